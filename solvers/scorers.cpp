#include "solvers/scorers.hpp"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <tuple>

#include "model/enum_names.hpp"
#include "model/error.hpp"
#include "model/surrogate.hpp"

namespace tierlab {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr auto kScorerKinds = enum_table<ScorerKind>("eviction scorer", {{ScorerKind::Streaming, "streaming"},
                                                                         {ScorerKind::H2O, "h2o"},
                                                                         {ScorerKind::SnapKV, "snapkv"},
                                                                         {ScorerKind::Tova, "tova"},
                                                                         {ScorerKind::AdaKV, "adakv"},
                                                                         {ScorerKind::PyramidKV, "pyramidkv"},
                                                                         {ScorerKind::DropKV, "dropkv"},
                                                                         {ScorerKind::OBCache, "obcache"},
                                                                         {ScorerKind::Expected, "expected"},
                                                                         {ScorerKind::KeyDiff, "keydiff"},
                                                                         {ScorerKind::LaProx, "laprox"}});
constexpr auto kGqaAggregates = enum_table<GqaAggregate>("GQA aggregate", {{GqaAggregate::Mean, "mean"},
                                                                          {GqaAggregate::Max, "max"},
                                                                          {GqaAggregate::Sum, "sum"}});
constexpr auto kWindowReduces = enum_table<WindowReduce>("window reduction", {{WindowReduce::Sum, "sum"},
                                                                             {WindowReduce::Mean, "mean"}});
constexpr auto kGroupOrders = enum_table<GroupOrder>("group order", {{GroupOrder::AfterPool, "after"},
                                                                    {GroupOrder::BeforePool, "before"}});

std::string_view kind_name(ScorerKind k) { return enum_name(kScorerKinds, k); }

const std::vector<ScorerKind>& all_kinds() {
  static const std::vector<ScorerKind> k = [] {
    std::vector<ScorerKind> v;
    for (const auto& row : kScorerKinds.names) v.push_back(row.value);
    return v;
  }();
  return k;
}

// parse(v), its InputError prefixed with the method and the parameter.
template <class Parse>
auto parse_choice(Parse parse, const std::string& method, const std::string& p, const std::string& v) {
  try {
    return parse(v);
  } catch (const InputError& e) {
    throw InputError("method '" + method + "': parameter " + p + ": " + e.what());
  }
}

bool snap_family(ScorerKind k) {
  return k == ScorerKind::SnapKV || k == ScorerKind::AdaKV || k == ScorerKind::PyramidKV;
}

// One entry per scorer, declared once: its name (kScorerKinds), its summary and source, the
// parameters it takes and its defaults (the settings of ScorerConfig it changes). `tierlab
// methods`, make_scorer and the scenario files read it.
struct ScorerEntry {
  ScorerKind kind;
  const char* summary;
  const char* source;
  std::vector<std::string> params;
  void (*defaults)(ScorerConfig&);
};

// The SnapKV family's parameters (snapkv, adakv, pyramidkv share the window score).
#define TIERLAB_SNAP_PARAMS "window", "reduce", "pool", "kernel", "count_include_pad", "group_order", "gqa", "causal"

const std::vector<ScorerEntry>& scorer_registry() {
  static const std::vector<ScorerEntry> r = {
      {ScorerKind::Streaming, "keep sink tokens + the most recent", "arXiv 2309.17453, mit-han-lab/streaming-llm",
       {"sinks"}, [](ScorerConfig& c) { c.sinks = 4, c.window = 0; }},
      {ScorerKind::H2O,
       "accumulated attention (all queries so far, decode-time accumulation); heavy hitters + recent window",
       "arXiv 2306.14048, FMInference/H2O", {"window", "gqa", "causal", "recent_fraction", "sinks", "group_size"},
       [](ScorerConfig& c) { c.window = 0; }},
      {ScorerKind::SnapKV, "window attention (sum|mean), pooled (avg|max); top-k per head + the window",
       "arXiv 2404.14469, FasterDecoding/SnapKV; NVIDIA/kvpress",
       {TIERLAB_SNAP_PARAMS, "sinks", "selection", "group_size"}, [](ScorerConfig& c) { c.window = 32, c.kernel = 5; }},
      {ScorerKind::Tova, "last query's attention averaged over the layer's heads; one shared top-k per layer",
       "arXiv 2401.06104, schwartz-lab-NLP/TOVA", {"sinks", "group_size"}, [](ScorerConfig& c) { c.window = 1; }},
      {ScorerKind::AdaKV, "SnapKV score; layer-wide top-k, head budget = share won with a floor",
       "arXiv 2407.11550, FFY0/AdaKV", {TIERLAB_SNAP_PARAMS, "floor", "group_size"},
       [](ScorerConfig& c) { c.window = 32, c.kernel = 5; }},
      {ScorerKind::PyramidKV, "SnapKV score; layer budgets decreasing linearly with depth",
       "arXiv 2406.02069, Zefan-Cai/KVCache-Factory", {TIERLAB_SNAP_PARAMS, "beta", "group_size"},
       [](ScorerConfig& c) { c.window = 32, c.kernel = 5; }},
      {ScorerKind::DropKV, "sum_i (p/(1-p))^2 ||v - o_i||^2 over the window, avg-pooled (k 11); top-k",
       "METHODS.md (DropKV)",
       {"window", "kernel", "count_include_pad", "group_order", "gqa", "causal", "sinks", "recent", "selection",
        "group_size"},
       [](ScorerConfig& c) { c.window = 32, c.kernel = 11, c.recent = 32; }},
      {ScorerKind::OBCache, "optimal-brain saliency: value sum p^2||v||^2, key sum (p z)^2 ||v - o||^2",
       "arXiv 2510.07651, DreamSoul-AI/OBCache",
       {"window", "score", "pool", "kernel", "count_include_pad", "gqa", "causal", "sinks", "recent", "selection",
        "group_size"},
       [](ScorerConfig& c) { c.window = 32, c.kernel = 1, c.sinks = 4, c.recent = 32; }},
      {ScorerKind::Expected,
       "attention to the expected future query (mean, covariance of window queries, post-RoPE) x ||v||",
       "NVIDIA/kvpress ExpectedAttentionPress (arXiv 2510.00636)",
       {"window", "use_covariance", "use_value_norm", "gqa", "sinks", "recent", "selection", "group_size"},
       [](ScorerConfig& c) { c.window = 32, c.kernel = 1, c.sinks = 4; }},
      {ScorerKind::KeyDiff, "-cos(k_t, mean normalised key); no attention", "arXiv 2504.15364 (KeyDiff)",
       {"sinks", "recent", "selection"}, [](ScorerConfig& c) { c.window = 0, c.kernel = 1; }},
      {ScorerKind::LaProx, "approximation: single-removal output cost c_t(0) / layer output norm; model-wide top-k",
       "arXiv 2605.07234 (formula not public; tierlab approximation)", {"sinks", "recent", "selection"},
       [](ScorerConfig& c) { c.window = 0, c.kernel = 1, c.selection = Scope::Model; }}};
  return r;
}
#undef TIERLAB_SNAP_PARAMS

const ScorerEntry& scorer_entry(ScorerKind k) {
  for (const ScorerEntry& e : scorer_registry())
    if (e.kind == k) return e;
  throw std::logic_error("scorer kind " + std::string(kind_name(k)) + " has no registry entry");
}

ScorerConfig defaults(ScorerKind k) {
  ScorerConfig c;
  c.kind = k;
  scorer_entry(k).defaults(c);
  // Only the scorers that pool take a kernel; the others read the scores unpooled.
  if (k != ScorerKind::SnapKV && k != ScorerKind::AdaKV && k != ScorerKind::PyramidKV && k != ScorerKind::DropKV &&
      k != ScorerKind::OBCache)
    c.kernel = 1;
  return c;
}

// Parameter names each method accepts.
const std::vector<std::string>& param_names(ScorerKind k) { return scorer_entry(k).params; }

std::string value_of(const ScorerConfig& c, const std::string& p) {
  std::ostringstream os;
  if (p == "window") os << c.window;
  else if (p == "gqa") os << enum_name(kGqaAggregates, c.gqa);
  else if (p == "reduce") os << enum_name(kWindowReduces, c.reduce);
  else if (p == "pool") os << to_string(c.pool);
  else if (p == "kernel") os << c.kernel;
  else if (p == "count_include_pad") os << (c.count_include_pad ? "true" : "false");
  else if (p == "group_order") os << enum_name(kGroupOrders, c.group_order);
  else if (p == "causal") os << (c.causal ? "true" : "false");
  else if (p == "sinks") os << c.sinks;
  else if (p == "recent") os << c.recent;
  else if (p == "recent_fraction") os << c.recent_fraction;
  else if (p == "floor") os << c.floor;
  else if (p == "beta") os << c.pyramid_beta;
  else if (p == "score") os << c.obcache_score;
  else if (p == "use_covariance") os << (c.use_covariance ? "true" : "false");
  else if (p == "use_value_norm") os << (c.use_value_norm ? "true" : "false");
  else if (p == "selection") os << to_string(c.selection);
  else if (p == "group_size") os << c.group_size;
  return os.str();
}

std::string help_of(const std::string& p) {
  static const std::map<std::string, std::string> h = {
      {"window", "W window queries read (0 = all of the trace's window); snapkv family keeps them"},
      {"gqa", "aggregate over the g query heads of a KV head: mean | max | sum"},
      {"reduce", "over the window queries: sum (SnapKV original) | mean (kvpress)"},
      {"pool", "pooling over positions: avg | max"},
      {"kernel", "pooling kernel k (odd; padding k//2; 1 = none)"},
      {"count_include_pad", "avg pooling counts the zero padding at the edges (PyTorch default)"},
      {"group_order", "GQA aggregate after (kvpress) | before (AdaKV GQA) pooling"},
      {"causal", "window query i sees only keys t <= T - W + i"},
      {"sinks", "first tokens always kept"},
      {"recent", "last tokens always kept"},
      {"recent_fraction", "share of the budget given to the recent window (rest: heavy hitters)"},
      {"floor", "Ada-KV floor fraction of each head's budget (0.2-0.5)"},
      {"beta", "PyramidKV: smallest layer budget = F / beta"},
      {"score", "value | key | joint (value + key)"},
      {"use_covariance", "include k^T Sigma k / (2d)"},
      {"use_value_norm", "multiply by ||v_t||"},
      {"selection", "top-k per head | layer (pooled over heads) | model (pooled over all heads)"},
      {"group_size", "g query heads per KV head (TraceMeta::group_size)"}};
  auto it = h.find(p);
  return it == h.end() ? "" : it->second;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

bool parse_bool(const std::string& method, const std::string& p, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw InputError("method '" + method + "': parameter " + p + " = '" + v + "' is not true or false");
}
double parse_double(const std::string& method, const std::string& p, const std::string& v) {
  try {
    std::size_t used = 0;
    double x = std::stod(v, &used);
    if (used == v.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  throw InputError("method '" + method + "': parameter " + p + " = '" + v + "' is not a number");
}
int parse_int(const std::string& method, const std::string& p, const std::string& v) {
  double x = parse_double(method, p, v);
  if (x != std::floor(x) || std::abs(x) > 1e9)
    throw InputError("method '" + method + "': parameter " + p + " = '" + v + "' is not an integer");
  return static_cast<int>(x);
}

double softmax_row(const double* z, double* p, int n) {
  double m = -kInf;
  for (int t = 0; t < n; ++t) m = std::max(m, z[t]);
  double s = 0;
  for (int t = 0; t < n; ++t) s += (p[t] = std::exp(z[t] - m));
  for (int t = 0; t < n; ++t) p[t] /= s;
  return m + std::log(s);
}

int query_rows(const HeadData& h, int g) {
  const auto rows = static_cast<int>(h.obs_queries.rows());
  if (g < 1 || rows % g != 0)
    throw InputError("head (" + std::to_string(h.layer) + ", " + std::to_string(h.kv_head) + "): obs_queries has " +
                     std::to_string(rows) + " rows, not a multiple of group_size " + std::to_string(g));
  return rows / g;
}

int effective_window(const ScorerConfig& c, const HeadData& h) {
  const int wtr = query_rows(h, c.group_size);
  const int w = c.window == 0 ? wtr : c.window;
  if (w > wtr)
    throw InputError("scorer '" + std::string(kind_name(c.kind)) + "': parameter window = " + std::to_string(w) +
                     " exceeds the trace's W = " + std::to_string(wtr) + " observation queries (head (" +
                     std::to_string(h.layer) + ", " + std::to_string(h.kv_head) + ")); give window <= " +
                     std::to_string(wtr) + ", or 0 for all of them.");
  return w;
}

// logits (W x T, masked entries -inf) of query head j's last W window queries.
MatrixRMd window_logits(const HeadData& head, int g, int j, int window, bool causal) {
  const int wtr = query_rows(head, g);
  const int T = static_cast<int>(head.keys.rows());
  const double scale = 1.0 / std::sqrt(static_cast<double>(head.keys.cols()));
  MatrixRMd z(window, T);
  const std::vector<int> visible = observation_queries(head, g).visible;  // trace.hpp
  for (int i = 0; i < window; ++i) {
    const int row = j * wtr + (wtr - window) + i;
    const auto q = head.obs_queries.row(row).cast<double>();
    const int last_visible = causal ? visible[static_cast<std::size_t>(row)] - 1 : T - 1;
    for (int t = 0; t < T; ++t)
      z(i, t) = t <= last_visible ? scale * q.dot(head.keys.row(t).cast<double>()) : -kInf;
  }
  return z;
}

MatrixRMd softmax_rows(const MatrixRMd& z) {
  MatrixRMd p(z.rows(), z.cols());
  for (Eigen::Index i = 0; i < z.rows(); ++i) softmax_row(z.row(i).data(), p.row(i).data(), static_cast<int>(z.cols()));
  return p;
}

VectorD pool(const VectorD& x, const ScorerConfig& c, Eigen::Index n) {
  VectorD y = x;
  if (c.kernel <= 1 || n <= 0) return y;
  SmoothingOptions o;
  o.pool = c.pool;
  o.kernel = c.kernel;
  o.padding = (c.pool == PoolKind::Avg && c.count_include_pad) ? Padding::Zero : Padding::None;
  smooth_row(x.data(), y.data(), n, o);
  return y;
}

VectorD aggregate(const std::vector<VectorD>& xs, GqaAggregate a) {
  VectorD out = xs[0];
  for (std::size_t j = 1; j < xs.size(); ++j) {
    if (a == GqaAggregate::Max) out = out.cwiseMax(xs[j]);
    else out += xs[j];
  }
  if (a == GqaAggregate::Mean) out /= static_cast<double>(xs.size());
  return out;
}

// Per query head raw scores (before pooling), length n (snap family: the prefix).
VectorD query_head_raw(const ScorerConfig& c, const HeadData& h, int j, int W) {
  const int T = static_cast<int>(h.keys.rows());
  const MatrixRMd z = window_logits(h, c.group_size, j, W, c.causal);
  const MatrixRMd p = softmax_rows(z);
  switch (c.kind) {
    case ScorerKind::H2O: return p.colwise().sum().transpose();
    case ScorerKind::SnapKV:
    case ScorerKind::AdaKV:
    case ScorerKind::PyramidKV: {
      VectorD s = p.leftCols(std::max(0, T - W)).colwise().sum().transpose();
      if (c.reduce == WindowReduce::Mean) s /= static_cast<double>(W);
      return s;
    }
    case ScorerKind::DropKV:
    case ScorerKind::OBCache: {
      const MatrixRMd V = h.values.cast<double>();
      const MatrixRMd O = p * V;
      VectorD s = VectorD::Zero(T);
      for (int t = 0; t < T; ++t) {
        const double vn2 = V.row(t).squaredNorm();
        for (int i = 0; i < W; ++i) {
          const double pt = p(i, t);
          if (pt == 0.0) continue;
          const double r2 = (V.row(t) - O.row(i)).squaredNorm();
          if (c.kind == ScorerKind::DropKV) {
            const double ratio = pt / std::max(1.0 - pt, 1e-12);
            s(t) += ratio * ratio * r2;
          } else {
            const double val = pt * pt * vn2, pz = pt * z(i, t), key = pz * pz * r2;
            s(t) += c.obcache_score == "value" ? val : c.obcache_score == "key" ? key : val + key;
          }
        }
      }
      return s;
    }
    default: break;
  }
  return VectorD::Zero(T);
}

VectorD expected_query_head(const ScorerConfig& c, const HeadData& h, int j, int W) {
  const int wtr = query_rows(h, c.group_size);
  const int T = static_cast<int>(h.keys.rows()), d = static_cast<int>(h.keys.cols());
  const MatrixRMd Q = h.obs_queries.middleRows(j * wtr + (wtr - W), W).cast<double>();
  const VectorD mu = Q.colwise().mean().transpose();
  const MatrixRMd C = Q.rowwise() - mu.transpose();
  const MatrixRMd sigma = (C.transpose() * C) / static_cast<double>(W);
  VectorD z(T);
  for (int t = 0; t < T; ++t) {
    const VectorD k = h.keys.row(t).cast<double>().transpose();
    z(t) = mu.dot(k) / std::sqrt(static_cast<double>(d));
    if (c.use_covariance) z(t) += k.dot(sigma * k) / (2.0 * d);
  }
  VectorD e(T);
  softmax_row(z.data(), e.data(), T);
  if (c.use_value_norm)
    for (int t = 0; t < T; ++t) e(t) *= h.values.row(t).cast<double>().norm();
  return e;
}

struct Candidate {
  double score;
  int layer, head, t;
};
bool better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  return std::tie(a.layer, a.head, a.t) < std::tie(b.layer, b.head, b.t);
}

}  // namespace

// ---------------------------------------------------------------- Budget

Budget Budget::ratio(double rho) {
  if (!(rho >= 0.0 && rho <= 1.0)) {
    char v[32];
    std::snprintf(v, sizeof v, "%g", rho);
    throw InputError("keep ratio:" + std::string(v) + ": the kept share of tokens must be in [0, 1].");
  }
  return Budget{Kind::Ratio, rho};
}
Budget Budget::count(std::int64_t n) {
  if (n < 0) throw InputError("keep count:" + std::to_string(n) + ": the number of kept tokens must be 0 or more.");
  return Budget{Kind::Count, static_cast<double>(n)};
}
Budget Budget::parse(std::string_view text) {
  const std::string s(text);
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon), v = colon == std::string::npos ? "" : s.substr(colon + 1);
  if (kind == "ratio") return ratio(parse_double("budget", "ratio", v));
  if (kind == "count") {
    const int n = parse_int("budget", "count", v);
    return count(n);
  }
  throw InputError("budget '" + s + "' is not ratio:R (R in [0, 1]) or count:N (tokens per head)");
}
int Budget::keep(int tokens) const {
  if (kind == Kind::Count) return static_cast<int>(std::min<double>(value, tokens));
  return std::min(tokens, static_cast<int>(std::floor(value * tokens + 0.5)));
}
std::string Budget::name() const {
  std::ostringstream os;
  if (kind == Kind::Ratio) os << "ratio:" << value;
  else os << "count:" << static_cast<std::int64_t>(value);
  return os.str();
}

// ---------------------------------------------------------------- registry

void ScorerConfig::validate() const {
  const std::string m(kind_name(kind));
  auto bad = [&](const std::string& p, const std::string& why) {
    throw InputError("method '" + m + "': parameter " + p + " = " + value_of(*this, p) + " " + why);
  };
  if (window < 0) bad("window", "must be >= 0");
  if (kernel < 1 || kernel % 2 == 0) bad("kernel", "must be odd and >= 1");
  if (sinks < 0) bad("sinks", "must be >= 0");
  if (recent < 0) bad("recent", "must be >= 0");
  if (!(recent_fraction >= 0 && recent_fraction <= 1)) bad("recent_fraction", "must be in [0, 1]");
  if (!(floor >= 0 && floor <= 1)) bad("floor", "must be in [0, 1]");
  if (pyramid_beta < 1) bad("beta", "must be >= 1");
  if (obcache_score != "value" && obcache_score != "key" && obcache_score != "joint")
    bad("score", "is not value, key or joint");
  if (group_size < 1) bad("group_size", "must be >= 1");
}

std::string ScorerConfig::name() const {
  std::string s(kind_name(kind));
  const auto names = param_names(kind);
  for (std::size_t i = 0; i < names.size(); ++i) s += (i ? "," : ":") + names[i] + "=" + value_of(*this, names[i]);
  return s;
}

const std::vector<MethodInfo>& eviction_scorer_methods() {
  static const std::vector<MethodInfo> infos = [] {
    std::vector<MethodInfo> v;
    for (ScorerKind k : all_kinds()) {
      const ScorerEntry& e = scorer_entry(k);
      MethodInfo info;
      info.name = kind_name(k);
      info.kind = "eviction scorer";
      info.summary = e.summary;
      info.source = e.source;
      const ScorerConfig c = defaults(k);
      for (const auto& p : e.params) info.params.push_back({p, value_of(c, p), help_of(p)});
      v.push_back(std::move(info));
    }
    return v;
  }();
  return infos;
}

ScorerConfig make_scorer_for_trace(std::string_view name, const MethodParams& params, int group_size) {
  MethodParams p = params;
  const ScorerKind kind = parse_enum(kScorerKinds, name);
  const auto& takes = param_names(kind);
  if (!p.count("group_size") && std::find(takes.begin(), takes.end(), "group_size") != takes.end())
    p["group_size"] = std::to_string(group_size);
  return make_scorer(name, p);
}

ScorerConfig make_scorer(std::string_view name_view, const MethodParams& params) {
  const std::string name(name_view);
  const ScorerKind kind = parse_enum(kScorerKinds, name);
  ScorerConfig c = defaults(kind);
  const auto valid = param_names(kind);
  for (const auto& [p, v] : params) {
    if (std::find(valid.begin(), valid.end(), p) == valid.end())
      throw InputError("method '" + name + "': unknown parameter '" + p + "'; valid: " + join(valid));
    if (p == "window") c.window = parse_int(name, p, v);
    else if (p == "gqa") c.gqa = parse_choice([](const std::string& s) { return parse_enum(kGqaAggregates, s); }, name, p, v);
    else if (p == "reduce")
      c.reduce = parse_choice([](const std::string& s) { return parse_enum(kWindowReduces, s); }, name, p, v);
    else if (p == "pool") c.pool = parse_choice(parse_pool_kind, name, p, v);
    else if (p == "kernel") c.kernel = parse_int(name, p, v);
    else if (p == "count_include_pad") c.count_include_pad = parse_bool(name, p, v);
    else if (p == "group_order")
      c.group_order = parse_choice([](const std::string& s) { return parse_enum(kGroupOrders, s); }, name, p, v);
    else if (p == "causal") c.causal = parse_bool(name, p, v);
    else if (p == "sinks") c.sinks = parse_int(name, p, v);
    else if (p == "recent") c.recent = parse_int(name, p, v);
    else if (p == "recent_fraction") c.recent_fraction = parse_double(name, p, v);
    else if (p == "floor") c.floor = parse_double(name, p, v);
    else if (p == "beta") c.pyramid_beta = parse_int(name, p, v);
    else if (p == "score") c.obcache_score = v;
    else if (p == "use_covariance") c.use_covariance = parse_bool(name, p, v);
    else if (p == "use_value_norm") c.use_value_norm = parse_bool(name, p, v);
    else if (p == "selection") c.selection = parse_choice(parse_scope, name, p, v);
    else if (p == "group_size") c.group_size = parse_int(name, p, v);
  }
  c.validate();
  return c;
}

RateLadder eviction_ladder() { return RateLadder::parse("evict,exact"); }

MatrixRMd window_attention(const HeadData& head, int group_size, int query_head, int window, bool causal) {
  return softmax_rows(window_logits(head, group_size, query_head, window, causal));
}

// ---------------------------------------------------------------- scores

VectorD head_scores(const ScorerConfig& c, const HeadData& h) {
  c.validate();
  const int T = static_cast<int>(h.keys.rows());
  const int g = c.group_size;
  switch (c.kind) {
    case ScorerKind::Streaming: {
      VectorD s(T);
      for (int t = 0; t < T; ++t) s(t) = t;
      return s;
    }
    case ScorerKind::KeyDiff: {
      VectorD kbar = VectorD::Zero(h.keys.cols());
      for (int t = 0; t < T; ++t) {
        const VectorD k = h.keys.row(t).cast<double>().transpose();
        const double n = k.norm();
        if (n > 0) kbar += k / n;
      }
      kbar /= std::max(1, T);
      VectorD s(T);
      for (int t = 0; t < T; ++t) {
        const VectorD k = h.keys.row(t).cast<double>().transpose();
        const double den = k.norm() * kbar.norm();
        s(t) = den > 0 ? -k.dot(kbar) / den : 0.0;
      }
      return s;
    }
    case ScorerKind::LaProx: {
      const TokenWeights w = token_weights(h.keys, h.values, observation_queries(h, c.group_size));
      return w.evict_cost;
    }
    case ScorerKind::Tova: {
      query_rows(h, g);
      std::vector<VectorD> xs;
      for (int j = 0; j < g; ++j) xs.push_back(softmax_rows(window_logits(h, g, j, 1, c.causal)).row(0).transpose());
      return aggregate(xs, GqaAggregate::Mean);
    }
    case ScorerKind::Expected: {
      const int W = effective_window(c, h);
      std::vector<VectorD> xs;
      for (int j = 0; j < g; ++j) xs.push_back(expected_query_head(c, h, j, W));
      return aggregate(xs, c.gqa);
    }
    default: break;
  }
  const int W = effective_window(c, h);
  const bool snap = snap_family(c.kind);
  const Eigen::Index n = snap ? std::max(0, T - W) : T;
  std::vector<VectorD> xs;
  for (int j = 0; j < g; ++j) xs.push_back(query_head_raw(c, h, j, W));
  VectorD s;
  if (c.kind == ScorerKind::H2O) {
    s = aggregate(xs, c.gqa);
  } else if (c.group_order == GroupOrder::AfterPool) {
    for (auto& x : xs) x = pool(x, c, n);
    s = aggregate(xs, c.gqa);
  } else {
    s = pool(aggregate(xs, c.gqa), c, n);
  }
  if (snap) {
    VectorD full = VectorD::Constant(T, kInf);
    full.head(n) = s.head(n);
    return full;
  }
  return s;
}

std::vector<VectorD> layer_scores(const ScorerConfig& c, const std::vector<HeadData>& layer) {
  std::vector<VectorD> out;
  for (const auto& h : layer) out.push_back(head_scores(c, h));
  if (c.kind == ScorerKind::Tova && !out.empty()) {
    VectorD shared = out[0];
    for (std::size_t i = 1; i < out.size(); ++i) {
      if (out[i].size() != shared.size())
        throw InputError("tova: heads of layer " + std::to_string(layer[0].layer) + " have different token counts");
      shared += out[i];
    }
    shared /= static_cast<double>(out.size());
    for (auto& o : out) o = shared;
  }
  if (c.kind == ScorerKind::LaProx && !layer.empty()) {
    double norm = 0;
    for (const auto& h : layer) {  // mean_q ||o_q||^2 over the causal window queries
      const CausalQueries qs = observation_queries(h, c.group_size);
      const double scale = 1.0 / std::sqrt(static_cast<double>(h.keys.cols()));
      double sum = 0;
      for (Eigen::Index r = 0; r < h.obs_queries.rows(); ++r) {
        const int T = qs.visible[static_cast<std::size_t>(r)];
        const VectorD zr = h.keys.topRows(T).cast<double>() * h.obs_queries.row(r).transpose().cast<double>() * scale;
        VectorD p(T);
        softmax_row(zr.data(), p.data(), T);
        sum += (h.values.topRows(T).cast<double>().transpose() * p).squaredNorm();
      }
      norm += sum / static_cast<double>(h.obs_queries.rows());
    }
    norm /= static_cast<double>(layer.size());
    for (auto& o : out) o /= (norm > 0 ? norm : 1.0);
  }
  return out;
}

// ---------------------------------------------------------------- budget rules

EvictionPlan plan_eviction(const ScorerConfig& c, const std::vector<std::vector<HeadData>>& model,
                           const Budget& budget) {
  c.validate();
  EvictionPlan plan;
  plan.method = c.name();
  const int L = static_cast<int>(model.size());
  plan.scores.resize(L);
  plan.keep.resize(L);
  plan.head_budget.resize(L);
  // free slots per head, candidates per head
  std::vector<std::vector<int>> free(L);
  std::vector<std::vector<std::vector<Candidate>>> cands(L);
  for (int l = 0; l < L; ++l) {
    plan.scores[l] = layer_scores(c, model[l]);
    const int H = static_cast<int>(model[l].size());
    plan.keep[l].resize(H);
    plan.head_budget[l].assign(H, 0);
    free[l].assign(H, 0);
    cands[l].resize(H);
    for (int h = 0; h < H; ++h) {
      const HeadData& hd = model[l][h];
      const int T = static_cast<int>(hd.keys.rows());
      const int K = budget.keep(T);
      plan.tokens += T;
      HeadKeep& keep = plan.keep[l][h];
      keep.assign(T, 0);
      // forced tokens in priority order
      std::vector<int> forced;
      int recent = c.recent;
      if (snap_family(c.kind)) recent = std::min(T, effective_window(c, hd));
      if (c.kind == ScorerKind::H2O) recent = static_cast<int>(std::floor(c.recent_fraction * K + 0.5));
      for (int t = 0; t < std::min(c.sinks, T); ++t) forced.push_back(t);
      for (int t = T - 1; t >= std::max(0, T - recent); --t)
        if (t >= c.sinks) forced.push_back(t);
      const int nf = std::min<int>(K, static_cast<int>(forced.size()));
      for (int i = 0; i < nf; ++i) keep[forced[i]] = 1;
      std::vector<std::uint8_t> is_forced(T, 0);
      for (int t : forced) is_forced[t] = 1;
      for (int t = 0; t < T; ++t)
        if (!is_forced[t]) cands[l][h].push_back({plan.scores[l][h](t), l, h, t});
      std::sort(cands[l][h].begin(), cands[l][h].end(), better);
      free[l][h] = K - nf;
    }
  }
  auto take = [&](int l, int h, int n) {  // keep the best n remaining candidates of a head
    auto& cs = cands[l][h];
    n = std::min<int>(n, static_cast<int>(cs.size()));
    for (int i = 0; i < n; ++i) plan.keep[l][h][cs[i].t] = 1;
    cs.erase(cs.begin(), cs.begin() + n);
  };
  auto pooled = [&](const std::vector<std::pair<int, int>>& heads, std::int64_t slots) {
    std::vector<Candidate> all;
    for (auto [l, h] : heads) all.insert(all.end(), cands[l][h].begin(), cands[l][h].end());
    std::sort(all.begin(), all.end(), better);
    slots = std::min<std::int64_t>(slots, static_cast<std::int64_t>(all.size()));
    for (std::int64_t i = 0; i < slots; ++i) plan.keep[all[i].layer][all[i].head][all[i].t] = 1;
  };
  Scope sel = c.selection;
  if (c.kind == ScorerKind::AdaKV) {
    for (int l = 0; l < L; ++l) {
      std::int64_t rest = 0;
      std::vector<std::pair<int, int>> heads;
      for (int h = 0; h < static_cast<int>(model[l].size()); ++h) {
        const int base = static_cast<int>(std::floor(c.floor * free[l][h]));
        take(l, h, base);
        rest += free[l][h] - base;
        heads.push_back({l, h});
      }
      pooled(heads, rest);
    }
  } else if (c.kind == ScorerKind::PyramidKV) {
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < static_cast<int>(model[l].size()); ++h) {
        const int F = free[l][h];
        int Fl = F;
        if (L > 1) {
          const int m = F / c.pyramid_beta, M = 2 * F - m, s = (M - m) / (L - 1);
          Fl = M - l * s;
        }
        take(l, h, Fl);
      }
  } else if (sel == Scope::Head || c.kind == ScorerKind::Tova) {
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < static_cast<int>(model[l].size()); ++h) take(l, h, free[l][h]);
  } else if (sel == Scope::Layer) {
    for (int l = 0; l < L; ++l) {
      std::vector<std::pair<int, int>> heads;
      std::int64_t slots = 0;
      for (int h = 0; h < static_cast<int>(model[l].size()); ++h) heads.push_back({l, h}), slots += free[l][h];
      pooled(heads, slots);
    }
  } else {
    std::vector<std::pair<int, int>> heads;
    std::int64_t slots = 0;
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < static_cast<int>(model[l].size()); ++h) heads.push_back({l, h}), slots += free[l][h];
    pooled(heads, slots);
  }
  for (int l = 0; l < L; ++l)
    for (std::size_t h = 0; h < plan.keep[l].size(); ++h) {
      const int k = static_cast<int>(std::count(plan.keep[l][h].begin(), plan.keep[l][h].end(), 1));
      plan.head_budget[l][h] = k;
      plan.kept += k;
    }
  return plan;
}

