// Exact solver: Lagrangian relaxation by selection, then a core Pareto DP that closes
// the integer gap with a reduced-cost certificate (exact.hpp states the maths).
#include "solvers/exact.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <type_traits>

#include "model/error.hpp"

namespace tierlab {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] __attribute__((noinline)) void bad_cost(std::int64_t i, int j, double v) { throw_nonfinite_cost(i, j, v); }

// Everything the passes share: the ladder in rate order, the per-position rate in
// "capacity units" (integer units when the ladder is on the 1/64 grid, else bits), and
// the cost offsets of each sorted position for the strided view.
struct Setup {
  const MckpInstance& inst;
  LadderGeometry geom;
  RateUnits units;
  std::vector<double> cap_rate;        // rate[k] in capacity units
  std::vector<std::int64_t> offset;    // order[k] * tier_stride
  double capacity = 0;                 // T: capacity above N r_min, in capacity units
  double capacity_bits = 0;            // T in bits (K u when integral: the tighter, equivalent form)
  double unit_bits = 1;                // bits per capacity unit

  explicit Setup(const MckpInstance& in) : inst(in), geom(in.rates), units(rate_units(in)) {
    const int m = geom.m;
    cap_rate.resize(m);
    offset.resize(m);
    for (int k = 0; k < m; ++k) {
      offset[k] = static_cast<std::int64_t>(geom.order[k]) * inst.cost.tier_stride;
      cap_rate[k] = units.integral ? static_cast<double>(units.tier_units[geom.order[k]]) : geom.rate[k];
    }
    if (units.integral) {
      unit_bits = units.unit;
      capacity = static_cast<double>(units.capacity_units);
      capacity_bits = capacity * unit_bits;
    } else {
      capacity = units.capacity_bits + 1e-9 * std::max(1.0, std::fabs(units.budget_bits));
      capacity_bits = capacity;
    }
  }
  bool infeasible() const { return units.integral ? units.capacity_units < 0 : capacity < 0; }

  // One item's costs in sorted-rate order; throws on a non-finite cost.
  void gather(std::int64_t i, double* c) const {
    const double* row = inst.cost.data + i * inst.cost.item_stride;
    bool ok = true;
    for (int k = 0; k < geom.m; ++k) {
      c[k] = row[offset[k]];
      ok &= std::isfinite(c[k]);
    }
    if (!ok)
      for (int k = 0; k < geom.m; ++k)
        if (!std::isfinite(c[k])) bad_cost(i, geom.order[k], c[k]);
  }
};

struct Upgrade {
  double e;  // efficiency, cost per bit
  double w;  // rate step in capacity units
};

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

