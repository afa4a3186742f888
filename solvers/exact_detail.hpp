#pragma once
// What the exact solver's three files share (exact.hpp states the maths):
//   exact_relaxation.cpp  steps 1-2: lambda* by selection and the base pass (relax), and
//                         lagrangian_relaxation;
//   exact_core.cpp        step 3's searches: the cheapest single moves and the gcd bound,
//                         the core Pareto DP;
//   exact.cpp             the driver: solve_exact tries the certificates a-c in order
//                         (prove_relaxed);
//   exact_parametric.cpp  the same at many budgets: one sort of every hull slope gives
//                         each budget's relaxation, then prove_relaxed.
// Internal to solvers/: nothing outside these files includes it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "solvers/exact.hpp"
#include "solvers/mckp.hpp"

namespace tierlab::exact_detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

[[noreturn]] __attribute__((noinline)) inline void bad_cost(std::int64_t i, int j, double v) {
  throw_nonfinite_cost(i, j, v);
}

// Everything the passes share: the ladder in rate order, the per-position rate in
// "capacity units" (integer units when the ladder is on the 1/64 grid, else bits), and
// the cost offsets of each sorted position for the strided view (an item's disallowed
// tiers, CostView::allowed, read as its penalty).
struct Setup {
  const MckpInstance& inst;
  LadderGeometry geom;
  RateUnits units;
  std::vector<double> cap_rate;        // rate[k] in capacity units
  std::vector<std::int64_t> offset;    // cost.offset(order[k])
  double capacity = 0;                 // T: capacity above N r_min, in capacity units
  double capacity_bits = 0;            // T in bits (K u when integral: the tighter, equivalent form)
  double unit_bits = 1;                // bits per capacity unit

  explicit Setup(const MckpInstance& in) : inst(in), geom(in.rates), units(rate_units(in)) {
    const int m = geom.m;
    cap_rate.resize(m);
    offset.resize(m);
    for (int k = 0; k < m; ++k) {
      offset[k] = inst.cost.offset(geom.order[k]);
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
      c[k] = inst.cost.is_allowed(i, geom.order[k]) ? row[offset[k]] : inst.cost.penalty;
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

// Reduced-cost keys: the top 16 bits of max(x, 0) as a double (sign, exponent, 4
// mantissa bits). Truncation rounds down, so key_value(rc_key(x)) <= x: a conservative
// key for the core test rc < tau, at 2 bytes per item.
inline std::uint16_t rc_key(double x) {
  x = x > 0 ? x : 0.0;
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return static_cast<std::uint16_t>(b >> 48);
}
inline double key_value(std::uint32_t key) {
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

// One item at multiplier lambda, base vertex kb, costs c and lr_k = lambda r_k: returns the
// Lagrangian term min_k (c_k + lr_k) and lowers `alt` to the smallest reduced cost of another
// tier, min over k != kb of (c_k + lr_k) - (c_kb + lr_kb). The solver's relaxation and the
// parametric sweep both call this, so their sums have one order.
inline double base_lagrangian(const double* c, const double* lr, int m, int kb, double& alt) {
  const double vb = c[kb] + lr[kb];
  double vmin = vb;
  for (int k = 0; k < m; ++k) {
    if (k == kb) continue;
    const double v = c[k] + lr[k];
    vmin = std::min(vmin, v);
    alt = std::min(alt, v - vb);
  }
  return vmin;
}

// The relaxation when the budget affords every item's cheapest vertex (lambda* = 0): item i
// at the last vertex kb of its lower hull, cost c_i(kb); `last_vertex(i)` returns {kb, c}
// (the solver computes the hull per item, the parametric sweep reads the hulls it kept).
template <class LastVertex>
void fill_trivial(const Setup& s, Relaxed& r, LastVertex last_vertex) {
  CompensatedSum obj;
  double rate = 0;
  for (std::int64_t i = 0; i < s.inst.items(); ++i) {
    const auto [kb, c] = last_vertex(i);
    obj.add(c);
    rate += s.cap_rate[kb];
    r.choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(s.geom.order[kb]);
  }
  r.trivial = true;
  r.lambda = 0;
  r.lagr_sum = r.base_obj = obj.value_extended();
  r.base_rate = rate;
}

// Steps 1-2 (exact_relaxation.cpp): lambda* and the base choice of every item.
Relaxed relax(const Setup& s, const ExactOptions& opt);

// Step 3 (exact.cpp) on a relaxation computed for s: the certificates a-c in order, the
// result with its message and timings (t0: the start of the solve, sel_s: the relaxation's
// seconds). solve_exact is relax + prove_relaxed; the parametric sweep (exact_parametric.cpp)
// builds the same Relaxed for each budget from one sort and calls this.
MckpResult prove_relaxed(const MckpInstance& inst, const ExactOptions& opt, const Setup& s, Relaxed& bp,
                         std::chrono::steady_clock::time_point t0, double sel_s);

// ---- step 3 (exact_core.cpp) --------------------------------------------------------

// For every net rate change dr (capacity units) of one item away from its base tier:
// the cheapest such move over all items, or over `only` when given (its reduced cost,
// cost change, item, tier).
struct MoveScan {
  std::int64_t span = 0;  // dr in [-span, span], index dr + span
  std::vector<double> rc, dc;
  std::vector<std::int64_t> item;
  std::vector<std::uint8_t> tier;
};

// The cheapest single move of every rate change (over `only`, else all items).
MoveScan scan_moves(const Setup& s, const std::vector<std::uint8_t>& base_choice, double lambda,
                    const std::vector<std::int64_t>* only);

// A lower bound on objective(x) - L(lambda*) for every feasible x (integral ladders).
double gcd_gap_bound(const MoveScan& ms, std::int64_t slack, double lu);

struct DpOutcome {
  bool completed = false;   // false: state limit hit
  bool improved = false;    // found a solution better than the incumbent
  double best_dc = 0;       // its cost change vs base
  double best_dr = 0;       // its rate change vs base (capacity units)
  std::vector<std::pair<std::int64_t, std::uint8_t>> mods;  // (item, tier) differing from base
  std::int64_t states = 0;
};

// The core Pareto DP: the best solution over the core items that beats the incumbent by
// more than tol; instantiated for integral (std::int64_t) and bit (double) rates.
template <class R>
DpOutcome core_dp(const Setup& s, const std::vector<std::int64_t>& core_in, const std::vector<std::uint8_t>& base_choice,
                  double lambda, double tau, R slack, double incumbent_dc, double tol, std::int64_t max_states);

}  // namespace tierlab::exact_detail