// ---------------------------------------------------------------- H2O in decode

H2OCache::H2OCache(const ScorerConfig& cfg, const HeadData& prompt, const Budget& budget) : cfg_(cfg) {
  if (cfg.kind != ScorerKind::H2O) throw InputError("H2OCache: scorer '" + std::string(kind_name(cfg.kind)) + "' is not h2o");
  keys_ = prompt.keys.cast<double>();
  values_ = prompt.values.cast<double>();
  const VectorD s = head_scores(cfg, prompt);
  acc_.assign(s.data(), s.data() + s.size());
  alive_.assign(acc_.size(), 1);
  capacity_ = budget.keep(static_cast<int>(acc_.size()));
  evict();
}

void H2OCache::step(const MatrixRM& queries, const VectorF& key, const VectorF& value) {
  const Eigen::Index n = keys_.rows(), d = keys_.cols();
  if (key.size() != d || value.size() != d || queries.cols() != d || queries.rows() != cfg_.group_size)
    throw InputError("H2OCache::step: queries must be group_size x d and key/value d entries (d = " +
                     std::to_string(d) + ")");
  keys_.conservativeResize(n + 1, d);
  values_.conservativeResize(n + 1, d);
  keys_.row(n) = key.cast<double>().transpose();
  values_.row(n) = value.cast<double>().transpose();
  acc_.push_back(0.0);
  alive_.push_back(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<VectorD> xs;
  for (Eigen::Index j = 0; j < queries.rows(); ++j) {
    const auto q = queries.row(j).cast<double>();
    VectorD z = VectorD::Constant(n + 1, -kInf), p(n + 1);
    for (Eigen::Index t = 0; t <= n; ++t)
      if (alive_[t]) z(t) = scale * q.dot(keys_.row(t));
    softmax_row(z.data(), p.data(), static_cast<int>(n + 1));
    xs.push_back(p);
  }
  const VectorD a = aggregate(xs, cfg_.gqa);
  for (Eigen::Index t = 0; t <= n; ++t)
    if (alive_[t]) acc_[t] += a(t);
  evict();
}

void H2OCache::evict() {
  const int n = static_cast<int>(alive_.size());
  const int recent = static_cast<int>(std::floor(cfg_.recent_fraction * capacity_ + 0.5));
  std::vector<int> live;
  for (int t = 0; t < n; ++t)
    if (alive_[t]) live.push_back(t);
  if (static_cast<int>(live.size()) <= capacity_) return;
  std::vector<std::uint8_t> keep(n, 0);
  int kept = 0;
  for (int t = 0; t < std::min(cfg_.sinks, n); ++t)
    if (alive_[t] && kept < capacity_) keep[t] = 1, ++kept;
  int r = 0;
  for (int i = static_cast<int>(live.size()) - 1; i >= 0 && r < recent && kept < capacity_; --i)
    if (!keep[live[i]]) keep[live[i]] = 1, ++kept, ++r;
  std::vector<int> rest;
  for (int t : live)
    if (!keep[t]) rest.push_back(t);
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return acc_[a] > acc_[b]; });
  for (int t : rest)
    if (kept < capacity_) keep[t] = 1, ++kept;
  alive_ = keep;
}

