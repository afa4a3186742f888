// The eviction scorers' registry, parameter reading, budgets and the plan (scores, forced
// tokens, budget rule) that every scorer shares (solvers/scorers.hpp). The scorers themselves
// are in scorers_window.cpp, scorers_saliency.cpp, scorers_position.cpp and scorers_decode.cpp.
#include "solvers/scorers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/base/text.hpp"
#include "solvers/scorer_parts.hpp"

namespace tierlab {
namespace {

constexpr auto kGqaAggregates = enum_table<GqaAggregate>("GQA aggregate", {{GqaAggregate::Mean, "mean"},
                                                                          {GqaAggregate::Max, "max"},
                                                                          {GqaAggregate::Sum, "sum"}});
constexpr auto kWindowReduces = enum_table<WindowReduce>("window reduction", {{WindowReduce::Sum, "sum"},
                                                                             {WindowReduce::Mean, "mean"}});
constexpr auto kGroupOrders = enum_table<GroupOrder>("group order", {{GroupOrder::AfterPool, "after"},
                                                                    {GroupOrder::BeforePool, "before"}});

// parse(v), its InputError prefixed with the method and the parameter.
template <class Parse>
auto parse_choice(Parse parse, const std::string& method, const std::string& p, const std::string& v) {
  try {
    return parse(v);
  } catch (const InputError& e) {
    throw InputError("method '" + method + "': parameter " + p + ": " + e.what());
  }
}

double parse_double(const std::string& method, const std::string& p, const std::string& v) {
  if (const std::optional<double> x = read_real(v)) return *x;  // model/base/numbers.hpp: the whole text, finite
  throw InputError("method '" + method + "': parameter " + p + " = '" + v + "' is not a number");
}
int parse_int(const std::string& method, const std::string& p, const std::string& v) {
  double x = parse_double(method, p, v);
  if (x != std::floor(x) || std::abs(x) > 1e9)
    throw InputError("method '" + method + "': parameter " + p + " = '" + v + "' is not an integer");
  return static_cast<int>(x);
}

const char* bool_text(bool b) { return b ? "true" : "false"; }

// The value of a common setting as text, or nothing for a parameter that is not one.
bool common_value(const ScorerSettings& c, const std::string& p, std::string& out) {
  if (p == "window") out = std::to_string(c.window);
  else if (p == "gqa") out = enum_name(kGqaAggregates, c.gqa);
  else if (p == "causal") out = bool_text(c.causal);
  else if (p == "sinks") out = std::to_string(c.sinks);
  else if (p == "recent") out = std::to_string(c.recent);
  else if (p == "selection") out = to_string(c.selection);
  else if (p == "group_size") out = std::to_string(c.group_size);
  else return false;
  return true;
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

// ---------------------------------------------------------------- parameters

MethodParam shared_scorer_param(const std::string& name, const std::string& default_value) {
  static const std::map<std::string, std::string> help = {
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
      {"selection", "top-k per head | layer (pooled over heads) | model (pooled over all heads)"},
      {"group_size", "g query heads per KV head (TraceMeta::group_size)"}};
  const auto it = help.find(name);
  if (it == help.end()) throw std::logic_error("scorer parameter '" + name + "' is not a shared one");
  return {name, default_value, it->second};
}

GqaAggregate ScorerParamReader::get_gqa(const std::string& p) {
  const GqaAggregate v = parse_choice([](const std::string& s) { return parse_enum(kGqaAggregates, s); }, method_, p, text(p));
  set_effective(p, std::string(enum_name(kGqaAggregates, v)));
  return v;
}
WindowReduce ScorerParamReader::get_reduce(const std::string& p) {
  const WindowReduce v = parse_choice([](const std::string& s) { return parse_enum(kWindowReduces, s); }, method_, p, text(p));
  set_effective(p, std::string(enum_name(kWindowReduces, v)));
  return v;
}
GroupOrder ScorerParamReader::get_group_order(const std::string& p) {
  const GroupOrder v = parse_choice([](const std::string& s) { return parse_enum(kGroupOrders, s); }, method_, p, text(p));
  set_effective(p, std::string(enum_name(kGroupOrders, v)));
  return v;
}
PoolKind ScorerParamReader::get_pool(const std::string& p) {
  const PoolKind v = parse_choice(parse_pool_kind, method_, p, text(p));
  set_effective(p, std::string(to_string(v)));
  return v;
}
Scope ScorerParamReader::get_scope(const std::string& p) {
  const Scope v = parse_choice(parse_scope, method_, p, text(p));
  set_effective(p, std::string(to_string(v)));
  return v;
}

void ScorerParamReader::read_settings(ScorerSettings& s) {
  if (declares("window")) s.window = get_int("window");
  if (declares("gqa")) s.gqa = get_gqa("gqa");
  if (declares("causal")) s.causal = get_bool("causal");
  if (declares("sinks")) s.sinks = get_int("sinks");
  if (declares("recent")) s.recent = get_int("recent");
  if (declares("selection")) s.selection = get_scope("selection");
  if (declares("group_size")) s.group_size = get_int("group_size");
}

// ---------------------------------------------------------------- registry

// The entries, each defined in its scorer's file (scorers_*.cpp).
const ScorerEntry& streaming_scorer_entry();
const ScorerEntry& h2o_scorer_entry();
const ScorerEntry& snapkv_scorer_entry();
const ScorerEntry& tova_scorer_entry();
const ScorerEntry& adakv_scorer_entry();
const ScorerEntry& pyramidkv_scorer_entry();
const ScorerEntry& dropkv_scorer_entry();
const ScorerEntry& obcache_scorer_entry();
const ScorerEntry& expected_scorer_entry();
const ScorerEntry& keydiff_scorer_entry();
const ScorerEntry& laprox_scorer_entry();

const std::vector<ScorerEntry>& scorer_registry() {
  static const std::vector<ScorerEntry> r = {
      streaming_scorer_entry(), h2o_scorer_entry(),     snapkv_scorer_entry(),   tova_scorer_entry(),
      adakv_scorer_entry(),     pyramidkv_scorer_entry(), dropkv_scorer_entry(), obcache_scorer_entry(),
      expected_scorer_entry(),  keydiff_scorer_entry(), laprox_scorer_entry()};
  return r;
}

const ScorerEntry& scorer_entry(std::string_view name) {
  std::vector<std::string> names;
  for (const ScorerEntry& e : scorer_registry()) {
    if (e.info.name == name) return e;
    names.push_back(e.info.name);
  }
  throw InputError(invalid_choice_message("eviction scorer", name, join(names)));
}

const std::vector<MethodInfo>& eviction_scorer_methods() {
  static const std::vector<MethodInfo> infos = [] {
    std::vector<MethodInfo> v;
    for (const ScorerEntry& e : scorer_registry()) v.push_back(e.info);
    return v;
  }();
  return infos;
}

ScorerConfig make_scorer(std::string_view name, const MethodParams& params) {
  const ScorerEntry& e = scorer_entry(name);
  ScorerParamReader r(e, params);
  ScorerConfig c;
  c.scorer = e.make(r, c);
  r.finish();
  c.entry = &e;
  c.effective = r.effective();
  c.validate();
  return c;
}

ScorerConfig make_scorer_for_trace(std::string_view name, const MethodParams& params, int group_size) {
  MethodParams p = params;
  const auto& takes = scorer_entry(name).info.params;
  const bool takes_group =
      std::any_of(takes.begin(), takes.end(), [](const MethodParam& q) { return q.name == "group_size"; });
  if (!p.count("group_size") && takes_group) p["group_size"] = std::to_string(group_size);
  return make_scorer(name, p);
}

RateLadder eviction_ladder() { return RateLadder::parse("evict,exact"); }

// ---------------------------------------------------------------- ScorerConfig

std::string ScorerConfig::method() const { return entry ? entry->info.name : std::string(); }

void ScorerConfig::validate() const {
  if (!scorer || !entry) throw InputError("eviction scorer: the configuration was not built by make_scorer");
  auto bad = [&](const std::string& p, const std::string& why) {
    throw InputError("method '" + method() + "': parameter " + p + " = " + param(p) + " " + why);
  };
  if (window < 0) bad("window", "must be >= 0");
  if (sinks < 0) bad("sinks", "must be >= 0");
  if (recent < 0) bad("recent", "must be >= 0");
  if (group_size < 1) bad("group_size", "must be >= 1");
}

std::string ScorerConfig::param(const std::string& p) const {
  std::string v;
  if (common_value(*this, p, v)) return v;
  const auto it = effective.find(p);
  if (it == effective.end()) throw InputError("method '" + method() + "' takes no parameter '" + p + "'");
  return it->second;
}

std::string ScorerConfig::name() const {
  std::string s = method();
  if (!entry) return s;
  const auto& ps = entry->info.params;
  for (std::size_t i = 0; i < ps.size(); ++i) s += (i ? "," : ":") + ps[i].name + "=" + param(ps[i].name);
  return s;
}

// ---------------------------------------------------------------- scores and the plan

VectorD head_scores(const ScorerConfig& c, const HeadData& h) {
  c.validate();
  return c.scorer->head_scores(c, h);
}

std::vector<VectorD> layer_scores(const ScorerConfig& c, const std::vector<HeadData>& layer) {
  std::vector<VectorD> out;
  for (const auto& h : layer) out.push_back(head_scores(c, h));
  c.scorer->finish_layer(c, layer, out);
  return out;
}

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
      const int recent = c.scorer->forced_recent(c, hd, K);
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
  FreeSlots slots(plan.keep, std::move(free), std::move(cands));
  c.scorer->select(c, slots);
  for (int l = 0; l < L; ++l)
    for (std::size_t h = 0; h < plan.keep[l].size(); ++h) {
      const int k = static_cast<int>(std::count(plan.keep[l][h].begin(), plan.keep[l][h].end(), 1));
      plan.head_budget[l][h] = k;
      plan.kept += k;
    }
  return plan;
}

}  // namespace tierlab
