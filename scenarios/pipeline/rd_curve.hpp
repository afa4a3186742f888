#pragma once
// The operational rate-distortion curve (issue 18): distortion against rate, one curve per
// policy family, each point exactly recomputed, with the lower convex hull of all points.
//
// For a set of heads (one head, a layer, a whole trace) and a grid of budgets B_1..B_n (bits
// per key element, code or total: options.solve.rate_kind), every family F in the options
// (quantize Q, evict E, mixed M, routed; solvers/families.hpp) and every B_k:
//   allocation  the surrogate optimum of F at B_k in the options' scope (head | layer |
//               model: heads trade budget), exactly as `tierlab solve --budget B_k --family F`
//               finds it (allocate_heads: same solver, same equal-memory repair, so the
//               MEASURED rate is <= B_k)
//   x           its measured rate in the budget's kind, mean over the heads (both kinds kept)
//   surrogate   its predicted relative error, mean over the heads of
//               sum_t c_t(tau_t) / mean_q ||o_q||^2 (observation queries, docs/model.md section 3)
//   error       its exactly recomputed errors (docs/model.md section 8), mean over the heads, on
//               the decode queries (default; out of sample), the observation queries, or
//               one decode step's queries
// The ladder points: every tier tau of the ladder applied to every token (evict: (0, 1);
// exact: error 0), with the same three numbers. The hull is the lower convex hull
// (model/dominance.hpp lower_hull) of all feasible curve points and the ladder points in the
// (x, error) plane; surrogate_hull the same in the (x, surrogate) plane. A ladder tier is
// hull-dominated on the curve when its point lies above the hull (no budget makes any family's
// optimum sit at it: the curve passes below it).
//
// Speed, exact: the surrogate costs are computed once per head (head_costs). In head scope with
// the exact solver, every budget's optimum of each family option comes from one parametric pass
// (solvers/exact_parametric.hpp: one sort of the hull slopes, then the exact solver's own
// integer step per budget; equal to solve_exact at each budget) and the option is chosen as
// solve_families_per_head chooses it. In the layer and model scopes a family of one option (E,
// M, Q with one finite tier) is one knapsack over the scope's tokens, swept the same way. A
// point where some head has no feasible option, the knapsack is not proven optimal or the
// scope needs the equal-memory repair, and every point of the pooled families of several
// options (Q, routed) and of the other solvers, is one solve (allocate_heads). The E points of a head, in increasing budget, keep nested sets of exact
// tokens: each updates the previous one's errors by the tokens it adds
// (cpu::IncrementalKeptSet; a step whose set is not nested resets: a full pass), equal to the
// full evaluation within 1e-5 relative. For the other points, per head the exact part of the
// recomputation (softmax, reference output) is prepared once (cpu::prepare_head) and each
// distinct allocation only sets its key variant (cpu::set_variants: token blocks whose keys
// are exact cost nothing) and evaluates its selection (cpu::evaluate_selection; the head's
// distinct allocations are materialised and evaluated in parallel, one copy of the prepared
// head per OpenMP thread), so a point equals the independent evaluation (evaluate_trace on the
// `tierlab solve` allocation) within the CPU reference's precision. Two points with the same
// allocation of a head (routed = its chosen family; ladder points) are evaluated once. A
// token-grouped tier's keys (KIVI) depend on which tokens share the tier, so they are
// materialised per distinct allocation, not once per curve.
#include <array>
#include <atomic>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/allocate.hpp"

