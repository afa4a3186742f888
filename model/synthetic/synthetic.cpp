// Seeded synthetic attention heads (docs/synthetic.md).
//
// Every head is a pure function of (parameters, preset name, seed, layer, kv_head): its
// random numbers come from xoshiro256** streams seeded by splitmix64 from those values,
// normals come from Box-Muller written here (std::normal_distribution differs across
// standard libraries), and all arithmetic is done in double and rounded to float32 once at
// the end.
//
// Logits of a query at position p over the keys t = 0..p (docs/model.md section 8: s_t = q.k_t /
// sqrt(d), nats) are, up to cross terms with the key content,
//   s_t = content_t + [t = 0] s_0 + kappa_l g(p - t) + [t in span j] kappa_r pi_j nu_t
// content_t the query's content against the key's (standard deviation lambda nu_q over t, nu_q a
// per-query log-normal factor), g the RoPE kernel sum_i h_i cos(omega_i (p - t)) with g(0) = 1.
// Over the query's reference positions R (the first token, the spans and the 256 most recent
// positions) kappa_l, kappa_r and s_0 are solved on the exact logits so that, of the softmax
// over R, the 16 most recent positions hold m_l, the spans m_r and the first token m_s (the
// query head's shares); positions older than R dilute them.
#include "model/synthetic/synthetic.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <sstream>

#include "model/base/phases.hpp"
#include "model/base/error.hpp"
#include "model/synthetic/synthetic_parts.hpp"

// Compiled with -ffp-contract=off (model/CMakeLists.txt): the same source then gives the same
// bits whether or not the CPU has FMA (-march=native differs between machines).
namespace tierlab {
using namespace synthetic_detail;
namespace {

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

// Kind weights at depth x: more sink heads late, more local and diffuse heads early.
std::array<double, 4> kind_weights(const SynthParams& p, double x) {
  return {p.mix_sink * (0.1 + 1.9 * x), p.mix_local * (1.9 - 1.8 * x), p.mix_retrieval,
          p.mix_diffuse * (1.25 - 0.5 * x)};
}

std::string invalid(const std::string& name, const std::string& value, const std::string& rule) {
  return "synthetic parameter " + name + " = " + value + " is invalid: " + rule + ".";
}


bool finite(double x) { return std::isfinite(x); }

}  // namespace

nlohmann::json synth_params_json(const SynthParams& p) {
  nlohmann::json j{
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
  // Written only when set, so every trace and scenario cell made before the parameter
  // existed keeps its provenance and identity (the runner's cell hash is built from this).
  if (p.query_drift_reversion != 0.0) j["query_drift_reversion"] = p.query_drift_reversion;
  return j;
}

namespace synthetic_detail {

std::uint64_t head_seed(const SynthParams& p, int layer, int kv_head, Stream stream, int index) {
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

}  // namespace synthetic_detail

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
    if (!finite(w) || w < 0.0 || w > 1e6)  // relative weights: a bound keeps their sum and products finite
      throw InputError(invalid(name, str(w), "head-mix weights are relative: each must be in [0, 1e6]"));
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
  if (!finite(query_drift_reversion) || query_drift_reversion < 0.0 || query_drift_reversion >= 1.0)
    throw InputError(invalid("query_drift_reversion", str(query_drift_reversion), "it must be in [0, 1)"));
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
                         {"seed", p.seed},        {"params", synth_params_json(p)},       {"heads", heads}};
  meta.provenance = prov.dump();
  return meta;
}


// ---- whole trace ------------------------------------------------------------------
TraceReader synthetic_trace(const SynthParams& p, const std::string& name) {
  p.validate();
  return TraceReader(synth_meta(p), name, [p](int layer, int kv_head) {
    const PhaseScope phase(Phase::Generate);
    HeadData head = synth_head(p, layer, kv_head);
    // What the file would hold: each value in the storage dtype (TraceWriter rounds to nearest
    // even; the reader widens back to float).
    auto store = [&](MatrixRM& m) {
      if (p.storage == DType::F16)
        for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = half_to_float(float_to_half(m.data()[i]));
      else if (p.storage == DType::BF16)
        for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = bf16_to_float(float_to_bf16(m.data()[i]));
    };
    for (MatrixRM* m : {&head.keys, &head.keys_pre_rope, &head.values, &head.obs_queries, &head.decode_queries,
                        &head.decode_keys, &head.decode_values})
      store(*m);
    return head;
  });
}

void write_synthetic_trace(const SynthParams& p, const std::string& path, const Progress& progress) {
  const PhaseScope phase(Phase::Generate);
  TraceWriter writer(path, synth_meta(p));
  const int total = p.n_layers * p.n_kv_heads;
  int done = 0;
  for (int l = 0; l < p.n_layers; ++l)
    for (int h = 0; h < p.n_kv_heads; ++h) {
      const HeadData head = synth_head(p, l, h);
      add_phase_work(Phase::Generate, 0,
                     4.0 * static_cast<double>(head.keys.size() + head.keys_pre_rope.size() + head.values.size() +
                                               head.obs_queries.size() + head.decode_queries.size() +
                                               head.decode_keys.size() + head.decode_values.size()));
      writer.write_head(head);
      ++done;
      if (progress) progress(done, total);
    }
  writer.commit();
}

}  // namespace tierlab
