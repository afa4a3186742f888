// The greedy on the lower hulls and the greedy on the raw ladder (greedy.hpp).
#include "solvers/greedy.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "model/base/error.hpp"
#include "solvers/exact.hpp"

namespace tierlab {

namespace {

struct Step {
  double gain;          // cost decrease per bit
  std::int64_t item;
  int from, to;         // sorted rate positions, from < to
  bool operator<(const Step& o) const {  // max-heap on gain, ties: lower item first
    return gain < o.gain || (gain == o.gain && item > o.item);
  }
};

// The upgrades an item offers. Raw: position k -> k + 1, while the cost decreases. Hull:
// the next edge of the item's lower hull (lower_hull_kernel, mckp.hpp), rebuilt from its
// costs whenever it is asked for (O(m), no per-item storage).
class Upgrades {
 public:
  Upgrades(const MckpInstance& inst, const LadderGeometry& g, bool hull)
      : inst_(inst), g_(g), hull_(hull), c_(g.m), h_(g.m), eff_(g.m) {}

  // The upgrade of item i from sorted position `pos` (where the item sits); false when
  // there is none.
  bool next(std::int64_t i, int pos, Step& s) {
    if (!hull_) {
      if (pos + 1 >= g_.m) return false;
      const double gain = (cost(i, pos) - cost(i, pos + 1)) / (g_.rate[pos + 1] - g_.rate[pos]);
      s = Step{gain, i, pos, pos + 1};
      return gain > 0;
    }
    for (int k = 0; k < g_.m; ++k) c_[k] = cost(i, k);
    const int n = lower_hull_kernel(g_, c_.data(), h_.data(), eff_.data());
    for (int k = 0; k + 1 < n; ++k)
      if (h_[k] == pos) {
        s = Step{eff_[k + 1], i, pos, h_[k + 1]};
        return true;
      }
    return false;  // pos is the hull's last vertex: the item's cheapest tier
  }

 private:
  double cost(std::int64_t i, int pos) const { return checked_cost(inst_, i, g_.order[pos]); }

  const MckpInstance& inst_;
  const LadderGeometry& g_;
  bool hull_;
  std::vector<double> c_;
  std::vector<int> h_;
  std::vector<double> eff_;
};

}  // namespace

MckpResult solve_greedy(const MckpInstance& inst, const GreedyOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  inst.validate();
  const RateUnits u = rate_units(inst);
  MckpResult res = begin_result(inst, u, opt.hull ? "greedy" : "greedy-raw");
  const LadderGeometry g(inst.rates);
  const std::int64_t N = inst.items();
  auto elapsed = [&] { return seconds_since(t0); };
  if (res.status == SolveStatus::Infeasible) {
    res.seconds = elapsed();
    return res;
  }
  const char* what = opt.hull ? "Greedy on the lower hulls" : "Greedy on the raw ladder";

  Upgrades upgrades(inst, g, opt.hull);
  auto units_of = [&](int pos) { return u.tier_units[g.order[pos]]; };

  std::vector<int> pos(static_cast<std::size_t>(N), 0);
  std::vector<Step> heap;
  heap.reserve(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i) {
    Step s;
    if (upgrades.next(i, 0, s)) heap.push_back(s);
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
      const std::int64_t du = units_of(s.to) - units_of(s.from);
      fits = used_units + du <= u.capacity_units;
      if (fits) used_units += du;
    } else {
      const double db = g.rate[s.to] - g.rate[s.from];
      fits = u.fits_bits(used_bits + db);
      if (fits) used_bits += db;
    }
    if (!fits) continue;  // the item stops here; smaller upgrades of other items go on
    pos[static_cast<std::size_t>(s.item)] = s.to;
    Step next;
    if (upgrades.next(s.item, s.to, next)) {
      heap.push_back(next);
      std::push_heap(heap.begin(), heap.end());
    }
  }
  std::vector<std::uint8_t> choice(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i)
    choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(g.order[pos[static_cast<std::size_t>(i)]]);
  const LagrangianRelaxation lr = finish_heuristic(inst, std::move(choice), pops, opt.compute_bound, res);
  res.message = std::string(what) + ": a feasible allocation, no optimality claim.";
  if (opt.compute_bound) {
    if (res.gap <= 1e-12 * (std::fabs(res.objective) + std::fabs(lr.bound))) {
      res.status = SolveStatus::Optimal;
      res.lower_bound = res.objective;
      res.gap = res.relative_gap = 0;
      res.message = std::string(what) + " reached the LP bound: optimal.";
    } else {
      std::ostringstream os;
      os << what << ": feasible; gap to the LP bound " << res.gap << " (relative " << res.relative_gap << ").";
      res.message = os.str();
    }
  }
  res.seconds = elapsed();
  return res;
}

}  // namespace tierlab