namespace tierlab {

// Which queries the recomputed errors are measured on: every decode step (step s over the
// T + s tokens it sees), the observation queries, or one decode step s (its g query rows:
// what the explorer's water-filling view recomputes).
enum class RdQueries { Decode, Obs, Step };
std::string_view to_string(RdQueries);       // "decode" | "obs" | "step"
RdQueries parse_rd_queries(std::string_view);  // InputError lists the choices

// The budgets A, A + STEP, ..., up to B (inclusive within 1e-9 STEP) from "A:B:STEP"; `option`
// names the option in the InputError (bad syntax, A < 0, B < A, STEP <= 0, more than
// kMaxRdBudgets points).
inline constexpr int kMaxRdBudgets = 4096;
// The allocations of every point are kept until the recomputation (a pooled scope solves all
// heads at once): (families x budgets + ladder tiers) x heads x T bytes, at most this many.
inline constexpr double kMaxRdAllocationBytes = 4.0 * (1 << 30);
std::vector<double> parse_budget_grid(std::string_view spec, std::string_view option = "--budgets");

struct RdCurveOptions {
  std::vector<double> budgets;  // B grid, bits per element (finite, >= 0, at most kMaxRdBudgets)
  // ladder, rate_kind, solver, scope, smoothing, exact: as `tierlab solve`; budget and family
  // are set per point.
  AllocateOptions solve;
  std::vector<FamilyChoice> families{FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed,
                                     FamilyChoice::Routed};
  bool recompute = true;  // false: the surrogate only (error fields NaN)
  // Speed switches that leave the numbers as they are (the benchmark turns them off to compare):
  // sweep: exact solver: every budget's optimum from one parametric pass per head and family
  // option, or per pooled scope and single-option family (solvers/exact_parametric.hpp),
  // instead of one solve per point;
  // incremental: the E points' errors updated along their nested kept sets
  // (cpu::IncrementalKeptSet) instead of one evaluation each (equal within 1e-5 relative).
  bool sweep = true;
  bool incremental = true;
  RdQueries queries = RdQueries::Decode;  // Decode or Step on a trace without decode steps uses Obs (RdCurve::queries)
  int decode_step = 1;                    // s of RdQueries::Step, 1 <= s <= S (checked against the trace)
  void validate() const;  // InputError naming the option and value
};

struct RdPoint {
  FamilyChoice family = FamilyChoice::Mixed;
  double budget = 0;
  bool feasible = false;
  std::string message;  // why infeasible
  Rate rate;            // measured, mean over the heads
  double x = std::numeric_limits<double>::quiet_NaN();          // rate_of(rate, kind)
  double surrogate = std::numeric_limits<double>::quiet_NaN();  // predicted relative error (mean over heads)
  ErrorMetrics error;   // recomputed, mean over the heads (NaN rel_error when not recomputed)
  std::array<double, 3> family_share{0, 0, 0};  // heads routed to Q, E, M
  std::vector<double> head_surrogate, head_error;  // per head (relative)
};

struct RdLadderPoint {
  std::string tier;  // tier name ("evict", "kivi2", "exact")
  Rate rate;
  double x = 0, surrogate = 0;
  double error = std::numeric_limits<double>::quiet_NaN();
  bool above_hull = false;            // above the recomputed hull (hull-dominated on the curve)
  bool above_surrogate_hull = false;  // above the surrogate hull
};

// Vertices of a lower hull in x order; label: "M B=2.5" or "tier kivi2".
struct RdHull {
  std::vector<double> x, y;
  std::vector<std::string> label;
  double at(double x) const;  // piecewise-linear value (NaN outside [x_0, x_last])
};

// The tolerance of "above the recomputed hull", relative to the hull's value (docs/model.md
// section 4). Recomputed errors are float32 attention outputs accumulated in double; the same
// allocation evaluated by two paths (the prepared CPU head, evaluate_decode_steps, an
// incremental E point) agrees to about 1e-8-1e-7 relative, so a point within 1e-5 (about 80
// float32 ulps) of the hull is on it: the eviction tier and the E B=0 vertex that is the same
// allocation are never "dominated" by each other's rounding.
inline constexpr double kRecomputedHullTolerance = 1e-5;

// Is the recomputed error y above hull h at rate x (y > h(x) (1 + kRecomputedHullTolerance)
// + 1e-15)? False where the hull does not reach x or y is NaN.
bool above_recomputed_hull(const RdHull& h, double x, double y);

struct RdCurve {
  RdCurveOptions options;
  std::string source;   // trace path, or "heads"
  RdQueries queries = RdQueries::Decode;  // the query set the errors were measured on
  int heads = 0, tokens = 0;              // heads in scope; prompt tokens per head
  std::vector<RdPoint> points;            // family-major: points[f * budgets + k]
  std::vector<RdLadderPoint> ladder;
  RdHull hull, surrogate_hull;
  int evaluations = 0;  // distinct (head, allocation) recomputations (incremental ones included)
  int swept_points = 0;  // points whose surrogate optimum came from the parametric sweep (the rest: one solve each)
  int incremental_points = 0;  // (head, E point) errors updated from the previous E point's kept set
  int incremental_resets = 0;  // ... of which the kept set was not nested in the previous one (full pass)
  std::int64_t incremental_updates = 0;  // tokens added by the incremental E evaluations
  double seconds_costs = 0, seconds_solve = 0, seconds_recompute = 0, seconds = 0;

  const RdPoint& at(int family_index, int budget_index) const;
};

// Every head of a trace.
// The recomputation runs on the CPU reference (gpu/cpu_recompute.hpp), which is what lets each
// head's exact part be shared by all its points.
RdCurve rd_curve(const TraceReader& trace, const RdCurveOptions& options, const Progress& progress = {},
                 const std::atomic<bool>* cancel = nullptr);
// Heads in memory (one head: the explorer), as one layer of heads.size() heads; they share
// the trace's RoPE `rope` and head dimension.
// `costs` (optional): the heads' costs already computed (head_costs with options.solve, in the
// order of `heads`; the explorer's cache), else computed here.
RdCurve rd_curve(const std::vector<const HeadData*>& heads, const RopeParams& rope, const RdCurveOptions& options,
                 const Progress& progress = {}, const std::atomic<bool>* cancel = nullptr,
                 std::vector<HeadCosts> costs = {});

nlohmann::json to_json(const RdCurve&);
// The table (budget, family, code and total rate, surrogate, recomputed error), then the
// ladder points and the hull.
std::string text_report(const RdCurve&);

}  // namespace tierlab
