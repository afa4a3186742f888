// The shared-ladder multiple-choice knapsack: views, validation, rate units, results.
#include "solvers/mckp.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"

namespace tierlab {

std::string number_text(double v) {
  std::ostringstream os;
  os << std::setprecision(10) << v;
  return os.str();
}

MckpResult begin_result(const MckpInstance& inst, const RateUnits& u, const char* solver) {
  MckpResult res;
  res.solver = solver;
  res.items = inst.items();
  res.rate_budget = u.budget_bits;
  if (u.integral ? u.capacity_units < 0 : !u.fits_bits(0.0)) {
    res.status = SolveStatus::Infeasible;
    res.message = "The budget is below the smallest rate: no allocation fits.";
  }
  return res;
}

void throw_nonfinite_cost(std::int64_t i, int j, double v) {
  throw InputError("MckpInstance.cost(" + std::to_string(i) + ", " + std::to_string(j) + ") = " + number_text(v) +
                   " is not finite; costs must be finite numbers.");
}

namespace {

CostView strided(const double* data, std::int64_t items, int tiers, std::int64_t item_stride, std::int64_t tier_stride) {
  CostView v;
  v.data = data;
  v.items = items;
  v.tiers = tiers;
  v.item_stride = item_stride;
  v.tier_stride = tier_stride;
  return v;
}

}  // namespace

CostView CostView::item_major(const double* data, std::int64_t items, int tiers) {
  return strided(data, items, tiers, tiers, 1);
}

CostView CostView::tier_major(const double* data, int tiers, std::int64_t items) {
  return strided(data, items, tiers, 1, items);
}

CostView CostView::of_tier_major(const MatrixRMd& m) {
  return tier_major(m.data(), static_cast<int>(m.rows()), static_cast<std::int64_t>(m.cols()));
}

void MckpInstance::validate() const {
  const int m = tiers();
  if (m < 1) throw InputError("MckpInstance.rates is empty; the ladder needs at least one tier.");
  if (m > 255)
    throw InputError("MckpInstance.rates has " + std::to_string(m) + " tiers; at most 255 fit the uint8 choice.");
  if (cost.tiers != m)
    throw InputError("MckpInstance.cost has " + std::to_string(cost.tiers) + " tiers but rates has " +
                     std::to_string(m) + ".");
  if (cost.items < 0) throw InputError("MckpInstance.cost has a negative item count " + std::to_string(cost.items) + ".");
  if (cost.items > 0 && cost.data == nullptr) throw InputError("MckpInstance.cost.data is null for " +
                                                                std::to_string(cost.items) + " items.");
  if (!cost.offsets.empty() && cost.offsets.size() != static_cast<std::size_t>(m))
    throw InputError("MckpInstance.cost.offsets has " + std::to_string(cost.offsets.size()) + " entries for " +
                     std::to_string(m) + " tiers.");
  if (cost.allowed != nullptr && m > 8)
    throw InputError("MckpInstance.cost.allowed marks tiers by bits of one byte; " + std::to_string(m) +
                     " tiers do not fit.");
  if (cost.allowed != nullptr && !std::isfinite(cost.penalty))
    throw InputError("MckpInstance.cost.penalty = " + number_text(cost.penalty) + " is not finite.");
  for (int j = 0; j < m; ++j) {
    if (!std::isfinite(rates[j]) || rates[j] < 0)
      throw InputError("MckpInstance.rates[" + std::to_string(j) + "] = " + number_text(rates[j]) +
                       " bits; rates must be finite and >= 0.");
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  for (int j = 1; j < m; ++j)
    if (sorted[j] == sorted[j - 1])
      throw InputError("MckpInstance.rates has the rate " + number_text(sorted[j]) +
                       " bits twice; tiers of one ladder need distinct rates (keep the cheaper one).");
  if (!std::isfinite(budget))
    throw InputError("MckpInstance.budget = " + number_text(budget) + " bits per element is not finite.");
}

bool RateUnits::fits_bits(double used) const {
  return used <= capacity_bits + 1e-9 * std::max(1.0, std::fabs(budget_bits));
}

RateUnits rate_units(const MckpInstance& inst) {
  RateUnits u;
  const auto n = static_cast<double>(inst.items());
  u.r_min = *std::min_element(inst.rates.begin(), inst.rates.end());
  u.budget_bits = inst.budget * n;
  u.capacity_bits = static_cast<double>(static_cast<long double>(inst.budget) * n - static_cast<long double>(u.r_min) * n);

  std::vector<std::int64_t> sixty_fourths;
  u.integral = true;
  for (double r : inst.rates) {
    const double x = r * 64.0;
    const double k = std::round(x);
    if (std::fabs(x - k) > 1e-9 * std::max(1.0, std::fabs(x)) || k > 9.0e15) {
      u.integral = false;
      break;
    }
    sixty_fourths.push_back(static_cast<std::int64_t>(k));
  }
  if (!u.integral) return u;

  const std::int64_t base = *std::min_element(sixty_fourths.begin(), sixty_fourths.end());
  std::int64_t g = 0;
  for (auto k : sixty_fourths) g = std::gcd(g, k - base);
  if (g == 0) g = 64;  // one tier: any unit works
  u.unit = static_cast<double>(g) / 64.0;
  for (auto k : sixty_fourths) u.tier_units.push_back((k - base) / g);
  const long double cap = (static_cast<long double>(inst.budget) * n - static_cast<long double>(u.r_min) * n) /
                          static_cast<long double>(u.unit);
  const long double tol = 1e-9L + 1e-12L * std::fabs(cap);
  const long double fl = std::floor(cap + tol);
  u.capacity_units = fl > 9.0e18L ? std::numeric_limits<std::int64_t>::max() / 4 : static_cast<std::int64_t>(fl);
  return u;
}

constexpr auto kSolveStatuses = enum_table<SolveStatus>("solve status", {{SolveStatus::Optimal, "optimal"},
                                                                        {SolveStatus::Feasible, "feasible"},
                                                                        {SolveStatus::Infeasible, "infeasible"},
                                                                        {SolveStatus::Trivial, "trivial"}});

std::string_view to_string(SolveStatus s) { return enum_name(kSolveStatuses, s); }

constexpr auto kFeasibleReasons = enum_table<FeasibleReason>("feasible reason", {{FeasibleReason::None, "none"},
                                                                                {FeasibleReason::Heuristic, "heuristic"},
                                                                                {FeasibleReason::Tolerance, "tolerance"},
                                                                                {FeasibleReason::Relaxation, "relaxation"},
                                                                                {FeasibleReason::Limit, "limit"}});

std::string_view to_string(FeasibleReason r) { return enum_name(kFeasibleReasons, r); }

FeasibleReason feasible_reason_of(FeasibleReason a, FeasibleReason b) { return a >= b ? a : b; }

std::string SolveSummary::status_text() const {
  std::string s(to_string(status));
  if (status == SolveStatus::Feasible) s += " (" + std::string(to_string(feasible_reason)) + ")";
  return s;
}

std::string MckpResult::summary() const {
  std::ostringstream os;
  os << solver << ": " << status_text();
  if (has_solution()) {
    os << ", objective " << number_text(objective) << ", bound " << number_text(lower_bound) << " (gap " << number_text(gap)
       << ", rel " << std::setprecision(3) << relative_gap << ")";
    os << ", rate " << std::setprecision(6) << mean_rate() << " bits/element (budget "
       << (items > 0 ? rate_budget / static_cast<double>(items) : 0.0) << ")";
  }
  os << ", " << items << " items, " << std::setprecision(4) << seconds << " s";
  return os.str();
}

std::string MckpResult::report() const {
  std::ostringstream os;
  os << "solver        " << solver << "\n"
     << "status        " << status_text() << "\n"
     << "message       " << message << "\n"
     << "items         " << items << "\n"
     << "objective     " << number_text(objective) << "\n"
     << "lower bound   " << number_text(lower_bound) << "\n"
     << "gap           " << number_text(gap) << " (relative " << number_text(relative_gap) << ")\n"
     << "LP bound      " << number_text(lp_bound) << "\n"
     << "lambda        " << number_text(lambda) << " cost per bit\n"
     << "rate used     " << number_text(rate_used) << " bits (" << number_text(mean_rate()) << " per element)\n"
     << "rate budget   " << number_text(rate_budget) << " bits ("
     << number_text(items > 0 ? rate_budget / static_cast<double>(items) : 0.0) << " per element)\n"
     << "seconds       " << number_text(seconds) << "\n"
     << "iterations    " << iterations << "\n"
     << "core items    " << core_items << "\n"
     << "DP states     " << dp_states << "\n";
  return os.str();
}

Evaluation evaluate(const MckpInstance& inst, const std::vector<std::uint8_t>& choice) {
  if (static_cast<std::int64_t>(choice.size()) != inst.items())
    throw InputError("The choice has " + std::to_string(choice.size()) + " entries but the instance has " +
                     std::to_string(inst.items()) + " items.");
  const RateUnits u = rate_units(inst);
  CompensatedSum obj, rate;
  Evaluation e;
  for (std::int64_t i = 0; i < inst.items(); ++i) {
    const int j = choice[static_cast<std::size_t>(i)];
    if (j >= inst.tiers())
      throw InputError("The choice of item " + std::to_string(i) + " is tier " + std::to_string(j) + " but the ladder has " +
                       std::to_string(inst.tiers()) + " tiers.");
    obj.add(inst.cost(i, j));
    rate.add(inst.rates[j] - u.r_min);
    if (u.integral) e.units_used += u.tier_units[j];
  }
  e.objective = obj.value();
  e.rate_used = rate.value() + u.r_min * static_cast<double>(inst.items());
  e.within_budget = u.integral ? e.units_used <= u.capacity_units : u.fits_bits(rate.value());
  return e;
}

std::vector<int> rate_order(const std::vector<double>& rates) {
  std::vector<int> order(rates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rates[a] < rates[b]; });
  return order;
}

LadderGeometry::LadderGeometry(const std::vector<double>& rates) : order(rate_order(rates)) {
  m = static_cast<int>(rates.size());
  const double r_min = m > 0 ? rates[order[0]] : 0.0;
  for (int k = 0; k < m; ++k) rate.push_back(rates[order[k]] - r_min);
  inv_step.assign(static_cast<std::size_t>(m) * m, 0.0);
  for (int a = 0; a < m; ++a)
    for (int b = a + 1; b < m; ++b) inv_step[static_cast<std::size_t>(a) * m + b] = 1.0 / (rate[b] - rate[a]);
}

std::vector<int> item_hull(const MckpInstance& inst, std::int64_t item) {
  inst.validate();
  if (item < 0 || item >= inst.items())
    throw InputError("item_hull: item " + std::to_string(item) + " is outside 0.." + std::to_string(inst.items() - 1) + ".");
  const LadderGeometry g(inst.rates);
  std::vector<double> c(g.m), eff(g.m);
  std::vector<int> hull(g.m);
  for (int k = 0; k < g.m; ++k) c[k] = inst.cost(item, g.order[k]);
  const int n = lower_hull_kernel(g, c.data(), hull.data(), eff.data());
  std::vector<int> out;
  for (int k = 0; k < n; ++k) out.push_back(g.order[hull[k]]);
  return out;
}

}  // namespace tierlab
