// Exact solver: Lagrangian relaxation by selection, then a core Pareto DP that closes
// the integer gap with a reduced-cost certificate (exact.hpp states the maths). This file
// is the driver; the relaxation is in exact_relaxation.cpp, the searches of step 3 in
// exact_core.cpp (exact_detail.hpp has what they share).
#include "solvers/exact.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>

#include "model/base/phases.hpp"
#include "model/base/error.hpp"
#include "solvers/exact_detail.hpp"

namespace tierlab {

using namespace exact_detail;

namespace {

using Clock = std::chrono::steady_clock;

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

// The proof after the relaxation (step 3 of exact.hpp): the LP base and its bound, the
// incumbent (the base with inc_mods applied), and the certificates a-c tried in order;
// finish() writes the result with the certificate's message.
struct GapProof {
  const MckpInstance& inst;
  const ExactOptions& opt;
  const Setup& s;
  const Clock::time_point t0;
  const double sel_s;  // seconds of the relaxation
  MckpResult& res;
  Relaxed& bp;
  const double lambda, lb, base_obj, rmin_bits;
  double tol = 0;
  double inc_dc = 0;      // incumbent's cost change vs base
  double inc_dr = 0;      // its rate change (capacity units)
  std::vector<std::pair<std::int64_t, std::uint8_t>> inc_mods{};
  double slack = 0;
  double gap_floor = 0;  // proven: objective(x) - LP bound >= gap_floor for every feasible x

  double gap_of(double dc) const { return (base_obj + dc) - lb; }
  std::pair<double, double> apply(double dc, double dr);
  MckpResult finish(SolveStatus st, double obj, double rate_cap_units, std::string msg);
  MckpResult prove();
  std::optional<MckpResult> try_gcd_bound(const std::vector<std::int64_t>& hist);
  MckpResult run_core_rounds(const std::vector<std::int64_t>& hist);
};

// The incumbent applied to the base choice: its objective and rate (capacity units).
std::pair<double, double> GapProof::apply(double dc, double dr) {
  for (const auto& [i, t] : inc_mods) bp.choice[static_cast<std::size_t>(i)] = t;
  return std::pair<double, double>{base_obj + dc, bp.base_rate + dr};
}

MckpResult GapProof::finish(SolveStatus st, double obj, double rate_cap_units, std::string msg) {
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
}

// Trivial (the budget affords every cheapest tier), then a: the LP optimum is integral,
// b: the gcd bound (integral ladders), c: core DP rounds.
MckpResult GapProof::prove() {
  if (bp.trivial)
    return finish(SolveStatus::Trivial, base_obj, bp.base_rate,
                  "The budget affords every item its cheapest tier (" + fmt(bp.base_rate * s.unit_bits + rmin_bits) +
                      " of " + fmt(s.units.budget_bits) + " bits): optimal.");

  // Step 3: close the integer gap on a core.
  tol = 1e-12 * (std::fabs(lb) + std::fabs(base_obj) + bp.scale) + 1e-300;
  slack = s.capacity - bp.base_rate;  // >= 0 up to rounding

  if (gap_of(inc_dc) <= tol && slack >= 0) {
    auto [obj, rate] = apply(inc_dc, inc_dr);
    return finish(SolveStatus::Optimal, obj, rate,
                  "The LP optimum is integral (objective equals the Lagrangian bound): optimal.");
  }

  const std::vector<std::int64_t> hist = key_histogram(bp.alt_key);
  if (s.units.integral)
    if (std::optional<MckpResult> certified = try_gcd_bound(hist)) return std::move(*certified);
  return run_core_rounds(hist);
}

// Cheapest single moves: a better incumbent, and the gcd bound on every solution's gap.
// Moves with rc >= the base gap cannot matter, so only items whose key is below it are
// scanned (all items when they are many).
std::optional<MckpResult> GapProof::try_gcd_bound(const std::vector<std::int64_t>& hist) {
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
  return std::nullopt;
}

// Core DP rounds: the core of items whose key is below tau, grown (x8 items, or straight
// to the incumbent's gap) until the incumbent's gap is at most tau, or a limit ends it.
MckpResult GapProof::run_core_rounds(const std::vector<std::int64_t>& hist) {
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
  res.feasible_reason = FeasibleReason::Limit;
  return finish(SolveStatus::Feasible, obj, rate,
                "Feasible, optimality not proven: " + why + "; the gap to the Lagrangian bound is honest.");
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

MckpResult solve_exact(const MckpInstance& inst, const ExactOptions& opt) {
  const PhaseScope phase(Phase::Solve);
  const auto t0 = Clock::now();
  inst.validate();
  opt.validate();
  MckpResult res;
  res.solver = "exact";
  res.items = inst.items();
  const Setup s(inst);
  res.rate_budget = s.units.budget_bits;

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
  return exact_detail::prove_relaxed(inst, opt, s, bp, t0, seconds_since(t_sel));
}

namespace exact_detail {

MckpResult prove_relaxed(const MckpInstance& inst, const ExactOptions& opt, const Setup& s, Relaxed& bp,
                         std::chrono::steady_clock::time_point t0, double sel_s) {
  MckpResult res;
  res.solver = "exact";
  res.items = inst.items();
  res.rate_budget = s.units.budget_bits;
  const double n_items = static_cast<double>(inst.items());
  res.iterations = bp.passes;
  const double lambda = bp.lambda;
  res.lambda = lambda;
  const double lb = static_cast<double>(bp.lagr_sum - static_cast<long double>(lambda) * s.capacity_bits);
  res.lp_bound = lb;
  const double base_obj = static_cast<double>(bp.base_obj);
  const double rmin_bits = s.units.r_min * n_items;

  GapProof proof{.inst = inst,
                 .opt = opt,
                 .s = s,
                 .t0 = t0,
                 .sel_s = sel_s,
                 .res = res,
                 .bp = bp,
                 .lambda = lambda,
                 .lb = lb,
                 .base_obj = base_obj,
                 .rmin_bits = rmin_bits};
  return proof.prove();
}

}  // namespace exact_detail

}  // namespace tierlab
