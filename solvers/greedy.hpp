#pragma once
// Two greedy heuristics for the shared-ladder knapsack (mckp.hpp): minimise sum_i c_{i,j(i)}
// subject to sum_i r_{j(i)} <= B N. Both start every item at the smallest-rate tier and
// keep a max-heap of each item's next upgrade a -> b (sorted rate positions a < b), keyed
// by its cost decrease per bit
//   e_i(a -> b) = (c_{i,a} - c_{i,b}) / (r_b - r_a)
// The best upgrade is popped; it is taken when it fits the remaining budget (then the
// item's following upgrade is pushed), otherwise it is dropped and the item stops there,
// and the loop goes on with the other items' (smaller) upgrades until the heap is empty.
// They differ in which upgrades an item offers:
//
//   greedy      (GreedyOptions::hull = true, the default; `--solver greedy`,
//                FamilySolver::Greedy) the classic MCKP greedy (Sinha-Zoltners,
//                Dyer-Zemel): item i walks its LOWER CONVEX HULL H_i = (h_0, ..., h_n)
//                (mckp.hpp item_hull / lower_hull_kernel: from the smallest-rate tier to
//                the cheapest, dominated and hull-dominated tiers skipped), offering the
//                hull edges h_k -> h_{k+1} in turn. Their efficiencies strictly decrease
//                along H_i, so the pops come in non-increasing e over all items: the
//                greedy takes, up to the first edge that does not fit (the critical edge,
//                of item i*, cost decrease D* = c_{i*,h_k} - c_{i*,h_k+1}), exactly the
//                edges the LP relaxation takes whole (the LP takes a fraction theta in
//                [0, 1) of the critical edge and nothing after it). Later edges only
//                lower the cost, hence the guarantee
//                  objective - LP bound <= theta D* < D* <= max_i (c_{i,j_min} - min_j c_ij)
//                with j_min the smallest-rate tier: within one item's cost spread of the
//                LP bound, and so of the optimum (LP bound <= optimum <= objective).
//                When every hull edge fits, every item sits at its cheapest tier (optimal).
//   greedy-raw  (hull = false; `--solver greedy-raw`, FamilySolver::GreedyRaw) the
//                marginal-return greedy on the RAW ladder: item i offers the consecutive
//                steps k -> k+1 (sorted positions), e = (c_{i,k} - c_{i,k+1}) / (r_{k+1} - r_k);
//                a step with e <= 0 is never taken (and stops the item). It ignores hull
//                dominance on purpose (the teaching point of docs/model.md section 9,
//                docs/solvers.md): a step that looks poor on the raw ladder (0 -> 2 bits
//                when the 2-bit tier is nearly useless) hides a much better two-step
//                upgrade (0 -> 4 bits) that the hull greedy, and the exact solver, see as
//                one efficient edge. No bound on its loss: it can be any factor.
//
// Cost O(N m log N) (greedy: plus O(m) per taken edge to rebuild the item's hull).
// The result's lower_bound is the Lagrangian (LP) bound of exact.hpp when compute_bound
// is set, so gap = objective - LP bound >= the true gap to the optimum.
#include "solvers/mckp.hpp"

namespace tierlab {

struct GreedyOptions {
  bool compute_bound = true;  // run the Lagrangian relaxation to report the gap
  bool hull = true;           // true: greedy on the lower hulls; false: greedy-raw
};

// result.solver is "greedy" (hull) or "greedy-raw".
MckpResult solve_greedy(const MckpInstance&, const GreedyOptions& = {});

}  // namespace tierlab
