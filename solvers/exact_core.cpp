// The exact solver's step 3 searches (exact.hpp): the cheapest single move of every rate
// change with the gcd bound it gives, and the core Pareto DP over the items whose reduced
// costs are small.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "solvers/exact_detail.hpp"

namespace tierlab::exact_detail {

// ---- core Pareto DP ---------------------------------------------------------------

namespace {

// One alternative of a core item, relative to its base tier.
template <class R>
struct Option {
  R dr;       // rate change, capacity units
  double dc;  // cost change
  std::uint8_t tier;
};

template <class R>
struct State {
  R d;         // net rate change
  double dc;   // net cost change
  std::int32_t parent;
  std::uint8_t tier;
};

}  // namespace

// Exact minimisation of sum dc over the core items (others at base) subject to
// sum dr <= slack, restricted to options with rc < tau; only solutions with
// dc < incumbent_dc - tol are sought (states that cannot beat it are pruned).
//
// Pruning uses the measure of a complete solution relative to the Lagrangian bound,
//   objective - L = sum_i rc_i + lambda u (slack - d),
// bounded below for a partial state (d, rc so far) at layer l by
//   rc + lambda u (slack - S') + (d > S' ? a_l : min(a_l, lambda u (S' - d)))
// where a_l is the smallest non-base reduced cost among the remaining items (the items
// are taken in increasing order of it, so a_l grows) and S' the slack rounded down to a
// multiple of g, the gcd of every option's rate change (integral ladders): net rate
// changes are multiples of g, so S - S' units of slack can never be used.
template <class R>
DpOutcome core_dp(const Setup& s, const std::vector<std::int64_t>& core_in, const std::vector<std::uint8_t>& base_choice,
                  double lambda, double tau, R slack, double incumbent_dc, double tol, std::int64_t max_states) {
  DpOutcome out;
  const int m = s.geom.m;
  std::vector<int> pos_of_tier(m);
  for (int k = 0; k < m; ++k) pos_of_tier[s.geom.order[k]] = k;
  const double lu = lambda * s.unit_bits;  // cost of one unused capacity unit

  // Options per core item (base first), and each item's smallest non-base reduced cost.
  struct Item {
    std::int64_t i;
    double alt;
    std::vector<Option<R>> options;
  };
  std::vector<Item> items;
  items.reserve(core_in.size());
  std::vector<double> c(m);
  std::int64_t g = 0;
  for (const std::int64_t i : core_in) {
    s.gather(i, c.data());
    const int kb = pos_of_tier[base_choice[static_cast<std::size_t>(i)]];
    const double vb = c[kb] + lambda * s.geom.rate[kb];
    Item it{i, kInf, {{R{0}, 0.0, static_cast<std::uint8_t>(s.geom.order[kb])}}};
    for (int k = 0; k < m; ++k) {
      if (k == kb) continue;
      const double rc = c[k] + lambda * s.geom.rate[k] - vb;
      if (!(rc < tau)) continue;
      R dr;
      if constexpr (std::is_same_v<R, std::int64_t>) {
        dr = s.units.tier_units[s.geom.order[k]] - s.units.tier_units[s.geom.order[kb]];
        g = std::gcd(g, dr < 0 ? -dr : dr);
      } else {
        dr = s.geom.rate[k] - s.geom.rate[kb];
      }
      it.options.push_back({dr, c[k] - c[kb], static_cast<std::uint8_t>(s.geom.order[k])});
      it.alt = std::min(it.alt, std::max(rc, 0.0));
    }
    if (it.options.size() > 1) items.push_back(std::move(it));  // else fixed at base
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.alt < b.alt || (a.alt == b.alt && a.i < b.i); });
  const std::size_t L = items.size();

  // Slack usable by net changes that are multiples of g.
  R slack_eff = slack;
  if constexpr (std::is_same_v<R, std::int64_t>) {
    if (g > 0) slack_eff = (slack >= 0 ? slack / g : -((-slack + g - 1) / g)) * g;
  }
  const double unusable = lu * static_cast<double>(slack - slack_eff);
  const double inc_measure = incumbent_dc + lu * static_cast<double>(slack);
  out.completed = true;
  if (L == 0 || unusable >= inc_measure - tol) return out;  // nothing can beat the incumbent

