#pragma once
// Seeded, deterministic synthetic traces (docs/synthetic.md).
//
// Each KV head is drawn as one of four kinds:
//   sink      - most attention on the first few positions (attention sinks)
//   local     - attention concentrated on recent positions (recency)
//   retrieval - decode queries attend to planted multi-token spans (recorded as spans)
//   diffuse   - attention spread nearly uniformly
// Keys have a few large outlier channels (as real post-RoPE keys do) and RoPE applied
// (keys_pre_rope are stored too); each head has a logit scale (sharpness) applied to
// its queries; GQA groups of g query heads share one KV head; decode queries drift
// step by step. Same parameters and seed -> byte-identical file.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/safetensors.hpp"
#include "model/trace.hpp"

namespace tierlab {

struct SynthParams {
  std::string preset = "custom";
  std::uint64_t seed = 0;
  int n_layers = 4;
  int n_kv_heads = 4;
  int group_size = 4;
  int head_dim = 64;
  int prompt_len = 1024;
  int obs_window = 32;
  int decode_steps = 64;
  // Head mix: relative weights of each kind (normalised).
  double mix_sink = 0.25, mix_local = 0.25, mix_retrieval = 0.25, mix_diffuse = 0.25;
  // Per-head logit scale drawn log-uniformly in [min, max] (multiplies query norms).
  double logit_scale_min = 0.5, logit_scale_max = 2.0;
  int outlier_channels = 4;        // channels per head with large magnitude
  double outlier_strength = 8.0;   // their scale relative to the others
  int spans_per_head = 4;          // retrieval heads: planted spans
  int span_len = 8;                // tokens per span
  double query_drift = 0.05;       // per-step random-walk size of decode queries
  double rope_theta = 10000.0;
  DType storage = DType::F32;

  void validate() const;  // throws InputError naming the parameter and its value
};

SynthParams synth_preset(const std::string& name);  // throws InputError listing the presets
std::vector<std::string> synth_preset_names();      // "tiny", "llama-like", "mistral-like", "qwen-like"

// Progress callback: (heads done, heads total).
using ProgressFn = std::function<void(int, int)>;

TraceMeta synth_meta(const SynthParams&);
HeadData synth_head(const SynthParams&, int layer, int kv_head);
void write_synthetic_trace(const SynthParams&, const std::string& path, const ProgressFn& progress = {});

}  // namespace tierlab
