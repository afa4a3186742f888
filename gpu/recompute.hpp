#pragma once
// Exact recomputation (docs/model.md section 8): the ground truth every surrogate and
// solver is checked against. For query q (one row of the query set) and keys k_t:
//   s_t = q.k_t / sqrt(d),  p = softmax(s),  o = sum_t p_t v_t                  (exact)
//   s^_t = q.k^_t / sqrt(d) over kept t,  p^ = softmax over kept,  o^ = sum p^_t v_t
// Per query:  rel_error   e = ||o^ - o||^2 / ||o||^2
//             abs_error     = ||o^ - o||^2
//             attn_tv       = 1/2 sum_t |p^_t - p_t|   (p^_t = 0 for evicted t)
//             logit_error   = mean over kept t of (s^_t - s_t)^2          [nats^2]
// A head's errors are the means over its query rows (the g query heads x the query set).
// An allocation that evicts every token has o^ = 0 (e = 1).
//
// Backends: "cpu" (the reference; Eigen + OpenMP, float32 logits and products with
// double accumulation of the error sums) and "cuda" (gpu/cuda, same numbers within a
// stated tolerance). Choose at run time with make_recomputer(). The CPU reference's two
// phases for one head (prepare once, then evaluate many selections) are public too:
// gpu/cpu_recompute.hpp (cpu::prepare_head, cpu::evaluate_selection).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/base/linalg.hpp"

namespace tierlab {

struct ErrorMetrics {
  double rel_error = 0, abs_error = 0, attn_tv = 0, logit_error = 0;
};

// One head and one query set. Key variants are candidate key matrices (T x d), e.g.
// the dense quantization at each tier; a selection picks, per token, a variant or
// eviction. The exact keys define the reference output o.
struct HeadProblem {
  const MatrixRM* queries = nullptr;     // nq x d
  const MatrixRM* exact_keys = nullptr;  // T x d
  const MatrixRM* values = nullptr;      // T x d
  std::vector<const MatrixRM*> variants; // each T x d
  // Optional causal limits: row r attends only to tokens 0 .. visible[r]-1 (1 <= visible[r]
  // <= T), for both the exact and the approximate output. Decode step s of a trace with T
  // prompt tokens has visible = T + s. Empty: every row sees all T tokens. The logit error
  // then averages over the kept tokens each row sees.
  std::vector<int> visible;
};

// Per token: 0 = evicted, v >= 1 = variant v - 1.
using Selection = std::vector<std::uint8_t>;

struct HeadBatch {
  HeadProblem problem;
  std::vector<Selection> selections;  // many allocations of one head
};

// Status of the call, apart from the numbers it computed.
struct EvalResult {
  bool ok = true;
  std::string message;  // why the call failed (bad shapes, device error)
  std::vector<std::vector<ErrorMetrics>> errors;  // [batch][selection]
};

// One query set of one head with the exact half of its recomputation (the exact logits, their
// softmax and output: the same for every allocation) kept between calls: a cell evaluates a
// head's allocations budget by budget, and prepares the exact half once instead of once per
// budget (docs/performance.md). evaluate(batch) returns the numbers Recomputer::evaluate({batch})
// returns, bit for bit; the batch's problem must name the prepared queries, exact keys and values
// (the same objects, which must outlive this) and the same visible limits, else the call fails
// (ok false, message).
class PreparedQuerySet {
 public:
  virtual ~PreparedQuerySet() = default;
  virtual EvalResult evaluate(const HeadBatch& batch) = 0;
  virtual bool keeps_exact() const { return true; }  // false: each call computes the exact half again
  int calls = 0;  // calls through recompute() so far (its work counters count the exact half once)
};

class Recomputer {
 public:
  virtual ~Recomputer() = default;
  virtual std::string name() const = 0;         // "cpu" or "cuda"
  virtual std::string description() const = 0;  // e.g. "cpu (2 OpenMP threads)", "cuda (NVIDIA H200)"
  virtual EvalResult evaluate(const std::vector<HeadBatch>& batches) = 0;
  // Whether evaluate() may be called from several threads at once (heads side by side,
  // scenarios/pipeline/parallel_heads.hpp). The CPU backend keeps no state between calls; a
  // CUDA device is one queue, and a backend that does not say otherwise is called by one thread.
  virtual bool concurrent_calls() const { return false; }
  // The query set of `exact` (its variants are ignored) for several evaluate calls. A backend
  // that keeps nothing between calls (the default) returns a set whose evaluate calls evaluate().
  virtual std::unique_ptr<PreparedQuerySet> prepare(const HeadProblem& exact);
};

// The one seam between the backends' call status and the rest of the library: evaluates the
// batches on `backend` and returns errors[batch][selection]; a failed call (EvalResult.ok
// false: a device error, bad shapes) throws RecomputeError (model/base/error.hpp) naming the
// backend and the reason. Every recomputation outside gpu/ goes through it.
// A result with a non-finite metric also throws RecomputeError: heads within the magnitude
// range (model/io/head_range.hpp, checked by every reader) give finite numbers, so it is a defect.
std::vector<std::vector<ErrorMetrics>> recompute(Recomputer& backend, const std::vector<HeadBatch>& batches);
// The same seam for one batch on a prepared query set of `backend` (Recomputer::prepare).
std::vector<ErrorMetrics> recompute(Recomputer& backend, PreparedQuerySet& prepared, const HeadBatch& batch);

// "" when every metric of m is finite, else "rel_error = nan" (the first that is not).
std::string non_finite_metric(const ErrorMetrics& m);

enum class Backend { Auto, Cpu, Cuda };
Backend parse_backend(const std::string&);  // "auto" | "cpu" | "cuda"; throws InputError

// Returns the backend asked for. Auto picks CUDA when built and a device is present,
// else the CPU, and sets *note to the one-line reason for the fallback. Asking for
// "cuda" where it is unavailable returns nullptr and sets *note to the reason.
std::unique_ptr<Recomputer> make_recomputer(Backend, std::string* note = nullptr);

// Checks a batch's shapes; returns an empty string or the sentence saying what is wrong.
std::string check_batch(const HeadBatch&);

// For one of several processes on a node (an MPI rank, local_rank = its index on the node):
// makes CUDA device local_rank mod (devices on the node) the calling thread's current one,
// so the backends this thread makes use it. Returns "cuda device D of N" or, when there is
// no CUDA (not built, no device), "" and sets *reason.
std::string use_cuda_device(int local_rank, std::string* reason = nullptr);

// Is the CUDA backend compiled in, and is a device present? (reason when not)
bool cuda_available(std::string* reason = nullptr);

}  // namespace tierlab
