// Families Q/E/M, per-head routing and the pooled (layer/model) multiplier routing
// (solvers/families.hpp), checked against brute-force enumeration of tiny heads.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <set>

#include "model/base/error.hpp"
#include "solvers/families.hpp"

using namespace tierlab;

namespace {

// Ladder evict, kivi2, kivi4, kivi8, exact at code rates 0, 2, 4, 8, 16.
const std::vector<double> kRates{0, 2, 4, 8, 16};
RateLadder ladder5() { return RateLadder::parse("evict,kivi2,kivi4,kivi8,exact"); }

// A random head: eviction cost e_t, finite tiers a_t * noise * 4^-b (times a random factor
// so that some tiers are dominated or out of order), exact 0.
MatrixRMd random_head(std::mt19937_64& rng, int T) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  MatrixRMd c(5, T);
  for (int t = 0; t < T; ++t) {
    const double a = std::exp(4.0 * u(rng) - 3.0);
    c(0, t) = a * (0.2 + u(rng));
    const double noise = std::exp(3.0 * u(rng) - 1.0);
    for (int j = 1; j <= 3; ++j) c(j, t) = a * noise * std::pow(4.0, -kRates[j] / 2.0) * (0.5 + u(rng));
    c(4, t) = 0.0;
  }
  return c;
}

FamilyProblem problem_of(const std::vector<MatrixRMd>& heads, double budget) {
  FamilyProblem p;
  p.rates = kRates;
  p.budget = budget;
  for (const auto& c : heads) p.heads.push_back(FamilyHead{&c, nullptr, {}});
  return p;
}

// Brute force over one head's allocations within a tier set, at a rate cap in bits.
double brute_head(const MatrixRMd& c, const std::vector<int>& tiers, double cap_bits) {
  const int T = static_cast<int>(c.cols());
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> idx(static_cast<std::size_t>(T), 0);
  while (true) {
    double rate = 0, obj = 0;
    for (int t = 0; t < T; ++t) {
      rate += kRates[tiers[idx[t]]];
      obj += c(tiers[idx[t]], t);
    }
    if (rate <= cap_bits + 1e-9) best = std::min(best, obj);
    int k = 0;
    while (k < T && ++idx[k] == static_cast<int>(tiers.size())) idx[k++] = 0;
    if (k == T) break;
  }
  return best;
}

// The least objective of one head at every integer rate cap 0..16T within a tier set
// (a table for brute-forcing pooled budgets by splitting the bits between heads).
std::vector<double> brute_profile(const MatrixRMd& c, const std::vector<int>& tiers) {
  const int T = static_cast<int>(c.cols());
  std::vector<double> prof(static_cast<std::size_t>(16 * T + 1));
  for (int cap = 0; cap <= 16 * T; ++cap) prof[cap] = brute_head(c, tiers, cap);
  return prof;
}

bool uses_only(const std::vector<std::uint8_t>& tiers, std::set<int> allowed) {
  for (auto j : tiers)
    if (!allowed.count(j)) return false;
  return true;
}

double rate_of_tiers(const std::vector<std::uint8_t>& tiers) {
  double r = 0;
  for (auto j : tiers) r += kRates[j];
  return r;
}

}  // namespace

TEST_CASE("family options follow the ladder", "[families]") {
  const auto q = family_options(ladder5(), FamilyChoice::Quantize);
  REQUIRE(q.size() == 3);
  CHECK(q[0].name == "Q:kivi2");
  CHECK(q[0].tiers == std::vector<int>{1, 4});
  const auto e = family_options(ladder5(), FamilyChoice::Evict);
  REQUIRE(e.size() == 1);
  CHECK(e[0].tiers == std::vector<int>{0, 4});
  const auto r = family_options(ladder5(), FamilyChoice::Routed);
  REQUIRE(r.size() == 5);
  CHECK(r.back().family == Family::Mixed);
  CHECK(r.back().tiers.size() == 5);
  CHECK_THROWS_AS(family_options(RateLadder::parse("evict,exact"), FamilyChoice::Quantize), InputError);
  CHECK_THROWS_AS(parse_family_choice("interior"), InputError);
  CHECK(parse_scope("model") == Scope::Model);
}