  // Suffix bounds on the rate the remaining items can still free.
  std::vector<R> min_rem(L + 1, R{0});
  for (std::size_t l = L; l-- > 0;) {
    R lo = R{0};
    for (const auto& o : items[l].options) lo = std::min(lo, o.dr);
    min_rem[l] = min_rem[l + 1] + lo;
  }
  const double rate_tol = std::is_same_v<R, std::int64_t> ? 0.0 : 1e-12 * std::max(1.0, std::fabs(s.units.budget_bits));
  // Largest single up / down step of any option (capacity units).
  double step_up = 0, step_down = 0;
  for (const auto& it : items)
    for (const auto& o : it.options) {
      step_up = std::max(step_up, static_cast<double>(o.dr));
      step_down = std::max(step_down, -static_cast<double>(o.dr));
    }
  // Least cost to finish from net change d with the items from `next` on: k more moves
  // cost >= k a each; a state above S' needs ceil((d - S') / step_down) of them, one
  // below S' pays lambda u per unit it leaves unused, or moves to fill it.
  auto bound = [&](R d, double dc, std::size_t next) {
    const double rc = dc + lu * static_cast<double>(d);
    const double a = next < L ? items[next].alt : kInf;
    const double room = static_cast<double>(slack_eff - d);
    double rest;
    if (room < 0) {
      rest = step_down > 0 ? std::ceil(-room / step_down - 1e-9) * a : kInf;
    } else {
      rest = lu * room;
      if (step_up > 0 && a < kInf) {
        const double k_full = std::floor(room / step_up + 1e-9);
        rest = std::min(rest, k_full * a + lu * (room - k_full * step_up));
        rest = std::min(rest, (k_full + 1) * a);
      }
    }
    return rc + unusable + rest;
  };

  std::vector<std::vector<State<R>>> layers(L + 1);
  layers[0].push_back({R{0}, 0.0, -1, 0});
  std::vector<State<R>> cand;
  for (std::size_t l = 0; l < L; ++l) {
    cand.clear();
    const auto& prev = layers[l];
    for (std::size_t p = 0; p < prev.size(); ++p) {
      for (const auto& o : items[l].options) {
        const R d = prev[p].d + o.dr;
        const double dc = prev[p].dc + o.dc;
        if (static_cast<double>(d + min_rem[l + 1]) > static_cast<double>(slack) + rate_tol) continue;
        if (bound(d, dc, l + 1) >= inc_measure - tol) continue;
        cand.push_back({d, dc, static_cast<std::int32_t>(p), o.tier});
      }
    }
    std::sort(cand.begin(), cand.end(), [](const State<R>& a, const State<R>& b) {
      return a.d < b.d || (a.d == b.d && a.dc < b.dc);
    });
    auto& next = layers[l + 1];
    double best = kInf;
    for (const auto& st : cand) {
      if (st.dc < best) {  // Pareto: more rate must buy strictly less cost
        next.push_back(st);
        best = st.dc;
      }
    }
    out.states += static_cast<std::int64_t>(next.size());
    if (out.states > max_states) {
      out.completed = false;
      return out;
    }
    if (next.empty()) return out;
  }
  const auto& last = layers[L];
  std::int32_t best_idx = -1;
  double best_dc = incumbent_dc - tol;
  for (std::size_t k = 0; k < last.size(); ++k) {
    const bool fits = static_cast<double>(last[k].d) <= static_cast<double>(slack) + rate_tol;
    if (fits && last[k].dc < best_dc) {
      best_dc = last[k].dc;
      best_idx = static_cast<std::int32_t>(k);
    }
  }
  if (best_idx < 0) return out;
  out.improved = true;
  out.best_dc = last[static_cast<std::size_t>(best_idx)].dc;
  out.best_dr = static_cast<double>(last[static_cast<std::size_t>(best_idx)].d);
  std::int32_t idx = best_idx;
  for (std::size_t l = L; l-- > 0;) {
    const auto& st = layers[l + 1][static_cast<std::size_t>(idx)];
    if (st.tier != base_choice[static_cast<std::size_t>(items[l].i)]) out.mods.push_back({items[l].i, st.tier});
    idx = st.parent;
  }
  return out;
}

