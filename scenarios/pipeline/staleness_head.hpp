#pragma once
// Allocation staleness over decode steps (docs/model.md section 10), measured out of sample.
//
// Per head, with T prompt tokens, g query heads, S decode steps, budget B, window W (decode
// steps the fresh decision looks back over; default the trace's observation window W_obs)
// and horizon k (steps an allocation is scored on; default 1). Every allocation below is a
// family's surrogate optimum (solvers/families.hpp via solve_head, exact solver, head scope
// at B, same ladder and rate kind) of the surrogate costs c_t(tau_j) over the T prompt
// tokens (model/surrogate.hpp) for one query set:
//
//   decided from                                                     name
//   the observation queries (after prefill)                          stale: Q*_obs, E*_obs, M*_obs
//   D(s) = the decode queries of steps max(1, s-W)..s-1, filled up   fresh: Q*_s, E*_s, M*_s
//          with the last W - min(W, s-1) observation rows when s-1 < W
//   the scored queries of steps s..s+k-1 themselves                   in-sample: M*_in(s)
//
// The stale allocation is M*_obs, the fresh one is M*_s. Causal limits over the prompt: an
// observation row at position p sees p + 1 tokens (observation_queries(head)); a decode row
// sees all T (every decode step follows the whole prompt). D(1) is the observation window
// itself when W = W_obs, so the fresh allocation at s = 1 is the stale one.
//
// Scoring: every allocation is materialized (model/quantizers/quantizer.hpp) and recomputed exactly on
// the g query rows of each step u = s..min(s+k-1, S), step u over the T + u tokens it sees
// (the u appended decode keys exact and kept), errors averaged over those rows:
//   err_stale(s), err_fresh(s), err_insample(s)   relative output error e (docs/model.md section 8)
//   ratio(s)          = err_stale(s) / err_fresh(s)       out of sample: > 1 when re-deciding
//                                                          from the recent steps pays
//   aging(s)          = err_stale(s) / err_stale(1)       how the stale allocation ages
//   ratio_insample(s) = err_stale(s) / err_insample(s)    the BOUND: M*_in(s) is fitted on the
//                                                          scored queries (not achievable: the
//                                                          queries are not known before step s)
// (a ratio is 1 when both errors are 0, NaN when only the denominator is 0). err_insample
// need not be <= err_fresh (the surrogate is not the exact error), but on the scored
// queries' surrogate costs M*_in(s)'s objective is <= that of M*_s and of M*_obs (it is the
// optimum there): surrogate_insample <= surrogate_fresh, surrogate_stale.
//   jaccard(s)   = |X_stale n X_fresh| / |X_stale u X_fresh|, X = evicted prompt tokens
//                  (1 when both are empty)
//   agreement(s) = (1/T) sum_t [tier_stale(t) = tier_fresh(t)]
// Family stability, by exact error (not by the surrogate objective, whose argmin is M by
// construction: M's tiers contain Q's and E's):
//   family(s)      = argmin over f in {Q, E, M} of err(f*_s) on steps s..s+k-1
//   family_prefill = argmin over f of err(f*_obs) on steps 1..k (the family after prefill)
//   same_family(s) = family(s) == family_prefill
// Ties: errors below kFamilyErrorFloor count as equal, and ties go to Q, then E (the simpler
// policy); infeasible families (Q when B is below every finite tier) are skipped.
// Steps beyond S are skipped; step 1 is always scored (aging and family_prefill need it).
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/base/linalg.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "solvers/problem.hpp"