TEST_CASE("the solver names: greedy is the hull greedy, greedy-raw the raw-ladder one, both family solvers",
          "[families]") {
  CHECK(parse_family_solver("greedy") == FamilySolver::Greedy);
  CHECK(parse_family_solver("greedy-raw") == FamilySolver::GreedyRaw);
  CHECK(to_string(FamilySolver::GreedyRaw) == "greedy-raw");
  CHECK(family_solvers() == std::vector<FamilySolver>{FamilySolver::Exact, FamilySolver::Greedy, FamilySolver::GreedyRaw,
                                                      FamilySolver::Waterfill});
  CHECK_THROWS_WITH(parse_family_solver("raw"), Catch::Contains("greedy-raw"));
}

TEST_CASE("per-head families equal brute force and respect their tiers and budgets", "[families]") {
  std::mt19937_64 rng(7);
  const RateLadder L = ladder5();
  for (int trial = 0; trial < 40; ++trial) {
    const int T = 3 + trial % 4;  // 3..6 tokens
    std::vector<MatrixRMd> heads{random_head(rng, T), random_head(rng, T)};
    const double B = std::vector<double>{0.5, 2.0, 3.0, 5.0, 9.0, 12.0}[trial % 6];
    const FamilyProblem p = problem_of(heads, B);
    const auto Q = solve_families_per_head(p, family_options(L, FamilyChoice::Quantize));
    const auto E = solve_families_per_head(p, family_options(L, FamilyChoice::Evict));
    const auto M = solve_families_per_head(p, family_options(L, FamilyChoice::Mixed));
    REQUIRE(E.has_solution());
    REQUIRE(M.has_solution());
    CHECK(Q.has_solution() == (B >= 2.0));
    for (std::size_t h = 0; h < heads.size(); ++h) {
      const double cap = B * T;
      // Golden: exhaustive enumeration.
      const double bq = std::min({brute_head(heads[h], {1, 4}, cap), brute_head(heads[h], {2, 4}, cap),
                                  brute_head(heads[h], {3, 4}, cap)});
      const double be = brute_head(heads[h], {0, 4}, cap);
      const double bm = brute_head(heads[h], {0, 1, 2, 3, 4}, cap);
      CHECK(E.heads[h].objective == Approx(be).epsilon(1e-12).margin(1e-15));
      CHECK(M.heads[h].objective == Approx(bm).epsilon(1e-12).margin(1e-15));
      CHECK(uses_only(E.heads[h].tiers, {0, 4}));
      CHECK(rate_of_tiers(E.heads[h].tiers) <= cap + 1e-9);
      CHECK(rate_of_tiers(M.heads[h].tiers) <= cap + 1e-9);
      CHECK(M.heads[h].objective <= E.heads[h].objective * (1 + 1e-12) + 1e-15);
      if (Q.has_solution()) {
        CHECK(Q.heads[h].objective == Approx(bq).epsilon(1e-12).margin(1e-15));
        const auto& o = Q.options[Q.heads[h].option];
        CHECK(o.family == Family::Quantize);
        CHECK(uses_only(Q.heads[h].tiers, {o.tiers[0], 4}));  // one finite tier, never evict
        CHECK(rate_of_tiers(Q.heads[h].tiers) <= cap + 1e-9);
        CHECK(M.heads[h].objective <= Q.heads[h].objective * (1 + 1e-12) + 1e-15);
        // The chosen Q option is the best of the option objectives.
        double best = std::numeric_limits<double>::infinity();
        for (double v : Q.heads[h].option_objectives)
          if (!std::isnan(v)) best = std::min(best, v);
        CHECK(Q.heads[h].objective == best);
      }
      CHECK(M.heads[h].bound <= M.heads[h].objective + 1e-15);
    }
    CHECK(M.rate_used <= M.rate_budget + 1e-9);
  }
}

