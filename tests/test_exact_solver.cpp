// The exact solver against the exhaustive oracle, hand-computed cases and an
// independent brute force (solvers/exact.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/base/error.hpp"
#include "solvers/exact.hpp"
#include "solvers/mckp.hpp"
#include "solvers/oracle.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

using Owned = tierlab::testing::OwnedInstance;

bool close(double a, double b, double rel = 1e-9, double abs = 1e-12) {
  return std::fabs(a - b) <= abs + rel * std::max(std::fabs(a), std::fabs(b));
}

// Random small instance: non-convex costs, integral or 1/4-bit rates, budgets from
// infeasible to trivial.
Owned random_instance(std::mt19937_64& rng, int max_items = 12, int max_tiers = 5) {
  std::uniform_int_distribution<int> n_dist(1, max_items), m_dist(1, max_tiers);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  Owned o;
  o.n = n_dist(rng);
  const int m = m_dist(rng);
  // Rates: integral {0,2,4,8,16}-like, or multiples of 1/4 (2.25, 4.5, ...), sometimes r_0 > 0.
  std::vector<double> pool;
  const int kind = static_cast<int>(rng() % 3);
  if (kind == 0)
    pool = {0, 2, 4, 8, 16};
  else if (kind == 1)
    pool = {0, 1, 2, 3, 4, 6, 8};
  else
    pool = {0, 2.25, 3.5, 4.25, 8.5, 16};
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(static_cast<std::size_t>(std::min<int>(m, static_cast<int>(pool.size()))));
  std::sort(pool.begin(), pool.end());
  if (rng() % 5 == 0) pool[0] += 0.5;  // r_min > 0 sometimes (keeps distinct, 1/64 grid)
  o.rates = pool;
  const int mm = static_cast<int>(o.rates.size());
  o.costs.resize(static_cast<std::size_t>(o.n * mm));
  const int cost_kind = static_cast<int>(rng() % 3);
  for (std::int64_t i = 0; i < o.n; ++i)
    for (int j = 0; j < mm; ++j) {
      double c;
      if (cost_kind == 0)
        c = 10 * u01(rng);  // arbitrary non-monotone
      else if (cost_kind == 1)
        c = static_cast<double>(rng() % 4);  // many ties
      else
        c = 10 * std::exp(-0.4 * o.rates[static_cast<std::size_t>(j)]) * (0.5 + u01(rng));  // roughly decreasing
      o.costs[static_cast<std::size_t>(i * mm + j)] = c;
    }
  const double r_max = o.rates.back();
  o.budget = -0.5 + (r_max + 1.5) * u01(rng);
  if (rng() % 4 == 0) {  // an exact multiple of the rate unit per element
    const double unit = kind == 2 ? 0.25 : 1.0;
    o.budget = o.rates[0] + unit * static_cast<double>(rng() % static_cast<unsigned>(o.n * 8 + 1)) / static_cast<double>(o.n);
  }
  return o;
}

