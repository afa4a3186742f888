#pragma once
// Allocation staleness over decode steps (MODEL.md section 7).
//
// Per head, the stale allocation is M* (the mixed family's surrogate optimum, exact solver,
// solvers/families.hpp, head scope at budget B) of the surrogate costs c_t(tau_j) over the
// T prompt tokens for the observation queries (model/surrogate.hpp). At decode step s the
// fresh allocation is M* of the surrogate costs for the g query rows of step s
// (decode_queries rows j * S + (s - 1), j = 0..g-1), same ladder, rate kind and budget.
// Both are materialized (model/quantizer.hpp) and recomputed exactly on step s's queries
// over the T + s tokens the step sees (the s appended decode keys exact and kept):
//   ratio(s)     = err_stale(s) / err_fresh(s)    (relative output error; 1 when both are 0,
//                                                  NaN when only err_fresh(s) is 0)
//   jaccard(s)   = |X_stale n X_fresh| / |X_stale u X_fresh|, X = the evicted prompt tokens
//                  (1 when both are empty)
//   agreement(s) = (1/T) sum_t [tier_stale(t) = tier_fresh(t)]
//   same_family(s) = best(s) == best(obs), best = argmin over Q*, E*, M* of the surrogate
//                  objective (ties to Q, then E; infeasible families skipped).
// Steps beyond the trace's S are skipped. Fresh allocations use only the step's queries,
// so a stale allocation may beat the fresh one on exact error (ratio < 1).
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/tier.hpp"
#include "model/trace.hpp"

namespace tierlab {

struct StalenessOptions {
  RateLadder ladder = RateLadder::parse("evict,kivi2,kivi4,kivi8,exact");
  RateKind rate_kind = RateKind::Code;
  double budget = 2.0;        // B, bits per key element
  std::vector<int> steps;     // decode steps s >= 1, increasing
  RopeParams rope;            // the trace's (TraceMeta::rope), for the tiers that need the head
};

struct StalenessStep {
  int step = 0;
  double err_stale = 0, err_fresh = 0, ratio = 0, jaccard = 0, agreement = 0;
  std::string family;  // best family at step s ("Q", "E", "M"; "" when none feasible)
  bool same_family = false;
  std::vector<std::uint8_t> fresh_tiers;  // the fresh M* allocation (ladder tier per prompt token)
};

struct StalenessHead {
  int layer = 0, kv_head = 0;
  std::string family_obs;                 // best family on the observation queries
  std::vector<std::uint8_t> stale_tiers;  // the stale M* allocation
  std::vector<StalenessStep> steps;       // empty when M is infeasible at B
};

// One head (its decode_queries and decode_keys give S; an empty result when S = 0).
StalenessHead staleness_head(const HeadData& head, const StalenessOptions& opt, Recomputer& backend);

// The Jaccard overlap and tier agreement of two allocations of the same tokens (formulas
// above); a value of 0 means evicted (ladder tier 0, or a kept flag of 0).
double evicted_jaccard(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b);
double tier_agreement(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b);

}  // namespace tierlab