TEST_CASE("routed per head takes the least objective, endpoints on ties", "[families]") {
  const RateLadder L = ladder5();
  // Head 0: finite tiers useless (cost above eviction) -> M's optimum is an E allocation.
  // Head 1: eviction very costly, kivi2 cheap -> M's optimum is Q:kivi2-like at B = 2.
  MatrixRMd h0(5, 4), h1(5, 4);
  h0 << 1.0, 0.1, 0.3, 0.2,  //
      5.0, 5.0, 5.0, 5.0,    //
      4.0, 4.0, 4.0, 4.0,    //
      3.0, 3.0, 3.0, 3.0,    //
      0, 0, 0, 0;
  h1 << 9, 9, 9, 9,              //
      0.01, 0.02, 0.01, 0.03,    //
      0.005, 0.01, 0.005, 0.01,  //
      0.001, 0.002, 0.001, 0.002, 0, 0, 0, 0;
  std::vector<MatrixRMd> heads{h0, h1};
  const FamilyProblem p = problem_of(heads, 4.0);  // 16 bits per head: keep one token exactly (E)
  const auto R = solve_families_per_head(p, family_options(L, FamilyChoice::Routed));
  REQUIRE(R.has_solution());
  CHECK(R.options[R.heads[0].option].family == Family::Evict);
  CHECK(R.heads[0].tiers == std::vector<std::uint8_t>{4, 0, 0, 0});  // keeps the costliest token
  CHECK(R.heads[0].objective == Approx(0.6));
  // Head 1 at 16 bits: kivi4 on all 4 tokens (0.03) beats kivi2 + one exact (0.04 ...).
  CHECK(R.options[R.heads[1].option].family == Family::Quantize);
  CHECK(R.options[R.heads[1].option].name == "Q:kivi4");
  CHECK(R.heads[1].objective == Approx(0.03));
  const auto counts = R.family_counts();
  CHECK(counts == std::vector<int>{1, 1, 0});

  // With a huge tolerance the endpoints always win; with none, M wins where it is strictly better.
  std::mt19937_64 rng(11);
  std::vector<MatrixRMd> rh;
  for (int i = 0; i < 6; ++i) rh.push_back(random_head(rng, 6));
  const FamilyProblem rp = problem_of(rh, 5.0);
  FamilyOptions tol;
  tol.route_tolerance = 1e9;
  const auto Rt = solve_families_per_head(rp, family_options(L, FamilyChoice::Routed), tol);
  CHECK(Rt.family_counts()[2] == 0);
  const auto R0 = solve_families_per_head(rp, family_options(L, FamilyChoice::Routed));
  const auto M0 = solve_families_per_head(rp, family_options(L, FamilyChoice::Mixed));
  CHECK(R0.objective == Approx(M0.objective).epsilon(1e-12));
  CHECK(R0.status == SolveStatus::Optimal);
  // The endpoints kept within the tolerance cost more than M's optimum: feasible, by the tolerance.
  REQUIRE(Rt.objective > M0.objective * (1 + 1e-9));
  CHECK(Rt.status == SolveStatus::Feasible);
  CHECK(Rt.feasible_reason == FeasibleReason::Tolerance);
}