// Independent brute force: every allocation (m^N), double-precision budget test.
double brute_force(const Owned& o, bool& feasible) {
  const int m = static_cast<int>(o.rates.size());
  std::vector<int> x(static_cast<std::size_t>(o.n), 0);
  double best = INFINITY;
  feasible = false;
  while (true) {
    double c = 0, r = 0;
    for (std::int64_t i = 0; i < o.n; ++i) {
      c += o.costs[static_cast<std::size_t>(i * m + x[static_cast<std::size_t>(i)])];
      r += o.rates[static_cast<std::size_t>(x[static_cast<std::size_t>(i)])];
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

void check_budget(const MckpInstance& inst, const MckpResult& r) {
  const Evaluation ev = evaluate(inst, r.choice);
  CHECK(ev.within_budget);
  CHECK(ev.rate_used <= inst.budget * static_cast<double>(inst.items()) + 1e-9);
  CHECK(close(ev.objective, r.objective));
  CHECK(close(ev.rate_used, r.rate_used));
}

}  // namespace

TEST_CASE("hand example: three items, ladder {0,2,4}", "[exact]") {
  // item 0: {10, 4, 1}; item 1: {6, 5, 0}; item 2: {3, 1, 0.5}; budget 2 bits/element = 6 bits
  // = 3 units of 2 bits (tiers cost 0, 1, 2 units). By hand, the allocations of <= 3 units:
  //   (1,2,0): 4 + 0 + 3   = 7    <- optimum
  //   (2,0,1): 1 + 6 + 1   = 8
  //   (2,1,0): 1 + 5 + 3   = 9
  //   (1,1,1): 4 + 5 + 1   = 10,  (2,0,0): 1 + 6 + 3 = 10, every other one is worse.
  Owned o{{0, 2, 4}, {10, 4, 1, 6, 5, 0, 3, 1, 0.5}, 3, 2.0};
  const auto r = solve_exact(o.view());
  REQUIRE(r.status == SolveStatus::Optimal);
  CHECK(r.objective == Approx(7.0));
  CHECK(r.choice == std::vector<std::uint8_t>{1, 2, 0});
  CHECK(r.gap == 0);
  CHECK(r.lower_bound == r.objective);
  CHECK(r.lp_bound <= r.objective + 1e-12);
  CHECK(r.rate_used == Approx(6.0));
}

TEST_CASE("exact equals the layered-DAG oracle on random small instances", "[exact][oracle]") {
  std::mt19937_64 rng(20240601);
  ExactOptions sampled;  // forces the sampled bracket and a tiny first core (several rounds)
  sampled.full_selection_max_items = 0;
  sampled.sample_items = 3;
  sampled.initial_core_items = 1;
  int optimal = 0, trivial = 0, infeasible = 0, by_dp = 0, by_gcd = 0, by_lp = 0;
  for (int t = 0; t < 600; ++t) {
    const Owned o = random_instance(rng);
    const MckpInstance inst = o.view();
    const MckpResult orc = solve_oracle(inst);
    for (const ExactOptions& opt : {ExactOptions{}, sampled}) {
      const MckpResult ex = solve_exact(inst, opt);
      INFO("instance " << t << ": N=" << o.n << " m=" << o.rates.size() << " B=" << o.budget << "\n" << ex.report());
      if (orc.status == SolveStatus::Infeasible) {
        CHECK(ex.status == SolveStatus::Infeasible);
        CHECK(ex.choice.empty());
        ++infeasible;
        continue;
      }
      REQUIRE((ex.status == SolveStatus::Optimal || ex.status == SolveStatus::Trivial));
      (ex.status == SolveStatus::Trivial ? trivial : optimal)++;
      by_dp += ex.message.find("core DP") != std::string::npos ? 1 : 0;
      by_gcd += ex.message.find("gcd bound") != std::string::npos ? 1 : 0;
      by_lp += ex.message.find("LP optimum is integral") != std::string::npos ? 1 : 0;
      CHECK(close(ex.objective, orc.objective));
      CHECK(ex.gap == 0);
      CHECK(ex.lower_bound == ex.objective);
      CHECK(ex.lp_bound <= ex.objective + 1e-9 * std::max(1.0, std::fabs(ex.objective)));
      check_budget(inst, ex);
    }
  }
  // The generator reaches every outcome and every way of proving optimality.
  INFO("proofs: core DP " << by_dp << ", gcd bound " << by_gcd << ", integral LP " << by_lp);
  CHECK(by_dp > 30);
  CHECK(by_gcd > 30);
  CHECK(by_lp > 30);
  CHECK(optimal > 300);
  CHECK(trivial > 20);
  CHECK(infeasible > 20);
}

TEST_CASE("exact matches brute force on rates off the 1/64 grid (double-rate DP)", "[exact]") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int t = 0; t < 300; ++t) {
    Owned o;
    o.n = 1 + static_cast<std::int64_t>(rng() % 7);
    const int m = 2 + static_cast<int>(rng() % 3);
    o.rates = {0.0};
    for (int j = 1; j < m; ++j) o.rates.push_back(o.rates.back() + 0.3 + 3.0 * u01(rng) + 1e-3 * M_PI);
    for (std::int64_t i = 0; i < o.n * m; ++i) o.costs.push_back(10 * u01(rng));
    o.budget = o.rates.back() * 1.1 * u01(rng);
    bool feasible = false;
    const double best = brute_force(o, feasible);
    const auto r = solve_exact(o.view());
    INFO("instance " << t << "\n" << r.report());
    REQUIRE(!rate_units(o.view()).integral);
    REQUIRE(feasible);
    REQUIRE((r.status == SolveStatus::Optimal || r.status == SolveStatus::Trivial));
    CHECK(close(r.objective, best));
    CHECK(r.rate_used <= o.budget * static_cast<double>(o.n) + 1e-9);
  }
}

