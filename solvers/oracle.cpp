// Exhaustive oracle: layered-DAG shortest path with Boost.Graph (oracle.hpp).
#include "solvers/oracle.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dag_shortest_paths.hpp>
#include <chrono>
#include <cmath>
#include <limits>

#include "model/base/error.hpp"

namespace tierlab {

MckpResult solve_oracle(const MckpInstance& inst, const OracleOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  inst.validate();
  const RateUnits u = rate_units(inst);
  if (!u.integral)
    throw InputError("solve_oracle: the rates are not multiples of 1/64 bit; the oracle counts capacity in integer units.");
  MckpResult res;
  res.solver = "oracle";
  res.items = inst.items();
  res.rate_budget = u.budget_bits;
  const std::int64_t N = inst.items();
  const int m = inst.tiers();
  if (u.capacity_units < 0) {
    res.status = SolveStatus::Infeasible;
    res.message = "The budget is below the smallest rate: no path reaches the last layer.";
    return res;
  }
  // Capacity beyond N * max units is never binding.
  std::int64_t max_units = 0;
  for (auto k : u.tier_units) max_units = std::max(max_units, k);
  const std::int64_t K = std::min(u.capacity_units, N * max_units);
  if ((N + 1) * (K + 1) > opt.max_vertices)
    throw InputError("solve_oracle: the layered graph would have " + std::to_string((N + 1) * (K + 1)) +
                     " vertices, above OracleOptions.max_vertices = " + std::to_string(opt.max_vertices) + ".");

  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                                      boost::property<boost::edge_weight_t, double>>;
  const auto width = K + 1;
  auto vertex = [&](std::int64_t i, std::int64_t used) { return static_cast<std::size_t>(i * width + used); };
  Graph graph(static_cast<std::size_t>((N + 1) * width));
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t used = 0; used <= K; ++used)
      for (int j = 0; j < m; ++j) {
        const double c = inst.cost(i, j);
        if (!std::isfinite(c))
          throw InputError("MckpInstance.cost(" + std::to_string(i) + ", " + std::to_string(j) + ") is not finite.");
        const std::int64_t to = used + u.tier_units[static_cast<std::size_t>(j)];
        if (to <= K) boost::add_edge(vertex(i, used), vertex(i + 1, to), c, graph);
      }
  const std::size_t V = boost::num_vertices(graph);
  std::vector<double> dist(V);
  std::vector<std::size_t> pred(V);
  boost::dag_shortest_paths(graph, vertex(0, 0),
                            boost::distance_map(dist.data()).predecessor_map(pred.data()));
  std::int64_t best_u = -1;
  double best = std::numeric_limits<double>::infinity();
  for (std::int64_t used = 0; used <= K; ++used)
    if (dist[vertex(N, used)] < best) {
      best = dist[vertex(N, used)];
      best_u = used;
    }
  // Walk back: the tier of each edge is the one whose units match the step.
  res.choice.assign(static_cast<std::size_t>(N), 0);
  std::size_t v = vertex(N, best_u);
  for (std::int64_t i = N; i-- > 0;) {
    const std::size_t p = pred[v];
    const std::int64_t step = static_cast<std::int64_t>(v % static_cast<std::size_t>(width)) -
                              static_cast<std::int64_t>(p % static_cast<std::size_t>(width));
    for (int j = 0; j < m; ++j)
      if (u.tier_units[static_cast<std::size_t>(j)] == step) res.choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(j);
    v = p;
  }
  const Evaluation ev = evaluate(inst, res.choice);
  res.status = SolveStatus::Optimal;
  res.objective = ev.objective;
  res.rate_used = ev.rate_used;
  res.lower_bound = ev.objective;
  res.lp_bound = std::numeric_limits<double>::quiet_NaN();
  res.gap = res.relative_gap = 0;
  res.iterations = static_cast<std::int64_t>(boost::num_edges(graph));
  res.message = "Exhaustive: shortest path over " + std::to_string(V) + " vertices and " +
                std::to_string(boost::num_edges(graph)) + " edges of the layered DAG.";
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace tierlab
