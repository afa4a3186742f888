#pragma once
// Solving a whole trace for one budget (docs/model.md sections 6 and 9): `tierlab solve`.
//
// Every head is read once from the TraceReader; only its surrogate costs are kept
// (c_t(tau_j) for the ladder, tier-major; a_t and the fitted n_h(b) for water-filling;
// the planted spans). The budget B is in bits per key element, counted as code bits or
// total bits (nominal tier rates, tier.hpp). The heads are then solved by scope:
//   head   each head alone at B (solve_families_per_head)
//   layer  each layer's heads share B (solve_families_pooled per layer)
//   model  all heads share B (solve_families_pooled once)
// with the family (mixed | quantize | evict | routed, solvers/families.hpp) and the solver:
//   exact      the certified knapsack optimum (exact.hpp)
//   greedy     the classic MCKP greedy on each token's lower convex hull (greedy.hpp)
//   greedy-raw marginal-return greedy on the raw ladder (greedy.hpp)
//   waterfill  head scope: per token (RDKV), b_t from w_t = a_t and the head's n_h(b),
//              projected on the family's tiers; layer/model scope: per head (RateQuant)
//   smoothed   every cost row pooled over neighbouring tokens (smoothing.hpp), exact on
//              the pooled costs; the objective is reported on the true costs, next to the
//              exact (unsmoothed) solution of the same family and scope, whose bound is
//              the bound reported
// Reported per head and overall: tier histogram; rate (code and total bits per element,
// with the metadata of the groups actually formed, quantizer.hpp allocation_rate) and the
// nominal rate the budget counted; surrogate objective sum_t c_t(tau_t) (absolute, and
// relative to mean_q ||o_q||^2); the lower bound and gap = objective - bound; time; the
// share of heads routed to Q, E and M; the span truncation rate when the trace has spans.
#include <array>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/allocation.hpp"
#include "model/base/cancel.hpp"
#include "model/base/linalg.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "solvers/exact.hpp"
#include "solvers/families.hpp"
#include "solvers/problem.hpp"
#include "solvers/smoothing.hpp"

namespace tierlab {

// The solver of `tierlab solve --solver`: the one solver list of solvers/families.hpp
// (exact, greedy, greedy-raw, waterfill, smoothed); smoothed is carried out here, the others by the
// family solvers. to_string(AllocSolver) is to_string(FamilySolver).
using AllocSolver = FamilySolver;
inline AllocSolver parse_alloc_solver(std::string_view s) { return parse_family_solver(s); }

// The problem (ladder, rate kind, budget B in bits per key element, scope; solvers/problem.hpp,
// with its one default each) and how it is solved. `queries` is the curve's recomputation
// (rd_curve.hpp); one allocation is decided on the observation queries.
struct AllocateOptions : ProblemOptions {
  AllocSolver solver = AllocSolver::Exact;
  FamilyChoice family = FamilyChoice::Mixed;
  SmoothingOptions smoothing;    // smoothed solver only
  double route_tolerance = 0.0;  // families.hpp
  ExactOptions exact;