TEST_CASE("pooled scope: brute force for M and E, never worse than per-head routing", "[families]") {
  std::mt19937_64 rng(3);
  const RateLadder L = ladder5();
  int joint = 0, incumbent = 0, relaxed = 0;
  for (int trial = 0; trial < 25; ++trial) {
    const int T = 3 + trial % 2;
    std::vector<MatrixRMd> heads{random_head(rng, T), random_head(rng, T), random_head(rng, T)};
    const double B = std::vector<double>{1.0, 2.0, 3.5, 6.0, 10.0}[trial % 5];
    const FamilyProblem p = problem_of(heads, B);
    const int cap = static_cast<int>(std::floor(B * 3 * T + 1e-9));

    // Golden pooled optimum within a tier set: split the integer bits between the heads.
    auto brute_pooled = [&](const std::vector<int>& tiers) {
      std::vector<std::vector<double>> prof;
      for (const auto& c : heads) prof.push_back(brute_profile(c, tiers));
      double best = std::numeric_limits<double>::infinity();
      const int top = 16 * T;
      for (int a = 0; a <= std::min(cap, top); ++a)
        for (int b = 0; a + b <= cap && b <= top; ++b) {
          const int c = std::min(cap - a - b, top);
          best = std::min(best, prof[0][a] + prof[1][b] + prof[2][c]);
        }
      return best;
    };

    const auto Mp = solve_families_pooled(p, family_options(L, FamilyChoice::Mixed));
    const auto Ep = solve_families_pooled(p, family_options(L, FamilyChoice::Evict));
    REQUIRE(Mp.has_solution());
    REQUIRE(Ep.has_solution());
    CHECK(Mp.objective == Approx(brute_pooled({0, 1, 2, 3, 4})).epsilon(1e-12).margin(1e-15));
    CHECK(Ep.objective == Approx(brute_pooled({0, 4})).epsilon(1e-12).margin(1e-15));
    CHECK(Mp.rate_used <= Mp.rate_budget + 1e-9);
    CHECK(Ep.rate_used <= Ep.rate_budget + 1e-9);
    for (const auto& h : Ep.heads) CHECK(uses_only(h.tiers, {0, 4}));

    const auto Rp = solve_families_pooled(p, family_options(L, FamilyChoice::Routed));
    const auto Rh = solve_families_per_head(p, family_options(L, FamilyChoice::Routed));
    REQUIRE(Rp.has_solution());
    joint += Rp.method.find("options fixed") != std::string::npos;
    incumbent += Rp.method.find("incumbent") != std::string::npos;
    CHECK(Rp.objective <= Rh.objective * (1 + 1e-12) + 1e-15);
    CHECK(Rp.rate_used <= Rp.rate_budget + 1e-9);
    CHECK(Rp.lower_bound <= Mp.objective * (1 + 1e-12) + 1e-15);  // a bound of the pooled optimum
    CHECK(Rp.gap >= 0);
    // Unproven here only because the multiplier fixed each head's family (the knapsacks are exact).
    if (Rp.status == SolveStatus::Feasible) {
      ++relaxed;
      CHECK(Rp.feasible_reason == FeasibleReason::Relaxation);
    }
    // Each head's tiers lie inside its routed option.
    for (const auto& h : Rp.heads) {
      const auto& o = Rp.options[h.option].tiers;
      CHECK(uses_only(h.tiers, std::set<int>(o.begin(), o.end())));
    }

    if (B >= 2.0) {
      const auto Qp = solve_families_pooled(p, family_options(L, FamilyChoice::Quantize));
      const auto Qh = solve_families_per_head(p, family_options(L, FamilyChoice::Quantize));
      REQUIRE(Qp.has_solution());
      CHECK(Qp.objective <= Qh.objective * (1 + 1e-12) + 1e-15);
      CHECK(Qp.lower_bound <= Qp.objective + 1e-15);
      CHECK(Qp.rate_used <= Qp.rate_budget + 1e-9);
      for (const auto& h : Qp.heads) {
        CHECK(Qp.options[h.option].family == Family::Quantize);
        const auto& o = Qp.options[h.option].tiers;
        CHECK(uses_only(h.tiers, std::set<int>(o.begin(), o.end())));
      }
    }
  }
  // Both pooled fills were exercised (the joint knapsack usually wins).
  CHECK(joint > incumbent);
  CHECK(relaxed > 0);
}

TEST_CASE("pooled budgets below every rate are infeasible, not a crash", "[families]") {
  std::mt19937_64 rng(5);
  std::vector<MatrixRMd> heads{random_head(rng, 4), random_head(rng, 4)};
  const FamilyProblem p = problem_of(heads, 1.0);
  const auto Qp = solve_families_pooled(p, family_options(ladder5(), FamilyChoice::Quantize));
  CHECK(Qp.status == SolveStatus::Infeasible);
  CHECK(Qp.heads.empty());
  const auto Qh = solve_families_per_head(p, family_options(ladder5(), FamilyChoice::Quantize));
  CHECK(Qh.status == SolveStatus::Infeasible);
  // At 16 bits everything fits: trivial, objective 0.
  const FamilyProblem full = problem_of(heads, 16.0);
  const auto Mp = solve_families_pooled(full, family_options(ladder5(), FamilyChoice::Mixed));
  CHECK(Mp.status == SolveStatus::Trivial);
  CHECK(Mp.objective == 0.0);
}

