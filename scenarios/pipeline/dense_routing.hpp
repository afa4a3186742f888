#pragma once
// Routing as the reference paper routes (docs/model.md section 6, "Routing"): per KV head at its
// budget B (bits per key element, code or total), the allocator chooses between its interior
// M* (the ladder's mixed optimum, head_interior) and DENSE QUANTIZERS THAT ARE NOT TIERS OF
// THE LADDER (TurboQuant, KIVI, KVQuant, ...: every token at one tier). A dense candidate of
// quantizer q is q at the largest code bits b whose dense rate (its real metadata counted,
// nominal_rate) is <= B in the budget's kind; a quantizer with no such b is no candidate.
//
// Two routers, each recorded per head:
//   by surrogate   the least surrogate objective sum_t c_t(tau) (the same first-order cost
//                  model as the ladder's; a dense tier's costs do not depend on the ladder)
//   by obs error   the least recomputed relative error on the observation queries (in
//                  sample, as a router that measures before deciding would)
// The routed head's errors are those of the chosen allocation; its advantage over the
// ladder's endpoints is A = 1 - err(routed) / min(err(Q*), err(E*)) (interior_advantage_of).
// (Today's routed-over-Q/E/M (solvers/families.hpp) equals M by construction: M's tiers
// contain Q's and E's; a dense quantizer outside the ladder can win a head.)
#include <limits>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

struct DenseCandidate {
  std::string tier;  // "turboquant2"
  double surrogate = std::numeric_limits<double>::quiet_NaN();
  Rate rate;         // the dense rate (<= B in the budget's kind)
  ErrorMetrics obs, decode;
};

struct DenseRoute {
  std::string choice;  // "M" or a candidate's tier name; "" when nothing is feasible
  double err_obs = std::numeric_limits<double>::quiet_NaN(), err_decode = err_obs;
};

struct DenseRouting {
  std::vector<DenseCandidate> candidates;
  DenseRoute by_surrogate, by_obs;
};

// The dense candidate of quantizer `q` ("kivi", "turboquant", "kvquant", ...) at budget B: the
// tier at the largest code bits whose dense rate meets B; an empty tier name when none does.
// Throws InputError naming `q` when it is not a quantizer with a bits parameter.
Tier dense_tier_at_budget(const HeadData& head, const RopeParams& rope, const std::string& q, double budget,
                          RateKind kind);

// M: the head's interior (feasible, its surrogate objective and recomputed errors).
// has_m = false when M* is infeasible (then only the dense candidates compete).
DenseRouting route_dense(const HeadData& head, const RopeParams& rope, const std::vector<std::string>& quantizers,
                         double budget, RateKind kind, bool has_m, double m_surrogate, const ErrorMetrics& m_obs,
                         const ErrorMetrics& m_decode, Recomputer& backend);

// The quantizer names a dense router accepts (registered quantizers with a bits parameter).
void validate_dense_quantizers(const std::vector<std::string>& quantizers, const std::string& where);

}  // namespace tierlab