TEST_CASE("the integer optimum may use a hull-dominated tier; the LP never does", "[exact]") {
  // One item, rates {0, 2, 4}, costs {10, 9, 0}: the hull is tiers {0, 2} (tier 1 lies above
  // the chord from (0,10) to (4,0)). At B = 2 bits only tiers 0 and 1 fit, so the integer
  // optimum is tier 1 (cost 9) although it is hull-dominated. The LP takes half of the
  // 0 -> 4 upgrade: lambda* = 10/4 = 2.5, bound = 10 - 2.5 * 2 = 5.
  Owned o{{0, 2, 4}, {10, 9, 0}, 1, 2.0};
  CHECK(item_hull(o.view(), 0) == std::vector<int>{0, 2});
  const auto r = solve_exact(o.view());
  REQUIRE(r.status == SolveStatus::Optimal);
  CHECK(r.choice == std::vector<std::uint8_t>{1});
  CHECK(r.objective == Approx(9.0));
  CHECK(r.lp_bound == Approx(5.0));
  CHECK(r.lambda == Approx(2.5));
}

TEST_CASE("exact uses only hull tiers when the budget sits on a Lagrangian breakpoint", "[exact]") {
  // Pick lambda, let every item take argmin_j c_ij + lambda r_j (unique with random real
  // costs), and set the budget to exactly that allocation's rate: the LP optimum is then
  // integral and the exact solver must return it, on hull tiers only.
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (int t = 0; t < 200; ++t) {
    Owned o;
    o.n = 1 + static_cast<std::int64_t>(rng() % 40);
    o.rates = {0, 2, 4, 8, 16};
    for (std::int64_t i = 0; i < o.n * 5; ++i) o.costs.push_back(10 * u01(rng));
    const double lambda = 2.0 * u01(rng);
    double rate = 0, cost = 0;
    for (std::int64_t i = 0; i < o.n; ++i) {
      int best = 0;
      for (int j = 1; j < 5; ++j)
        if (o.costs[static_cast<std::size_t>(i * 5 + j)] + lambda * o.rates[static_cast<std::size_t>(j)] <
            o.costs[static_cast<std::size_t>(i * 5 + best)] + lambda * o.rates[static_cast<std::size_t>(best)])
          best = j;
      rate += o.rates[static_cast<std::size_t>(best)];
      cost += o.costs[static_cast<std::size_t>(i * 5 + best)];
    }
    o.budget = rate / static_cast<double>(o.n);
    const auto r = solve_exact(o.view());
    INFO("instance " << t << "\n" << r.report());
    REQUIRE((r.status == SolveStatus::Optimal || r.status == SolveStatus::Trivial));
    CHECK(close(r.objective, cost));
    for (std::int64_t i = 0; i < o.n; ++i) {
      const auto hull = item_hull(o.view(), i);
      CHECK(std::find(hull.begin(), hull.end(), r.choice[static_cast<std::size_t>(i)]) != hull.end());
    }
  }
}

