// The exact solver at many budgets in one parametric pass (exact_parametric.hpp).
#include "solvers/exact_parametric.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "solvers/exact_detail.hpp"

namespace tierlab {

using namespace exact_detail;

namespace {

using Clock = std::chrono::steady_clock;

// Every item's costs (sorted-rate order) and lower hull, from one pass over the instance,
// and all hull upgrades sorted by decreasing efficiency with the prefix sums of their steps.
struct HullTable {
  std::int64_t N = 0;
  int m = 0;
  std::vector<double> cost;          // N x m, sorted-rate order
  std::vector<std::uint8_t> hull;    // N x m: hull positions, first n_hull[i] valid
  std::vector<std::uint8_t> n_hull;  // vertices per item
  std::vector<double> eff;           // N x m: eff[k] of hull step k (k >= 1)
  std::vector<double> sorted_e;      // upgrades in decreasing efficiency
  std::vector<double> prefix;        // prefix[p] = sum of the first p steps (capacity units)
  std::int64_t items_with_upgrades = 0;

  explicit HullTable(const Setup& s) : N(s.inst.items()), m(s.geom.m) {
    const auto Nm = static_cast<std::size_t>(N) * static_cast<std::size_t>(m);
    cost.resize(Nm);
    hull.resize(Nm);
    eff.resize(Nm);
    n_hull.resize(static_cast<std::size_t>(N));
    std::vector<Upgrade> ups;
    ups.reserve(static_cast<std::size_t>(N) * static_cast<std::size_t>(std::max(0, m - 1)));
    int hb[256];
    double eb[256];
    for (std::int64_t i = 0; i < N; ++i) {
      double* c = cost.data() + i * m;
      s.gather(i, c);  // throws on a non-finite cost, as solve_exact does
      const int n = lower_hull_kernel(s.geom, c, hb, eb);
      n_hull[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n);
      items_with_upgrades += n > 1 ? 1 : 0;
      for (int k = 0; k < n; ++k) {
        hull[static_cast<std::size_t>(i * m + k)] = static_cast<std::uint8_t>(hb[k]);
        eff[static_cast<std::size_t>(i * m + k)] = k > 0 ? eb[k] : kInf;
        if (k > 0) ups.push_back({eb[k], s.cap_rate[hb[k]] - s.cap_rate[hb[k - 1]]});
      }
    }
    std::sort(ups.begin(), ups.end(), [](const Upgrade& a, const Upgrade& b) { return a.e > b.e; });
    sorted_e.resize(ups.size());
    prefix.assign(ups.size() + 1, 0.0);
    for (std::size_t p = 0; p < ups.size(); ++p) {
      sorted_e[p] = ups[p].e;
      prefix[p + 1] = prefix[p] + ups[p].w;
    }
  }

  // The relaxation at the capacity of s: what relax() returns with full selection (every item
  // with an upgrade decided at lambda* with its exact reduced costs; an item without one at
  // its only vertex, its key bounded at lambda = 0), in the same summation order.
  Relaxed relax_at(const Setup& s) const {
    Relaxed r;
    r.choice.resize(static_cast<std::size_t>(N));
    r.alt_key.resize(static_cast<std::size_t>(N));
    r.passes = 1;
    r.window = static_cast<std::int64_t>(sorted_e.size());
    r.window_items = items_with_upgrades;
    const double T = s.capacity;
    if (prefix.back() <= T) {  // every item at its cheapest vertex
      fill_trivial(s, r, [&](std::int64_t i) {
        const int kb = hull[static_cast<std::size_t>(i * m + n_hull[static_cast<std::size_t>(i)] - 1)];
        return std::pair<int, double>(kb, cost[static_cast<std::size_t>(i * m + kb)]);
      });
      return r;
    }
    // lambda* = e of the first sorted upgrade whose prefix passes T.
    const auto p = static_cast<std::size_t>(std::upper_bound(prefix.begin() + 1, prefix.end(), T) - (prefix.begin() + 1));
    const double lambda = sorted_e[p];
    r.lambda = lambda;
    std::vector<double> lr(static_cast<std::size_t>(m));
    for (int k = 0; k < m; ++k) lr[static_cast<std::size_t>(k)] = lambda * s.geom.rate[k];
    const double lo_c = 0.0, hi = kInf;  // relax()'s unbounded bracket
    CompensatedSum fixed, lagr, obj;
    double fixed_rate_bits = 0, fixed_units = 0, units = 0, scale = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      const double* c = cost.data() + i * m;
      const std::uint8_t* h = hull.data() + i * m;
      const double* e = eff.data() + i * m;
      const int n = n_hull[static_cast<std::size_t>(i)];
      double alt = kInf;
      int kb;
      if (n == 1) {
        kb = h[0];
        const double cb = c[kb], rb = s.geom.rate[kb];
        for (int k = 0; k < m; ++k) {
          if (k == kb) continue;
          const double dr = s.geom.rate[k] - rb;
          alt = std::min(alt, (c[k] - cb) + (dr > 0 ? lo_c : hi) * dr);
        }
        fixed.add(cb);
        fixed_rate_bits += rb;
        fixed_units += s.cap_rate[kb];
        scale = std::max(scale, std::fabs(cb));
      } else {
        int b = 0;
        while (b + 1 < n && e[b + 1] > lambda) ++b;
        kb = h[b];
        lagr.add(base_lagrangian(c, lr.data(), m, kb, alt));
        obj.add(c[kb]);
        units += s.cap_rate[kb];
        scale = std::max(scale, std::fabs(c[kb]));
      }
      r.choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(s.geom.order[kb]);
      r.alt_key[static_cast<std::size_t>(i)] = rc_key(alt);
    }
    r.lagr_sum = fixed.value_extended() + static_cast<long double>(lambda) * fixed_rate_bits + lagr.value_extended();
    r.base_obj = fixed.value_extended() + obj.value_extended();
    r.base_rate = fixed_units + units;
    r.scale = scale + lambda * s.geom.rate.back();
    return r;
  }
};

}  // namespace

std::vector<MckpResult> solve_exact_budgets(const MckpInstance& instance, const std::vector<double>& budgets,
                                            const ExactOptions& opt, ExactSweepStats* stats) {
  opt.validate();
  std::vector<MckpResult> out(budgets.size());
  MckpInstance inst = instance;
  // Budgets that solve_exact settles before reading a cost (infeasible; no items) go to it.
  std::vector<std::size_t> todo;
  for (std::size_t k = 0; k < budgets.size(); ++k) {
    inst.budget = budgets[k];
    inst.validate();
    if (inst.items() == 0 || Setup(inst).infeasible()) out[k] = solve_exact(inst, opt);
    else todo.push_back(k);
  }
  if (stats) *stats = {};
  if (todo.empty()) return out;

  const auto t0 = Clock::now();
  inst.budget = budgets[todo.front()];
  const HullTable table{Setup(inst)};
  const double hull_s = seconds_since(t0);
  const auto t1 = Clock::now();
  for (const std::size_t k : todo) {
    const auto tk = Clock::now();
    inst.budget = budgets[k];
    const Setup s(inst);
    Relaxed r = table.relax_at(s);
    out[k] = prove_relaxed(inst, opt, s, r, tk, seconds_since(tk));
  }
  if (stats) {
    stats->upgrades = static_cast<std::int64_t>(table.sorted_e.size());
    stats->seconds_hulls = hull_s;
    stats->seconds_budgets = seconds_since(t1);
  }
  return out;
}

}  // namespace tierlab
