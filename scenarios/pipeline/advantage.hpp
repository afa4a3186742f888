#pragma once
// The interior advantage (docs/model.md section 6): does mixing tiers beat both endpoints once
// the errors are recomputed exactly?
//
// Per head, at budget B (bits per key element, code or total), each family's
// surrogate-optimal allocation is solved exactly at head scope (solvers/families.hpp):
//   Q* = best of {tau, exact} over the finite tiers tau, E* = {evict, exact}, M* = the ladder.
// Each is materialised (tier-local grouping, quantizer.hpp) and recomputed exactly
// (gpu/recompute.hpp): on the observation queries (in-sample) and on the decode queries
// (out-of-sample, the verdict; docs/model.md section 12, convention 3). With err the relative output error
// e = ||o^ - o||^2 / ||o||^2 averaged over the query set:
//   A = 1 - err(M*) / min(err(Q*), err(E*))
// (Q* left out of the min when B is below every finite tier's rate; A undefined, NaN, when
// the min is 0). A > 0: the interior pays; A = 0: an endpoint is as good. The surrogate's
// prediction uses the surrogate objectives in place of err. A cell (one trace) reports the
// mean of A over the heads where it is defined, and its dominated share (fraction of heads
// whose 2-bit tier has R_h >= 1, model/dominance.hpp; NaN when the ladder has no 2-bit tier).
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "model/base/cancel.hpp"
#include "scenarios/pipeline/head.hpp"

namespace tierlab {

// The reference paper's allocator as the cell's allocation (docs/model.md section 6,
// "Cells and the headline relation"): one MODEL-WIDE budget B sum_h T_h d, heads trade it; under Routed each KV head also picks
// its family (Q, E or M, solvers/families.hpp solve_families_pooled). The endpoints are
// solved the same way (every head Q, every head E, trading budget), so
//   A_model = 1 - err(routed) / min(err(Q pooled), err(E pooled)),
// err = the mean over heads of the recomputed relative error (decode or observation
// queries), errors compared as max(err, floor). Each allocation is repaired at model scope
// until the mean MEASURED rate over the heads meets B (equal memory, budget_repair.hpp), as
// solve_within_budget does for one head. Nested at equal memory: the routed family's options
// contain Q's and E's, so when the (repaired) Q or E allocation has the smaller surrogate
// objective it IS the routed allocation (routed_is_endpoint names it): routed is never worse
// than Q or E under the surrogate. (Routed over Q/E/M therefore equals M in effect: M's tiers
// contain Q's and E's. The reference paper's router also chooses dense quantizers that are not
// tiers of the ladder: DenseRouting, head.hpp.)
struct ModelFamily {
  bool feasible = false;
  double err_decode = std::numeric_limits<double>::quiet_NaN(), err_obs = err_decode;
  Rate rate;                 // mean measured rate over the heads
  double surrogate = std::numeric_limits<double>::quiet_NaN();  // sum over heads of sum_t c_t (the objective)
  bool repaired = false;
};
struct ModelScopeReport {
  ModelFamily Q, E, routed;
  std::string routed_is_endpoint;  // "Q" or "E" when that endpoint's allocation beat the routed solve; "" otherwise
  double advantage_decode = std::numeric_limits<double>::quiet_NaN(), advantage_obs = advantage_decode;
  int routed_Q = 0, routed_E = 0, routed_M = 0;  // heads routed to each family
};

struct InteriorReport {
  InteriorOptions options;
  ModelScopeReport model;   // filled when the run asked for it (model_scope)
  std::string trace_path, backend;
  std::vector<HeadInterior> heads;
  double mean_advantage_decode = std::numeric_limits<double>::quiet_NaN();
  double mean_advantage_obs = std::numeric_limits<double>::quiet_NaN();
  double mean_advantage_surrogate = std::numeric_limits<double>::quiet_NaN();
  // The medians over the heads where A is defined (A is unbounded below: a few heads where an
  // endpoint is nearly exact swamp the mean; the text reports lead with the median).
  double median_advantage_decode = std::numeric_limits<double>::quiet_NaN();
  double median_advantage_obs = std::numeric_limits<double>::quiet_NaN();
  double median_advantage_surrogate = std::numeric_limits<double>::quiet_NaN();
  int defined_decode = 0, defined_obs = 0, defined_surrogate = 0;  // heads where A is defined
  double dominated_share = std::numeric_limits<double>::quiet_NaN();
  bool has_decode = false;  // the trace has decode steps
  double seconds = 0;
};

// Every head of the trace through head_interior (pipeline/head.hpp), at options.budget.
InteriorReport interior_advantage(const TraceReader& trace, const InteriorOptions& options, Recomputer& backend,
                                  const Progress& progress = {});
// The same at several budgets (options.budget ignored), each head's surrogate costs computed
// once for all of them; element b is the report at budgets[b]. Throws Cancelled between heads
// when *stop is set.
// model_scope: also the model-wide routed allocation and its pooled endpoints (ModelScopeReport;
// every head's costs are kept in memory until the end: ladder.size() x T doubles per head).
std::vector<InteriorReport> interior_advantage(const TraceReader& trace, const InteriorOptions& options,
                                               const std::vector<double>& budgets, Recomputer& backend,
                                               const std::atomic<bool>* stop = nullptr,
                                               const Progress& progress = {}, bool model_scope = false);

nlohmann::json to_json(const InteriorReport&);
std::string text_report(const InteriorReport&, bool per_head);

}  // namespace tierlab
