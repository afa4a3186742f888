#pragma once
// The exact solver (exact.hpp) at many budgets B_1..B_n of one instance: one parametric pass
// instead of n independent relaxations (issue 18: the surrogate's rate-distortion curve).
//
// The Lagrangian relaxation's optimum as a function of the budget is piecewise linear
// between the breakpoints of the items' lower hulls: with every hull upgrade (item i, hull
// step k) at efficiency e_ik (cost per bit) and rate step w_ik (capacity units), sorted once
// in decreasing efficiency with prefix sums W_p of the steps, the multiplier at capacity T is
//   lambda*(T) = e_(p)  for the first sorted position p with W_(p+1) > T
// (W(> lambda*) <= T < W(>= lambda*), the same weighted quantile exact.hpp step 2 selects),
// the base choice takes every upgrade with e > lambda*, and the LP bound is
//   L(T) = sum_i (c_i,base + lambda* r_base) - lambda* T,
// linear in T between consecutive breakpoints. So one sort of all hull slopes (and each
// item's costs and hull kept from one pass) gives every budget's relaxation; per budget one
// pass over the kept hulls writes the base choice and the reduced-cost keys, and step 3 (the
// integer gap closed exactly: the certificates a-c of exact.hpp) runs unchanged on them
// (exact_detail::prove_relaxed). Results equal solve_exact at each budget: the same
// lambda*, the same base choice and keys as its full-selection relaxation, hence the same
// status and objective (to the 1e-12 rounding tolerance of the proof), and the same choice
// wherever the optimum is unique. (For instances larger than
// ExactOptions::full_selection_max_items solve_exact brackets lambda* from a sample and
// bounds the keys of items decided outside the bracket; the keys here are the exact ones,
// which are valid and tighter, so the optimum is the same.)
//
// Cost: O(U log U) for the sort of the U <= N (m-1) upgrades, then O(N m + log U) per budget
// and step 3 where the LP optimum is fractional (usually a gcd certificate or a small core).
#include <vector>

#include "solvers/exact.hpp"
#include "solvers/mckp.hpp"

namespace tierlab {

// What the sweep did, for reports and benchmarks.
struct ExactSweepStats {
  std::int64_t upgrades = 0;  // hull upgrades sorted (U)
  double seconds_hulls = 0;   // the one pass over the costs: hulls and the sort
  double seconds_budgets = 0; // every budget's base pass and step 3
};

// results[k] = the exact optimum at budgets[k] (inst.budget is ignored), as solve_exact with
// inst.budget = budgets[k] would return it; budgets in any order (finite; a budget below the
// smallest rate gives Infeasible). Throws InputError as solve_exact does.
std::vector<MckpResult> solve_exact_budgets(const MckpInstance& inst, const std::vector<double>& budgets,
                                            const ExactOptions& options = {}, ExactSweepStats* stats = nullptr);

}  // namespace tierlab