// Reduced-cost keys: the top 16 bits of max(x, 0) as a double (sign, exponent, 4
// mantissa bits). Truncation rounds down, so key_value(rc_key(x)) <= x: a conservative
// key for the core test rc < tau, at 2 bytes per item.
std::uint16_t rc_key(double x) {
  x = x > 0 ? x : 0.0;
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return static_cast<std::uint16_t>(b >> 48);
}
double key_value(std::uint32_t key) {
  const std::uint64_t b = static_cast<std::uint64_t>(key) << 48;
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// The relaxation (steps 1-2 of exact.hpp) and what step 3 needs: the base choice, the
// bound, and per item a lower bound on the smallest reduced cost of any other tier
// (exact for items with an upgrade efficiency inside the bracket of lambda*, a bound
// over the bracket [lo, hi] for the others).
struct Relaxed {
  bool trivial = false;
  double lambda = 0;
  std::vector<std::uint8_t> choice;
  std::vector<std::uint16_t> alt_key;  // rc_key of the smallest reduced cost of another tier
  long double lagr_sum = 0;            // sum_i min_j (c_ij + lambda (r_j - r_min))
  long double base_obj = 0;            // sum_i c at the base choice
  double base_rate = 0;                // sum_i rate at base, capacity units
  double scale = 0;                    // max |c| at base + lambda r_max (rounding scale)
  int passes = 0;
  std::int64_t window = 0;        // upgrades kept in memory for the selection
  std::int64_t window_items = 0;  // items decided after lambda*
};

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

double weighted_select(std::vector<Upgrade>& v, double target);

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

// Eight doubles and their comparison mask (GCC/Clang vector extensions).
typedef double V8 __attribute__((vector_size(64)));
typedef std::int64_t M8 __attribute__((vector_size(64)));
inline double hsum(const V8& v) {
  double s = 0;
  for (int l = 0; l < 8; ++l) s += v[l];
  return s;
}

// Neumaier's compensated sum (the base objective of millions of items to ~1 ulp).
struct Compensated {
  double sum = 0, carry = 0;
  void add(double x) {
    const double t = sum + x;
    carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
  }
  long double value() const { return static_cast<long double>(sum) + carry; }
};

// What one main pass over all items gathers for a bracket [lo, hi] of lambda*.
struct MainScan {
  double lo = 0, hi = 0, lo_c = 0;  // bracket; lo_c = max(lo, 0)
  double w_above = 0, w_total = 0;  // upgrade weight with e > hi; all upgrade weight
  std::vector<Upgrade> window;      // upgrades with lo <= e <= hi
  std::vector<std::int64_t> items;  // items owning a window upgrade (decided after lambda*)
  std::vector<double> costs;        // their costs, sorted-rate order, m per item
  Compensated fixed_cost;           // other items: sum c at base
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
    }
    // Eight items per step in GCC vector extensions (AVX-512, 2 x AVX2 or 4 x SSE2).
    V8 w_above = {}, w_total = {}, units = {}, rbits = {}, cost_sum = {}, scale_v = {};
    const int L8 = L - L % 8;
    for (int t = 0; t < L8; t += 8) {
      V8 c[M], e[M];
      for (int k = 0; k < M; ++k) std::memcpy(&c[k], &cbuf[k][t], sizeof(V8));
      M8 ok = (c[0] - c[0]) == 0.0;  // finite
      e[0] = c[0] * 0.0 + kInf;
      for (int k = 1; k < M; ++k) {
        e[k] = (c[k - 1] - c[k]) * inv[k];
        ok &= ((c[k] - c[k]) == 0.0) & (c[k] < c[k - 1]) & (e[k] < e[k - 1]);
      }
      V8 b = {};
      M8 win = {};
      for (int k = 1; k < M; ++k) {
        b = e[k] > hi ? b + 1.0 : b;
        win |= (e[k] <= hi) & (e[k] >= lo);
      }
      V8 cb = c[0], rb = {}, ub = {}, down = c[0] * 0.0 + kInf, up = down, wa = {}, wt = {};
      for (int k = 1; k < M; ++k) {
        const M8 is_b = b == static_cast<double>(k);
        const M8 is_next = b == static_cast<double>(k - 1);
        cb = is_b ? c[k] : cb;
        rb = is_b ? rb * 0.0 + rate[k] : rb;
        ub = is_b ? ub * 0.0 + cap[k] : ub;
        down = is_b ? (e[k] - hi) * dr[k] : down;
        up = is_next ? (lo_c - e[k]) * dr[k] : up;
        wa = b >= static_cast<double>(k) ? wa + dcap[k] : wa;
        wt += dcap[k];
      }
      const M8 fast = ok & ~win;
      const V8 zero = {};
      w_above += fast ? wa : zero;
      w_total += fast ? wt : zero;
      units += fast ? ub : zero;
      rbits += fast ? rb : zero;
      cost_sum += fast ? cb : zero;
      const V8 acb = cb < 0.0 ? -cb : cb;
      scale_v = (fast & (acb > scale_v)) ? acb : scale_v;
      const V8 alt = down < up ? down : up;
      std::memcpy(&ok_b[t], &fast, sizeof fast);
      std::memcpy(&b_b[t], &b, sizeof b);
      std::memcpy(&alt_b[t], &alt, sizeof alt);
    }
    for (int t = L8; t < L; ++t) ok_b[t] = 0;  // the tail goes through general_item
    double scale = out.scale;
    for (int l = 0; l < 8; ++l) scale = std::max(scale, scale_v[l]);
    out.w_above += hsum(w_above);
    out.w_total += hsum(w_total);
    out.fixed_units += hsum(units);
    out.fixed_rate_bits += hsum(rbits);
    out.fixed_cost.add(hsum(cost_sum));
    out.scale = scale;
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
  Compensated obj;
  double rate = 0;
  for (std::int64_t i = 0; i < s.inst.items(); ++i) {
    s.gather(i, c.data());
    const int n = lower_hull_kernel(s.geom, c.data(), hull.data(), eff.data());
    const int kb = hull[n - 1];
    obj.add(c[kb]);
    rate += s.cap_rate[kb];
    r.choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(s.geom.order[kb]);
  }
  r.trivial = true;
  r.lambda = 0;
  r.lagr_sum = r.base_obj = obj.value();
  r.base_rate = rate;
}

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
      Compensated lagr, obj;
      double units = 0, scale = scan.scale;
      for (std::size_t t = 0; t < scan.items.size(); ++t) {
        const double* c = scan.costs.data() + t * static_cast<std::size_t>(m);
        const int n = lower_hull_kernel(s.geom, c, hull.data(), eff.data());
        int b = 0;
        while (b + 1 < n && eff[b + 1] > lambda) ++b;
        const int kb = hull[b];
        const double vb = c[kb] + lr[kb];
        double vmin = vb, alt = kInf;
        for (int k = 0; k < m; ++k) {
          if (k == kb) continue;
          const double v = c[k] + lr[k];
          vmin = std::min(vmin, v);
          alt = std::min(alt, v - vb);
        }
        lagr.add(vmin);
        obj.add(c[kb]);
        units += s.cap_rate[kb];
        scale = std::max(scale, std::fabs(c[kb]));
        const auto i = static_cast<std::size_t>(scan.items[t]);
        r.choice[i] = static_cast<std::uint8_t>(s.geom.order[kb]);
        r.alt_key[i] = rc_key(alt);
      }
      r.lagr_sum = scan.fixed_cost.value() + static_cast<long double>(lambda) * scan.fixed_rate_bits + lagr.value();
      r.base_obj = scan.fixed_cost.value() + obj.value();
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

