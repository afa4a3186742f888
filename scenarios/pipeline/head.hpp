#pragma once
// The per-head pipeline: the steps from one KV head to numbers, in one place, used by the
// scenarios, the CLI and the explorer alike (the model-level steps are in
// model/surrogate.hpp: ladder_rates, fit_head_noise; model/quantizers/tier.hpp: index_of_bits).
//
//   solve_head     one family's optimum for one head at budget B: the tier of every token
//                  minimising sum_t c_t(tau_t) subject to sum_t r(tau_t) <= B T
//                  (solvers/families.hpp, head scope; exact solver unless options say)
//   head_interior  the interior advantage of one head (docs/model.md section 6): Q*, E* and M*
//                  solved, materialised with the head (tier-local groups, the published
//                  quantizers' real metadata; model/quantizers/quantizer.hpp), repaired until the
//                  MEASURED rate meets B (solve_within_budget: equal memory) and recomputed
//                  exactly on the (causal) observation and the decode queries;
//                    A = 1 - err(M*) / min(err(Q*), err(E*))   (interior_advantage_of)
//                  and whether the head's 2-bit tier is dominated (R_h(2) >= 1).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/dense_routing.hpp"
#include "solvers/exact.hpp"
#include "solvers/families.hpp"
#include "solvers/problem.hpp"

namespace tierlab {

class HeadEvaluations;  // scenarios/pipeline/evaluation.hpp

struct HeadSolution {
  bool feasible = false;
  std::string option;               // "Q:kivi4", "E", "M" (the routed option for Routed)
  std::vector<std::uint8_t> tiers;  // ladder tier per token; empty when infeasible
  double objective = std::numeric_limits<double>::quiet_NaN();  // sum_t cost(tiers_t, t)
  double bound = std::numeric_limits<double>::quiet_NaN();      // the solver's lower bound
  std::string message;              // why infeasible
};
// cost: ladder.size() x T (SurrogateCosts::cost or pooled costs); a: token weights (for the
// water-filling solver); noise: the head's n_h(b) (water-filling solver only).
HeadSolution solve_head(const MatrixRMd& cost, const VectorD& a, const std::vector<double>& rates,
                        const RateLadder& ladder, double budget, FamilyChoice family,
                        const FamilyOptions& options = {}, DistortionModel noise = {});

// Equal memory (docs/model.md section 6): solve_head budgets the nominal per-tier rates r_j, but a
// materialised allocation can measure more (tier-local partial groups carry a whole group's
// metadata; published quantizers' side data). solve_within_budget repairs that
// (budget_repair.hpp): it solves at B' = B and, while the measured rate (in the budget's
// kind) exceeds B, re-solves at smaller B' (shrink by the excess, then bisection), keeping of
// every allocation tried that measures <= B the one of least objective. `solved_budget` is
// the B' of the allocation returned (= B when no repair was needed).
struct BudgetedSolution {
  HeadSolution solution;
  MaterializedKeys keys;    // the materialised allocation (empty when infeasible)
  double solved_budget = std::numeric_limits<double>::quiet_NaN();
  bool repaired = false;    // B' < B was needed
};
BudgetedSolution solve_within_budget(const HeadData& head, const RopeParams& rope, const SurrogateCosts& costs,
                                     const std::vector<double>& rates, const RateLadder& ladder, double budget,
                                     RateKind kind, FamilyChoice family, const FamilyOptions& options = {});

// The repair without materialising, for any solve_head input (pooled costs, a noise model):
// what every front door that solves one head calls (solve_within_budget, the methods' family
// entries, Python's solve_head, the explorer). With `true_cost`, the objective of each attempt
// (and so the attempt kept) is scored on it (the smoothed solver decides on pooled costs).
struct RepairedHead {
  HeadSolution solution;
  double solved_budget = std::numeric_limits<double>::quiet_NaN();
  bool repaired = false;
};
RepairedHead solve_head_at_equal_memory(const HeadData& head, const RopeParams& rope, const MatrixRMd& cost,
                                        const VectorD& a, const std::vector<double>& rates, const RateLadder& ladder,
                                        double budget, RateKind kind, FamilyChoice family,
                                        const FamilyOptions& options = {}, DistortionModel noise = {},
                                        const MatrixRMd* true_cost = nullptr);

// The tie floor of recomputed errors (docs/model.md section 12, convention 6): the relative squared error of
// rounding an output to float32, u^2 with u = 2^-24 (about 3.6e-15). Two errors at or below
// it are equal; an interior advantage is not reported where every family is at or below it.
inline constexpr double kFloat32ErrorFloor = 0x1p-48;

struct InteriorOptions {
  double budget = 4.0;  // B, bits per key element
  RateKind rate_kind = kDefaultRateKind;
  RateLadder ladder = RateLadder::parse(kDefaultLadder);
  ExactOptions exact;
  double error_floor = kFloat32ErrorFloor;  // >= 0
  // Dense quantizers outside the ladder that the reference paper's router may send a head to
  // (dense_routing.hpp: "turboquant", "kivi", "kvquant"); empty: no dense routing.
  std::vector<std::string> dense_quantizers;
  void validate() const;  // InputError naming the option and value
};

// One family's allocation of one head.
struct FamilyOutcome {
  bool feasible = false;
  std::string option;  // "Q:kivi4", "E", "M"
  double surrogate = std::numeric_limits<double>::quiet_NaN();  // sum_t c_t (absolute)
  Rate rate;           // measured on the materialised allocation (<= B in the budget's kind)
  bool repaired = false;  // the nominal optimum at B measured over B (solve_within_budget)
  ErrorMetrics obs, decode;
};

struct HeadInterior {
  int layer = 0, kv_head = 0;
  FamilyOutcome Q, E, M;
  double advantage_decode = std::numeric_limits<double>::quiet_NaN();  // NaN without decode steps
  double advantage_obs = std::numeric_limits<double>::quiet_NaN();
  double advantage_surrogate = std::numeric_limits<double>::quiet_NaN();
  bool dominated_2bit = false;  // R_h(2-bit tier) >= 1
  // R_h(2-bit tier) itself (model/dominance.hpp, surrogate on the observation queries); NaN
  // when the ladder has no 2-bit tier.
  double R_2bit = std::numeric_limits<double>::quiet_NaN();
  // Every feasible family's recomputed error is at or below the floor (a tie: A not reported).
  bool below_floor_decode = false, below_floor_obs = false;
  // Routing between M* and the dense quantizers (options.dense_quantizers non-empty).
  DenseRouting dense;
};

// A = 1 - m / min(q, e) with NaN (infeasible) inputs left out of the min; NaN when undefined.
// With a floor f > 0, errors are compared as max(err, f) (two errors below f are equal), and
// A is NaN (not reported) when every defined error is <= f.
double interior_advantage_of(double err_m, double err_q, double err_e, double floor = 0.0);
// Are all defined (non-NaN) errors at or below the floor? (false when none is defined)
bool all_below_floor(double err_m, double err_q, double err_e, double floor);

// costs: surrogate_costs of the head on its observation queries for options.ladder;
// rates: ladder_rates(head, rope, options.ladder, options.rate_kind).
// evaluations (optional): the head's query sets prepared once for several calls (the budgets of
// a cell, evaluation.hpp HeadEvaluations) on `backend`; the numbers are the same without it.
HeadInterior head_interior(const HeadData& head, const RopeParams& rope, const SurrogateCosts& costs,
                           const std::vector<double>& rates, const InteriorOptions& options, Recomputer& backend,
                           HeadEvaluations* evaluations = nullptr);

}  // namespace tierlab
