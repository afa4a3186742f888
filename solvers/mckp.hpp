#pragma once
// The multiple-choice knapsack with one shared rate ladder (docs/model.md section 9), the
// problem every allocation solver in solvers/ answers.
//
// Items i = 0..N-1 (tokens, or channels, or heads), tiers j = 0..m-1 with rate r_j in
// bits per element shared by all items (distinct, finite, >= 0; tier 0 is normally
// eviction, r_0 = 0, and the ladder increasing), cost c_ij (finite; it need not be
// monotone or convex in j). Choose one tier j(i) per item to
//
//   minimise  sum_i c_{i,j(i)}   subject to   sum_i r_{j(i)} <= B * N
//
// with B the budget in bits per element (every item weighs the same number of elements).
//
// Rate units. When every r_j is a multiple of 1/64 bit (64 r_j integral to 1e-9), rates
// are counted exactly in integers: the unit is u = gcd_j(64 r_j - 64 r_min) / 64 bits
// (rates {0,2,4,8,16} -> u = 2 bits; {0, 2.25, 4.5, 16} -> u = 0.25 bit) and the
// capacity above the all-cheapest-rate allocation is
//   K = floor((B N - N r_min) / u + 1e-9 + 1e-12 |.|)   units
// (the small tolerance reads a budget that is an exact multiple of u, up to rounding
// of B N in double precision, as that multiple). Otherwise rates stay doubles and the
// budget test is sum r <= B N + 1e-9 max(1, B N).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "model/base/clock.hpp"
#include "model/base/linalg.hpp"

namespace tierlab {

// Neumaier's compensated sum: the objective of millions of items to about 1 ulp. value() in
// double; value_extended() keeps the carry apart in long double (the exact solver's bounds).
struct CompensatedSum {
  double sum = 0.0, carry = 0.0;
  void add(double x) {
    const double t = sum + x;
    carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
    sum = t;
  }
  double value() const { return sum + carry; }
  long double value_extended() const { return static_cast<long double>(sum) + carry; }
};

// A read-only view of the cost matrix c_ij with arbitrary strides, so that both an
// item-major N x m array and the model's tier-major SurrogateCosts::cost
// (ladder.size() x T, row-major) are used in place, without copying:
//   cost(i, j) = data[i * item_stride + offset(j)],  offset(j) = j * tier_stride
// or, with `offsets`, offset(j) = offsets[j] (some rows of a larger matrix: the tiers of one
// family option taken from every head's costs in place, solvers/families.hpp). With
// `allowed` (one byte per item, bit j for view tier j; at most 8 tiers) a tier whose bit is
// clear costs `penalty` instead: an option that lacks the tier, in a pooled instance whose
// heads have different options.
struct CostView {
  const double* data = nullptr;
  std::int64_t items = 0;
  int tiers = 0;
  std::int64_t item_stride = 0;
  std::int64_t tier_stride = 0;
  std::vector<std::int64_t> offsets;      // empty: j * tier_stride
  const std::uint8_t* allowed = nullptr;  // null: every tier of every item
  double penalty = 0.0;

  std::int64_t offset(int j) const { return offsets.empty() ? j * tier_stride : offsets[static_cast<std::size_t>(j)]; }
  bool is_allowed(std::int64_t i, int j) const { return allowed == nullptr || ((allowed[i] >> j) & 1) != 0; }
  double operator()(std::int64_t i, int j) const {
    return is_allowed(i, j) ? data[i * item_stride + offset(j)] : penalty;
  }

  // N x m row-major (one item's costs contiguous).
  static CostView item_major(const double* data, std::int64_t items, int tiers);
  // m x N row-major (one tier's costs contiguous), the layout of SurrogateCosts::cost.
  static CostView tier_major(const double* data, int tiers, std::int64_t items);
  // A tier-major matrix (rows = tiers, columns = items), e.g. SurrogateCosts::cost.
  static CostView of_tier_major(const MatrixRMd& tiers_by_items);
};

// One instance: the shared ladder, the costs and the budget B (bits per element).
struct MckpInstance {
  std::vector<double> rates;  // r_j, m entries
  CostView cost;              // c_ij, N x m
  double budget = 0.0;        // B

  std::int64_t items() const { return cost.items; }
  int tiers() const { return static_cast<int>(rates.size()); }
  // Shapes, rates (finite, >= 0, distinct, at most 255 tiers), budget finite.
  // Costs are checked by the solvers as they read them. Throws InputError.
  void validate() const;
};

// Exact integer accounting of rates (see the header comment).
struct RateUnits {
  bool integral = false;                 // all rates multiples of 1/64 bit
  double unit = 0.0;                     // u in bits (integral only)
  double r_min = 0.0;                    // smallest rate of the ladder
  std::vector<std::int64_t> tier_units;  // (r_j - r_min) / u (integral only)
  std::int64_t capacity_units = 0;       // K; negative when the budget is infeasible (integral only)
  double capacity_bits = 0.0;            // B N - N r_min (both cases)
  double budget_bits = 0.0;              // B N

