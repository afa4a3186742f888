// Strict and hull dominance of a head's tiers (dominance.hpp, docs/model.md section 4).
#include "model/dominance.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "model/base/error.hpp"

namespace tierlab {

namespace {

// Tolerance for "lies above": absolute in units of R (which is O(1)) plus relative.
bool above(double y, double line) { return y > line + 1e-12 * (1.0 + std::abs(line)); }

// Cross product of (b - a) x (c - a); <= 0 means b is not strictly below segment a-c.
double cross(double ax, double ay, double bx, double by, double cx, double cy) {
  return (bx - ax) * (cy - ay) - (by - ay) * (cx - ax);
}

}  // namespace

std::vector<int> lower_hull(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size())
    throw InputError("lower_hull: " + std::to_string(x.size()) + " x values but " + std::to_string(y.size()) +
                     " y values; they must pair up.");
  std::vector<int> idx;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(x[i]) && std::isfinite(y[i])) idx.push_back(static_cast<int>(i));
  // x ascending; among equal x the lowest y first (then lowest index, for determinism).
  std::sort(idx.begin(), idx.end(), [&](int a, int b) {
    if (x[a] != x[b]) return x[a] < x[b];
    if (y[a] != y[b]) return y[a] < y[b];
    return a < b;
  });
  // Keep only the lowest point of each x.
  idx.erase(std::unique(idx.begin(), idx.end(), [&](int a, int b) { return x[a] == x[b]; }), idx.end());
  // Andrew's monotone chain, lower part; collinear points are dropped (strict vertices only).
  std::vector<int> hull;
  for (int i : idx) {
    while (hull.size() >= 2) {
      const int a = hull[hull.size() - 2], b = hull.back();
      if (cross(x[a], y[a], x[b], y[b], x[i], y[i]) <= 0) hull.pop_back();
      else break;
    }
    hull.push_back(i);
  }
  return hull;
}

DominanceReport dominance(const SurrogateCosts& costs, RateKind rate_kind) {
  const RateLadder& ladder = costs.ladder;
  const int n = ladder.size();
  if (costs.cost.rows() != n || static_cast<int>(costs.rates.size()) != n)
    throw InputError("dominance: the costs have " + std::to_string(costs.cost.rows()) + " rows and " +
                     std::to_string(costs.rates.size()) + " rates but ladder '" + ladder.name() + "' has " +
                     std::to_string(n) + " tiers.");
  DominanceReport rep;
  rep.R.assign(n, 0.0);
  rep.rate.assign(n, 0.0);
  rep.dominated.assign(n, false);
  rep.hull_dominated.assign(n, false);

  const double evict_total = costs.cost.cols() > 0 ? costs.cost.row(0).sum() : 0.0;
  for (int i = 0; i < n; ++i) {
    rep.rate[i] = rate_of(costs.rates[i], rate_kind);
    const QuantizerKind k = ladder.tiers[i].kind;
    if (k == QuantizerKind::Evict) {
      rep.R[i] = 1.0;
    } else if (k == QuantizerKind::Exact) {
      rep.R[i] = 0.0;
    } else {
      const double tier_total = costs.cost.row(i).sum();
      // Eviction free (sum c_t(0) = 0): a tier that costs nothing ties with it (R = 1,
      // dominated); one that costs anything is infinitely worse.
      if (evict_total > 0) rep.R[i] = tier_total / evict_total;
      else rep.R[i] = tier_total > 0 ? std::numeric_limits<double>::infinity() : 1.0;
      rep.dominated[i] = rep.R[i] >= 1.0;
    }
  }

  // The useful lower envelope: the lower convex hull of all points (eviction (0, 1) and
  // exact (r_exact, 0) included) up to its lowest vertex, then flat to the right (a
  // point with more rate and no less cost than that vertex is never chosen for any
  // multiplier lambda >= 0). A point strictly above it is hull-dominated.
  const std::vector<int> hull = lower_hull(rep.rate, rep.R);
  std::size_t lowest = 0;
  for (std::size_t j = 1; j < hull.size(); ++j)
    if (rep.R[hull[j]] < rep.R[hull[lowest]]) lowest = j;
  const double x_low = rep.rate[hull[lowest]], y_low = rep.R[hull[lowest]];
  for (int i = 0; i < n; ++i) {
    const double x = rep.rate[i], y = rep.R[i];
    if (!std::isfinite(y)) {
      rep.hull_dominated[i] = true;
      continue;
    }
    double line;
    if (x >= x_low) {
      line = y_low;
    } else {
      line = std::numeric_limits<double>::infinity();  // left of the hull: nothing to compare with
      for (std::size_t j = 0; j + 1 <= lowest; ++j) {
        const int a = hull[j], b = hull[j + 1];
        if (x >= rep.rate[a] && x <= rep.rate[b]) {
          const double f = (x - rep.rate[a]) / (rep.rate[b] - rep.rate[a]);
          line = rep.R[a] + f * (rep.R[b] - rep.R[a]);
          break;
        }
      }
    }
    rep.hull_dominated[i] = above(y, line);
  }
  return rep;
}

double dominated_share(const std::vector<DominanceReport>& heads, const RateLadder& ladder, int bits) {
  const int tier = ladder.index_of_bits(bits);
  if (tier < 0)
    throw InputError("dominated_share: ladder '" + ladder.name() + "' has no finite tier with " + std::to_string(bits) +
                     " code bits.");
  if (heads.empty()) throw InputError("dominated_share: no heads were given; the share of zero heads is undefined.");
  int count = 0;
  for (std::size_t h = 0; h < heads.size(); ++h) {
    if (static_cast<int>(heads[h].dominated.size()) != ladder.size())
      throw InputError("dominated_share: head " + std::to_string(h) + " has " + std::to_string(heads[h].dominated.size()) +
                       " tiers but ladder '" + ladder.name() + "' has " + std::to_string(ladder.size()) + ".");
    if (heads[h].dominated[tier]) ++count;
  }
  return double(count) / double(heads.size());
}

}  // namespace tierlab
