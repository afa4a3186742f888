#pragma once
// Evaluating one allocation of a whole trace: the exact recomputed errors (docs/model.md
// section 8) next to the surrogate's prediction (section 3), per head, per layer and for
// the model.
//
// Query sets: "obs" = the observation queries (in-sample: the allocation is decided from
// them) and "decode" = the decode-step queries (out-of-sample). At decode step s the cache
// holds the T prompt tokens (under the allocation) and the s tokens appended so far, which
// stay exact (docs/model.md section 12, convention 7); the query of step s attends to all T + s of them.
// Surrogate prediction (obs queries): predicted abs error = sum_t c_t(tau_t), predicted
// relative error = sum_t c_t(tau_t) / mean_q ||o_q||^2.
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "model/allocation.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

struct HeadEvaluation {
  int layer = 0, kv_head = 0;
  Rate rate;                   // bits per key element of this head's prompt tokens
  double evicted_fraction = 0;
  ErrorMetrics obs;            // recomputed on the observation queries
  ErrorMetrics decode;         // recomputed on the decode queries (zeros when S = 0)
  double predicted_abs = 0;    // surrogate, obs queries
  double predicted_rel = 0;
};

struct Aggregate {
  Rate rate;
  ErrorMetrics obs, decode;
  double predicted_abs = 0, predicted_rel = 0;
};

struct TraceEvaluation {
  std::string trace_path, policy, backend;
  RateLadder ladder;
  std::vector<HeadEvaluation> heads;   // in (layer, head) order
  std::vector<Aggregate> layers;       // means over each layer's heads
  Aggregate model;                     // mean over all heads
  bool has_decode = false;             // the trace has decode steps (else the decode errors are undefined)
  double seconds = 0;
};

// The tier of every token of one head: called once per head.
using HeadAllocator = std::function<std::vector<std::uint8_t>(const HeadData&, const TokenWeights&)>;

TraceEvaluation evaluate_trace(const TraceReader& trace, const RateLadder& ladder,
                               const HeadAllocator& allocate, Recomputer& backend,
                               const Progress& progress = {});

// Any per-head compression (a published key quantizer, an eviction scorer): the
// dequantized keys (T x d; evicted rows ignored), the kept flags and the rate. The surrogate
// prediction is then computed from these keys: sum_t c_t(k^_t) over kept tokens plus c_t(0)
// over evicted ones (model/surrogate.hpp formulas, obs queries).
struct CompressedHead {
  MatrixRM keys;
  std::vector<std::uint8_t> kept;
  Rate rate;
};

// Every head of a model, heads[layer][kv_head] -> the compressed prompt keys of each head
// (same indexing): what a method of scenarios/methods/ hands the replay.
using ModelCompressor =
    std::function<std::vector<std::vector<CompressedHead>>(const std::vector<std::vector<HeadData>>& heads)>;

using HeadCompressor = std::function<CompressedHead(const HeadData&)>;

// A method's operating point on a model's heads (heads[l][h], compressed[l][h] its output):
// the means over the H heads of the measured rate, the evicted fraction, the surrogate's
// relative error sum_t c_t / mean_q ||o_q||^2 on the observation queries (surrogate_abs_cost)
// and the recomputed relative error recompute(head, compressed).rel_error (NaN without
// `recompute`). Shared by the proxy and rd_curve analyses' method points.
struct MethodMeasure {
  Rate rate;
  double evicted = 0, surrogate = 0, error = std::numeric_limits<double>::quiet_NaN();
};
MethodMeasure measure_compressed(const std::vector<std::vector<HeadData>>& heads,
                                 const std::vector<std::vector<CompressedHead>>& compressed,
                                 const std::function<ErrorMetrics(const HeadData&, const CompressedHead&)>& recompute);
TraceEvaluation evaluate_trace(const TraceReader& trace, const HeadCompressor& compress, Recomputer& backend,
                               const Progress& progress = {});

// sum_t [kept_t ? c_t(approx_t) : c_t(0)] for one head and query set (its causal mask
// applied), in double; sets *output_norm2 = mean_q ||o_q||^2.
double surrogate_abs_cost(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& queries,
                          const MatrixRM& approx, const std::vector<std::uint8_t>& kept, double* output_norm2);

// Recomputed errors of one head's compressed keys on its observation queries (causal:
// observation_queries(head).visible): one variant
// (keys; rows of evicted tokens ignored), token t attended to iff kept_t != 0 (the selection
// is kept as given).
ErrorMetrics evaluate_obs_queries(const HeadData& head, const MatrixRM& keys, const std::vector<std::uint8_t>& kept,
                                  Recomputer& backend);
// The same for several materialized allocations of one head, in one batch: variant k is
// mats[k].keys and token t selects it iff mats[k].kept_t; element k of the result is mats[k]'s
// errors. No recomputation (and an empty result) when mats is empty.
std::vector<ErrorMetrics> evaluate_obs_queries(const HeadData& head, const std::vector<MaterializedKeys>& mats,
                                               Recomputer& backend);

// Recomputed errors of one head's allocation on its decode steps (see above).
ErrorMetrics evaluate_decode_steps(const HeadData& head, const MatrixRM& allocated_keys,
                                   const std::vector<std::uint8_t>& kept, Recomputer& backend);
// The same for several allocations of one head (mats[k]: its keys and kept mask), the head's
// exact attention prepared once; element k of the result is mats[k]'s errors (the numbers of
// the one-allocation call). Empty when mats is empty.
std::vector<ErrorMetrics> evaluate_decode_steps(const HeadData& head, const std::vector<MaterializedKeys>& mats,
                                                Recomputer& backend);
// The same, taking the allocations' keys: each buffer grows by the decode rows where the call
// above copies it, so a head holds one copy of each allocation (the same numbers).
std::vector<ErrorMetrics> evaluate_decode_steps(const HeadData& head, std::vector<MaterializedKeys>&& mats,
                                                Recomputer& backend);

// One head's two query sets with the exact half of their recomputation prepared once
// (Recomputer::prepare) for several groups of allocations of that head (a cell's budgets, each
// evaluated in its own batch): obs and decode give, bit for bit, the numbers of
// evaluate_obs_queries and of evaluate_decode_steps (the allocations taken), with the exact
// logits, their softmax and output computed once per query set instead of once per call. Holds
// the decode steps' exact keys and values (T + S rows each) until destroyed; `head` and
// `backend` must outlive it. One thread at a time.
class HeadEvaluations {
 public:
  HeadEvaluations(const HeadData& head, Recomputer& backend);
  ~HeadEvaluations();
  HeadEvaluations(const HeadEvaluations&) = delete;
  HeadEvaluations& operator=(const HeadEvaluations&) = delete;
  std::vector<ErrorMetrics> obs(const std::vector<MaterializedKeys>& mats);
  std::vector<ErrorMetrics> decode(std::vector<MaterializedKeys>&& mats);

 private:
  const HeadData& head_;
  Recomputer& backend_;
  std::unique_ptr<PreparedQuerySet> obs_, decode_;
  MatrixRM exact_, values_;  // the decode steps' T + S tokens
};
// The same on one decode step s (1 <= s <= S): its g query rows over the T + s tokens they
// see (the s appended decode keys exact and kept). InputError when s is out of range.
ErrorMetrics evaluate_decode_step(const HeadData& head, const MatrixRM& allocated_keys,
                                  const std::vector<std::uint8_t>& kept, int step, Recomputer& backend);

}  // namespace tierlab