// ---- core Pareto DP ---------------------------------------------------------------

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

struct DpOutcome {
  bool completed = false;   // false: state limit hit
  bool improved = false;    // found a solution better than the incumbent
  double best_dc = 0;       // its cost change vs base
  double best_dr = 0;       // its rate change vs base (capacity units)
  std::vector<std::pair<std::int64_t, std::uint8_t>> mods;  // (item, tier) differing from base
  std::int64_t states = 0;
};

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

// ---- single moves and the gcd bound (integral ladders) ------------------------------

// For every net rate change dr (capacity units) of one item away from its base tier:
// the cheapest such move over all items, or over `only` when given (its reduced cost,
// cost change, item, tier).
struct MoveScan {
  std::int64_t span = 0;  // dr in [-span, span], index dr + span
  std::vector<double> rc, dc;
  std::vector<std::int64_t> item;
  std::vector<std::uint8_t> tier;
};

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

// Histogram of the reduced-cost keys (built only when the core DP runs).
std::vector<std::int64_t> key_histogram(const std::vector<std::uint16_t>& keys) {
  std::vector<std::int64_t> h(std::size_t{1} << 16, 0);
  for (auto k : keys) ++h[k];
  return h;
}
// Smallest tau (a key edge) with at least `count` items whose key value is below it.
double tau_for_count(const std::vector<std::int64_t>& hist, std::int64_t count) {
  std::int64_t acc = 0;
  for (std::uint32_t k = 0; k + 1 < hist.size(); ++k) {
    acc += hist[k];
    if (acc >= count) return key_value(k + 1);
  }
  return kInf;
}
// Number of items whose key value is below tau (these form the core for tau).
std::int64_t count_below(const std::vector<std::int64_t>& hist, double tau) {
  std::int64_t acc = 0;
  for (std::uint32_t k = 0; k < hist.size() && key_value(k) < tau; ++k) acc += hist[k];
  return acc;
}

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

}  // namespace