namespace tierlab {

// Relative output errors below this are equal when choosing a family (about the float32
// rounding of e = ||o^ - o||^2 / ||o||^2, (2^-24)^2 d, with margin).
inline constexpr double kFamilyErrorFloor = 1e-12;

struct StalenessOptions {
  RateLadder ladder = RateLadder::parse(kDefaultLadder);
  RateKind rate_kind = kDefaultRateKind;
  double budget = 2.0;     // B, bits per key element
  std::vector<int> steps;  // decode steps s >= 1, increasing
  int window = 0;          // W >= 1: decode steps the fresh decision looks back over; 0: W_obs
  int horizon = 1;         // k >= 1: steps s..s+k-1 each allocation is scored on
  RopeParams rope;         // the trace's (TraceMeta::rope), for the tiers that need the head
  void validate() const;   // InputError naming the option and value
};

constexpr double kStaleNaN = std::numeric_limits<double>::quiet_NaN();

// Exact errors (relative output error) of the three families' optima on one scoring set;
// NaN for an infeasible family.
struct FamilyErrors {
  double Q = kStaleNaN, E = kStaleNaN, M = kStaleNaN;
};
// argmin over the feasible families ("Q", "E", "M"; "" when none), ties as above.
std::string recomputed_best_family(const FamilyErrors&);

struct StalenessStep {
  int step = 0;          // s
  int scored_steps = 0;  // min(k, S - s + 1)
  double err_stale = kStaleNaN, err_fresh = kStaleNaN, err_insample = kStaleNaN;
  double ratio = kStaleNaN, aging = kStaleNaN, ratio_insample = kStaleNaN;
  double jaccard = kStaleNaN, agreement = kStaleNaN;
  // Surrogate objectives sum_t c_t(tau_t) of M*_obs, M*_s and M*_in(s) on the scored queries'
  // costs (absolute squared-output units).
  double surrogate_stale = kStaleNaN, surrogate_fresh = kStaleNaN, surrogate_insample = kStaleNaN;
  FamilyErrors family_errors;   // err(Q*_s), err(E*_s), err(M*_s) on the scored steps
  std::string family;           // recomputed-best family at s ("" when none feasible)
  bool same_family = false;     // family == StalenessHead::family_obs
  std::string family_surrogate; // argmin of the surrogate objective of D(s)'s optima (M by construction)
  std::vector<std::uint8_t> fresh_tiers;     // M*_s (ladder tier per prompt token)
  std::vector<std::uint8_t> insample_tiers;  // M*_in(s)
};

struct StalenessHead {
  int layer = 0, kv_head = 0;
  int window = 0;          // the W used (the option, or W_obs)
  std::string family_obs;  // family_prefill: recomputed best of Q*_obs, E*_obs, M*_obs on steps 1..k
  FamilyErrors prefill_errors;            // their errors on steps 1..k
  std::vector<std::uint8_t> stale_tiers;  // M*_obs
  double err_stale_first = kStaleNaN;     // err_stale(1), the aging reference
  std::vector<StalenessStep> steps;       // the listed steps <= S; empty when S = 0 or M is infeasible
};

// Told the result so far after each listed step is scored (its `steps` one longer each
// time; the steps beyond S are not scored and not told). It may throw (a cancel) to stop.
using StalenessStepCallback = std::function<void(const StalenessHead& so_far)>;

// One head (its decode_queries and decode_keys give S; an empty result when S = 0).
// `on_step` (optional) sees the steps as they are scored; the result does not depend on it.
StalenessHead staleness_head(const HeadData& head, const StalenessOptions& opt, Recomputer& backend,
                             const StalenessStepCallback& on_step = {});

// The query set D(s) the fresh decision at step s is made from (formula above), per query
// head j: the observation rows i = W_obs - n_obs .. W_obs - 1 (n_obs = min(W_obs, W - n_dec))
// with their causal limits, then the decode rows of steps s - n_dec .. s - 1 (n_dec =
// min(W, s - 1)) seeing all T prompt tokens. It reads no decode query of step s or later.
struct DecisionQueries {
  MatrixRM rows;
  std::vector<int> visible;  // per row, over the T prompt tokens
  int observation_rows = 0;  // n_obs per query head
  int decode_rows = 0;       // n_dec per query head
  CausalQueries view() const { return CausalQueries{&rows, visible}; }
};
DecisionQueries fresh_decision_queries(const HeadData& head, int step, int window);

// The Jaccard overlap and tier agreement of two allocations of the same tokens (formulas
// above); a value of 0 means evicted (ladder tier 0, or a kept flag of 0).
double evicted_jaccard(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b);
double tier_agreement(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b);

}  // namespace tierlab
