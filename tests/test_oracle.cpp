// The layered-DAG oracle (solvers/oracle.hpp) against hand-computed cases and an
// independent brute-force enumeration.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/base/error.hpp"
#include "solvers/oracle.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

using Owned = tierlab::testing::OwnedInstance;

// Every allocation (m^N), rates summed in double, budget B N with a 1e-9 tolerance.
double brute_force(const Owned& o, bool& feasible) {
  const int m = static_cast<int>(o.rates.size());
  std::vector<int> x(static_cast<std::size_t>(o.n), 0);
  double best = INFINITY;
  feasible = false;
  while (true) {
    double c = 0, r = 0;
    for (std::int64_t i = 0; i < o.n; ++i) {
      const int j = x[static_cast<std::size_t>(i)];
      c += o.costs[static_cast<std::size_t>(i * m + j)];
      r += o.rates[static_cast<std::size_t>(j)];
    }
    if (r <= o.budget * static_cast<double>(o.n) + 1e-9) {
      feasible = true;
      best = std::min(best, c);
    }
    std::int64_t k = 0;
    while (k < o.n && ++x[static_cast<std::size_t>(k)] == m) x[static_cast<std::size_t>(k++)] = 0;
    if (k == o.n) break;
  }
  return best;
}

}  // namespace

TEST_CASE("oracle: hand example", "[oracle]") {
  // Two items, rates {0, 2, 4} bits, budget 2 bits/element = 4 bits in all.
  // item 0: {9, 5, 1}; item 1: {4, 3, 2}. Allocations within 4 bits:
  //   (2,0) 1+4 = 5 <- optimum; (1,1) 5+3 = 8; (0,2) 9+2 = 11; (1,0) 9; (0,1) 12; (0,0) 13.
  Owned o{{0, 2, 4}, {9, 5, 1, 4, 3, 2}, 2, 2.0};
  const auto r = solve_oracle(o.view());
  REQUIRE(r.status == SolveStatus::Optimal);
  CHECK(r.objective == Approx(5.0));
  CHECK(r.choice == std::vector<std::uint8_t>{2, 0});
  CHECK(r.rate_used == Approx(4.0));
  CHECK(r.gap == 0);
}

TEST_CASE("oracle equals brute-force enumeration", "[oracle]") {
  std::mt19937_64 rng(424242);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const std::vector<std::vector<double>> ladders{{0, 2, 4, 8, 16}, {0, 2.25, 4.5, 16}, {0, 1, 3}, {0.5, 2, 4}, {0, 16}};
  int feasible_count = 0, infeasible_count = 0;
  for (int t = 0; t < 400; ++t) {
    Owned o;
    o.rates = ladders[rng() % ladders.size()];
    o.n = 1 + static_cast<std::int64_t>(rng() % 6);
    const auto m = static_cast<std::int64_t>(o.rates.size());
    for (std::int64_t i = 0; i < o.n * m; ++i) o.costs.push_back(rng() % 3 == 0 ? static_cast<double>(rng() % 3) : 10 * u01(rng));
    o.budget = -0.3 + (o.rates.back() + 0.6) * u01(rng);
    bool feasible = false;
    const double best = brute_force(o, feasible);
    const auto r = solve_oracle(o.view());
    INFO("instance " << t << " N=" << o.n << " B=" << o.budget << "\n" << r.report());
    if (!feasible) {
      CHECK(r.status == SolveStatus::Infeasible);
      ++infeasible_count;
      continue;
    }
    ++feasible_count;
    REQUIRE(r.status == SolveStatus::Optimal);
    CHECK(r.objective == Approx(best).epsilon(1e-12).margin(1e-12));
    const Evaluation ev = evaluate(o.view(), r.choice);
    CHECK(ev.within_budget);
    CHECK(ev.objective == Approx(r.objective).epsilon(1e-12));
  }
  CHECK(feasible_count > 200);
  CHECK(infeasible_count > 10);
}

TEST_CASE("oracle refuses what it cannot count", "[oracle]") {
  std::vector<double> costs{1, 0};
  SECTION("rates off the 1/64 grid") {
    const MckpInstance inst{{0, 1.0 / 3.0}, CostView::item_major(costs.data(), 1, 2), 1.0};
    CHECK_THROWS_WITH(solve_oracle(inst), Catch::Contains("1/64"));
  }
  SECTION("graph above the vertex limit") {
    std::vector<double> many(2000, 1.0);
    const MckpInstance inst{{0, 1.0 / 64.0}, CostView::item_major(many.data(), 1000, 2), 1.0};
    OracleOptions o;
    o.max_vertices = 1000;
    CHECK_THROWS_WITH(solve_oracle(inst, o), Catch::Contains("max_vertices"));
  }
}