// ---------------------------------------------------------------- TOVA in decode

TovaCache::TovaCache(const ScorerConfig& cfg, const std::vector<HeadData>& layer, const Budget& budget) : cfg_(cfg) {
  if (cfg.kind != ScorerKind::Tova) throw InputError("TovaCache: scorer '" + std::string(kind_name(cfg.kind)) + "' is not tova");
  if (layer.empty()) throw InputError("TovaCache: the layer has no heads");
  const auto scores = layer_scores(cfg, layer);
  for (const auto& h : layer) keys_.push_back(h.keys.cast<double>()), values_.push_back(h.values.cast<double>());
  last_.assign(scores[0].data(), scores[0].data() + scores[0].size());
  alive_.assign(last_.size(), 1);
  capacity_ = budget.keep(static_cast<int>(last_.size()));
  evict();
}

void TovaCache::step(const std::vector<MatrixRM>& queries, const std::vector<VectorF>& keys,
                     const std::vector<VectorF>& values) {
  const std::size_t H = keys_.size();
  if (queries.size() != H || keys.size() != H || values.size() != H)
    throw InputError("TovaCache::step: expected queries, keys and values for " + std::to_string(H) + " heads");
  const Eigen::Index n = keys_[0].rows();
  alive_.push_back(1);
  VectorD score = VectorD::Zero(n + 1);
  int count = 0;
  for (std::size_t h = 0; h < H; ++h) {
    const Eigen::Index d = keys_[h].cols();
    keys_[h].conservativeResize(n + 1, d);
    values_[h].conservativeResize(n + 1, d);
    keys_[h].row(n) = keys[h].cast<double>().transpose();
    values_[h].row(n) = values[h].cast<double>().transpose();
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (Eigen::Index j = 0; j < queries[h].rows(); ++j) {
      const auto q = queries[h].row(j).cast<double>();
      VectorD z = VectorD::Constant(n + 1, -kInf), p(n + 1);
      for (Eigen::Index t = 0; t <= n; ++t)
        if (alive_[t]) z(t) = scale * q.dot(keys_[h].row(t));
      softmax_row(z.data(), p.data(), static_cast<int>(n + 1));
      score += p;
      ++count;
    }
  }
  score /= std::max(1, count);
  last_.assign(score.data(), score.data() + score.size());
  evict();
}

void TovaCache::evict() {
  const int n = static_cast<int>(alive_.size());
  int live = static_cast<int>(std::count(alive_.begin(), alive_.end(), 1));
  while (live > capacity_) {
    int worst = -1;
    for (int t = std::min(cfg_.sinks, n); t < n; ++t)
      if (alive_[t] && (worst < 0 || last_[t] < last_[worst])) worst = t;
    if (worst < 0) break;
    alive_[worst] = 0;
    --live;
  }
}

}  // namespace tierlab