TEST_CASE("the certificate: every chosen tier's reduced cost is within the integrality gap", "[exact]") {
  // objective - LP bound = sum_i rc_i + lambda * slack, every term >= 0, so each chosen
  // tier has rc <= objective - LP bound.
  std::mt19937_64 rng(5);
  for (int t = 0; t < 200; ++t) {
    const Owned o = random_instance(rng, 30, 5);
    const auto inst = o.view();
    const auto r = solve_exact(inst);
    if (r.status != SolveStatus::Optimal) continue;
    const double slack_gap = r.objective - r.lp_bound;
    const int m = static_cast<int>(o.rates.size());
    for (std::int64_t i = 0; i < o.n; ++i) {
      double vmin = INFINITY;
      for (int j = 0; j < m; ++j) vmin = std::min(vmin, o.costs[static_cast<std::size_t>(i * m + j)] + r.lambda * o.rates[static_cast<std::size_t>(j)]);
      const int j = r.choice[static_cast<std::size_t>(i)];
      const double rc = o.costs[static_cast<std::size_t>(i * m + j)] + r.lambda * o.rates[static_cast<std::size_t>(j)] - vmin;
      CHECK(rc <= slack_gap + 1e-9 * (1 + std::fabs(r.objective)));
    }
  }
}

TEST_CASE("tier-major and item-major views give the same answer", "[exact]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const std::int64_t N = 5000;
  const int m = 5;
  const std::vector<double> rates{0, 2, 4, 8, 16};
  std::vector<double> item_major(static_cast<std::size_t>(N * m));
  MatrixRMd tier_major(m, N);
  for (std::int64_t i = 0; i < N; ++i)
    for (int j = 0; j < m; ++j) {
      const double c = std::exp(-0.5 * rates[static_cast<std::size_t>(j)]) * (1 + u01(rng)) * (j == 1 ? 3 * u01(rng) : 1.0);
      item_major[static_cast<std::size_t>(i * m + j)] = c;
      tier_major(j, i) = c;
    }
  const MckpInstance a{rates, CostView::item_major(item_major.data(), N, m), 3.1};
  const MckpInstance b{rates, CostView::of_tier_major(tier_major), 3.1};
  const auto ra = solve_exact(a), rb = solve_exact(b);
  REQUIRE(ra.status == SolveStatus::Optimal);
  CHECK(ra.objective == rb.objective);
  CHECK(ra.choice == rb.choice);
  check_budget(a, ra);
}

TEST_CASE("large instance: exact is no worse than a NumPy-style Lagrangian bisection", "[exact]") {
  // The peer baseline's method (bench/numpy_lagrangian_ref.py), reimplemented here: costs
  // w_i * EPS_j, lambda by bisection keeping the best feasible allocation.
  const std::vector<double> bits{0, 2, 4, 8, 16};
  const std::vector<double> eps{1.0, 0.0955, 4.02e-3, 1.40e-5, 0.0};
  const std::int64_t N = 300000;
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> lognormal(0.0, 2.0);
  std::vector<double> w(static_cast<std::size_t>(N));
  for (auto& x : w) x = lognormal(rng);
  MatrixRMd cost(5, N);
  for (int j = 0; j < 5; ++j)
    for (std::int64_t i = 0; i < N; ++i) cost(j, i) = w[static_cast<std::size_t>(i)] * eps[static_cast<std::size_t>(j)];
  const double budget = 2.0;
  double lo = 0, hi = *std::max_element(w.begin(), w.end()), best_obj = INFINITY;
  for (int it = 0; it < 50; ++it) {
    const double lam = 0.5 * (lo + hi);
    double rate = 0, obj = 0;
    for (std::int64_t i = 0; i < N; ++i) {
      int b = 0;
      for (int j = 1; j < 5; ++j)
        if (cost(j, i) + lam * bits[static_cast<std::size_t>(j)] < cost(b, i) + lam * bits[static_cast<std::size_t>(b)]) b = j;
      rate += bits[static_cast<std::size_t>(b)];
      obj += cost(b, i);
    }
    if (rate / static_cast<double>(N) <= budget) {
      best_obj = obj;
      hi = lam;
    } else {
      lo = lam;
    }
  }
  const MckpInstance inst{bits, CostView::of_tier_major(cost), budget};
  const auto r = solve_exact(inst);
  ExactOptions sampled;
  sampled.full_selection_max_items = 1000;  // exercise the sampled bracket at scale
  const auto rs = solve_exact(inst, sampled);
  INFO(r.report() << rs.report());
  REQUIRE(r.status == SolveStatus::Optimal);
  REQUIRE(rs.status == SolveStatus::Optimal);
  CHECK(r.objective <= best_obj * (1 + 1e-12));
  CHECK(close(r.objective, rs.objective, 1e-12));
  CHECK(r.lp_bound <= r.objective);
  CHECK(r.objective - r.lp_bound <= 1e-6 * r.objective);  // a tiny integrality gap at this size
  check_budget(inst, r);
}

