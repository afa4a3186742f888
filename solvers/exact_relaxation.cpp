// The exact solver's steps 1-2 (exact.hpp): lambda* by selection (a sampled bracket, one
// main pass over all items, a weighted quickselect on the upgrades inside the bracket)
// and the base choice with its reduced-cost keys; lagrangian_relaxation on top of it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "solvers/exact_detail.hpp"

namespace tierlab {
namespace exact_detail {

namespace {

// Weighted selection: e* with W(> e*) <= target < W(>= e*). Requires
// 0 <= target < total weight of v. Expected O(|v|) (random pivots, fixed seed).
double weighted_select(std::vector<Upgrade>& v, double target) {
  std::mt19937_64 rng(0x5eed);
  std::size_t lo = 0, hi = v.size();
  while (hi > lo) {
    const double p = v[lo + rng() % (hi - lo)].e;
    auto first = v.begin() + static_cast<std::ptrdiff_t>(lo), last = v.begin() + static_cast<std::ptrdiff_t>(hi);
    auto gt_end = std::partition(first, last, [p](const Upgrade& u) { return u.e > p; });
    auto eq_end = std::partition(gt_end, last, [p](const Upgrade& u) { return u.e == p; });
    double w_gt = 0, w_eq = 0;
    for (auto it = first; it != gt_end; ++it) w_gt += it->w;
    for (auto it = gt_end; it != eq_end; ++it) w_eq += it->w;
    if (target < w_gt) {
      hi = static_cast<std::size_t>(gt_end - v.begin());
    } else if (target < w_gt + w_eq) {
      return p;
    } else {
      target -= w_gt + w_eq;
      lo = static_cast<std::size_t>(eq_end - v.begin());
    }
  }
  // Only reachable through rounding of non-integral weights: the least efficient upgrade.
  double e_min = kInf;
  for (const auto& u : v) e_min = std::min(e_min, u.e);
  return e_min;
}

// A sample of upgrades (contiguous blocks at evenly spaced starts) that brackets lambda*:
// with the sample's critical upgrade at rank `crit` (in decreasing efficiency, at the
// capacity scaled to the sample), the bracket of half-width d is the efficiencies at
// ranks crit + d (lo) and crit - d (hi), found by nth_element.
struct Bracket {
  std::vector<Upgrade> sample;
  std::int64_t taken = 0;  // items sampled
  double crit = 0;
  double delta = 0;  // half-width of the bracket in sample ranks
  double rank_value(double rank) {
    auto nth = sample.begin() + static_cast<std::ptrdiff_t>(rank);
    std::nth_element(sample.begin(), nth, sample.end(), [](const Upgrade& a, const Upgrade& b) { return a.e > b.e; });
    return nth->e;
  }
  void at(double d, double& lo, double& hi) {
    hi = crit - d >= 0 ? rank_value(crit - d) : kInf;
    lo = crit + d < static_cast<double>(sample.size()) ? rank_value(crit + d) : -kInf;
  }
  // Expected fraction of all upgrades inside a bracket of half-width d.
  double fraction(double d) const { return sample.empty() ? 1.0 : std::min(1.0, 2 * d / static_cast<double>(sample.size())); }
};

Bracket sample_bracket(const Setup& s, const ExactOptions& opt) {
  Bracket br;
  const std::int64_t n_items = s.inst.items();
  const std::int64_t want = std::min(opt.sample_items, n_items);
  const std::int64_t blocks = std::max<std::int64_t>(1, std::min<std::int64_t>(512, want / 64));
  const std::int64_t len = std::max<std::int64_t>(1, want / blocks);
  std::int64_t taken = 0;
  const int m = s.geom.m;
  std::vector<double> c(m), eff(m);
  std::vector<int> hull(m);
  double w_total = 0;
  br.sample.reserve(static_cast<std::size_t>(want) * static_cast<std::size_t>(m - 1));
  for (std::int64_t b = 0; b < blocks; ++b) {
    const auto start = static_cast<std::int64_t>((static_cast<long double>(b) * n_items) / blocks);
    const std::int64_t end = std::min(n_items, start + len);
    for (std::int64_t i = start; i < end; ++i, ++taken) {
      s.gather(i, c.data());
      const int n = lower_hull_kernel(s.geom, c.data(), hull.data(), eff.data());
      for (int k = 1; k < n; ++k) {
        br.sample.push_back({eff[k], s.cap_rate[hull[k]] - s.cap_rate[hull[k - 1]]});
        w_total += br.sample.back().w;
      }
    }
  }
  br.taken = taken;
  br.delta = 4.0 * std::sqrt(static_cast<double>(br.sample.size())) + 32.0;
  const double target = s.capacity * static_cast<double>(taken) / static_cast<double>(n_items);
  if (br.sample.empty() || target >= w_total) {
    br.crit = static_cast<double>(br.sample.size());
    return br;
  }
  std::vector<Upgrade> copy = br.sample;
  const double e_crit = weighted_select(copy, target);
  std::size_t above = 0;
  for (const auto& u : br.sample) above += u.e > e_crit ? 1 : 0;
  br.crit = static_cast<double>(above);
  return br;
}

// The fast path's vectors: W doubles in the machine's widest register (AVX-512: 8,
// AVX: 4, otherwise 2), with GCC/Clang vector extensions. Wider logical vectors than
// the hardware has are split by the compiler badly (about 5x slower with AVX2 than
// native 8-lane AVX-512 on 8,388,608 items; issue 21). Accumulators are kept as eight
// logical lanes whatever W is, so every sum is added in the same order on every machine.
#if defined(__AVX512F__)
constexpr int kLanes = 8;
#elif defined(__AVX__)
constexpr int kLanes = 4;
#else
constexpr int kLanes = 2;
#endif
typedef double VW __attribute__((vector_size(8 * kLanes)));
typedef std::int64_t MW __attribute__((vector_size(8 * kLanes)));
constexpr int kParts = 8 / kLanes;  // native vectors per eight logical lanes
struct Acc8 {                       // eight logical lanes: lane h * kLanes + j is part[h][j]
  VW part[kParts] = {};
  double sum() const {
    double s = 0;
    for (int h = 0; h < kParts; ++h)
      for (int j = 0; j < kLanes; ++j) s += part[h][j];
    return s;
  }
  double max(double m) const {
    for (int h = 0; h < kParts; ++h)
      for (int j = 0; j < kLanes; ++j) m = std::max(m, part[h][j]);
    return m;
  }
};

// What one main pass over all items gathers for a bracket [lo, hi] of lambda*.
struct MainScan {
  double lo = 0, hi = 0, lo_c = 0;  // bracket; lo_c = max(lo, 0)
  double w_above = 0, w_total = 0;  // upgrade weight with e > hi; all upgrade weight
  std::vector<Upgrade> window;      // upgrades with lo <= e <= hi
  std::vector<std::int64_t> items;  // items owning a window upgrade (decided after lambda*)
  std::vector<double> costs;        // their costs, sorted-rate order, m per item
  CompensatedSum fixed_cost;           // other items: sum c at base
  double fixed_rate_bits = 0;       // ... sum (r - r_min) at base, bits
  double fixed_units = 0;           // ... in capacity units
  double scale = 0;                 // max |c| at base
};

// One item through the general path: its hull; either copied out (an upgrade inside
// the bracket) or decided (base vertex = upgrades with e > hi, reduced-cost bound over
// the bracket: c_k - c_b + lambda (r_k - r_b) is smallest at lo when r_k > r_b, at hi otherwise).
inline void general_item(const Setup& s, std::int64_t i, const double* c, Relaxed& r, MainScan& out) {
  const int m = s.geom.m;
  double eff[256];
  int hull[256] = {0};
  const int n = lower_hull_kernel(s.geom, c, hull, eff);
  int b = 0;
  bool in_window = false;
  for (int k = 1; k < n; ++k) {
    const double w = s.cap_rate[hull[k]] - s.cap_rate[hull[k - 1]];
    out.w_total += w;
    if (eff[k] > out.hi) {
      out.w_above += w;
      b = k;
    } else if (eff[k] >= out.lo) {
      out.window.push_back({eff[k], w});
      in_window = true;
    }
  }
  if (in_window) {
    out.items.push_back(i);
    out.costs.insert(out.costs.end(), c, c + m);
    return;
  }
  const int kb = hull[b];
  const double cb = c[kb], rb = s.geom.rate[kb];
  double alt = kInf;
  for (int k = 0; k < m; ++k) {
    if (k == kb) continue;
    const double dr = s.geom.rate[k] - rb;
    alt = std::min(alt, (c[k] - cb) + (dr > 0 ? out.lo_c : out.hi) * dr);
  }
  out.fixed_cost.add(cb);
  out.fixed_rate_bits += rb;
  out.fixed_units += s.cap_rate[kb];
  out.scale = std::max(out.scale, std::fabs(cb));
  r.choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(s.geom.order[kb]);
  r.alt_key[static_cast<std::size_t>(i)] = rc_key(alt);
}

// The main pass. Items are taken in blocks; a branch-free loop (vectorised) handles the
// common item whose raw ladder is already strictly decreasing and strictly convex (so
// its hull is every tier and its smallest other reduced cost is at a neighbour of the
// base vertex); any other item, and every item with an upgrade inside the bracket, goes
// through general_item.
template <int M>
void main_pass(const Setup& s, double lo, double hi, Relaxed& r, MainScan& out) {
  constexpr int kBlock = 256;
  out.lo = lo;
  out.hi = hi;
  out.lo_c = std::max(lo, 0.0);
  const double lo_c = out.lo_c;
  const std::int64_t N = s.inst.items();
  const double* data = s.inst.cost.data;
  const std::int64_t stride = s.inst.cost.item_stride;
  double inv[M], dr[M], rate[M], cap[M], dcap[M];
  int order[M];
  for (int k = 0; k < M; ++k) {
    rate[k] = s.geom.rate[k];
    cap[k] = s.cap_rate[k];
    order[k] = s.geom.order[k];
    inv[k] = k > 0 ? s.geom.inverse_step(k - 1, k) : 0.0;
    dr[k] = k > 0 ? rate[k] - rate[k - 1] : 0.0;
    dcap[k] = k > 0 ? cap[k] - cap[k - 1] : 0.0;
  }
  alignas(64) double cbuf[M][kBlock];
  alignas(64) double alt_b[kBlock];
  alignas(64) double b_b[kBlock];
  alignas(64) std::int64_t ok_b[kBlock];
  double item[M];
  for (std::int64_t i0 = 0; i0 < N; i0 += kBlock) {
    const int L = static_cast<int>(std::min<std::int64_t>(kBlock, N - i0));
    for (int k = 0; k < M; ++k) {
      const double* src = data + s.offset[k] + i0 * stride;
      if (stride == 1)
        std::memcpy(cbuf[k], src, sizeof(double) * static_cast<std::size_t>(L));
      else
        for (int t = 0; t < L; ++t) cbuf[k][t] = src[t * stride];
      if (s.inst.cost.allowed != nullptr) {
        const std::uint8_t* allowed = s.inst.cost.allowed + i0;
        const int bit = order[k];
        for (int t = 0; t < L; ++t)
          if (((allowed[t] >> bit) & 1) == 0) cbuf[k][t] = s.inst.cost.penalty;
      }
    }
    // Eight items per step, kParts native vectors of kLanes items each.
    Acc8 w_above, w_total, units, rbits, cost_sum, scale_v;
    const int L8 = L - L % 8;
    for (int t8 = 0; t8 < L8; t8 += 8) {
      for (int h = 0; h < kParts; ++h) {
        const int t = t8 + h * kLanes;
        VW c[M], e[M];
        for (int k = 0; k < M; ++k) std::memcpy(&c[k], &cbuf[k][t], sizeof(VW));
        MW ok = (c[0] - c[0]) == 0.0;  // finite
        e[0] = c[0] * 0.0 + kInf;
        for (int k = 1; k < M; ++k) {
          e[k] = (c[k - 1] - c[k]) * inv[k];
          ok &= ((c[k] - c[k]) == 0.0) & (c[k] < c[k - 1]) & (e[k] < e[k - 1]);
        }
        VW b = {};
        MW win = {};
        for (int k = 1; k < M; ++k) {
          b = e[k] > hi ? b + 1.0 : b;
          win |= (e[k] <= hi) & (e[k] >= lo);
        }
        VW cb = c[0], rb = {}, ub = {}, down = c[0] * 0.0 + kInf, up = down, wa = {}, wt = {};
        for (int k = 1; k < M; ++k) {
          const MW is_b = b == static_cast<double>(k);
          const MW is_next = b == static_cast<double>(k - 1);
          cb = is_b ? c[k] : cb;
          rb = is_b ? rb * 0.0 + rate[k] : rb;
          ub = is_b ? ub * 0.0 + cap[k] : ub;
          down = is_b ? (e[k] - hi) * dr[k] : down;
          up = is_next ? (lo_c - e[k]) * dr[k] : up;
          wa = b >= static_cast<double>(k) ? wa + dcap[k] : wa;
          wt += dcap[k];
        }
        const MW fast = ok & ~win;
        const VW zero = {};
        w_above.part[h] += fast ? wa : zero;
        w_total.part[h] += fast ? wt : zero;
        units.part[h] += fast ? ub : zero;
        rbits.part[h] += fast ? rb : zero;
        cost_sum.part[h] += fast ? cb : zero;
        const VW acb = cb < 0.0 ? -cb : cb;
        scale_v.part[h] = (fast & (acb > scale_v.part[h])) ? acb : scale_v.part[h];
        const VW alt = down < up ? down : up;
        std::memcpy(&ok_b[t], &fast, sizeof fast);
        std::memcpy(&b_b[t], &b, sizeof b);
        std::memcpy(&alt_b[t], &alt, sizeof alt);
      }
    }
    for (int t = L8; t < L; ++t) ok_b[t] = 0;  // the tail goes through general_item
    out.w_above += w_above.sum();
    out.w_total += w_total.sum();
    out.fixed_units += units.sum();
    out.fixed_rate_bits += rbits.sum();
    out.fixed_cost.add(cost_sum.sum());
    out.scale = scale_v.max(out.scale);
    for (int t = 0; t < L; ++t) {
      const std::int64_t i = i0 + t;
      if (ok_b[t]) {
        r.choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(order[static_cast<int>(b_b[t])]);
        r.alt_key[static_cast<std::size_t>(i)] = rc_key(alt_b[t]);
      } else {
        for (int k = 0; k < M; ++k) item[k] = cbuf[k][t];
        bool finite = true;
        for (int k = 0; k < M; ++k) finite &= std::isfinite(item[k]);
        if (!finite) s.gather(i, item);  // throws, naming the tier
        general_item(s, i, item, r, out);
      }
    }
  }
}

void main_pass_general(const Setup& s, double lo, double hi, Relaxed& r, MainScan& out) {
  out.lo = lo;
  out.hi = hi;
  out.lo_c = std::max(lo, 0.0);
  std::vector<double> c(s.geom.m);
  for (std::int64_t i = 0; i < s.inst.items(); ++i) {
    s.gather(i, c.data());
    general_item(s, i, c.data(), r, out);
  }
}

void main_pass_dispatch(const Setup& s, double lo, double hi, Relaxed& r, MainScan& out) {
  switch (s.geom.m) {
    case 2: return main_pass<2>(s, lo, hi, r, out);
    case 3: return main_pass<3>(s, lo, hi, r, out);
    case 4: return main_pass<4>(s, lo, hi, r, out);
    case 5: return main_pass<5>(s, lo, hi, r, out);
    case 6: return main_pass<6>(s, lo, hi, r, out);
    case 7: return main_pass<7>(s, lo, hi, r, out);
    case 8: return main_pass<8>(s, lo, hi, r, out);
    default: return main_pass_general(s, lo, hi, r, out);
  }
}

// Budget affords every cheapest tier: the last hull vertex of every item.
void trivial_pass(const Setup& s, Relaxed& r) {
  const int m = s.geom.m;
  std::vector<double> c(m), eff(m);
  std::vector<int> hull(m);
  fill_trivial(s, r, [&](std::int64_t i) {
    s.gather(i, c.data());
    const int kb = hull[lower_hull_kernel(s.geom, c.data(), hull.data(), eff.data()) - 1];
    return std::pair<int, double>(kb, c[kb]);
  });
}

}  // namespace

Relaxed relax(const Setup& s, const ExactOptions& opt) {
  Relaxed r;
  const std::int64_t N = s.inst.items();
  const int m = s.geom.m;
  r.choice.resize(static_cast<std::size_t>(N));
  r.alt_key.resize(static_cast<std::size_t>(N));
  const double T = s.capacity;
  double lo = -kInf, hi = kInf;
  Bracket br;
  const bool sampled = N > opt.full_selection_max_items;
  if (sampled) {
    br = sample_bracket(s, opt);
    if (!br.sample.empty()) br.at(br.delta, lo, hi);
  }
  for (int attempt = 0;; ++attempt) {
    MainScan scan;
    if (sampled) {  // expected sizes (1.5x margin) so that the window vectors do not regrow
      const double f = std::isfinite(lo) && std::isfinite(hi) ? std::min(1.0, 1.5 * br.fraction(br.delta)) : 1.0;
      const double upgrades = static_cast<double>(br.sample.size()) * static_cast<double>(N) /
                              static_cast<double>(std::max<std::int64_t>(1, br.taken));
      const auto expect = static_cast<std::size_t>(f * upgrades) + 64;
      scan.window.reserve(expect);
      scan.items.reserve(std::min(expect, static_cast<std::size_t>(N)));
      scan.costs.reserve(std::min(expect, static_cast<std::size_t>(N)) * static_cast<std::size_t>(m));
    }
    main_pass_dispatch(s, lo, hi, r, scan);
    ++r.passes;
    if (scan.w_total <= T) {
      trivial_pass(s, r);
      ++r.passes;
      return r;
    }
    double w_win = 0;
    for (const auto& u : scan.window) w_win += u.w;
    const bool below_hi = scan.w_above <= T;
    const bool above_lo = T < scan.w_above + w_win;
    if (below_hi && above_lo) {
      r.window = static_cast<std::int64_t>(scan.window.size());
      r.window_items = static_cast<std::int64_t>(scan.items.size());
      const double lambda = weighted_select(scan.window, T - scan.w_above);
      r.lambda = lambda;
      // Decide the items of the bracket at lambda*: exact reduced costs.
      std::vector<double> eff(m), lr(m);
      std::vector<int> hull(m);
      for (int k = 0; k < m; ++k) lr[k] = lambda * s.geom.rate[k];
      CompensatedSum lagr, obj;
      double units = 0, scale = scan.scale;
      for (std::size_t t = 0; t < scan.items.size(); ++t) {
        const double* c = scan.costs.data() + t * static_cast<std::size_t>(m);
        const int n = lower_hull_kernel(s.geom, c, hull.data(), eff.data());
        int b = 0;
        while (b + 1 < n && eff[b + 1] > lambda) ++b;
        const int kb = hull[b];
        double alt = kInf;
        lagr.add(base_lagrangian(c, lr.data(), m, kb, alt));
        obj.add(c[kb]);
        units += s.cap_rate[kb];
        scale = std::max(scale, std::fabs(c[kb]));
        const auto i = static_cast<std::size_t>(scan.items[t]);
        r.choice[i] = static_cast<std::uint8_t>(s.geom.order[kb]);
        r.alt_key[i] = rc_key(alt);
      }
      r.lagr_sum = scan.fixed_cost.value_extended() + static_cast<long double>(lambda) * scan.fixed_rate_bits + lagr.value_extended();
      r.base_obj = scan.fixed_cost.value_extended() + obj.value_extended();
      r.base_rate = scan.fixed_units + units;
      r.scale = scale + lambda * s.geom.rate.back();
      return r;
    }
    // The bracket missed (sampling noise): widen on the side that failed.
    br.delta *= 8;
    double nlo = -kInf, nhi = kInf;
    if (!br.sample.empty() && attempt < 3) br.at(br.delta, nlo, nhi);
    if (!below_hi) {  // lambda* > hi
      lo = hi;
      hi = nhi > lo ? nhi : kInf;
    } else {  // lambda* < lo
      hi = lo;
      lo = nlo < hi ? nlo : -kInf;
    }
  }
}
}  // namespace exact_detail

using exact_detail::relax;
using exact_detail::Relaxed;
using exact_detail::Setup;

LagrangianRelaxation finish_heuristic(const MckpInstance& inst, std::vector<std::uint8_t> choice, long long iterations,
                                      bool bound, MckpResult& res) {
  res.choice = std::move(choice);
  const Evaluation ev = evaluate(inst, res.choice);
  res.objective = ev.objective;
  res.rate_used = ev.rate_used;
  res.iterations = iterations;
  res.set_feasible(FeasibleReason::Heuristic);
  LagrangianRelaxation lr;
  if (!bound) return lr;
  lr = lagrangian_relaxation(inst);
  res.lp_bound = lr.bound;
  res.lambda = lr.lambda;
  res.lower_bound = std::min(lr.bound, res.objective);
  res.gap = res.objective - res.lower_bound;
  res.relative_gap = res.gap / std::max(std::fabs(res.objective), 1e-300);
  return lr;
}

LagrangianRelaxation lagrangian_relaxation(const MckpInstance& inst, const ExactOptions& opt) {
  inst.validate();
  opt.validate();
  LagrangianRelaxation out;
  const Setup s(inst);
  if (s.infeasible()) {
    out.status = SolveStatus::Infeasible;
    return out;
  }
  if (inst.items() == 0) {
    out.status = SolveStatus::Trivial;
    return out;
  }
  const Relaxed r = relax(s, opt);
  out.selection_passes = r.passes;
  out.upgrades_in_window = r.window;
  out.status = r.trivial ? SolveStatus::Trivial : SolveStatus::Feasible;
  out.lambda = r.lambda;
  out.bound = static_cast<double>(r.lagr_sum - static_cast<long double>(out.lambda) * s.capacity_bits);
  out.base_objective = static_cast<double>(r.base_obj);
  out.base_slack_bits = (s.capacity - r.base_rate) * s.unit_bits;
  return out;
}

}  // namespace tierlab
