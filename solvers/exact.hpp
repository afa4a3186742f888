#pragma once
// The exact solver of the shared-ladder multiple-choice knapsack (mckp.hpp): the integer
// optimum with a certificate.
//
// 1. Hulls. Per item, the lower convex hull of (r_j, c_ij) (mckp.hpp item_hull), whose
//    upgrades k-1 -> k have strictly decreasing efficiencies
//      e_ik = (c_{i,h_{k-1}} - c_{i,h_k}) / (r_{h_k} - r_{h_{k-1}})   [cost per bit].
// 2. Lagrangian / LP relaxation. For lambda >= 0 every item takes the hull vertex after
//    all its upgrades with e_ik > lambda. lambda* is the weighted quantile of the
//    efficiencies at the capacity: W(> lambda*) <= B N - N r_min < W(>= lambda*), with
//    W(> x) the rate of all upgrades more efficient than x. It is found by selection: a
//    sample of items brackets lambda*, ONE pass over all items decides every item with
//    no upgrade inside the bracket and keeps the upgrades inside it, and a weighted
//    quickselect on those gives lambda* (a missed bracket widens and repeats the pass).
//    O(N m) expected. The bound
//      L(lambda*) = sum_i min_j (c_ij + lambda* (r_j - r_min)) - lambda* (B N - N r_min)
//    equals the LP optimum (at most one fractional item) and bounds the integer optimum.
// 3. Integer gap, closed exactly. With the base choice x^0 (all upgrades with
//    e > lambda*: feasible, slack S) and the reduced costs
//      rc_ij = c_ij + lambda* r_j - min_j' (c_ij' + lambda* r_j') >= 0
//    every feasible x has  objective(x) - L(lambda*) = sum_i rc_{i,x_i} + lambda* (slack of x).
//    Three certificates, tried in order:
//    a. the LP optimum is integral (S = 0 and no fractional item): x^0 is optimal;
//    b. the gcd bound (integral ladders): the cheapest single move of every rate change
//       dr is found in one pass; a solution whose measure is t uses only moves with
//       rc <= t, so its net rate change is a multiple of g(t) = gcd of those dr, and
//       t >= lambda* u (S mod g(t)). The least t satisfying this bounds every solution;
//       if the best single-move incumbent reaches it, it is optimal (this settles the
//       common case where the slack cannot be filled by the cheap moves' step);
//    c. core DP (Pisinger's core MCKP): a solution better than an incumbent with
//       G = objective - L uses only tiers with rc < G; items whose every other tier has
//       rc >= tau are fixed, the rest (the core, smallest reduced costs first) are solved
//       exactly by a Pareto dynamic programme over the net rate change (integer units on
//       the 1/64-bit grid, else doubles) with bound pruning. If the incumbent then has
//       G <= tau it is proven optimal; otherwise tau grows (x8 items) and the DP reruns.
//    Proven: status Optimal, lower_bound = objective, gap 0 (to a relative rounding
//    tolerance of 1e-12 of the objective's scale). If the core or the DP outgrows the
//    options' limits: Feasible with the honest gap objective - L(lambda*).
// Budgets below the smallest rate are Infeasible; a budget that affords every item its
// cheapest tier is Trivial (optimal, gap 0). Costs must be finite (InputError otherwise).
// Note: the integer optimum may use a hull-dominated tier (docs/solvers.md); the LP never does.
#include <cstdint>
#include <string>
#include <vector>

#include "solvers/mckp.hpp"

namespace tierlab {

struct ExactOptions {
  std::int64_t max_core_items = 2'000'000;  // a larger core ends the proof: Feasible with the honest gap
  std::int64_t max_dp_states = 20'000'000;  // DP states summed over the core's layers (24 bytes each)
  std::int64_t initial_core_items = 256;    // target size of the first core (grows x8 per round)
  int max_rounds = 8;                       // core DP rounds before giving up the proof
  // Instances up to this many items select lambda* on all upgrades in memory; larger
  // ones bracket it from a sample first (same answer, less memory and time).
  std::int64_t full_selection_max_items = 1 << 18;
  std::int64_t sample_items = 1 << 16;  // items drawn (in contiguous blocks) to bracket lambda*
  void validate() const;                // throws InputError naming the option and value
};

// The Lagrangian relaxation alone (steps 1-2): also used by the greedy solver to
// report its gap. status is Infeasible, Trivial, or Feasible (bound valid).
struct LagrangianRelaxation {
  SolveStatus status = SolveStatus::Feasible;
  double lambda = 0.0;       // lambda*, cost per bit (0 when Trivial)
  double bound = 0.0;        // L(lambda*) = LP optimum
  double base_objective = 0.0;  // sum_i c at the base choice (all upgrades with e > lambda*)
  double base_slack_bits = 0.0; // B N - sum_i r at the base choice
  std::int64_t upgrades_in_window = 0;  // upgrades the selection kept in memory
  int selection_passes = 0;             // full passes over the costs the selection needed
};
LagrangianRelaxation lagrangian_relaxation(const MckpInstance&, const ExactOptions& = {});

// A heuristic's result (greedy, water-filling) from its choice: `choice`, its objective and
// rate (evaluate), iterations, status Feasible for FeasibleReason::Heuristic (no optimality
// claim) and, with `bound`, the
// LP bound of lagrangian_relaxation with lambda*, lower_bound = min(LP, objective), gap and
// relative gap. Returns the relaxation (default-constructed without `bound`).
LagrangianRelaxation finish_heuristic(const MckpInstance&, std::vector<std::uint8_t> choice, long long iterations,
                                      bool bound, MckpResult& res);

MckpResult solve_exact(const MckpInstance&, const ExactOptions& = {});

}  // namespace tierlab