TEST_CASE("greedy, greedy-raw and waterfill families stay feasible and never beat exact", "[families]") {
  std::mt19937_64 rng(9);
  const RateLadder L = ladder5();
  std::vector<MatrixRMd> heads;
  std::vector<VectorD> weights;
  for (int i = 0; i < 4; ++i) {
    heads.push_back(random_head(rng, 8));
    weights.push_back(heads.back().row(0).transpose());
  }
  for (double B : {2.0, 4.0, 7.0}) {
    FamilyProblem p = problem_of(heads, B);
    for (std::size_t h = 0; h < heads.size(); ++h) {
      p.heads[h].weights = &weights[h];
      p.heads[h].noise = DistortionModel{1.0, 4.0};
    }
    for (auto choice : {FamilyChoice::Mixed, FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Routed}) {
      const auto opts = family_options(L, choice);
      const auto ex_h = solve_families_per_head(p, opts);
      const auto ex_p = solve_families_pooled(p, opts);
      for (auto solver : {FamilySolver::Greedy, FamilySolver::GreedyRaw, FamilySolver::Waterfill}) {
        FamilyOptions o;
        o.solver = solver;
        const auto h = solve_families_per_head(p, opts, o);
        const auto m = solve_families_pooled(p, opts, o);
        REQUIRE(h.has_solution());
        REQUIRE(m.has_solution());
        for (const FamilyResult* r : {&h, &m})
          if (r->status == SolveStatus::Feasible) CHECK(r->feasible_reason == FeasibleReason::Heuristic);
        CHECK(h.rate_used <= h.rate_budget + 1e-9);
        CHECK(m.rate_used <= m.rate_budget + 1e-9);
        CHECK(h.objective >= ex_h.objective * (1 - 1e-12) - 1e-15);
        CHECK(m.lower_bound <= ex_p.objective * (1 + 1e-12) + 1e-15);
        if (choice == FamilyChoice::Mixed || choice == FamilyChoice::Evict)
          CHECK(m.objective >= ex_p.objective * (1 - 1e-12) - 1e-15);
      }
    }
  }
}

TEST_CASE("heads side by side in one matrix are solved in place, with the allocations of separate matrices",
          "[families]") {
  // The pooled costs read in place (restrict_costs' view, a tier an option lacks read as its
  // penalty through CostView::allowed) against the restricted copy of separate matrices: the
  // same numbers reach the solver, so every allocation, objective and bound is the same.
  std::mt19937_64 rng(21);
  const RateLadder L = ladder5();
  for (int T : {3, 700}) {
    const int H = T == 3 ? 3 : 6;
    std::vector<MatrixRMd> heads;
    for (int h = 0; h < H; ++h) heads.push_back(random_head(rng, T));
    MatrixRMd pooled(5, static_cast<Eigen::Index>(H) * T);
    for (int h = 0; h < H; ++h) pooled.middleCols(static_cast<Eigen::Index>(h) * T, T) = heads[static_cast<std::size_t>(h)];
    for (double B : {1.0, 2.5, 4.0, 9.0}) {
      const FamilyProblem separate = problem_of(heads, B);
      FamilyProblem inplace = separate;
      inplace.heads.clear();
      for (int h = 0; h < H; ++h) inplace.heads.push_back(FamilyHead::columns(pooled, static_cast<Eigen::Index>(h) * T, T));
      std::vector<int> all(static_cast<std::size_t>(H));
      for (int h = 0; h < H; ++h) all[static_cast<std::size_t>(h)] = h;
      for (auto choice : {FamilyChoice::Mixed, FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Routed}) {
        if (choice == FamilyChoice::Quantize && B < 2.0) continue;
        const auto opts = family_options(L, choice);
        // Every head on the first option, then the heads on different options (a penalty).
        std::vector<const TierOption*> same(all.size(), &opts[0]), mixed(all.size());
        for (std::size_t h = 0; h < all.size(); ++h) mixed[h] = &opts[h % opts.size()];
        for (const auto* chosen : {&same, &mixed}) {
          const RestrictedCosts a = restrict_costs(separate, all, *chosen);
          const RestrictedCosts b = restrict_costs(inplace, all, *chosen);
          CHECK_FALSE(a.is_view());
          REQUIRE(b.is_view());
          REQUIRE(a.items() == b.items());
          CHECK(a.penalty == b.penalty);
          const MckpInstance ia = a.instance(B), ib = b.instance(B);
          for (std::int64_t i = 0; i < a.items(); ++i)
            for (int k = 0; k < ia.tiers(); ++k) {
              REQUIRE(ia.cost(i, k) == ib.cost(i, k));
              REQUIRE(a.ladder_tier(i, k) == b.ladder_tier(i, k));
            }
        }
        for (auto solver : {FamilySolver::Exact, FamilySolver::Greedy, FamilySolver::GreedyRaw}) {
          FamilyOptions o;
          o.solver = solver;
          const auto x = solve_families_pooled(separate, opts, o);
          const auto y = solve_families_pooled(inplace, opts, o);
          REQUIRE(x.has_solution() == y.has_solution());
          if (!x.has_solution()) continue;
          CHECK(x.objective == y.objective);
          CHECK(x.lower_bound == y.lower_bound);
          for (int h = 0; h < H; ++h) {
            CHECK(x.heads[static_cast<std::size_t>(h)].option == y.heads[static_cast<std::size_t>(h)].option);
            CHECK(x.heads[static_cast<std::size_t>(h)].tiers == y.heads[static_cast<std::size_t>(h)].tiers);
          }
        }
      }
    }
  }
}

