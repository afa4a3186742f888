#pragma once
// Compressed-cache replay on the real llama2.c model: the end-task signal next to the
// recomputed attention errors.
//
// The prompt x_0..x_{T-1} is prefilled with the full cache; its last logits give the
// first token c_1 = argmax. Then each layer's key cache of the T prompt tokens is
// compressed: per (layer, KV head) an allocation picks a tier per token, the keys become
// materialize()'s dequantized keys (model/quantizers/quantizer.hpp) and evicted tokens leave
// attention (renormalised over the kept ones). Values stay exact; the tokens appended
// during decoding stay exact. Decode step s = 1..S feeds c_s at position T+s-1 to both
// caches, giving next-token distributions P_s (full cache) and Q_s (compressed cache)
// in the same context, and the target t_s = argmax P_s. The next input is
//   teacher-forced (default): c_{s+1} = argmax P_s  (the full cache's continuation)
//   free-running:             c_{s+1} = argmax Q_s  (the compressed cache's own)
// Metrics over s = 1..S (nats):
//   agreement          = (1/S) #{s : argmax Q_s = t_s};  first_divergence = first such s
//                        that fails (-1 when none)
//   mean_kl            = (1/S) sum_s KL(P_s || Q_s) = sum_v P_s(v) (log P_s(v) - log Q_s(v))
//   ppl_compressed     = exp(-(1/S) sum_s log Q_s(t_s)),  ppl_full = exp(-(1/S) sum_s log P_s(t_s))
//                        (teacher-forced: the perplexity of the full cache's greedy continuation)
//   continuation_match = free-running only: (1/S) #{s : c_{s+1} = x_{s+1}}, x the full
//                        cache's own greedy continuation.
// Decided once: the allocation is computed after the prompt from the observation
// queries (the last W prompt positions' queries of each KV head's g query heads).
// Re-decided every N steps: before steps 1, N+1, 2N+1, ... the allocation of the T prompt
// tokens is recomputed from their exact keys with the W most recent queries of the
// compressed run as observation queries (an oracle re-decision: a token evicted earlier
// may come back, which a cache that discarded it could not do).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/allocation.hpp"
#include "model/llama2c/capture.hpp"
#include "model/llama2c/llama2c.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "solvers/policy.hpp"

namespace tierlab {

enum class ReplayMode { TeacherForced, FreeRunning };
std::string to_string(ReplayMode);             // "teacher-forced" | "free-running"
ReplayMode parse_replay_mode(const std::string&);  // throws InputError naming the choices

// How the prompt's keys are compressed: a ladder and a per-head allocator (called with
// the head's exact keys, values and observation queries, and their token weights), or a
// generic compressor of every head at once (`compress`: a published key quantizer, an
// eviction scorer with layer- or model-wide budgets, a seed allocator over all heads;
// scenarios/methods/methods_spec.hpp builds one from a method spec). With `compress`, each head's keys become the compressor's
// dequantized keys, its evicted tokens leave attention, the rate is the compressor's, and
// the HeadData it receives also holds the pre-RoPE keys (for pre-RoPE quantizers).
struct KeyCompression {
  std::string label;
  RateLadder ladder;
  HeadAllocator allocate;
  bool redecidable = true;  // false for a fixed allocation file
  // A fixed allocation's shape (-1: any), checked against the model and the prompt.
  int n_layers = -1, n_kv_heads = -1, prompt_len = -1;
  // A fixed allocation's prompt ("1,15,27", allocation.hpp's trace_tokens; empty: unknown),
  // checked against the replay's prompt: an allocation is for the tokens it was solved on.
  std::string prompt_tokens;

  ModelCompressor compress;  // when set, `ladder` and `allocate` are unused

  static KeyCompression from_policy(const UniformPolicy& policy);
  static KeyCompression from_compressor(ModelCompressor compress, const std::string& label);
  // Checks n_layers/n_kv_heads against the model at replay time and prompt_len against T.
  static KeyCompression from_allocation(const Allocation& allocation, const std::string& label);
};

struct ReplayOptions {
  PromptSpec prompt;
  int decode_steps = 64;   // S
  int obs_window = -1;     // W (at most T); -1 means min(32, T)
  int redecide_every = 0;  // N; 0 = decided once after the prompt
  ReplayMode mode = ReplayMode::TeacherForced;
  std::string validate() const;  // empty, or the sentence saying what is wrong
};

struct ReplayStep {
  int step = 0;                      // s
  std::int32_t input = 0;            // c_s
  std::int32_t full_argmax = 0;      // t_s = argmax P_s
  std::int32_t compressed_argmax = 0;  // argmax Q_s
  double kl = 0;                     // KL(P_s || Q_s), nats
  double nll_full = 0, nll_compressed = 0;  // -log P_s(t_s), -log Q_s(t_s)
};

struct ReplayResult {
  std::string model, checkpoint, compression, ladder;
  ReplayMode mode = ReplayMode::TeacherForced;
  int prompt_len = 0, decode_steps = 0, obs_window = 0, redecide_every = 0, decisions = 0;
  Rate key_rate;                 // bits per element of the prompt's keys, mean over heads and decisions
  double evicted_fraction = 0;   // of the prompt's (layer, KV head, token) entries, mean over decisions
  double agreement = 0;
  int first_divergence = -1;
  double mean_kl = 0, max_kl = 0;
  double ppl_full = 0, ppl_compressed = 0;
  double continuation_match = -1;  // free-running only; -1 otherwise
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> full_continuation;  // x_1..x_{S+1}: the full cache's greedy tokens
  std::vector<std::int32_t> inputs;             // c_1..c_S as fed
  std::vector<ReplayStep> steps;
  double seconds = 0;
};

// Runs the replay. InputError for invalid options, a prompt plus S beyond seq_len, or an
// allocation whose shape does not fit the model and prompt.
ReplayResult replay(const Llama2cModel& model, const ReplayOptions& options, const KeyCompression& compression);

nlohmann::ordered_json to_json(const ReplayResult&);  // in a readable key order, steps included
std::string text_report(const ReplayResult&);

}  // namespace tierlab