  void validate() const;     // ProblemOptions::validate, then the solver's options
  std::string name() const;  // "exact mixed head B=4 total"
};

struct HeadSolveReport {
  int layer = 0, kv_head = 0, tokens = 0;
  std::string option;  // routed option: "Q:kivi2", "E", "M"
  Family family = Family::Mixed;
  std::vector<int> histogram;  // tokens per ladder tier
  Rate rate;                   // bits per element, groups actually formed
  double budget_rate = 0;      // nominal rate in the budget's kind (what the budget counted)
  double objective = 0;        // sum_t c_t(tau_t), true costs (absolute squared output)
  double relative_objective = 0;  // objective / mean_q ||o_q||^2
  double decision_objective = 0;  // on the costs the solver saw (pooled costs for smoothed)
  double bound = std::numeric_limits<double>::quiet_NaN();  // head scope: lower bound (true costs)
  double gap = std::numeric_limits<double>::quiet_NaN();
  double seconds = std::numeric_limits<double>::quiet_NaN();  // head scope: solve time
  SpanTruncation spans;
  SpanTruncation spans_unsmoothed;  // smoothed: the exact solution on the true costs
  double unsmoothed_objective = std::numeric_limits<double>::quiet_NaN();
  double noise_alpha = std::numeric_limits<double>::quiet_NaN();  // waterfill: fitted n_h(b)
  double noise_beta = std::numeric_limits<double>::quiet_NaN();
};

// One budget scope (a head, a layer, or the model) as the solver reported it.
// The solve summary (solvers/mckp.hpp SolveSummary: status, feasible_reason, message,
// objective, lower_bound, gap, lambda, rate_used and rate_budget in bits of the budget's kind,
// seconds) and the scope's name and method. An infeasible scope reports objective =
// lower_bound = gap = 0.
struct ScopeReport : SolveSummary {
  std::string name;  // "L0.H1", "layer 0", "model"
  std::string method;
};

// The solve summary over every scope (SolveSummary: status = the worst over the scopes,
// Infeasible if any; feasible_reason = feasible_reason_of over the feasible scopes; objective =
// sum over heads (true costs); lower_bound = sum of the scopes' bounds; gap, relative_gap;
// seconds = the whole call), then the allocation and its details.
struct AllocationReport : SolveSummary {
  AllocateOptions options;
  std::string trace_path;
  Allocation allocation;  // empty tiers when Infeasible
  std::vector<HeadSolveReport> heads;
  std::vector<ScopeReport> scopes;
  std::vector<int> histogram;
  Rate rate;                       // mean over heads
  double budget_rate = 0;          // mean nominal rate in the budget's kind
  double relative_objective = 0;   // mean over heads
  std::array<double, 3> family_share{0, 0, 0};  // Q, E, M fractions of heads
  std::map<std::string, int> option_counts;     // heads per option name
  bool has_spans = false;
  SpanTruncation spans, spans_unsmoothed;
  double unsmoothed_objective = std::numeric_limits<double>::quiet_NaN();
  double seconds_costs = 0, seconds_solve = 0;
};

AllocationReport allocate_trace(const TraceReader& trace, const AllocateOptions& options,
                                const Progress& progress = {});

// The two steps of allocate_trace, for callers that solve the same heads at many budgets or
// families (the rate-distortion curve, rd_curve.hpp): the costs once, then one solve each.
// What allocate_trace keeps of one head after its costs are computed (for options.ladder,
// rate_kind and solver; the budget, family and scope do not enter).
struct HeadCosts {
  int layer = 0, kv_head = 0;
  MatrixRMd cost;      // true costs c_t(tau_j), ladder.size() x T
  MatrixRMd smoothed;  // pooled costs (smoothed solver), else empty
  VectorD a;           // a_t
  DistortionModel noise;  // fitted n_h(b) (waterfill solver), else empty
  double output_norm2 = 0;  // mean_q ||o_q||^2 on the observation queries
  std::vector<Span> spans;
  std::vector<double> rates;  // ladder_rates of this head in options.rate_kind
};
HeadCosts head_costs(const HeadData& head, const RopeParams& rope, const AllocateOptions& options);
// The measured rate of head i's allocation (allocation_rate, quantizer.hpp).
using HeadRate = std::function<Rate(int head, const std::vector<std::uint8_t>& tiers)>;
// Steps 2-3 of allocate_trace on costs already computed: heads[i] is head (i / n_kv_heads,
// i % n_kv_heads) of `meta` (n_layers, n_kv_heads, prompt_len are read). Throws InputError
// when the costs were computed for another ladder or solver. trace_path and seconds_costs
// are left empty.
AllocationReport allocate_heads(const TraceMeta& meta, const std::vector<HeadCosts>& heads,
                                const AllocateOptions& options, const HeadRate& head_rate);

nlohmann::json to_json(const AllocationReport&);
// Summary lines, one row per layer (and per head when per_head), then the model row.
std::string text_report(const AllocationReport&, bool per_head);

}  // namespace tierlab