  // Whether `used_bits_above_min` (sum_i (r_j(i) - r_min)) fits, with the tolerance of the
  // non-integral case; integral callers compare units with capacity_units instead.
  bool fits_bits(double used_bits_above_min) const;
};
RateUnits rate_units(const MckpInstance&);


// Whether the call succeeded is not part of this: a failed call throws InputError. These
// are outcomes of a successful solve.
//   Optimal    the choice is a proven integer optimum (lower_bound == objective, gap 0)
//   Feasible   the choice meets the budget; lower_bound is a proven bound, gap honest;
//              SolveSummary::feasible_reason says why it is not proven optimal
//   Infeasible no choice meets the budget (B < smallest rate); choice is empty
//   Trivial    the budget affords every item its cheapest-cost tier (optimal, gap 0)
enum class SolveStatus { Optimal, Feasible, Infeasible, Trivial };
std::string_view to_string(SolveStatus);  // "optimal" | "feasible" | "infeasible" | "trivial"

// Why a Feasible result is not proven optimal (None with every other status):
//   Heuristic  the method gives no proof: greedy, greedy-raw, water-filling, the seed
//              allocators (ratequant, rdkv), KV-COBRA's redistribution, the smoothed solver
//              (exact on pooled costs, not on the true ones), an allocation repaired to its
//              measured budget (solved at a smaller B', scenarios/pipeline/allocate.hpp)
//   Tolerance  the routing kept an endpoint family within FamilyOptions::route_tolerance of
//              the mixed optimum (families.hpp, scope head)
//   Relaxation the pooled routing fixed each head's family at the Lagrange multiplier
//              (families.hpp): the knapsack under those families is solved, the choice of
//              families is not searched
//   Limit      a search that would have proven it was stopped by one of its limits: the
//              exact solver's core DP (ExactOptions max_core_items, max_dp_states, max_rounds)
// Where results are combined (several heads or scopes) the reason is the latest in this
// order that any of them gives (feasible_reason_of).
enum class FeasibleReason { None, Heuristic, Tolerance, Relaxation, Limit };
std::string_view to_string(FeasibleReason);  // "none" | "heuristic" | "tolerance" | "relaxation" | "limit"
FeasibleReason feasible_reason_of(FeasibleReason a, FeasibleReason b);  // the later of the two

// What every solve reports about itself, whatever it solved (a knapsack instance, a family
// problem): the outcome and how it was reached, the objective sum_i c_{i,choice_i} with a
// proven lower bound <= every feasible objective, gap = objective - lower_bound,
// relative_gap = gap / max(|objective|, tiny), the Lagrange multiplier where one was used
// (cost per bit), the rate spent against the budget (bits) and the time. The result types
// of the solvers (MckpResult, FamilyResult) are a SolveSummary plus their solution.
struct SolveSummary {
  SolveStatus status = SolveStatus::Feasible;
  FeasibleReason feasible_reason = FeasibleReason::None;  // why Feasible is not Optimal (read with status)
  std::string message;  // one or two sentences: how the status was reached
  double objective = std::numeric_limits<double>::quiet_NaN();
  double lower_bound = -std::numeric_limits<double>::infinity();
  double gap = std::numeric_limits<double>::infinity();
  double relative_gap = std::numeric_limits<double>::infinity();
  double lambda = std::numeric_limits<double>::quiet_NaN();  // Lagrange multiplier (cost per bit)
  double rate_used = 0.0;    // bits
  double rate_budget = 0.0;  // bits
  double seconds = 0.0;

  bool has_solution() const { return status != SolveStatus::Infeasible; }
  // Status Feasible for `why`.
  void set_feasible(FeasibleReason why) {
    status = SolveStatus::Feasible;
    feasible_reason = why;
  }
  // The reason when Feasible, None otherwise (what the reports print).
  FeasibleReason unproven_reason() const { return status == SolveStatus::Feasible ? feasible_reason : FeasibleReason::None; }
  // "feasible (limit)" when Feasible, else the status alone (text reports).
  std::string status_text() const;
};

// A solver's answer: its SolveSummary (rate_used = sum_i r_{choice_i}, rate_budget = B N)
// and the choice; lp_bound = the LP relaxation (Lagrangian) value where the solver
// computed it.
struct MckpResult : SolveSummary {
  std::string solver;  // "exact", "greedy", "greedy-raw", "waterfill", "oracle"
  double lp_bound = std::numeric_limits<double>::quiet_NaN();
  std::int64_t items = 0;
  std::vector<std::uint8_t> choice;  // tier index per item (empty when Infeasible)
  std::int64_t iterations = 0;  // solver-specific: passes, DP rounds, heap pops, bisection steps
  std::int64_t core_items = 0;  // exact: items in the last core DP
  std::int64_t dp_states = 0;   // exact: DP states created

