// Seeded synthetic attention heads (docs/synthetic.md).
//
// Every head is a pure function of (parameters, preset name, seed, layer, kv_head): its
// random numbers come from xoshiro256** streams seeded by splitmix64 from those values,
// normals come from Box-Muller written here (std::normal_distribution differs across
// standard libraries), and all arithmetic is done in double and rounded to float32 once at
// the end.
//
// Logits of a query at position p over the keys t = 0..p (MODEL.md section 2: s_t = q.k_t /
// sqrt(d), nats) are, up to cross terms with the key content,
//   s_t = content_t + [t = 0] s_0 + kappa_l g(p - t) + [t in span j] kappa_r pi_j nu_t
// content_t the query's content against the key's (standard deviation lambda nu_q over t, nu_q a
// per-query log-normal factor), g the RoPE kernel sum_i h_i cos(omega_i (p - t)) with g(0) = 1.
// Over the query's reference positions R (the first token, the spans and the 256 most recent
// positions) kappa_l, kappa_r and s_0 are solved on the exact logits so that, of the softmax
// over R, the 16 most recent positions hold m_l, the spans m_r and the first token m_s (the
// query head's shares); positions older than R dilute them.
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
constexpr int kSinkTokens = 4;               // spans start at position 4 or later
constexpr double kKeyCorrelation = 0.45;     // rho: lag-1 correlation of the key content
constexpr double kQuerySharpnessSpread = 0.3;  // log-normal sd of the per-query content factor nu_q
constexpr double kQueryInnovation = 0.5;     // epsilon: per-query fresh content, relative to the base
constexpr double kGroupSpread = 0.1;         // query heads of a GQA group: shares x U(0.9, 1.1)
constexpr double kOutlierMeanShare = 0.8;    // outlier channels: mean 0.8 S, sd 0.6 S (RMS S)
constexpr double kOutlierTokenScale = 2.5;   // outlier tokens: key content x 2.5
constexpr double kSinkKeyScale = 2.0;        // first key carries 2 sqrt(d) along the sink direction
constexpr double kSpanKeyScale = 1.5;        // span keys carry 1.5 sqrt(d) nu_t along their direction
constexpr double kLocalKeyShare = 0.5;       // every key carries a_l m, a_l = max(0.5 sqrt(d), 4)
constexpr double kLocalKeyMin = 4.0;
constexpr double kDiffuseContentScale = 0.7;  // diffuse heads: 0.7 lambda
constexpr double kBackgroundSinkMass = 0.2;   // other heads: m_s ~ U(0, 0.2 (0.2 + 0.8 x)) background
constexpr double kBackgroundLocalMass = 0.15;  // other heads: m_l ~ U(0, 0.15 (1 - 0.6 x)) background
constexpr double kMaxStructureMass = 0.95;    // m_s + m_l + m_r <= 0.95 (rescaled)
constexpr double kSpanPreferenceMin = 0.75;   // pi_j ~ U(0.75, 1): how strongly queries seek span j
constexpr double kSpanTokenMin = 0.85;        // nu_t ~ U(0.85, 1): key amplitude of each span token
constexpr double kLocalCenterPeriod = 16.0;   // local kernel centred on omega = 1/16 rad per token
constexpr double kLocalLogWidth = 2.0794415416798357;  // ln 8: its width in log-frequency
constexpr int kLocalWindow = 16;              // the local share: the query's 16 most recent positions
constexpr int kShareReference = 256;          // shares are solved over the 256 most recent positions
constexpr double kMaxKappa = 64.0;            // the share solves search kappa in [0, 64] nats
constexpr int kMaxLayers = 4096, kMaxHeads = 4096, kMaxGroup = 256, kMaxHeadDim = 1024;
constexpr int kMaxPrompt = 1 << 22, kMaxDecode = 1 << 20;
constexpr const char* kGeneratorVersion = "tierlab-synthetic/2";

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

// FNV-1a of the preset name: the name is part of every head's seed, so two presets drawn
// with one seed are independent.
std::uint64_t name_hash(const std::string& name) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

// Seed of one stream of one head; `index` separates the query heads of a GQA group, so
// that no stream's length depends on W, S or g.
std::uint64_t head_seed(const SynthParams& p, int layer, int kv_head, Stream stream, int index = 0) {
  std::uint64_t state = p.seed;
  std::uint64_t x = splitmix64_next(state);
  state = x ^ name_hash(p.preset);
  x = splitmix64_next(state);
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
  double depth = 0.5;        // x = (l + 1/2) / L
  double logit_scale = 1.0;  // lambda (nats), diffuse heads already halved
  double sink_mass = 0.0, local_mass = 0.0, span_mass = 0.0;  // target shares
  std::vector<int> outliers;          // sorted channel indices
  std::vector<double> outlier_means;  // signed mean of each outlier channel (same order)
  std::vector<Span> spans;            // retrieval heads only
};

