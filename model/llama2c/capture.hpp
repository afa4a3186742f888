#pragma once
// Capturing a trace (docs/model.md section 7, "captured") from the llama2.c forward pass.
//
// Sequence: the prompt x_0..x_{T-1} is run at positions 0..T-1; decode step s = 1..S
// feeds the full-cache model's greedy token x_{T+s-1} = argmax(logits of position
// T+s-2) at position T+s-1. For every layer l and KV head h the trace holds
//   keys / keys_pre_rope / values   rows t = 0..T-1 (post-RoPE, pre-RoPE keys, values)
//   obs_queries[j][i]               post-RoPE query of query head h*g + j at prompt
//                                   position T - W + i (the last W prompt positions)
//   decode_queries[j][s-1]          query of head h*g + j at position T + s - 1
//   decode_keys/values[s-1]         the key/value decode step s appends (position T + s - 1)
//   token_ids                       x_0..x_{T+S-1} (prompt, then the S decoded tokens)
// so decode step s's query attends to the T prompt keys and decode keys 1..s, and the
// observation query i attends (causally, in the model) to positions 0..T-W+i.
// RoPE metadata: the checkpoint's theta (Llama2cConfig::rope_theta, 10000 for stories260K),
// whole head, style "interleaved".
#include <cstdint>
#include <string>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

// Where a prompt comes from: explicit token ids, or `generate` tokens produced by the
// model itself: [BOS, y_1, ..., y_{N-1}], greedy at temperature 0, else sampled with
// Sampler(temperature, seed).
struct PromptSpec {
  std::vector<std::int32_t> ids;
  int generate = 0;
  float temperature = 0.0f;
  std::uint64_t seed = 0;

  std::string describe() const;  // "ids", "greedy 64 from BOS", "sampled 64 from BOS (temperature 0.8, seed 7)"
};

// "1,461,401" -> {1, 461, 401}; InputError naming the bad entry.
std::vector<std::int32_t> parse_token_ids(const std::string& text);

// The prompt's token ids, checked against the model (non-empty, ids < vocab_size,
// length <= seq_len); InputError otherwise.
std::vector<std::int32_t> resolve_prompt(const Llama2cModel& model, const PromptSpec& spec);

// Records the activations of every forward step, per layer, as matrices whose row is the
// position (0..n_positions-1). Only the fields asked for are kept.
class ActivationRecorder : public ForwardObserver {
 public:
  struct Fields {
    bool queries = true, keys = true, keys_pre_rope = true, values = true, attention_outputs = false;
  };
  ActivationRecorder(const Llama2cConfig& config, int n_positions, Fields fields);
  void on_layer(const LayerActivations& a) override;

  const MatrixRM& queries(int layer) const { return q_[layer]; }         // n_positions x (n_heads*hs)
  const MatrixRM& keys(int layer) const { return k_[layer]; }            // n_positions x kv_dim
  const MatrixRM& keys_pre_rope(int layer) const { return kp_[layer]; }  // n_positions x kv_dim
  const MatrixRM& values(int layer) const { return v_[layer]; }          // n_positions x kv_dim
  const MatrixRM& attention_outputs(int layer) const { return a_[layer]; }  // n_positions x (n_heads*hs)

 private:
  Fields fields_;
  int n_positions_;
  std::vector<MatrixRM> q_, k_, kp_, v_, a_;
};

// The queries of KV head h's g query heads at positions [first, first + count), from a
// layer's query matrix (positions x n_heads*hs): (g * count) x hs, row = j * count + i.
MatrixRM gather_head_queries(const MatrixRM& layer_queries, int kv_head, int group_size, int head_size, int first,
                             int count);

struct CaptureOptions {
  PromptSpec prompt;
  int decode_steps = 0;              // S
  int obs_window = -1;               // W; -1 means min(32, T)
  bool keep_attention_outputs = false;  // fill CaptureResult::attention_outputs (tests)
  std::string validate() const;      // empty, or the sentence saying what is wrong
};

struct CaptureResult {
  TraceMeta meta;
  std::vector<HeadData> heads;  // in (layer, KV head) order
  // Per layer, (T + S) x (n_heads * hs): every query head's attention output a_j at every
  // position, as the forward pass computed it (only with keep_attention_outputs).
  std::vector<MatrixRM> attention_outputs;
  double forward_seconds = 0;  // forward passes with recording
  double seconds = 0;          // total, building the heads included
};

// Runs the capture. InputError when the prompt plus decode steps exceed seq_len or the
// options are invalid.
CaptureResult capture(const Llama2cModel& model, const CaptureOptions& options);

// Writes a captured trace (atomically, through TraceWriter).
void write_trace(const std::string& path, const CaptureResult& result);

}  // namespace tierlab