  double mean_rate() const { return items > 0 ? rate_used / static_cast<double>(items) : 0.0; }
  std::string summary() const;  // one line
  std::string report() const;   // several lines, every field
};

// ---- what the solvers share -------------------------------------------------------
// A result of `solver` for inst before solving: its items and rate budget B N (u). When the
// budget is below the smallest rate (nothing fits), status Infeasible and its message.
MckpResult begin_result(const MckpInstance& inst, const RateUnits& u, const char* solver);
// v with 10 significant digits, for messages.
std::string number_text(double v);
// The solvers read costs lazily, so a NaN or infinite cost is reported where it is read:
// InputError "MckpInstance.cost(i, j) = v is not finite; costs must be finite numbers."
[[noreturn]] void throw_nonfinite_cost(std::int64_t i, int j, double v);
inline double checked_cost(const MckpInstance& inst, std::int64_t i, int j) {
  const double c = inst.cost(i, j);
  if (!std::isfinite(c)) throw_nonfinite_cost(i, j, c);
  return c;
}

// sum_i c_{i,choice_i} (compensated summation) and sum_i r_{choice_i}; throws InputError
// when the choice has the wrong length or an out-of-range tier.
struct Evaluation {
  double objective = 0.0;
  double rate_used = 0.0;
  std::int64_t units_used = 0;  // sum_i tier_units (integral ladders only)
  bool within_budget = false;
};
Evaluation evaluate(const MckpInstance&, const std::vector<std::uint8_t>& choice);

// The lower convex hull of item i's points (r_j, c_ij), restricted to its strictly
// decreasing part: it starts at the smallest-rate tier, ends at the cheapest tier
// (smallest rate among equal cheapest costs), and keeps only vertices where the slope
// strictly flattens (collinear middle points are dropped). Returned as tier indices in
// increasing rate. A tier not in it is hull-dominated (or a tie on a hull edge): no
// multiplier lambda >= 0 makes it the unique minimiser of c_ij + lambda r_j.
std::vector<int> item_hull(const MckpInstance&, std::int64_t item);

// Tier indices sorted by increasing rate.
std::vector<int> rate_order(const std::vector<double>& rates);

// The ladder in increasing rate, shared by every item, with the reciprocal rate steps
// precomputed so that an upgrade's efficiency is one multiply:
//   e(a -> b) = (c_a - c_b) / (r_b - r_a)   [cost per bit], a < b sorted positions.
struct LadderGeometry {
  std::vector<int> order;        // order[k] = tier at sorted position k
  std::vector<double> rate;      // rate[k] = r_{order[k]} - r_min (bits above the cheapest rate)
  std::vector<double> inv_step;  // inv_step[a * m + b] = 1 / (rate[b] - rate[a]) for a < b
  int m = 0;

  explicit LadderGeometry(const std::vector<double>& rates);
  double inverse_step(int a, int b) const { return inv_step[static_cast<std::size_t>(a) * m + b]; }
};

// The lower-hull kernel behind item_hull (hot loop of the exact solver). `c` holds one
// item's costs in sorted-rate order (c[k] = c_{i,order[k]}). Writes the hull's sorted
// positions to hull[0..n) and the efficiencies eff[k] = e(hull[k-1] -> hull[k]) for
// k = 1..n-1, strictly decreasing as computed in double precision; returns n >= 1.
// M > 0 fixes the ladder size at compile time (M == g.m); M = 0 reads it from g.
template <int M = 0>
inline int lower_hull_kernel(const LadderGeometry& g, const double* c, int* hull, double* eff) {
  const int m = M > 0 ? M : g.m;
  const double* inv = g.inv_step.data();
  int n = 0;
  for (int k = 0; k < m; ++k) {
    const double ck = c[k];
    if (n > 0 && !(ck < c[hull[n - 1]])) continue;  // dominated by a cheaper, lower-rate vertex
    while (true) {
      if (n == 0) {
        hull[0] = k;
        n = 1;
        break;
      }
      const double e = (c[hull[n - 1]] - ck) * inv[hull[n - 1] * m + k];
      if (n >= 2 && !(e < eff[n - 1])) {  // hull[n-1] is on or above the chord: drop it
        --n;
        continue;
      }
      hull[n] = k;
      eff[n] = e;
      ++n;
      break;
    }
  }
  return n;
}

}  // namespace tierlab