TEST_CASE("a cost view reads an item's disallowed tiers as the penalty, and rejects masks it cannot hold",
          "[families]") {
  const MatrixRMd c = (MatrixRMd(3, 2) << 1, 2, 3, 4, 5, 6).finished();
  MckpInstance inst;
  inst.rates = {0, 1, 2};
  inst.cost = CostView::of_tier_major(c);
  inst.budget = 1;
  const std::vector<std::uint8_t> allowed{0b101, 0b111};
  inst.cost.allowed = allowed.data();
  inst.cost.penalty = 99;
  CHECK(inst.cost(0, 0) == 1);
  CHECK(inst.cost(0, 1) == 99);
  CHECK(inst.cost(0, 2) == 5);
  CHECK(inst.cost(1, 1) == 4);
  inst.cost.offsets = {2 * 2, 0, 2};  // tiers read in the order 2, 0, 1
  CHECK(inst.cost(1, 0) == 6);
  CHECK(inst.cost(0, 1) == 99);
  CHECK(inst.cost(1, 2) == 4);
  CHECK_NOTHROW(inst.validate());
  inst.cost.offsets = {0, 2};
  CHECK_THROWS_WITH(inst.validate(), Catch::Contains("offsets has 2 entries for 3 tiers"));
  inst.cost.offsets.clear();
  inst.cost.penalty = std::numeric_limits<double>::infinity();
  CHECK_THROWS_WITH(inst.validate(), Catch::Contains("penalty"));
}

TEST_CASE("the multiplier routing's memo gives every budget the result of a solve without it, and forgets other costs",
          "[families]") {
  std::mt19937_64 rng(33);
  const RateLadder L = ladder5();
  std::vector<MatrixRMd> heads;
  for (int h = 0; h < 5; ++h) heads.push_back(random_head(rng, 300));
  std::vector<MatrixRMd> others;  // the same shapes, other values, elsewhere in memory
  for (int h = 0; h < 5; ++h) others.push_back(random_head(rng, 300));
  for (auto choice : {FamilyChoice::Quantize, FamilyChoice::Routed, FamilyChoice::Evict}) {
    const auto opts = family_options(L, choice);
    RoutingMemo memo;
    FamilyOptions with;
    with.routing_memo = &memo;
    for (double B : {2.0, 2.5, 2.4999, 3.0, 2.5001, 6.0}) {
      const FamilyProblem p = problem_of(heads, B);
      const RoutingMultiplier a = route_by_multiplier(p, opts), b = route_by_multiplier(p, opts, with);
      CHECK(a.lambda == b.lambda);
      CHECK(a.bound == b.bound);
      CHECK(a.option_of_head == b.option_of_head);
      CHECK(a.head_rate_bits == b.head_rate_bits);
      CHECK(a.steps == b.steps);
      const FamilyResult x = solve_families_pooled(p, opts), y = solve_families_pooled(p, opts, with);
      CHECK(x.objective == y.objective);
      for (std::size_t h = 0; h < heads.size(); ++h) CHECK(x.heads[h].tiers == y.heads[h].tiers);
    }
    CHECK(memo.hits > 0);  // nearby budgets try the same first midpoints
    // Other costs: the memo forgets what it held rather than answer from it.
    const FamilyProblem q = problem_of(others, 2.5);
    const RoutingMultiplier a = route_by_multiplier(q, opts), b = route_by_multiplier(q, opts, with);
    CHECK(a.lambda == b.lambda);
    CHECK(a.option_of_head == b.option_of_head);
    CHECK(a.bound == b.bound);
  }
}
