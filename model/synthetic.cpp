// Seeded synthetic attention heads (docs/synthetic.md).
//
// Every head is a pure function of (parameters, seed, layer, kv_head): its random
// numbers come from xoshiro256** streams seeded by splitmix64 from those four
// values, normals come from Box-Muller written here (std::normal_distribution
// differs across standard libraries), and all arithmetic is done in double and
// rounded to float32 once at the end.
//
// Logits of a head, for a query at position p and a key at position t, at logit
// scale lambda (MODEL.md section 2: s_t = q.k_t / sqrt(d)) are built as
//   s_t = lambda * ( structure(kind, t, p) + content noise )
// with structure, at lambda = 1, in nats:
//   sink:      kappa_s * w_t on the first 4 tokens, w = (1, 0.85, 0.8, 0.75)
//   local:     kappa_l * g(t - p), g the RoPE kernel sum_i h_i cos(omega_i (t - p)), g(0) = 1
//   retrieval: kappa_r * pi_j * nu_t on the tokens of planted span j
//   diffuse:   none
// kappa_s = kappa_l = ln T + 6, kappa_r = ln(T / (spans_per_head * span_len)) + 7, and a
// content-noise standard deviation of 1 nat (0.5 nat for diffuse heads).
#include "model/synthetic.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

#include "model/error.hpp"