TEST_CASE("outcomes: infeasible, trivial, one tier, no items", "[exact]") {
  SECTION("budget below the smallest rate is Infeasible with a sentence") {
    Owned o{{0.5, 2, 4}, {3, 2, 1, 3, 2, 1}, 2, 0.25};
    const auto r = solve_exact(o.view());
    CHECK(r.status == SolveStatus::Infeasible);
    CHECK(r.choice.empty());
    CHECK(r.message.find("below the smallest rate") != std::string::npos);
  }
  SECTION("budget affording every cheapest tier is Trivial") {
    // cheapest tiers: item 0 -> tier 1 (cost 1, 2 bits), item 1 -> tier 2 (cost 0, 4 bits): 6 bits <= 3 * 2.
    Owned o{{0, 2, 4}, {5, 1, 2, 5, 3, 0}, 2, 3.0};
    const auto r = solve_exact(o.view());
    CHECK(r.status == SolveStatus::Trivial);
    CHECK(r.choice == std::vector<std::uint8_t>{1, 2});
    CHECK(r.objective == Approx(1.0));
    CHECK(r.gap == 0);
  }
  SECTION("budget 0 with r_0 = 0 evicts everything") {
    Owned o{{0, 2, 4}, {5, 1, 2, 5, 3, 0}, 2, 0.0};
    const auto r = solve_exact(o.view());
    CHECK(r.status == SolveStatus::Optimal);
    CHECK(r.choice == std::vector<std::uint8_t>{0, 0});
    CHECK(r.objective == Approx(10.0));
  }
  SECTION("no items") {
    Owned o{{0, 2}, {}, 0, 1.0};
    const auto r = solve_exact(o.view());
    CHECK(r.status == SolveStatus::Trivial);
    CHECK(r.objective == 0);
  }
}

TEST_CASE("limits too small for the proof give Feasible with an honest gap", "[exact]") {
  std::mt19937_64 rng(17);
  ExactOptions tight;
  tight.max_core_items = 1;
  tight.max_rounds = 1;
  tight.initial_core_items = 1;
  int feasible = 0;
  for (int t = 0; t < 300; ++t) {
    const Owned o = random_instance(rng);
    const auto inst = o.view();
    const auto orc = solve_oracle(inst);
    const auto r = solve_exact(inst, tight);
    if (orc.status == SolveStatus::Infeasible) continue;
    INFO(r.report());
    CHECK(r.lower_bound <= orc.objective + 1e-9);
    CHECK(r.objective >= orc.objective - 1e-9);
    CHECK(r.gap >= 0);
    check_budget(inst, r);
    if (r.status == SolveStatus::Feasible) {
      ++feasible;
      // The status says why: a limit stopped the proof.
      CHECK(r.feasible_reason == FeasibleReason::Limit);
      CHECK(r.status_text() == "feasible (limit)");
      CHECK_THAT(r.summary(), Catch::StartsWith("exact: feasible (limit), "));
    } else {
      CHECK(r.unproven_reason() == FeasibleReason::None);
    }
  }
  CHECK(feasible > 0);
}

