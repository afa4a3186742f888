// Marginal-return greedy on the raw ladder (greedy.hpp).
#include "solvers/greedy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>
#include <sstream>

#include "model/error.hpp"
#include "solvers/exact.hpp"

namespace tierlab {

namespace {

struct Step {
  double gain;          // cost decrease per bit
  std::int64_t item;
  int pos;              // from sorted position pos to pos + 1
  bool operator<(const Step& o) const {  // max-heap on gain, ties: lower item first
    return gain < o.gain || (gain == o.gain && item > o.item);
  }
};

}  // namespace

MckpResult solve_greedy(const MckpInstance& inst, const GreedyOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  inst.validate();
  const RateUnits u = rate_units(inst);
  MckpResult res = begin_result(inst, u, "greedy");
  const LadderGeometry g(inst.rates);
  const int m = g.m;
  const std::int64_t N = inst.items();
  auto elapsed = [&] { return seconds_since(t0); };
  if (res.status == SolveStatus::Infeasible) {
    res.seconds = elapsed();
    return res;
  }

  auto cost = [&](std::int64_t i, int pos) { return checked_cost(inst, i, g.order[pos]); };
  auto step_of = [&](std::int64_t i, int pos) {
    return Step{(cost(i, pos) - cost(i, pos + 1)) / (g.rate[pos + 1] - g.rate[pos]), i, pos};
  };
  auto units_of = [&](int pos) { return u.tier_units[g.order[pos]]; };

  std::vector<int> pos(static_cast<std::size_t>(N), 0);
  std::vector<Step> heap;
  if (m > 1) {
    heap.reserve(static_cast<std::size_t>(N));
    for (std::int64_t i = 0; i < N; ++i) {
      const Step s = step_of(i, 0);
      if (s.gain > 0) heap.push_back(s);
    }
  }
  std::make_heap(heap.begin(), heap.end());
  std::int64_t used_units = 0;
  double used_bits = 0;  // above N r_min
  std::int64_t pops = 0;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Step s = heap.back();
    heap.pop_back();
    ++pops;
    bool fits;
    if (u.integral) {
      const std::int64_t du = units_of(s.pos + 1) - units_of(s.pos);
      fits = used_units + du <= u.capacity_units;
      if (fits) used_units += du;
    } else {
      const double db = g.rate[s.pos + 1] - g.rate[s.pos];
      fits = u.fits_bits(used_bits + db);
      if (fits) used_bits += db;
    }
    if (!fits) continue;  // the item stops here; smaller steps of other items go on
    pos[static_cast<std::size_t>(s.item)] = s.pos + 1;
    if (s.pos + 2 < m) {
      const Step next = step_of(s.item, s.pos + 1);
      if (next.gain > 0) {
        heap.push_back(next);
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  res.choice.resize(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i)
    res.choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(g.order[pos[static_cast<std::size_t>(i)]]);
  const Evaluation ev = evaluate(inst, res.choice);
  res.objective = ev.objective;
  res.rate_used = ev.rate_used;
  res.iterations = pops;
  res.status = SolveStatus::Feasible;
  res.message = "Greedy on the raw ladder: a feasible allocation, no optimality claim.";
  if (opt.compute_bound) {
    const LagrangianRelaxation lr = lagrangian_relaxation(inst);
    res.lp_bound = lr.bound;
    res.lambda = lr.lambda;
    res.lower_bound = std::min(lr.bound, res.objective);
    res.gap = res.objective - res.lower_bound;
    res.relative_gap = res.gap / std::max(std::fabs(res.objective), 1e-300);
    if (res.gap <= 1e-12 * (std::fabs(res.objective) + std::fabs(lr.bound))) {
      res.status = SolveStatus::Optimal;
      res.lower_bound = res.objective;
      res.gap = res.relative_gap = 0;
      res.message = "Greedy on the raw ladder reached the LP bound: optimal.";
    } else {
      std::ostringstream os;
      os << "Greedy on the raw ladder: feasible; gap to the LP bound " << res.gap << " (relative " << res.relative_gap
         << ").";
      res.message = os.str();
    }
  }
  res.seconds = elapsed();
  return res;
}

}  // namespace tierlab