// Compiled with -ffp-contract=off (model/CMakeLists.txt): the same source then gives the same
// bits whether or not the CPU has FMA (-march=native differs between machines).
namespace tierlab {
namespace {

// ---- fixed constants of the generator (documented in docs/synthetic.md) ------
constexpr int kSinkTokens = 4;
constexpr std::array<double, kSinkTokens> kSinkWeights = {1.0, 0.85, 0.8, 0.75};
constexpr double kContentLogitStd = 1.0;   // eta: content noise of sink/local/retrieval heads (nats)
constexpr double kDiffuseLogitStd = 0.5;   // eta of diffuse heads (nats)
constexpr double kQueryInnovation = 0.5;   // epsilon: per-query fresh content, relative to the head's base content
constexpr double kGroupSpread = 0.1;       // query heads of a GQA group: structure x U(1 - 0.1, 1 + 0.1)
constexpr double kSpanPreferenceMin = 0.75;  // pi_j ~ U(0.75, 1): how strongly queries seek span j
constexpr double kSpanTokenMin = 0.85;       // nu_t ~ U(0.85, 1): key amplitude of each span token
constexpr double kLocalCenterPeriod = 16.0;  // local kernel centred on omega = 1/16 rad per token
constexpr double kLocalLogWidth = 2.0794415416798357;  // ln 8: its width in log-frequency
constexpr int kMaxLayers = 4096, kMaxHeads = 4096, kMaxGroup = 256, kMaxHeadDim = 1024;
constexpr int kMaxPrompt = 1 << 22, kMaxDecode = 1 << 20;
constexpr const char* kGeneratorVersion = "tierlab-synthetic/1";

// ---- random numbers -----------------------------------------------------------
std::uint64_t splitmix64_next(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// xoshiro256** (Blackman & Vigna), state filled from splitmix64; normals by Box-Muller.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64_next(sm);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int below(int n) { return static_cast<int>(uniform() * n); }  // [0, n)
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::array<std::uint64_t, 4> s_{};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Independent streams of one head; adding a stream never changes the others.
enum class Stream : std::uint64_t {
  Plan = 1,
  Structure = 2,
  Keys = 3,
  Values = 4,
  Queries = 5,        // per query head: base content, multipliers, observation queries
  DecodeKeys = 6,
  DecodeValues = 7,
  DecodeQueries = 8,  // per query head: decode-query innovations
  Drift = 9,          // per query head: the random walk
};

// Seed of one stream of one head; `index` separates the query heads of a GQA group, so
// that no stream's length depends on W, S or g.
std::uint64_t head_seed(std::uint64_t seed, int layer, int kv_head, Stream stream, int index = 0) {
  std::uint64_t state = seed;
  std::uint64_t x = splitmix64_next(state);
  state = x ^ ((static_cast<std::uint64_t>(static_cast<std::uint32_t>(layer)) << 32) |
               static_cast<std::uint32_t>(kv_head));
  x = splitmix64_next(state);
  state = x ^ (static_cast<std::uint64_t>(stream) * 0xD1B54A32D192ED03ull);
  x = splitmix64_next(state);
  state = x ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(index));
  return splitmix64_next(state);
}

// ---- head plan: the cheap, per-head random choices synth_meta needs too ---------
enum class HeadKind { Sink = 0, Local = 1, Retrieval = 2, Diffuse = 3 };
constexpr std::array<const char*, 4> kKindNames = {"sink", "local", "retrieval", "diffuse"};

struct HeadPlan {
  HeadKind kind = HeadKind::Diffuse;
  double logit_scale = 1.0;
  std::vector<int> outliers;  // sorted channel indices
  std::vector<Span> spans;    // retrieval heads only
};

int pairs_of(int d) { return d / 2; }
// Outlier channels are drawn from the channels of the slowest quarter of RoPE pairs.
int outlier_first_channel(int d) { return d - 2 * ((pairs_of(d) + 3) / 4); }
// Sink and span directions live in the slowest half of the pairs (rotation over a span is small).
int structure_first_pair(int d) { return pairs_of(d) - (pairs_of(d) + 1) / 2; }

HeadPlan plan_head(const SynthParams& p, int layer, int kv_head) {
  Rng rng(head_seed(p.seed, layer, kv_head, Stream::Plan));
  HeadPlan plan;

  const std::array<double, 4> mix = {p.mix_sink, p.mix_local, p.mix_retrieval, p.mix_diffuse};
  double total = 0.0;
  for (double w : mix) total += w;
  const double u = rng.uniform() * total;
  double acc = 0.0;
  int chosen = -1, last_positive = 0;
  for (int k = 0; k < 4; ++k) {
    if (mix[k] <= 0.0) continue;
    last_positive = k;
    acc += mix[k];
    if (chosen < 0 && u < acc) chosen = k;
  }
  plan.kind = static_cast<HeadKind>(chosen < 0 ? last_positive : chosen);

  // Log-uniform; exactly logit_scale_min when the range is one point.
  plan.logit_scale = p.logit_scale_min * std::pow(p.logit_scale_max / p.logit_scale_min, rng.uniform());

  std::vector<int> candidates;
  for (int c = outlier_first_channel(p.head_dim); c < p.head_dim; ++c) candidates.push_back(c);
  for (int k = 0; k < p.outlier_channels; ++k) {
    const int j = k + rng.below(static_cast<int>(candidates.size()) - k);
    std::swap(candidates[k], candidates[j]);
    plan.outliers.push_back(candidates[k]);
  }
  std::sort(plan.outliers.begin(), plan.outliers.end());

  if (plan.kind == HeadKind::Retrieval) {
    // Non-overlapping spans, one free token at least between two spans, inside
    // [kSinkTokens, T - W): sorted gap offsets x_j in [0, free], begin_j = 4 + x_j + j (len + 1).
    const int n = p.spans_per_head, len = p.span_len;
    const int free = (p.prompt_len - p.obs_window - kSinkTokens) - n * len - (n - 1);
    std::vector<int> x(n);
    for (auto& v : x) v = rng.below(free + 1);
    std::sort(x.begin(), x.end());
    for (int j = 0; j < n; ++j) {
      const int begin = kSinkTokens + x[j] + j * (len + 1);
      plan.spans.push_back(Span{begin, begin + len});
    }
  }
  return plan;
}

// ---- RoPE -------------------------------------------------------------------
std::vector<double> rope_frequencies(int d, double theta) {
  std::vector<double> omega(pairs_of(d));
  for (int i = 0; i < pairs_of(d); ++i) omega[i] = std::pow(theta, -2.0 * i / d);
  return omega;
}

// Interleaved RoPE: pair (2i, 2i+1) rotated by angle pos * omega_i.
void rope_rotate(const double* in, double* out, double pos, const std::vector<double>& omega) {
  for (std::size_t i = 0; i < omega.size(); ++i) {
    const double a = pos * omega[i];
    const double c = std::cos(a), s = std::sin(a);
    const double x = in[2 * i], y = in[2 * i + 1];
    out[2 * i] = x * c - y * s;
    out[2 * i + 1] = x * s + y * c;
  }
}

double norm2(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return s;
}

void normalize(std::vector<double>& v) {
  const double n = std::sqrt(norm2(v));
  if (n > 0.0)
    for (double& x : v) x /= n;
}

// A unit Gaussian direction supported on the given channels.
std::vector<double> random_direction(Rng& rng, int d, const std::vector<int>& channels) {
  std::vector<double> v(d, 0.0);
  for (int c : channels) v[c] = rng.normal();
  normalize(v);
  return v;
}

std::string invalid(const std::string& name, const std::string& value, const std::string& rule) {
  return "synthetic parameter " + name + " = " + value + " is invalid: " + rule + ".";
}

template <class T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool finite(double x) { return std::isfinite(x); }

nlohmann::json params_json(const SynthParams& p) {
  return nlohmann::json{
      {"preset", p.preset},
      {"seed", p.seed},
      {"n_layers", p.n_layers},
      {"n_kv_heads", p.n_kv_heads},
      {"group_size", p.group_size},
      {"head_dim", p.head_dim},
      {"prompt_len", p.prompt_len},
      {"obs_window", p.obs_window},
      {"decode_steps", p.decode_steps},
      {"mix_sink", p.mix_sink},
      {"mix_local", p.mix_local},
      {"mix_retrieval", p.mix_retrieval},
      {"mix_diffuse", p.mix_diffuse},
      {"logit_scale_min", p.logit_scale_min},
      {"logit_scale_max", p.logit_scale_max},
      {"outlier_channels", p.outlier_channels},
      {"outlier_strength", p.outlier_strength},
      {"spans_per_head", p.spans_per_head},
      {"span_len", p.span_len},
      {"query_drift", p.query_drift},
      {"rope_theta", p.rope_theta},
      {"storage", std::string(dtype_name(p.storage))},
  };
}

}  // namespace

// ---- parameters -----------------------------------------------------------------
void SynthParams::validate() const {
  auto check_int = [](const char* name, int v, int lo, int hi) {
    if (v < lo || v > hi)
      throw InputError(invalid(name, str(v), "it must be in [" + str(lo) + ", " + str(hi) + "]"));
  };
  check_int("n_layers", n_layers, 1, kMaxLayers);
  check_int("n_kv_heads", n_kv_heads, 1, kMaxHeads);
  check_int("group_size", group_size, 1, kMaxGroup);
  check_int("head_dim", head_dim, 8, kMaxHeadDim);
  if (head_dim % 2 != 0)
    throw InputError(invalid("head_dim", str(head_dim), "RoPE rotates channel pairs, so it must be even"));
  check_int("obs_window", obs_window, 1, kMaxPrompt);
  check_int("prompt_len", prompt_len, obs_window + kSinkTokens + 1, kMaxPrompt);
  check_int("decode_steps", decode_steps, 1, kMaxDecode);
  const long long elements = static_cast<long long>(prompt_len + decode_steps) * head_dim * (group_size + 2);
  if (elements > (1ll << 31))
    throw InputError(invalid("(prompt_len + decode_steps) * head_dim * (group_size + 2)", str(elements),
                             "one head would not fit in memory; it must be at most 2^31 elements"));

  const std::array<std::pair<const char*, double>, 4> mix = {
      {{"mix_sink", mix_sink}, {"mix_local", mix_local}, {"mix_retrieval", mix_retrieval}, {"mix_diffuse", mix_diffuse}}};
  for (const auto& [name, w] : mix)
    if (!finite(w) || w < 0.0) throw InputError(invalid(name, str(w), "head-mix weights must be finite and >= 0"));
  if (mix_sink + mix_local + mix_retrieval + mix_diffuse <= 0.0)
    throw InputError(invalid("mix_sink + mix_local + mix_retrieval + mix_diffuse", "0", "at least one weight must be positive"));

  if (!finite(logit_scale_min) || logit_scale_min <= 0.0 || logit_scale_min > 100.0)
    throw InputError(invalid("logit_scale_min", str(logit_scale_min), "it must be in (0, 100]"));
  if (!finite(logit_scale_max) || logit_scale_max < logit_scale_min || logit_scale_max > 100.0)
    throw InputError(invalid("logit_scale_max", str(logit_scale_max),
                             "it must be in [logit_scale_min = " + str(logit_scale_min) + ", 100]"));
  check_int("outlier_channels", outlier_channels, 0, head_dim / 4);
  if (!finite(outlier_strength) || outlier_strength < 1.0 || outlier_strength > 1000.0)
    throw InputError(invalid("outlier_strength", str(outlier_strength), "it must be in [1, 1000]"));
  check_int("span_len", span_len, 1, kMaxPrompt);
  check_int("spans_per_head", spans_per_head, mix_retrieval > 0.0 ? 1 : 0, kMaxPrompt);
  if (mix_retrieval > 0.0) {
    // spans_per_head spans of span_len tokens, one token apart, inside [4, T - W).
    const long long need = static_cast<long long>(spans_per_head) * span_len + (spans_per_head - 1);
    const long long room = static_cast<long long>(prompt_len) - obs_window - kSinkTokens;
    if (need > room)
      throw InputError(invalid("spans_per_head * span_len", str(spans_per_head) + " * " + str(span_len),
                               "the spans plus one-token gaps (" + str(need) + " tokens) must fit in the " +
                                   str(room) + " positions between the 4 sink tokens and the observation window"));
  }
  if (!finite(query_drift) || query_drift < 0.0 || query_drift > 10.0)
    throw InputError(invalid("query_drift", str(query_drift), "it must be in [0, 10]"));
  if (!finite(rope_theta) || rope_theta <= 1.0 || rope_theta > 1e12)
    throw InputError(invalid("rope_theta", str(rope_theta), "it must be in (1, 1e12]"));
  if (storage != DType::F32 && storage != DType::F16 && storage != DType::BF16)
    throw InputError(invalid("storage", std::string(dtype_name(storage)), "it must be F32, F16 or BF16"));
}

std::vector<std::string> synth_preset_names() { return {"tiny", "llama-like", "mistral-like", "qwen-like"}; }

SynthParams synth_preset(const std::string& name) {
  SynthParams p;
  p.preset = name;
  if (name == "tiny") {
    // For tests: 4 heads of 64 tokens, one of every kind on average.
    p.n_layers = 2;
    p.n_kv_heads = 2;
    p.group_size = 2;
    p.head_dim = 16;
    p.prompt_len = 64;
    p.obs_window = 8;
    p.decode_steps = 8;
    p.mix_sink = p.mix_local = p.mix_retrieval = p.mix_diffuse = 0.25;
    p.logit_scale_min = 0.7;
    p.logit_scale_max = 1.5;
    p.outlier_channels = 2;
    p.outlier_strength = 6.0;
    p.spans_per_head = 2;
    p.span_len = 4;
    p.query_drift = 0.05;
    p.rope_theta = 10000.0;
  } else if (name == "llama-like") {
    // Llama-3-8B geometry (8 KV heads, g = 4, d = 128, theta = 5e5), 4 layers.
    p.n_layers = 4;
    p.n_kv_heads = 8;
    p.group_size = 4;
    p.head_dim = 128;
    p.prompt_len = 2048;
    p.obs_window = 32;
    p.decode_steps = 64;
    p.mix_sink = 0.35;
    p.mix_local = 0.25;
    p.mix_retrieval = 0.15;
    p.mix_diffuse = 0.25;
    p.logit_scale_min = 0.7;
    p.logit_scale_max = 1.8;
    p.outlier_channels = 4;
    p.outlier_strength = 6.0;
    p.spans_per_head = 4;
    p.span_len = 8;
    p.query_drift = 0.05;
    p.rope_theta = 500000.0;
  } else if (name == "mistral-like") {
    // Mistral-7B geometry (8 KV heads, g = 4, d = 128, theta = 1e6); sliding-window
    // heritage: more local heads, softer logits, milder outliers.
    p.n_layers = 4;
    p.n_kv_heads = 8;
    p.group_size = 4;
    p.head_dim = 128;
    p.prompt_len = 2048;
    p.obs_window = 32;
    p.decode_steps = 64;
    p.mix_sink = 0.2;
    p.mix_local = 0.45;
    p.mix_retrieval = 0.1;
    p.mix_diffuse = 0.25;
    p.logit_scale_min = 0.6;
    p.logit_scale_max = 1.5;
    p.outlier_channels = 4;
    p.outlier_strength = 4.0;
    p.spans_per_head = 4;
    p.span_len = 8;
    p.query_drift = 0.05;
    p.rope_theta = 1000000.0;
  } else if (name == "qwen-like") {
    // Qwen2.5-7B geometry (4 KV heads, g = 7, d = 128, theta = 1e6): very large key
    // outliers, sharper heads, more retrieval.
    p.n_layers = 4;
    p.n_kv_heads = 4;
    p.group_size = 7;
    p.head_dim = 128;
    p.prompt_len = 2048;
    p.obs_window = 32;
    p.decode_steps = 64;
    p.mix_sink = 0.3;
    p.mix_local = 0.2;
    p.mix_retrieval = 0.25;
    p.mix_diffuse = 0.25;
    p.logit_scale_min = 1.0;
    p.logit_scale_max = 3.0;
    p.outlier_channels = 4;
    p.outlier_strength = 20.0;
    p.spans_per_head = 4;
    p.span_len = 8;
    p.query_drift = 0.05;
    p.rope_theta = 1000000.0;
  } else {
    std::string list;
    for (const auto& n : synth_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw InputError("synthetic preset '" + name + "' is unknown; the presets are " + list + ".");
  }
  return p;
}

// ---- metadata -------------------------------------------------------------------
TraceMeta synth_meta(const SynthParams& p) {
  p.validate();
  TraceMeta meta;
  meta.n_layers = p.n_layers;
  meta.n_kv_heads = p.n_kv_heads;
  meta.group_size = p.group_size;
  meta.head_dim = p.head_dim;
  meta.prompt_len = p.prompt_len;
  meta.obs_window = p.obs_window;
  meta.decode_steps = p.decode_steps;
  meta.has_pre_rope = true;
  meta.rope.theta = p.rope_theta;
  meta.rope.rotary_dim = 0;
  meta.rope.style = "interleaved";
  meta.storage = p.storage;

  nlohmann::json heads = nlohmann::json::array();
  meta.spans.resize(static_cast<std::size_t>(p.n_layers) * p.n_kv_heads);
  for (int l = 0; l < p.n_layers; ++l) {
    for (int h = 0; h < p.n_kv_heads; ++h) {
      HeadPlan plan = plan_head(p, l, h);
      heads.push_back({{"layer", l},
                       {"kv_head", h},
                       {"kind", kKindNames[static_cast<int>(plan.kind)]},
                       {"logit_scale", plan.logit_scale},
                       {"outlier_channels", plan.outliers}});
      meta.spans[static_cast<std::size_t>(l) * p.n_kv_heads + h] = std::move(plan.spans);
    }
  }
  nlohmann::json prov = {{"source", "synthetic"}, {"generator", kGeneratorVersion}, {"preset", p.preset},
                         {"seed", p.seed},        {"params", params_json(p)},       {"heads", heads}};
  meta.provenance = prov.dump();
  return meta;
}

// ---- one head ---------------------------------------------------------------------
namespace {

// One head's generator in named steps. The constructor fixes the key-content scales and
// draws the structure (pre-RoPE key components and post-RoPE query components, at
// lambda = 1) from the Structure stream; generate() then draws keys, values and queries,
// each from its own stream (head_seed), in that order.
class HeadSynth {
 public:
  HeadSynth(const SynthParams& params, int layer_index, int kv_head_index);
  HeadData generate() const;

 private:
  bool pair_clean(int i) const { return !is_outlier[2 * i] && !is_outlier[2 * i + 1]; }
  void draw_sink_structure(Rng& srng, double log_t);
  void draw_local_structure(Rng& srng, double log_t);
  void draw_retrieval_structure(Rng& srng);
  void make_key(Rng& rng, int prompt_index, double* pre) const;
  void synth_prompt_keys(HeadData& out) const;
  void synth_decode_keys(HeadData& out) const;
  void fill_values(MatrixRM& m, int rows, Stream stream) const;
  void synth_queries(HeadData& out) const;

  const SynthParams& p;
  const int layer, kv_head;
  const HeadPlan plan;
  const int d, P, T, W, S, g;
  const double sqrt_d;
  const std::vector<double> omega;

  // Key content: N(0, sigma_c^2), sigma_c = outlier_strength on outlier channels, 1 elsewhere.
  std::vector<double> sigma;
  std::vector<bool> is_outlier;
  std::vector<int> struct_channels;  // sink/span subspace: clean pairs of the slowest half
  std::vector<bool> in_struct;

  std::vector<double> local_dir;                // m (unit), local heads
  double local_amp = 0.0;                       // a_l
  std::vector<double> sink_dir;                 // u (unit), sink heads
  std::vector<double> sink_query;               // beta_s u_post
  std::vector<std::vector<double>> span_dirs;   // v_j (unit), retrieval heads
  std::vector<std::vector<double>> span_targets;  // tau_j (unit, post-RoPE)
  std::vector<double> span_pref;                // pi_j
  std::vector<double> span_token_amp;           // a_r nu_t on span tokens, 0 elsewhere
  std::vector<int> span_of;
  double span_amp = 0.0;
};

HeadSynth::HeadSynth(const SynthParams& params, int layer_index, int kv_head_index)
    : p(params),
      layer(layer_index),
      kv_head(kv_head_index),
      plan(plan_head(p, layer, kv_head)),
      d(p.head_dim),
      P(pairs_of(d)),
      T(p.prompt_len),
      W(p.obs_window),
      S(p.decode_steps),
      g(p.group_size),
      sqrt_d(std::sqrt(static_cast<double>(d))),
      omega(rope_frequencies(d, p.rope_theta)),
      sigma(d, 1.0),
      is_outlier(d, false),
      local_dir(d, 0.0),
      span_token_amp(T, 0.0),
      span_of(T, -1) {
  for (int c : plan.outliers) {
    sigma[c] = p.outlier_strength;
    is_outlier[c] = true;
  }
  // Structure (pre-RoPE key components and post-RoPE query components, at lambda = 1).
  Rng srng(head_seed(p.seed, layer, kv_head, Stream::Structure));
  const double log_t = std::log(static_cast<double>(T));
  for (int i = structure_first_pair(d); i < P; ++i)
    if (pair_clean(i)) {
      struct_channels.push_back(2 * i);
      struct_channels.push_back(2 * i + 1);
    }
  in_struct.assign(d, false);
  for (int c : struct_channels) in_struct[c] = true;

  switch (plan.kind) {
    case HeadKind::Sink:
      draw_sink_structure(srng, log_t);
      break;
    case HeadKind::Local:
      draw_local_structure(srng, log_t);
      break;
    case HeadKind::Retrieval:
      draw_retrieval_structure(srng);
      break;
    case HeadKind::Diffuse:
      break;
  }
}

void HeadSynth::draw_sink_structure(Rng& srng, double log_t) {
  // Keys t < 4 get a_s w_t u with a_s = kappa_s; the query component beta_s u_post with
  // beta_s = sqrt(d) then gives logit kappa_s w_t (u_post . R(t) u) ~ kappa_s w_t.
  const double kappa = log_t + 6.0;
  sink_dir = random_direction(srng, d, struct_channels);
  std::vector<double> target(d, 0.0), rot(d);
  for (int t = 0; t < kSinkTokens; ++t) {
    rope_rotate(sink_dir.data(), rot.data(), t, omega);
    for (int c = 0; c < d; ++c) target[c] += kSinkWeights[t] * rot[c];
  }
  normalize(target);
  sink_query.resize(d);
  for (int c = 0; c < d; ++c) sink_query[c] = sqrt_d * target[c];
  for (double& x : sink_dir) x *= kappa;  // stored with its amplitude
}

void HeadSynth::draw_local_structure(Rng& srng, double log_t) {
  // Every key carries a_l m (m unit: a shared pre-RoPE key mean); the query carries
  // a_l m before RoPE too, so the logit is a_l^2 m^T R(t - p) m / sqrt(d) = kappa_l g(t - p)
  // with a_l^2 = kappa_l sqrt(d) and g(D) = sum_i h_i cos(omega_i D), sum h_i = 1: RoPE
  // turns the shared direction into a relative-position (recency) kernel. Query and key
  // share the amplitude, which balances the two cross terms with the content.
  const double kappa = log_t + 6.0;
  local_amp = std::sqrt(kappa * sqrt_d);
  for (int i = 0; i < P; ++i) {
    if (!pair_clean(i)) continue;
    const double z = std::log(omega[i] * kLocalCenterPeriod) / kLocalLogWidth;
    const double h = std::exp(-0.5 * z * z);
    const double phase = srng.uniform(0.0, 2.0 * std::numbers::pi);
    local_dir[2 * i] = std::sqrt(h) * std::cos(phase);
    local_dir[2 * i + 1] = std::sqrt(h) * std::sin(phase);
  }
  normalize(local_dir);
}

void HeadSynth::draw_retrieval_structure(Rng& srng) {
  // Span j tokens get a_r nu_t v_j (v_j orthonormal when the subspace allows); queries
  // carry sqrt(d) pi_j tau_j, tau_j the unit post-RoPE mean of the span's key direction:
  // logit ~ kappa_r pi_j nu_t on span j.
  const int n = static_cast<int>(plan.spans.size());
  const double kappa = std::log(static_cast<double>(T) / (static_cast<double>(n) * p.span_len)) + 7.0;
  span_amp = kappa;
  for (int j = 0; j < n; ++j) {
    std::vector<double> v = random_direction(srng, d, struct_channels);
    if (j < static_cast<int>(struct_channels.size())) {  // Gram-Schmidt against the earlier ones
      for (int rep = 0; rep < 2; ++rep)
        for (const auto& u : span_dirs) {
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += v[c] * u[c];
          for (int c = 0; c < d; ++c) v[c] -= dot * u[c];
        }
      normalize(v);
    }
    span_dirs.push_back(v);
    span_pref.push_back(srng.uniform(kSpanPreferenceMin, 1.0));
    std::vector<double> target(d, 0.0), rot(d);
    for (int t = plan.spans[j].begin; t < plan.spans[j].end; ++t) {
      span_of[t] = j;
      span_token_amp[t] = span_amp * srng.uniform(kSpanTokenMin, 1.0);
      rope_rotate(v.data(), rot.data(), t, omega);
      for (int c = 0; c < d; ++c) target[c] += rot[c];
    }
    normalize(target);
    span_targets.push_back(target);
  }
}

// Keys: pre = content + structure; post = R(t) pre. prompt_index < 0 for decode keys.
void HeadSynth::make_key(Rng& rng, int prompt_index, double* pre) const {
  for (int c = 0; c < d; ++c) pre[c] = sigma[c] * rng.normal();
  if (plan.kind == HeadKind::Local)
    for (int c = 0; c < d; ++c) pre[c] += local_amp * local_dir[c];
  if (prompt_index >= 0 && prompt_index < kSinkTokens && plan.kind == HeadKind::Sink)
    for (int c = 0; c < d; ++c) pre[c] += kSinkWeights[prompt_index] * sink_dir[c];
  if (prompt_index >= 0 && plan.kind == HeadKind::Retrieval && span_of[prompt_index] >= 0) {
    const auto& v = span_dirs[span_of[prompt_index]];
    for (int c = 0; c < d; ++c) pre[c] += span_token_amp[prompt_index] * v[c];
  }
}

void HeadSynth::synth_prompt_keys(HeadData& out) const {
  out.keys.resize(T, d);
  out.keys_pre_rope.resize(T, d);
  Rng rng(head_seed(p.seed, layer, kv_head, Stream::Keys));
  std::vector<double> pre(d), post(d);
  for (int t = 0; t < T; ++t) {
    make_key(rng, t, pre.data());
    rope_rotate(pre.data(), post.data(), t, omega);
    for (int c = 0; c < d; ++c) {
      out.keys_pre_rope(t, c) = static_cast<float>(pre[c]);
      out.keys(t, c) = static_cast<float>(post[c]);
    }
  }
}

void HeadSynth::synth_decode_keys(HeadData& out) const {
  out.decode_keys.resize(S, d);
  Rng rng(head_seed(p.seed, layer, kv_head, Stream::DecodeKeys));
  std::vector<double> pre(d), post(d);
  for (int s = 1; s <= S; ++s) {
    const int pos = T + s - 1;
    make_key(rng, -1, pre.data());
    rope_rotate(pre.data(), post.data(), pos, omega);
    for (int c = 0; c < d; ++c) out.decode_keys(s - 1, c) = static_cast<float>(post[c]);
  }
}

void HeadSynth::fill_values(MatrixRM& m, int rows, Stream stream) const {
  Rng rng(head_seed(p.seed, layer, kv_head, stream));
  m.resize(rows, d);
  for (int t = 0; t < rows; ++t)
    for (int c = 0; c < d; ++c) m(t, c) = static_cast<float>(rng.normal());
}

void HeadSynth::synth_queries(HeadData& out) const {
  // Queries. Content is N(0, 1) on the content channels (all but the sink/span subspace
  // for sink and retrieval heads), scaled so that its logit against the key content has
  // standard deviation eta: Var = s_q^2 (1 + eps^2) sum_{c in content} vbar_c / d, where
  // vbar_c averages the key-content variance over c's RoPE pair (RoPE mixes the pair).
  const bool mask_struct = plan.kind == HeadKind::Sink || plan.kind == HeadKind::Retrieval;
  std::vector<bool> content(d, true);
  if (mask_struct)
    for (int c = 0; c < d; ++c) content[c] = !in_struct[c];
  double var_sum = 0.0;
  for (int c = 0; c < d; ++c)
    if (content[c]) {
      const int i = c / 2;
      var_sum += 0.5 * (sigma[2 * i] * sigma[2 * i] + sigma[2 * i + 1] * sigma[2 * i + 1]);
    }
  const double eta = plan.kind == HeadKind::Diffuse ? kDiffuseLogitStd : kContentLogitStd;
  const double s_q = eta / std::sqrt((1.0 + kQueryInnovation * kQueryInnovation) * var_sum / d);
  const double lambda = plan.logit_scale;

  out.obs_queries.resize(static_cast<Eigen::Index>(g) * W, d);
  out.decode_queries.resize(static_cast<Eigen::Index>(g) * S, d);
  std::vector<double> base(d), pre(d), post(d), fixed_post(d), drift(d);
  for (int k = 0; k < g; ++k) {
    Rng qrng(head_seed(p.seed, layer, kv_head, Stream::Queries, k));
    Rng decode_rng(head_seed(p.seed, layer, kv_head, Stream::DecodeQueries, k));
    Rng drng(head_seed(p.seed, layer, kv_head, Stream::Drift, k));
    // Query head k: base content b_k, structure multiplier mu_k, span preferences.
    for (int c = 0; c < d; ++c) base[c] = content[c] ? s_q * qrng.normal() : 0.0;
    const double mu = qrng.uniform(1.0 - kGroupSpread, 1.0 + kGroupSpread);
    std::fill(fixed_post.begin(), fixed_post.end(), 0.0);  // position-independent structure
    if (plan.kind == HeadKind::Sink)
      for (int c = 0; c < d; ++c) fixed_post[c] = mu * sink_query[c];
    if (plan.kind == HeadKind::Retrieval)
      for (std::size_t j = 0; j < span_targets.size(); ++j) {
        const double w = mu * span_pref[j] * qrng.uniform(1.0 - kGroupSpread, 1.0 + kGroupSpread);
        for (int c = 0; c < d; ++c) fixed_post[c] += w * sqrt_d * span_targets[j][c];
      }
    const double local_beta = mu * local_amp;  // query pre-RoPE component mu a_l m
    const double q0_norm = std::sqrt(norm2(base) + norm2(fixed_post) +
                                     (plan.kind == HeadKind::Local ? local_beta * local_beta : 0.0));

    // One query at position pos, with content base + eps xi and post-RoPE offset extra.
    auto make_query = [&](Rng& rng, double pos, const std::vector<double>* extra, float* row) {
      for (int c = 0; c < d; ++c)
        pre[c] = content[c] ? base[c] + kQueryInnovation * s_q * rng.normal() : 0.0;
      if (plan.kind == HeadKind::Local)
        for (int c = 0; c < d; ++c) pre[c] += local_beta * local_dir[c];
      rope_rotate(pre.data(), post.data(), pos, omega);
      for (int c = 0; c < d; ++c) {
        double q = post[c] + fixed_post[c];
        if (extra) q += (*extra)[c];
        row[c] = static_cast<float>(lambda * q);
      }
    };
    for (int i = 0; i < W; ++i)
      make_query(qrng, T - W + i, nullptr, &out.obs_queries(static_cast<Eigen::Index>(k) * W + i, 0));
    // Decode: z_s = z_{s-1} + query_drift * |q0| / sqrt(d) * N(0, I_d), so |z_s - z_{s-1}| ~ query_drift |q0|.
    std::fill(drift.begin(), drift.end(), 0.0);
    const double step = p.query_drift * q0_norm / sqrt_d;
    for (int s = 1; s <= S; ++s) {
      for (int c = 0; c < d; ++c) drift[c] += step * drng.normal();
      make_query(decode_rng, T + s - 1, &drift, &out.decode_queries(static_cast<Eigen::Index>(k) * S + (s - 1), 0));
    }
  }
}

HeadData HeadSynth::generate() const {
  HeadData out;
  out.layer = layer;
  out.kv_head = kv_head;
  out.spans = plan.spans;
  synth_prompt_keys(out);
  synth_decode_keys(out);
  fill_values(out.values, T, Stream::Values);
  fill_values(out.decode_values, S, Stream::DecodeValues);
  synth_queries(out);
  return out;
}

}  // namespace

HeadData synth_head(const SynthParams& p, int layer, int kv_head) {
  p.validate();
  if (layer < 0 || layer >= p.n_layers)
    throw InputError("synthetic head layer = " + str(layer) + " is out of range [0, " + str(p.n_layers) + ").");
  if (kv_head < 0 || kv_head >= p.n_kv_heads)
    throw InputError("synthetic head kv_head = " + str(kv_head) + " is out of range [0, " + str(p.n_kv_heads) + ").");
  HeadData head = HeadSynth(p, layer, kv_head).generate();
  head.group_size = p.group_size;
  return head;
}

// ---- whole trace ------------------------------------------------------------------
void write_synthetic_trace(const SynthParams& p, const std::string& path, const ProgressFn& progress) {
  TraceWriter writer(path, synth_meta(p));
  const int total = p.n_layers * p.n_kv_heads;
  int done = 0;
  for (int l = 0; l < p.n_layers; ++l)
    for (int h = 0; h < p.n_kv_heads; ++h) {
      writer.write_head(synth_head(p, l, h));
      ++done;
      if (progress) progress(done, total);
    }
  writer.commit();
}

}  // namespace tierlab
