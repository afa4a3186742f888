#pragma once
// Equal memory (docs/model.md section 6, "Equal memory"): a solver budgets the nominal
// per-tier rates r_j, but a materialised allocation can measure more (tier-local partial
// groups carry a whole group's metadata; published quantizers' side data). The one repair
// every front door uses (one head: solve_within_budget; a scope of heads: allocate_heads;
// the model-wide families of the interior pass):
//
//   solve at B' = B; while the measured rate exceeds B, shrink B' by the excess (8 steps at
//   most), then bisect between the last B' whose allocation met B and the first that did
//   not (24 steps at most, to 1e-4 B);
//
// and of EVERY allocation tried whose measured rate meets B it keeps the one of least
// objective, not the last one. The measured rate and the objective are not monotone in B'
// (a partial group appears or vanishes), so the last B' of a bisection can be far below B
// and worse than an earlier one (issue 31: a model-wide M at B = 1 total spent 0.82 bits and
// lost to E* under the surrogate, although E*'s allocation is one of M's).
#include <algorithm>
#include <cmath>
#include <optional>

namespace tierlab {

template <class R>
struct RepairedSolution {
  std::optional<R> best;                 // empty: no allocation tried meets B
  double solved_budget = 0.0;            // the B' that gave `best`
  bool repaired = false;                 // the nominal optimum at B measured over B
  bool first_infeasible = false;         // the solve at B itself found no allocation
};

// solve_at(b) -> R; has(R) -> bool (the solver found an allocation); measured(R) -> double
// (its measured rate in the budget's kind); objective(R) -> double (what the solver minimised).
template <class R, class SolveAt, class Has, class Measured, class Objective>
RepairedSolution<R> repair_to_measured_budget(double B, SolveAt solve_at, Has has, Measured measured,
                                              Objective objective) {
  RepairedSolution<R> out;
  out.solved_budget = B;
  const double tol = 1e-12 * std::max(1.0, B);
  R first = solve_at(B);
  if (!has(first)) {
    out.first_infeasible = true;
    return out;
  }
  double m = measured(first);
  if (m <= B + tol) {
    out.best = std::move(first);
    return out;
  }
  out.repaired = true;
  auto keep = [&](R&& x, double b) {
    if (!out.best || objective(x) < objective(*out.best)) out.best = std::move(x), out.solved_budget = b;
  };
  double hi = B, lo = B, excess = m - B;
  bool met = false;
  for (int i = 0; i < 8 && lo > 0; ++i) {
    lo = std::max(0.0, lo - std::max(excess, 1e-6));
    R x = solve_at(lo);
    if (!has(x)) break;
    const double mx = measured(x);
    if (mx <= B + tol) {
      keep(std::move(x), lo);
      met = true;
      break;
    }
    hi = lo, excess = mx - B;
  }
  if (!met) return out;
  for (int i = 0; i < 24 && hi - lo > 1e-4 * std::max(1.0, B); ++i) {
    const double mid = 0.5 * (lo + hi);
    R x = solve_at(mid);
    if (has(x) && measured(x) <= B + tol) {
      lo = mid;
      keep(std::move(x), mid);
    } else {
      hi = mid;
    }
  }
  return out;
}

}  // namespace tierlab
