#pragma once
// Strict and hull dominance (docs/model.md section 4).
//
// For a head, the normalised cost of a finite tier tau is
//   R_h(tau) = sum_t c_t(tau) / sum_t c_t(0)
// tau is (strictly) dominated when R_h(tau) >= 1: spending its bits makes the output
// worse than spending none. tau is hull-dominated when (r(tau), R_h(tau)) lies above
// the lower convex hull of the head's points with (0, 1) (eviction) and (16, 0) (exact)
// included: no Lagrangian multiplier makes an optimal allocation use it. The dominated
// share of a cell is the fraction of its heads whose 2-bit tier is dominated.
#include <vector>

#include "model/surrogate.hpp"

namespace tierlab {

struct DominanceReport {
  std::vector<double> R;                // R_h(tau) per ladder tier (evict 1, exact 0)
  std::vector<double> rate;             // r(tau) used for the hull
  std::vector<bool> dominated;          // strict: R >= 1 (finite tiers only)
  std::vector<bool> hull_dominated;     // above the lower convex hull
};

// rate_kind sets the x axis of the hull (R does not depend on it); no default: the caller's
// problem says it (solvers/problem.hpp).
DominanceReport dominance(const SurrogateCosts& costs, RateKind rate_kind);

// Indices of the lower convex hull of points (x_i, y_i) (x ascending after sorting),
// used by dominance and by the solvers.
std::vector<int> lower_hull(const std::vector<double>& x, const std::vector<double>& y);

// Fraction of heads whose tier with `bits` code bits is dominated (strict).
double dominated_share(const std::vector<DominanceReport>& heads, const RateLadder& ladder, int bits = 2);

}  // namespace tierlab