TEST_CASE("bad input is an InputError naming the field", "[exact]") {
  std::vector<double> costs{1, 2, NAN, 0};
  SECTION("non-finite cost") {
    const MckpInstance inst{{0, 2}, CostView::item_major(costs.data(), 2, 2), 1.0};
    CHECK_THROWS_WITH(solve_exact(inst), Catch::Contains("cost(1, 0)"));
  }
  SECTION("duplicate rates") {
    const MckpInstance inst{{0, 0}, CostView::item_major(costs.data(), 2, 2), 1.0};
    CHECK_THROWS_AS(solve_exact(inst), InputError);
  }
  SECTION("negative rate") {
    const MckpInstance inst{{-1, 2}, CostView::item_major(costs.data(), 2, 2), 1.0};
    CHECK_THROWS_WITH(solve_exact(inst), Catch::Contains("rates[0]"));
  }
  SECTION("shape mismatch") {
    const MckpInstance inst{{0, 2, 4}, CostView::item_major(costs.data(), 2, 2), 1.0};
    CHECK_THROWS_AS(solve_exact(inst), InputError);
  }
  SECTION("bad options") {
    const MckpInstance inst{{0, 2}, CostView::item_major(costs.data(), 1, 2), 1.0};
    ExactOptions o;
    o.max_core_items = 0;
    CHECK_THROWS_WITH(solve_exact(inst, o), Catch::Contains("max_core_items"));
  }
}

TEST_CASE("item_hull drops strictly and hull-dominated tiers", "[exact]") {
  const std::vector<double> rates{0, 2, 4, 8, 16};
  std::vector<double> rdkv{1, 0.0955, 4.02e-3, 1.40e-5, 0};  // convex: every tier on the hull
  std::vector<double> bad2{1, 1.2, 0.3, 0.1, 0};             // 2-bit worse than eviction
  std::vector<double> flat{1, 0.5, 0.5, 0.2, 0.2};           // ties: smallest rate kept
  CHECK(item_hull(MckpInstance{rates, CostView::item_major(rdkv.data(), 1, 5), 1}, 0) == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(item_hull(MckpInstance{rates, CostView::item_major(bad2.data(), 1, 5), 1}, 0) == std::vector<int>{0, 2, 3, 4});
  // (0,1),(2,.5),(8,.2): slopes -.25, -.05 -> convex; tier 2 and 4 tie with cheaper lower rates.
  CHECK(item_hull(MckpInstance{rates, CostView::item_major(flat.data(), 1, 5), 1}, 0) == std::vector<int>{0, 1, 3});
}

TEST_CASE("rate units: gcd of rate differences on the 1/64 grid", "[exact]") {
  std::vector<double> costs(5, 0.0);
  const auto u1 = rate_units(MckpInstance{{0, 2, 4, 8, 16}, CostView::item_major(costs.data(), 1, 5), 2.0});
  CHECK(u1.integral);
  CHECK(u1.unit == 2.0);
  CHECK(u1.capacity_units == 1);
  const auto u2 = rate_units(MckpInstance{{0, 2.25, 4.5, 16}, CostView::item_major(costs.data(), 1, 4), 2.3});
  CHECK(u2.integral);
  CHECK(u2.unit == 0.25);
  CHECK(u2.capacity_units == 9);  // floor(2.3 / 0.25)
  const auto u3 = rate_units(MckpInstance{{0, 1.0 / 3.0}, CostView::item_major(costs.data(), 1, 2), 2.0});
  CHECK_FALSE(u3.integral);
}