int pairs_of(int d) { return d / 2; }
// Outlier channels are drawn from the channels of the slowest quarter of RoPE pairs.
int outlier_first_channel(int d) { return d - 2 * ((pairs_of(d) + 3) / 4); }
// Sink and span directions live in the slowest half of the pairs (rotation over a span is small).
int structure_first_pair(int d) { return pairs_of(d) - (pairs_of(d) + 1) / 2; }

double layer_depth(int layer, int n_layers) { return (layer + 0.5) / n_layers; }

// Kind weights at depth x: more sink heads late, more local and diffuse heads early.
std::array<double, 4> kind_weights(const SynthParams& p, double x) {
  return {p.mix_sink * (0.1 + 1.9 * x), p.mix_local * (1.9 - 1.8 * x), p.mix_retrieval,
          p.mix_diffuse * (1.25 - 0.5 * x)};
}

HeadPlan plan_head(const SynthParams& p, int layer, int kv_head) {
  Rng rng(head_seed(p, layer, kv_head, Stream::Plan));
  HeadPlan plan;
  plan.depth = layer_depth(layer, p.n_layers);
  const double x = plan.depth;

  const std::array<double, 4> mix = kind_weights(p, x);
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
  if (plan.kind == HeadKind::Diffuse) plan.logit_scale *= kDiffuseContentScale;

  // Shares: the dominant component's from its range, the others' from the background.
  const double u_sink = rng.uniform(), u_local = rng.uniform(), u_span = rng.uniform();
  plan.sink_mass = plan.kind == HeadKind::Sink
                       ? p.sink_mass_min + (p.sink_mass_max - p.sink_mass_min) * u_sink
                       : p.background * kBackgroundSinkMass * (0.2 + 0.8 * x) * u_sink;
  plan.local_mass = plan.kind == HeadKind::Local
                        ? p.local_mass_min + (p.local_mass_max - p.local_mass_min) * u_local
                        : p.background * kBackgroundLocalMass * (1.0 - 0.6 * x) * u_local;
  plan.span_mass =
      plan.kind == HeadKind::Retrieval ? p.span_mass_min + (p.span_mass_max - p.span_mass_min) * u_span : 0.0;
  const double structure = plan.sink_mass + plan.local_mass + plan.span_mass;
  if (structure > kMaxStructureMass) {
    const double f = kMaxStructureMass / structure;
    plan.sink_mass *= f;
    plan.local_mass *= f;
    plan.span_mass *= f;
  }

  std::vector<int> candidates;
  for (int c = outlier_first_channel(p.head_dim); c < p.head_dim; ++c) candidates.push_back(c);
  for (int k = 0; k < p.outlier_channels; ++k) {
    const int j = k + rng.below(static_cast<int>(candidates.size()) - k);
    std::swap(candidates[k], candidates[j]);
  }
  std::vector<std::pair<int, double>> out;
  for (int k = 0; k < p.outlier_channels; ++k) {
    const double sign = rng.uniform() < 0.5 ? -1.0 : 1.0;
    out.emplace_back(candidates[k], sign * kOutlierMeanShare * p.outlier_strength);
  }
  std::sort(out.begin(), out.end());
  for (const auto& [c, m] : out) {
    plan.outliers.push_back(c);
    plan.outlier_means.push_back(m);
  }

  if (plan.kind == HeadKind::Retrieval) {
    // Non-overlapping spans, one free token at least between two spans, inside
    // [kSinkTokens, T - W): sorted gap offsets x_j in [0, free], begin_j = 4 + x_j + j (len + 1).
    const int n = p.spans_per_head, len = p.span_len;
    const int free = (p.prompt_len - p.obs_window - kSinkTokens) - n * len - (n - 1);
    std::vector<int> xs(n);
    for (auto& v : xs) v = rng.below(free + 1);
    std::sort(xs.begin(), xs.end());
    for (int j = 0; j < n; ++j) {
      const int begin = kSinkTokens + xs[j] + j * (len + 1);
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

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double norm2(const std::vector<double>& v) { return dot(v, v); }

void normalize(std::vector<double>& v) {
  const double n = std::sqrt(norm2(v));
  if (n > 0.0)
    for (double& x : v) x /= n;
}

// A unit Gaussian direction supported on the given channels, orthogonal to `against`
// (Gram-Schmidt, twice) while the subspace has room.
std::vector<double> random_direction(Rng& rng, int d, const std::vector<int>& channels,
                                     const std::vector<std::vector<double>>& against = {}) {
  std::vector<double> v(d, 0.0);
  for (int c : channels) v[c] = rng.normal();
  if (against.size() < channels.size())
    for (int rep = 0; rep < 2; ++rep)
      for (const auto& u : against) {
        const double proj = dot(v, u);
        for (int c = 0; c < d; ++c) v[c] -= proj * u[c];
      }
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
      {"sink_mass_min", p.sink_mass_min},
      {"sink_mass_max", p.sink_mass_max},
      {"local_mass_min", p.local_mass_min},
      {"local_mass_max", p.local_mass_max},
      {"span_mass_min", p.span_mass_min},
      {"span_mass_max", p.span_mass_max},
      {"background", p.background},
      {"outlier_channels", p.outlier_channels},
      {"outlier_strength", p.outlier_strength},
      {"query_outlier_strength", p.query_outlier_strength},
      {"outlier_token_rate", p.outlier_token_rate},
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
  auto check_range = [](const char* name, double v, double lo, double hi) {
    if (!finite(v) || v < lo || v > hi)
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
  const std::array<std::tuple<const char*, const char*, double, double>, 3> shares = {
      {{"sink_mass_min", "sink_mass_max", sink_mass_min, sink_mass_max},
       {"local_mass_min", "local_mass_max", local_mass_min, local_mass_max},
       {"span_mass_min", "span_mass_max", span_mass_min, span_mass_max}}};
  for (const auto& [lo_name, hi_name, lo, hi] : shares) {
    check_range(lo_name, lo, 0.0, kMaxStructureMass);
    if (!finite(hi) || hi < lo || hi > kMaxStructureMass)
      throw InputError(invalid(hi_name, str(hi), "it must be in [" + std::string(lo_name) + " = " + str(lo) + ", " +
                                                     str(kMaxStructureMass) + "]"));
  }
  check_range("background", background, 0.0, 4.0);
  check_int("outlier_channels", outlier_channels, 0, head_dim / 4);
  if (!finite(outlier_strength) || outlier_strength < 1.0 || outlier_strength > 1000.0)
    throw InputError(invalid("outlier_strength", str(outlier_strength), "it must be in [1, 1000]"));
  check_range("query_outlier_strength", query_outlier_strength, 0.0, 1000.0);
  check_range("outlier_token_rate", outlier_token_rate, 0.0, 0.5);
  check_int("span_len", span_len, 1, kMaxPrompt);
  check_int("spans_per_head", spans_per_head, mix_retrieval > 0.0 ? 1 : 0, kMaxPrompt);
  if (mix_retrieval > 0.0) {
    // spans_per_head spans of span_len tokens, one token apart, inside [4, T - W).
    const long long need = static_cast<long long>(spans_per_head) * span_len + (spans_per_head - 1);
    const long long room = static_cast<long long>(prompt_len) - obs_window - kSinkTokens;
    if (need > room)
      throw InputError(invalid("spans_per_head * span_len", str(spans_per_head) + " * " + str(span_len),
                               "the spans plus one-token gaps (" + str(need) + " tokens) must fit in the " +
                                   str(room) + " positions between the first 4 tokens and the observation window"));
  }
  if (!finite(query_drift) || query_drift < 0.0 || query_drift > 10.0)
    throw InputError(invalid("query_drift", str(query_drift), "it must be in [0, 10]"));
  if (!finite(rope_theta) || rope_theta <= 1.0 || rope_theta > 1e12)
    throw InputError(invalid("rope_theta", str(rope_theta), "it must be in (1, 1e12]"));
  if (storage != DType::F32 && storage != DType::F16 && storage != DType::BF16)
    throw InputError(invalid("storage", std::string(dtype_name(storage)), "it must be F32, F16 or BF16"));
}

// ---- presets ----------------------------------------------------------------------
std::vector<std::string> synth_preset_names() {
  return {"tiny", "llama-like", "mistral-like", "qwen-like", "llama-3.1-8b", "mistral-7b", "qwen3-8b"};
}

namespace {

// The head model shared by the three 8B-class presets (docs/synthetic.md gives the source of
// every number): content logits calibrated on stories260K, sinks, retrieval heads and outliers
// from the literature.
void set_llm_head_model(SynthParams& p) {
  p.head_dim = 128;
  p.n_kv_heads = 8;
  p.group_size = 4;
  p.prompt_len = 2048;
  p.obs_window = 32;
  p.decode_steps = 64;
  p.mix_sink = 0.40;
  p.mix_local = 0.25;
  p.mix_retrieval = 0.04;
  p.mix_diffuse = 0.31;
  p.logit_scale_min = 2.0;
  p.logit_scale_max = 6.0;
  p.sink_mass_min = 0.3;
  p.sink_mass_max = 0.85;
  p.local_mass_min = 0.3;
  p.local_mass_max = 0.7;
  p.span_mass_min = 0.4;
  p.span_mass_max = 0.7;
  p.background = 1.0;
  p.outlier_channels = 4;
  p.outlier_strength = 6.0;
  p.query_outlier_strength = 2.0;
  p.outlier_token_rate = 0.002;
  p.spans_per_head = 4;
  p.span_len = 8;
  p.query_drift = 0.05;
}

}  // namespace

SynthParams synth_preset(const std::string& name) {
  SynthParams p;
  p.preset = name;
  // The "-like" names are 4-layer versions of the full presets (same head model, the depth
  // profile sampled at 4 layers); their own name seeds them, so they are separate draws.
  const bool llama = name == "llama-3.1-8b" || name == "llama-like";
  const bool mistral = name == "mistral-7b" || name == "mistral-like";
  const bool qwen = name == "qwen3-8b" || name == "qwen-like";
  const bool small = name == "llama-like" || name == "mistral-like" || name == "qwen-like";
  if (name == "tiny") {
    // For tests: 4 heads of 64 tokens, every kind equally likely (a quarter retrieval heads,
    // so that tests meet spans), sharpness in the calibrated range.
    p.n_layers = 2;
    p.n_kv_heads = 2;
    p.group_size = 2;
    p.head_dim = 16;
    p.prompt_len = 64;
    p.obs_window = 8;
    p.decode_steps = 8;
    p.mix_sink = p.mix_local = p.mix_retrieval = p.mix_diffuse = 0.25;
    p.logit_scale_min = 2.0;
    p.logit_scale_max = 5.0;
    p.outlier_channels = 2;
    p.outlier_strength = 6.0;
    p.query_outlier_strength = 2.0;
    p.outlier_token_rate = 0.02;
    p.spans_per_head = 2;
    p.span_len = 4;
    p.query_drift = 0.05;
    p.rope_theta = 10000.0;
  } else if (llama) {
    // Llama-3.1-8B config.json: 32 layers, 32 query / 8 KV heads, hidden 4096 (d = 128),
    // rope_theta 500000 (its llama3 frequency scaling is not modelled).
    set_llm_head_model(p);
    p.n_layers = 32;
    p.rope_theta = 500000.0;
  } else if (mistral) {
    // Mistral-7B v0.2 / v0.3: 32 layers, 32 query / 8 KV heads, d = 128, rope_theta 1e6, no
    // sliding window (v0.1: theta 1e4, window 4096).
    set_llm_head_model(p);
    p.n_layers = 32;
    p.rope_theta = 1000000.0;
  } else if (qwen) {
    // Qwen3-8B config.json: 36 layers, 32 query / 8 KV heads, head_dim 128, rope_theta 1e6.
    // QK-Norm (RMSNorm of each key) bounds every key's norm: no outlier tokens, milder channels.
    set_llm_head_model(p);
    p.n_layers = 36;
    p.rope_theta = 1000000.0;
    p.outlier_strength = 4.0;
    p.outlier_token_rate = 0.0;
  } else {
    std::string list;
    for (const auto& n : synth_preset_names()) list += (list.empty() ? "" : ", ") + n;
    throw InputError("synthetic preset '" + name + "' is unknown; the presets are " + list + ".");
  }
  if (small) p.n_layers = 4;
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
                       {"depth", plan.depth},
                       {"logit_scale", plan.logit_scale},
                       {"sink_mass", plan.sink_mass},
                       {"local_mass", plan.local_mass},
                       {"span_mass", plan.span_mass},
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

// The shares one query head aims at (the plan's, times the query head's own factor).
struct Shares {
  double sink = 0.0, local = 0.0, span = 0.0, content = 1.0;
};

// One head's generator in named steps. The constructor fixes the key-content scales and draws
// the structure directions (spans, sink, local) from the Structure stream; generate() then
// draws keys, values and queries, each from its own stream (head_seed), in that order, and
// solves each query's structure on the generated keys (kept in double, channel-major).
class HeadSynth {
 public:
  HeadSynth(const SynthParams& params, int layer_index, int kv_head_index);
  HeadData generate();

 private:
  bool pair_clean(int i) const { return !is_outlier[2 * i] && !is_outlier[2 * i + 1]; }
  void draw_span_structure(Rng& srng);
  void draw_sink_structure(Rng& srng);
  void draw_local_structure(Rng& srng);
  void make_key(Rng& rng, int position, std::vector<double>& state, bool first, double* pre) const;
  void synth_prompt_keys(HeadData& out);
  void synth_decode_keys(HeadData& out);
  void store_key(int position, const std::vector<double>& post);
  void logits(const std::vector<double>& q, const std::vector<int>& positions, std::vector<double>& out) const;
  double solve_share(const std::vector<double>& a, const std::vector<double>& v, const std::vector<char>& in_set,
                     double share) const;
  double solve_sink_beta(const std::vector<double>& a, const std::vector<double>& b, double share) const;
  void fill_values(MatrixRM& m, int rows, Stream stream) const;
  void synth_queries(HeadData& out) const;
  void add_structure(int pos, const Shares& sh, const std::vector<double>& prefs, std::vector<double>& q) const;

  const SynthParams& p;
  const int layer, kv_head;
  const HeadPlan plan;
  const int d, P, T, W, S, g;
  const double sqrt_d;
  const std::vector<double> omega;

  // Key content: mean_c + sigma_c z (z unit AR(1) over positions); outlier channels have
  // mean +-0.8 S and sigma 0.6 S, the others mean 0 and sigma 1.
  std::vector<double> sigma, mean;
  std::vector<bool> is_outlier;
  std::vector<double> pair_var;      // key-content variance averaged over each RoPE pair
  std::vector<double> query_weight;  // query content RMS per channel (query_outlier_strength on outliers)
  std::vector<int> struct_channels;  // sink/span subspace: clean pairs of the slowest half

  std::vector<double> sink_dir;  // u (unit); the first key carries sink_amp u
  double sink_amp = 0.0;
  std::vector<double> local_dir;  // m (unit); every key carries local_amp m
  double local_amp = 0.0;
  std::vector<std::vector<double>> span_dirs;     // v_j (unit), retrieval heads
  std::vector<std::vector<double>> span_targets;  // tau_j (unit, post-RoPE)
  std::vector<double> span_pref;                  // pi_j
  std::vector<double> span_token_amp;             // span_amp nu_t on span tokens, 0 elsewhere
  std::vector<int> span_of;
  double span_amp = 0.0;

  std::vector<double> keys_cm;       // post-RoPE keys of positions 0..T+S-1, channel-major [c * (T + S) + t]
  std::vector<double> last_content;  // the AR state after the last prompt key
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
      mean(d, 0.0),
      is_outlier(d, false),
      pair_var(P, 1.0),
      query_weight(d, 1.0),
      sink_dir(d, 0.0),
      local_dir(d, 0.0),
      span_token_amp(T, 0.0),
      span_of(T, -1) {
  const double sd_share = std::sqrt(1.0 - kOutlierMeanShare * kOutlierMeanShare);
  for (std::size_t k = 0; k < plan.outliers.size(); ++k) {
    const int c = plan.outliers[k];
    sigma[c] = sd_share * p.outlier_strength;
    mean[c] = plan.outlier_means[k];
    is_outlier[c] = true;
    query_weight[c] = p.query_outlier_strength;
  }
  for (int i = 0; i < P; ++i) pair_var[i] = 0.5 * (sigma[2 * i] * sigma[2 * i] + sigma[2 * i + 1] * sigma[2 * i + 1]);
  for (int i = structure_first_pair(d); i < P; ++i)
    if (pair_clean(i)) {
      struct_channels.push_back(2 * i);
      struct_channels.push_back(2 * i + 1);
    }

  // Structure directions, in this order from one stream: spans, sink, local.
  Rng srng(head_seed(p, layer, kv_head, Stream::Structure));
  if (!plan.spans.empty() && plan.span_mass > 0.0) draw_span_structure(srng);
  if (plan.sink_mass > 0.0) draw_sink_structure(srng);
  if (plan.local_mass > 0.0) draw_local_structure(srng);
}

void HeadSynth::draw_span_structure(Rng& srng) {
  // Span j's tokens get span_amp nu_t v_j (v_j orthonormal while the subspace allows); a query
  // that carries b_j tau_j (tau_j the unit post-RoPE mean of R(t) v_j over the span) then has
  // logit b_j span_amp nu_t (tau_j . R(t) v_j) / sqrt(d) on them.
  span_amp = kSpanKeyScale * sqrt_d;
  for (std::size_t j = 0; j < plan.spans.size(); ++j) {
    std::vector<double> v = random_direction(srng, d, struct_channels, span_dirs);
    span_pref.push_back(srng.uniform(kSpanPreferenceMin, 1.0));
    std::vector<double> target(d, 0.0), rot(d);
    for (int t = plan.spans[j].begin; t < plan.spans[j].end; ++t) {
      span_of[t] = static_cast<int>(j);
      span_token_amp[t] = span_amp * srng.uniform(kSpanTokenMin, 1.0);
      rope_rotate(v.data(), rot.data(), t, omega);
      for (int c = 0; c < d; ++c) target[c] += rot[c];
    }
    normalize(target);
    span_dirs.push_back(v);
    span_targets.push_back(target);
  }
}

void HeadSynth::draw_sink_structure(Rng& srng) {
  // The first key carries sink_amp u (u unit in the slow pairs, orthogonal to the span
  // directions); queries carry beta u, beta solved per query for the first token's logit.
  sink_amp = kSinkKeyScale * sqrt_d;
  sink_dir = random_direction(srng, d, struct_channels, span_dirs);
}

void HeadSynth::draw_local_structure(Rng& srng) {
  // Every key carries local_amp m (a shared pre-RoPE key mean); a query carries beta m before
  // RoPE, so the logit is beta local_amp m^T R(t - p) m / sqrt(d) = kappa_l g(p - t) with
  // g(D) = sum_i h_i cos(omega_i D), sum h_i = 1: RoPE turns the shared direction into a
  // relative-position (recency) kernel.
  local_amp = std::max(kLocalKeyShare * sqrt_d, kLocalKeyMin);
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

// Pre-RoPE key at `position`: mean + sigma (scale) z_t + structure. z_t is a unit AR(1) over
// positions (state), scale = 3 on outlier tokens (never the first token).
void HeadSynth::make_key(Rng& rng, int position, std::vector<double>& state, bool first, double* pre) const {
  const double innovation = std::sqrt(1.0 - kKeyCorrelation * kKeyCorrelation);
  for (int c = 0; c < d; ++c) {
    const double e = rng.normal();
    state[c] = first ? e : kKeyCorrelation * state[c] + innovation * e;
  }
  const double u = rng.uniform();
  const double scale = (position > 0 && u < p.outlier_token_rate) ? kOutlierTokenScale : 1.0;
  for (int c = 0; c < d; ++c) pre[c] = mean[c] + sigma[c] * scale * state[c] + local_amp * local_dir[c];
  if (position == 0)
    for (int c = 0; c < d; ++c) pre[c] += sink_amp * sink_dir[c];
  if (position < T && span_of[position] >= 0) {
    const auto& v = span_dirs[span_of[position]];
    for (int c = 0; c < d; ++c) pre[c] += span_token_amp[position] * v[c];
  }
}

void HeadSynth::synth_prompt_keys(HeadData& out) {
  out.keys.resize(T, d);
  out.keys_pre_rope.resize(T, d);
  keys_cm.assign(static_cast<std::size_t>(d) * (T + S), 0.0);
  Rng rng(head_seed(p, layer, kv_head, Stream::Keys));
  std::vector<double> pre(d), post(d), state(d, 0.0);
  for (int t = 0; t < T; ++t) {
    make_key(rng, t, state, t == 0, pre.data());
    rope_rotate(pre.data(), post.data(), t, omega);
    store_key(t, post);
    for (int c = 0; c < d; ++c) {
      out.keys_pre_rope(t, c) = static_cast<float>(pre[c]);
      out.keys(t, c) = static_cast<float>(post[c]);
    }
  }
  last_content = state;
}

void HeadSynth::store_key(int position, const std::vector<double>& post) {
  for (int c = 0; c < d; ++c) keys_cm[static_cast<std::size_t>(c) * (T + S) + position] = post[c];
}

void HeadSynth::synth_decode_keys(HeadData& out) {
  // The key content's AR(1) continues from the last prompt key, with its own stream.
  out.decode_keys.resize(S, d);
  Rng rng(head_seed(p, layer, kv_head, Stream::DecodeKeys));
  std::vector<double> pre(d), post(d), state = last_content;
  for (int s = 1; s <= S; ++s) {
    const int pos = T + s - 1;
    make_key(rng, pos, state, false, pre.data());
    rope_rotate(pre.data(), post.data(), pos, omega);
    store_key(pos, post);
    for (int c = 0; c < d; ++c) out.decode_keys(s - 1, c) = static_cast<float>(post[c]);
  }
}

void HeadSynth::fill_values(MatrixRM& m, int rows, Stream stream) const {
  Rng rng(head_seed(p, layer, kv_head, stream));
  m.resize(rows, d);
  for (int t = 0; t < rows; ++t)
    for (int c = 0; c < d; ++c) m(t, c) = static_cast<float>(rng.normal());
}

// out[r] = q . k_t / sqrt(d) for t = positions[r], accumulated channel by channel in double.
void HeadSynth::logits(const std::vector<double>& q, const std::vector<int>& positions, std::vector<double>& out) const {
  out.assign(positions.size(), 0.0);
  for (int c = 0; c < d; ++c) {
    const double qc = q[c];
    const double* row = keys_cm.data() + static_cast<std::size_t>(c) * (T + S);
    for (std::size_t r = 0; r < positions.size(); ++r) out[r] += qc * row[positions[r]];
  }
  for (double& x : out) x /= sqrt_d;
}

// kappa in [0, 64] for which the entries r >= 1 with in_set[r] hold `share` of the
// softmax of s_r = a_r + kappa v_r over the entries r >= 1:
//   f(kappa) = LSE_in(s) - LSE_out(s) - ln(share / (1 - share)) = 0,
//   f'(kappa) = mean_in(v) - mean_out(v) (softmax-weighted); Newton, kept in a bisection bracket
// found by doubling kappa from 0.5. 0 when the set already holds the share at kappa = 0; when no
// kappa up to 64 reaches it, the doubling step that came closest.
double HeadSynth::solve_share(const std::vector<double>& a, const std::vector<double>& v, const std::vector<char>& in_set,
                              double share) const {
  const std::size_t n = a.size();
  const double target = std::log(share / (1.0 - share));
  auto eval = [&](double kappa, double& slope) {
    double mx_in = -std::numeric_limits<double>::infinity(), mx_out = mx_in;
    for (std::size_t r = 1; r < n; ++r) {
      const double s = a[r] + kappa * v[r];
      if (in_set[r]) mx_in = std::max(mx_in, s);
      else mx_out = std::max(mx_out, s);
    }
    double z_in = 0, z_out = 0, v_in = 0, v_out = 0;
    for (std::size_t r = 1; r < n; ++r) {
      const double s = a[r] + kappa * v[r];
      if (in_set[r]) {
        const double e = std::exp(s - mx_in);
        z_in += e, v_in += e * v[r];
      } else {
        const double e = std::exp(s - mx_out);
        z_out += e, v_out += e * v[r];
      }
    }
    if (z_in <= 0.0) return -std::numeric_limits<double>::infinity();
    if (z_out <= 0.0) return std::numeric_limits<double>::infinity();
    slope = v_in / z_in - v_out / z_out;
    return (mx_in + std::log(z_in)) - (mx_out + std::log(z_out)) - target;
  };
  double slope = 0.0;
  double f = eval(0.0, slope);
  if (!(f < 0.0)) return 0.0;
  // Bracket the root by doubling kappa; where the share cannot be reached (a set whose v never
  // dominates, e.g. RoPE side lobes as high as the window's), keep the kappa that came closest.
  double lo = 0.0, hi = 0.0, best = 0.0, f_best = f, f_lo = f, slope_lo = slope;
  for (double k = 0.5; k <= kMaxKappa; k *= 2.0) {
    double s_k = 0.0;
    const double f_k = eval(k, s_k);
    if (f_k >= 0.0) {
      hi = k;
      break;
    }
    if (f_k > f_best) best = k, f_best = f_k;
    lo = k, f_lo = f_k, slope_lo = s_k;
  }
  if (hi == 0.0) return best;
  double kappa = lo;
  f = f_lo;
  slope = slope_lo;
  for (int it = 0; it < 60 && std::abs(f) > 1e-9; ++it) {
    double next = slope > 0.0 ? kappa - f / slope : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    kappa = next;
    f = eval(kappa, slope);
    (f < 0.0 ? lo : hi) = kappa;
  }
  return kappa;
}

// The sink coefficient beta for which the first token holds `share` of the softmax of
// s_t = a_t + beta b_t over positions 0..n-1: s_0 - ln sum_{t >= 1} e^{s_t} = ln(share / (1 - share)).
// Newton from the estimate that ignores b_t for t > 0 (b_0 ~ 2 sqrt(d) / sqrt(d) = 2 dominates).
double HeadSynth::solve_sink_beta(const std::vector<double>& a, const std::vector<double>& b, double share) const {
  const int n = static_cast<int>(a.size());
  const double target = std::log(share / (1.0 - share));
  auto rest = [&](double beta, double& weighted_b) {  // ln sum_{t >= 1} e^{s_t}, and the softmax mean of b
    double mx = -std::numeric_limits<double>::infinity();
    for (int t = 1; t < n; ++t) mx = std::max(mx, a[t] + beta * b[t]);
    double z = 0.0, zb = 0.0;
    for (int t = 1; t < n; ++t) {
      const double e = std::exp(a[t] + beta * b[t] - mx);
      z += e;
      zb += e * b[t];
    }
    weighted_b = zb / z;
    return mx + std::log(z);
  };
  if (b[0] <= 0.0 || n < 2) return 0.0;
  double wb = 0.0;
  double beta = (target + rest(0.0, wb) - a[0]) / b[0];
  for (int it = 0; it < 12; ++it) {
    const double f = a[0] + beta * b[0] - rest(beta, wb) - target;
    const double slope = b[0] - wb;
    if (!(slope > 1e-9)) break;
    beta -= f / slope;
    if (std::abs(f) < 1e-12) break;
  }
  return beta;
}

// Adds the local, span and sink components to the post-RoPE query q (content and drift) at
// position pos, for the shares sh. Each is solved on the exact logits over the query's
// reference positions: the first token, the spans and the 256 most recent positions (all of
// 0..pos while pos < 256). In that set the first token holds m_s, the spans m_r and the 16
// most recent positions m_l of the rest; the positions older than the reference dilute them,
// so over a longer context attention spreads.
// Order: local (m_l / (1 - m_s - m_r) of the set without the first token, before the spans),
// spans (m_r / (1 - m_s)), then the first token (m_s).
void HeadSynth::add_structure(int pos, const Shares& sh, const std::vector<double>& prefs,
                              std::vector<double>& q) const {
  const int recent = std::max(1, pos - kShareReference + 1);
  std::vector<int> ref = {0};
  if (!span_targets.empty())
    for (const Span& sp : plan.spans)
      for (int t = sp.begin; t < std::min(sp.end, recent); ++t) ref.push_back(t);
  for (int t = recent; t <= pos; ++t) ref.push_back(t);
  const std::size_t n = ref.size();
  std::vector<double> a, v;
  logits(q, ref, a);
  if (sh.local > 0.0) {
    std::vector<double> local_post(d);
    rope_rotate(local_dir.data(), local_post.data(), pos, omega);
    logits(local_post, ref, v);
    for (double& x : v) x *= sqrt_d / local_amp;  // kappa v_t = kappa g(pos - t) + cross terms
    std::vector<char> in_window(n, 0);
    for (std::size_t r = 1; r < n; ++r) in_window[r] = ref[r] > pos - kLocalWindow;
    const double kappa = solve_share(a, v, in_window, sh.local / (1.0 - sh.sink - sh.span));
    const double beta = kappa * sqrt_d / local_amp;
    for (int c = 0; c < d; ++c) q[c] += beta * local_post[c];
    for (std::size_t r = 0; r < n; ++r) a[r] += kappa * v[r];
  }
  if (sh.span > 0.0) {
    std::vector<double> dir(d, 0.0);
    for (std::size_t j = 0; j < span_targets.size(); ++j)
      for (int c = 0; c < d; ++c) dir[c] += sqrt_d * prefs[j] / span_amp * span_targets[j][c];
    logits(dir, ref, v);  // kappa v_t = kappa pi_j nu_t (tau_j . R(t) v_j) on span j's tokens
    std::vector<char> in_span(n, 0);
    for (std::size_t r = 1; r < n; ++r) in_span[r] = ref[r] < T && span_of[ref[r]] >= 0;
    const double kappa = solve_share(a, v, in_span, sh.span / (1.0 - sh.sink));
    for (int c = 0; c < d; ++c) q[c] += kappa * dir[c];
    for (std::size_t r = 0; r < n; ++r) a[r] += kappa * v[r];
  }
  if (sh.sink > 0.0 && sink_amp > 0.0) {
    logits(sink_dir, ref, v);
    const double beta = solve_sink_beta(a, v, sh.sink);
    for (int c = 0; c < d; ++c) q[c] += beta * sink_dir[c];
  }
}

void HeadSynth::synth_queries(HeadData& out) const {
  // Content: nu_q s_q (b_k + eps xi) per channel (times query_outlier_strength on the outlier
  // channels), rotated to the query's position; s_q makes the content logit's standard
  // deviation over the keys lambda: lambda^2 = s_q^2 (1 + eps^2) sum_i |w_i|^2 vbar_i / d.
  double var_unit = 0.0;
  for (int i = 0; i < P; ++i)
    var_unit += (query_weight[2 * i] * query_weight[2 * i] + query_weight[2 * i + 1] * query_weight[2 * i + 1]) *
                pair_var[i];
  var_unit *= (1.0 + kQueryInnovation * kQueryInnovation) / d;
  const double s_q = var_unit > 0.0 ? plan.logit_scale / std::sqrt(var_unit) : 0.0;
  const double nu_shift = 0.5 * kQuerySharpnessSpread * kQuerySharpnessSpread;

  out.obs_queries.resize(static_cast<Eigen::Index>(g) * W, d);
  out.decode_queries.resize(static_cast<Eigen::Index>(g) * S, d);
  std::vector<double> base(d), pre(d), post(d), drift(d);
  for (int k = 0; k < g; ++k) {
    Rng qrng(head_seed(p, layer, kv_head, Stream::Queries, k));
    Rng decode_rng(head_seed(p, layer, kv_head, Stream::DecodeQueries, k));
    Rng drng(head_seed(p, layer, kv_head, Stream::Drift, k));
    // Query head k: base content b_k, share multiplier mu_k, span preferences.
    for (int c = 0; c < d; ++c) base[c] = s_q * query_weight[c] * qrng.normal();
    const double mu = qrng.uniform(1.0 - kGroupSpread, 1.0 + kGroupSpread);
    std::vector<double> prefs(span_pref.size());
    for (std::size_t j = 0; j < prefs.size(); ++j)
      prefs[j] = span_pref[j] * qrng.uniform(1.0 - kGroupSpread, 1.0 + kGroupSpread);
    Shares sh;
    sh.sink = mu * plan.sink_mass;
    sh.local = mu * plan.local_mass;
    sh.span = span_targets.empty() ? 0.0 : mu * plan.span_mass;
    const double structure = sh.sink + sh.local + sh.span;
    if (structure > kMaxStructureMass) {
      const double f = kMaxStructureMass / structure;
      sh.sink *= f, sh.local *= f, sh.span *= f;
    }
    sh.content = 1.0 - sh.sink - sh.local - sh.span;
    const double q0_norm = std::sqrt(norm2(base));

    // One query at position pos: content nu (b_k + eps xi), RoPE, drift, then the structure.
    auto make_query = [&](Rng& rng, int pos, const std::vector<double>* extra, float* row) {
      const double nu = std::exp(kQuerySharpnessSpread * rng.normal() - nu_shift);
      for (int c = 0; c < d; ++c) pre[c] = nu * (base[c] + kQueryInnovation * s_q * query_weight[c] * rng.normal());
      rope_rotate(pre.data(), post.data(), pos, omega);
      if (extra)
        for (int c = 0; c < d; ++c) post[c] += (*extra)[c];
      for (const auto& tau : span_targets) {  // no content along the span directions
        const double along = dot(post, tau);
        for (int c = 0; c < d; ++c) post[c] -= along * tau[c];
      }
      std::vector<double> q = post;
      add_structure(pos, sh, prefs, q);
      for (int c = 0; c < d; ++c) row[c] = static_cast<float>(q[c]);
    };
    for (int i = 0; i < W; ++i)
      make_query(qrng, T - W + i, nullptr, &out.obs_queries(static_cast<Eigen::Index>(k) * W + i, 0));
    // Decode: z_s = z_{s-1} + query_drift * |s_q b_k| / sqrt(d) * N(0, I_d), post-RoPE.
    std::fill(drift.begin(), drift.end(), 0.0);
    const double step = p.query_drift * q0_norm / sqrt_d;
    for (int s = 1; s <= S; ++s) {
      for (int c = 0; c < d; ++c) drift[c] += step * drng.normal();
      make_query(decode_rng, T + s - 1, &drift, &out.decode_queries(static_cast<Eigen::Index>(k) * S + (s - 1), 0));
    }
  }
}

HeadData HeadSynth::generate() {
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
void write_synthetic_trace(const SynthParams& p, const std::string& path, const Progress& progress) {
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