template DpOutcome core_dp<std::int64_t>(const Setup&, const std::vector<std::int64_t>&, const std::vector<std::uint8_t>&,
                                         double, double, std::int64_t, double, double, std::int64_t);
template DpOutcome core_dp<double>(const Setup&, const std::vector<std::int64_t>&, const std::vector<std::uint8_t>&,
                                   double, double, double, double, double, std::int64_t);

// ---- single moves and the gcd bound (integral ladders) ------------------------------

MoveScan scan_moves(const Setup& s, const std::vector<std::uint8_t>& base_choice, double lambda,
                    const std::vector<std::int64_t>* only) {
  MoveScan ms;
  const int m = s.geom.m;
  for (auto u : s.units.tier_units) ms.span = std::max(ms.span, u);
  const auto size = static_cast<std::size_t>(2 * ms.span + 1);
  ms.rc.assign(size, kInf);
  ms.dc.assign(size, 0.0);
  ms.item.assign(size, -1);
  ms.tier.assign(size, 0);
  std::vector<int> pos_of_tier(m);
  for (int k = 0; k < m; ++k) pos_of_tier[s.geom.order[k]] = k;
  std::vector<double> c(m), lr(m);
  std::vector<std::int64_t> units(m);
  for (int k = 0; k < m; ++k) {
    lr[k] = lambda * s.geom.rate[k];
    units[k] = s.units.tier_units[s.geom.order[k]];
  }
  const std::int64_t n = only ? static_cast<std::int64_t>(only->size()) : s.inst.items();
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t i = only ? (*only)[static_cast<std::size_t>(t)] : t;
    s.gather(i, c.data());
    const int kb = pos_of_tier[base_choice[static_cast<std::size_t>(i)]];
    const double vb = c[kb] + lr[kb];
    for (int k = 0; k < m; ++k) {
      if (k == kb) continue;
      const double rc = std::max(0.0, c[k] + lr[k] - vb);
      const auto slot = static_cast<std::size_t>(units[k] - units[kb] + ms.span);
      if (rc < ms.rc[slot]) {
        ms.rc[slot] = rc;
        ms.dc[slot] = c[k] - c[kb];
        ms.item[slot] = i;
        ms.tier[slot] = static_cast<std::uint8_t>(s.geom.order[k]);
      }
    }
  }
  return ms;
}

// A lower bound on objective(x) - L(lambda*) for every feasible x (integral ladders).
// x's measure t = sum_i rc_i + lambda u (S - d) is at least every reduced cost it uses, so
// its net change d is a multiple of g(t) = gcd{dr : cheapest move of size dr has rc <= t},
// hence S - d >= S mod g(t) and t >= h(t) = lambda u (S mod g(t)) (g = 0: no move, d = 0).
// h does not increase with t (g(t) only shrinks through divisors), so the least t with
// t >= h(t) bounds every solution's measure.
double gcd_gap_bound(const MoveScan& ms, std::int64_t slack, double lu) {
  if (slack < 0) return 0.0;
  std::vector<std::pair<double, std::int64_t>> events;
  for (std::int64_t dr = -ms.span; dr <= ms.span; ++dr) {
    const double rc = ms.rc[static_cast<std::size_t>(dr + ms.span)];
    if (dr != 0 && rc < kInf) events.push_back({rc, dr < 0 ? -dr : dr});
  }
  std::sort(events.begin(), events.end());
  auto h = [&](std::int64_t g) { return lu * static_cast<double>(g == 0 ? slack : slack % g); };
  std::int64_t g = 0;
  double t = 0;
  for (const auto& [rc, step] : events) {
    const double candidate = std::max(t, h(g));
    if (candidate < rc) return candidate;
    g = std::gcd(g, step);
    t = rc;
  }
  return std::max(t, h(g));
}

}  // namespace tierlab::exact_detail
