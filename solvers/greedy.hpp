#pragma once
// Marginal-return greedy on the RAW tier ladder of the shared-ladder knapsack (mckp.hpp).
//
// Every item starts at the smallest-rate tier. A max-heap holds each item's next raw
// step k -> k+1 (consecutive tiers in increasing rate) keyed by its cost decrease per bit
//   g_ik = (c_{i,k} - c_{i,k+1}) / (r_{k+1} - r_k)
// The best step is popped; it is taken when it fits the remaining budget (then the
// item's following step is pushed), otherwise it is dropped and the item stops there,
// and the loop goes on with the other (smaller) steps until the heap is empty. Steps
// with g <= 0 are never taken (and stop the item).
//
// It ignores hull dominance on purpose (a teaching point, docs/solvers.md): a step
// that looks poor on the raw ladder (e.g. 0 -> 2 bits when the 2-bit tier is nearly
// useless) can hide a much better two-step upgrade (0 -> 4 bits) that the hull, and
// the exact solver, see as one efficient move. Cost O(N m log N).
//
// The result's lower_bound is the Lagrangian (LP) bound of exact.hpp when
// compute_bound is set, so gap = objective - LP bound >= the true gap to the optimum.
#include "solvers/mckp.hpp"

namespace tierlab {

struct GreedyOptions {
  bool compute_bound = true;  // run the Lagrangian relaxation to report the gap
};

MckpResult solve_greedy(const MckpInstance&, const GreedyOptions& = {});

}  // namespace tierlab
