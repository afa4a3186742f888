#pragma once
// Seeded, deterministic synthetic traces (docs/synthetic.md).
//
// Every KV head is a mixture of four components, each with a target share of the
// attention of every query (in nats of logit, docs/model.md section 8: s_t = q.k_t / sqrt(d)):
//   sink      - mass m_s on the first token (attention sinks)
//   local     - mass m_l on a RoPE recency kernel around the query's position
//   retrieval - mass m_r on planted multi-token spans (recorded as spans)
//   content   - the rest, m_c = 1 - m_s - m_l - m_r, spread by Gaussian content logits of
//               standard deviation lambda (the head's logit scale, nats) over all earlier tokens
// A head's dominant component (its "kind") is drawn from the mix weights, modulated by the
// layer's depth (more sink heads late, more local and diffuse heads early); every head also
// gets a smaller first-token and local share. The structured components are solved per query
// on its exact logits so that the shares hold over its 256 most recent positions (plus the
// first token and the spans); older positions dilute them, so attention spreads as T grows.
// Keys have large outlier channels (queries too, on the same channels), some outlier tokens,
// correlated neighbours and RoPE (keys_pre_rope are stored too); GQA groups of g query heads
// share one KV head; decode queries drift step by step.
// Each head's random streams are seeded by (preset name, seed, layer, kv_head).
// Same parameters and seed -> byte-identical file.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/base/cancel.hpp"
#include "model/io/safetensors.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

struct SynthParams {
  std::string preset = "custom";  // part of every head's seed
  std::uint64_t seed = 0;
  int n_layers = 4;
  int n_kv_heads = 4;
  int group_size = 4;
  int head_dim = 64;
  int prompt_len = 1024;
  int obs_window = 32;
  int decode_steps = 64;
  // Dominant-component weights of a head (normalised after the depth modulation, docs).
  double mix_sink = 0.25, mix_local = 0.25, mix_retrieval = 0.25, mix_diffuse = 0.25;
  // lambda: standard deviation of a head's content logits (nats), log-uniform in [min, max];
  // diffuse heads get half of it.
  double logit_scale_min = 2.0, logit_scale_max = 6.0;
  // Attention share of the dominant component, uniform in [min, max].
  double sink_mass_min = 0.3, sink_mass_max = 0.85;  // first token, sink heads
  double local_mass_min = 0.3, local_mass_max = 0.7;  // recency kernel, local heads
  double span_mass_min = 0.4, span_mass_max = 0.7;    // planted spans, retrieval heads
  // Scale of the secondary first-token and local shares every head gets (0: pure kinds).
  double background = 1.0;
  int outlier_channels = 4;             // key channels per head with large magnitude
  double outlier_strength = 6.0;        // their RMS relative to the other channels
  double query_outlier_strength = 2.0;  // query content RMS on the same channels, relative
  double outlier_token_rate = 0.002;    // share of tokens whose key content is 2.5x larger
  int spans_per_head = 4;               // retrieval heads: planted spans
  int span_len = 8;                     // tokens per span
  double query_drift = 0.05;            // per-step random-walk size of decode queries
  // Mean reversion r of the decode drift, in [0, 1): z_s = (1 - r) z_{s-1} + step N(0, I).
  // 0 (the default) is the unbounded random walk; r > 0 keeps the drift stationary with
  // per-channel RMS step / sqrt(1 - (1 - r)^2) (docs/synthetic.md, "Decode drift").
  double query_drift_reversion = 0.0;
  double rope_theta = 10000.0;
  DType storage = DType::F32;

  void validate() const;  // throws InputError naming the parameter and its value
};

SynthParams synth_preset(const std::string& name);  // throws InputError listing the presets
// "tiny", "llama-like", "mistral-like", "qwen-like" (4-layer versions of the next three),
// "llama-3.1-8b", "mistral-7b", "qwen3-8b".
std::vector<std::string> synth_preset_names();

// Every parameter by its SynthParams name (a flat object), as a synthetic trace's provenance
// records it ("params"); the scenario runner's cell identity is built from it, so a parameter
// added here is part of both.
nlohmann::json synth_params_json(const SynthParams&);
TraceMeta synth_meta(const SynthParams&);
HeadData synth_head(const SynthParams&, int layer, int kv_head);
// progress(heads done, heads total): model/base/cancel.hpp's one progress type.
void write_synthetic_trace(const SynthParams&, const std::string& path, const Progress& progress = {});
// The same trace without a file: a reader whose heads are generated when read (synth_head,
// rounded to p.storage as the file would store them, timed as the generate phase), named
// `name`. The same bits as write_synthetic_trace's file read back (tests/test_synthetic.cpp);
// a head read twice is generated twice.
TraceReader synthetic_trace(const SynthParams& p, const std::string& name);

}  // namespace tierlab