void ExactOptions::validate() const {
  auto positive = [](std::int64_t v, const char* name) {
    if (v < 1) throw InputError(std::string("ExactOptions.") + name + " = " + std::to_string(v) + " must be >= 1.");
  };
  positive(max_core_items, "max_core_items");
  positive(max_dp_states, "max_dp_states");
  positive(initial_core_items, "initial_core_items");
  positive(max_rounds, "max_rounds");
  if (full_selection_max_items < 0)
    throw InputError("ExactOptions.full_selection_max_items = " + std::to_string(full_selection_max_items) +
                     " must be >= 0.");
  if (sample_items < 1)
    throw InputError("ExactOptions.sample_items = " + std::to_string(sample_items) + " must be >= 1.");
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

MckpResult solve_exact(const MckpInstance& inst, const ExactOptions& opt) {
  const auto t0 = Clock::now();
  inst.validate();
  opt.validate();
  MckpResult res;
  res.solver = "exact";
  res.items = inst.items();
  const Setup s(inst);
  res.rate_budget = s.units.budget_bits;
  const double n_items = static_cast<double>(inst.items());

  if (s.infeasible()) {
    res.status = SolveStatus::Infeasible;
    res.message = "The budget B = " + fmt(inst.budget) + " bits per element is below the smallest rate r_min = " +
                  fmt(s.units.r_min) + " bits: no allocation fits.";
    res.seconds = seconds_since(t0);
    return res;
  }
  if (inst.items() == 0) {
    res.status = SolveStatus::Trivial;
    res.objective = res.lower_bound = res.lp_bound = 0;
    res.gap = res.relative_gap = 0;
    res.message = "No items: the empty allocation is optimal.";
    res.seconds = seconds_since(t0);
    return res;
  }

  // Steps 1-2: lambda* and the base pass.
  const auto t_sel = Clock::now();
  Relaxed bp = relax(s, opt);
  const double sel_s = seconds_since(t_sel);
  res.iterations = bp.passes;
  const double lambda = bp.lambda;
  res.lambda = lambda;
  const double lb = static_cast<double>(bp.lagr_sum - static_cast<long double>(lambda) * s.capacity_bits);
  res.lp_bound = lb;
  const double base_obj = static_cast<double>(bp.base_obj);
  const double rmin_bits = s.units.r_min * n_items;

  auto finish = [&](SolveStatus st, double obj, double rate_cap_units, std::string msg) {
    res.status = st;
    res.objective = obj;
    res.rate_used = rate_cap_units * s.unit_bits + rmin_bits;
    if (st == SolveStatus::Optimal || st == SolveStatus::Trivial) {
      res.lower_bound = obj;
      res.gap = 0;
      res.relative_gap = 0;
    } else {
      res.lower_bound = std::min(lb, obj);
      res.gap = obj - res.lower_bound;
      res.relative_gap = res.gap / std::max(std::fabs(obj), 1e-300);
    }
    std::ostringstream os;
    os << msg << " [relaxation " << fmt(sel_s) << " s (" << bp.passes << " pass(es), " << bp.window
       << " upgrades and " << bp.window_items << " items in the lambda* bracket), total " << fmt(seconds_since(t0))
       << " s]";
    res.message = os.str();
    res.choice = std::move(bp.choice);
    res.seconds = seconds_since(t0);
    return res;
  };

  if (bp.trivial)
    return finish(SolveStatus::Trivial, base_obj, bp.base_rate,
                  "The budget affords every item its cheapest tier (" + fmt(bp.base_rate * s.unit_bits + rmin_bits) +
                      " of " + fmt(s.units.budget_bits) + " bits): optimal.");

  // Step 3: close the integer gap on a core.
  const double tol = 1e-12 * (std::fabs(lb) + std::fabs(base_obj) + bp.scale) + 1e-300;
  double inc_dc = 0;      // incumbent's cost change vs base
  double inc_dr = 0;      // its rate change (capacity units)
  std::vector<std::pair<std::int64_t, std::uint8_t>> inc_mods;
  const double slack = s.capacity - bp.base_rate;  // >= 0 up to rounding
  auto gap_of = [&](double dc) { return (base_obj + dc) - lb; };

  auto apply = [&](double dc, double dr) {
    for (const auto& [i, t] : inc_mods) bp.choice[static_cast<std::size_t>(i)] = t;
    return std::pair<double, double>{base_obj + dc, bp.base_rate + dr};
  };

  if (gap_of(inc_dc) <= tol && slack >= 0) {
    auto [obj, rate] = apply(inc_dc, inc_dr);
    return finish(SolveStatus::Optimal, obj, rate,
                  "The LP optimum is integral (objective equals the Lagrangian bound): optimal.");
  }

  const std::vector<std::int64_t> hist = key_histogram(bp.alt_key);
  // Cheapest single moves: a better incumbent, and the gcd bound on every solution's gap.
  // Moves with rc >= the base gap cannot matter, so only items whose key is below it are
  // scanned (all items when they are many).
  double gap_floor = 0;  // proven: objective(x) - LP bound >= gap_floor for every feasible x
  if (s.units.integral) {
    const double gap0 = gap_of(inc_dc);
    const double gap0_eff = gap0 * (1 + 1e-9) + 64 * tol;
    std::vector<std::int64_t> candidates;
    const bool subset = count_below(hist, gap0_eff) <= inst.items() / 4;
    if (subset)
      for (std::int64_t i = 0; i < inst.items(); ++i)
        if (key_value(bp.alt_key[static_cast<std::size_t>(i)]) < gap0_eff) candidates.push_back(i);
    const MoveScan ms = scan_moves(s, bp.choice, lambda, subset ? &candidates : nullptr);
    ++res.iterations;
    const auto S = static_cast<std::int64_t>(std::llround(slack));
    gap_floor = std::min(gcd_gap_bound(ms, S, lambda * s.unit_bits), gap0);
    for (std::int64_t dr = 1; dr <= std::min(S, ms.span); ++dr) {
      const auto slot = static_cast<std::size_t>(dr + ms.span);
      if (ms.item[slot] >= 0 && ms.dc[slot] < inc_dc - tol) {
        inc_dc = ms.dc[slot];
        inc_dr = static_cast<double>(dr);
        inc_mods = {{ms.item[slot], ms.tier[slot]}};
      }
    }
    if (gap_of(inc_dc) <= gap_floor + tol) {
      auto [obj, rate] = apply(inc_dc, inc_dr);
      std::ostringstream os;
      os << "Certified optimal by the gcd bound: every feasible allocation is at least " << fmt(gap_floor)
         << " above the Lagrangian bound " << fmt(lb) << " (net rate changes cheaper than that are multiples of a "
         << "step that cannot fill the slack), and this one is " << fmt(obj - lb) << " above it.";
      return finish(SolveStatus::Optimal, obj, rate, os.str());
    }
  }

  std::int64_t K = opt.initial_core_items;
  double tau = std::min(gap_of(inc_dc), tau_for_count(hist, K));
  bool proven = false;
  std::string why = "";
  std::vector<std::int64_t> core;
  for (int round = 0; round < opt.max_rounds; ++round) {
    const double tau_eff = tau * (1 + 1e-9) + 64 * tol;
    core.clear();
    for (std::int64_t i = 0; i < inst.items(); ++i)
      if (key_value(bp.alt_key[static_cast<std::size_t>(i)]) < tau_eff) core.push_back(i);
    ++res.iterations;
    res.core_items = static_cast<std::int64_t>(core.size());
    if (static_cast<std::int64_t>(core.size()) > opt.max_core_items) {
      why = "the core (" + std::to_string(core.size()) + " items) exceeds max_core_items";
      break;
    }
    DpOutcome dp;
    if (s.units.integral)
      dp = core_dp<std::int64_t>(s, core, bp.choice, lambda, tau_eff, static_cast<std::int64_t>(std::llround(slack)),
                                 inc_dc, tol, opt.max_dp_states - res.dp_states);
    else
      dp = core_dp<double>(s, core, bp.choice, lambda, tau_eff, slack, inc_dc, tol, opt.max_dp_states - res.dp_states);
    res.dp_states += dp.states;
    if (dp.improved) {
      inc_dc = dp.best_dc;
      inc_dr = dp.best_dr;
      inc_mods = std::move(dp.mods);
    }
    if (!dp.completed) {
      why = "the core DP exceeded max_dp_states";
      break;
    }
    const double gap = gap_of(inc_dc);
    if (gap <= std::max(tau, gap_floor + tol)) {
      proven = true;
      break;
    }
    // Grow the core: straight to tau = gap if that core is not much larger, else x8.
    K *= 8;
    tau = count_below(hist, gap) <= K ? gap : std::min(gap, tau_for_count(hist, K));
  }
  if (!proven && why.empty()) why = "the proof needed more than max_rounds core rounds";
  bp.alt_key = {};
  const std::size_t n_mods = inc_mods.size();
  auto [obj, rate] = apply(inc_dc, inc_dr);
  if (proven) {
    std::ostringstream os;
    os << "Certified optimal: Lagrangian bound " << fmt(lb) << " (lambda* = " << fmt(lambda)
       << "), core DP over " << core.size() << " items changed " << n_mods
       << " item(s) from the LP base; every item outside the core has reduced cost >= the integrality gap "
       << fmt(obj - lb) << ".";
    return finish(SolveStatus::Optimal, obj, rate, os.str());
  }
  return finish(SolveStatus::Feasible, obj, rate,
                "Feasible, optimality not proven: " + why + "; the gap to the Lagrangian bound is honest.");
}

}  // namespace tierlab
