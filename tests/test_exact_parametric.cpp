// The exact solver's parametric sweep (solvers/exact_parametric.hpp) against independent
// single-budget solves (solve_exact at each budget): random instances of every rate kind and
// cost shape, a large instance (solve_exact's sampled relaxation), and the real stories260K
// model's heads (captured here, their surrogate costs on the default ladder).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/llama2c/capture.hpp"
#include "model/llama2c/llama2c.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "solvers/exact.hpp"
#include "solvers/exact_parametric.hpp"
#include "solvers/families.hpp"
#include "solvers/mckp.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

using Owned = tierlab::testing::OwnedInstance;

bool close(double a, double b, double rel = 1e-12, double abs = 1e-300) {
  return std::fabs(a - b) <= abs + rel * std::max(std::fabs(a), std::fabs(b));
}

// Compares the sweep with solve_exact at every budget; returns the budgets whose choices
// differ (allowed only where two allocations tie on the objective: the caller decides).
int compare_sweep(const MckpInstance& inst, const std::vector<double>& budgets, const ExactOptions& opt = {}) {
  const std::vector<MckpResult> sweep = solve_exact_budgets(inst, budgets, opt);
  REQUIRE(sweep.size() == budgets.size());
  int differ = 0;
  for (std::size_t k = 0; k < budgets.size(); ++k) {
    MckpInstance one = inst;
    one.budget = budgets[k];
    const MckpResult want = solve_exact(one, opt);
    const MckpResult& got = sweep[k];
    INFO("B = " << budgets[k] << ", N = " << inst.items() << ", m = " << inst.tiers() << ": " << want.message << " | "
                << got.message);
    REQUIRE(got.status == want.status);
    if (!want.has_solution()) continue;
    const double scale = std::max(std::fabs(want.objective), std::fabs(want.lp_bound));
    CHECK(std::fabs(got.objective - want.objective) <= 1e-12 * scale + 1e-300);
    CHECK(std::fabs(got.lp_bound - want.lp_bound) <= 1e-12 * scale + 1e-300);
    CHECK(got.lambda == want.lambda);
    CHECK(got.rate_used <= got.rate_budget + 1e-9 * std::max(1.0, got.rate_budget));
    const Evaluation ev = evaluate(one, got.choice);
    CHECK(ev.within_budget);
    CHECK(close(ev.objective, got.objective, 1e-12, 1e-300));
    if (got.choice != want.choice) ++differ;
  }
  return differ;
}

std::vector<double> grid(double a, double b, int n) {
  std::vector<double> v;
  for (int k = 0; k < n; ++k) v.push_back(a + (b - a) * k / std::max(1, n - 1));
  return v;
}

Owned random_instance(std::mt19937_64& rng, std::int64_t n, int rate_kind, int cost_kind) {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  Owned o;
  o.n = n;
  if (rate_kind == 0) o.rates = {0, 2, 4, 8, 16};
  else if (rate_kind == 1) o.rates = {0, 2.25, 3.5, 4.25, 8.5, 16};
  else o.rates = {0, 2.0 + 1.0 / 3.0, 4.1, 8.0 + 1e-3, 16};  // off the 1/64 grid: double rates
  const int m = static_cast<int>(o.rates.size());
  o.costs.resize(static_cast<std::size_t>(n * m));
  for (std::int64_t i = 0; i < n; ++i) {
    const double w = std::exp(4 * u01(rng));
    for (int j = 0; j < m; ++j) {
      double c;
      if (cost_kind == 0) c = w * std::exp(-0.5 * o.rates[static_cast<std::size_t>(j)]) * (0.5 + u01(rng));  // realistic
      else c = 10 * u01(rng);  // non-monotone, non-convex
      if (j == m - 1) c = cost_kind == 0 ? 0.0 : c;  // exact tier: cost 0
      o.costs[static_cast<std::size_t>(i * m + j)] = c;
    }
  }
  return o;
}

}  // namespace

TEST_CASE("The parametric sweep equals solve_exact at every budget on random instances", "[exact][parametric]") {
  std::mt19937_64 rng(20261201);
  const int rate_kind = GENERATE(0, 1, 2);
  const int cost_kind = GENERATE(0, 1);
  for (const std::int64_t n : {1, 7, 64, 1000, 5000}) {
    Owned o = random_instance(rng, n, rate_kind, cost_kind);
    // Budgets from infeasible (below r_min = 0 is impossible: use r_min-shifted grids) to
    // trivial, unsorted, with repeats.
    std::vector<double> budgets = grid(0.0, 17.0, 69);
    budgets.push_back(4.0);
    budgets.push_back(0.0);
    std::shuffle(budgets.begin(), budgets.end(), rng);
    INFO("rates kind " << rate_kind << ", costs kind " << cost_kind << ", n " << n);
    // Continuous random costs: the optimum is unique, so the choices are the same.
    CHECK(compare_sweep(o.view(), budgets) == 0);
  }
}

TEST_CASE("The parametric sweep handles infeasible budgets, one tier, ties and r_min > 0", "[exact][parametric]") {
  std::mt19937_64 rng(7);
  Owned o = random_instance(rng, 200, 0, 0);
  for (double& r : o.rates) r += 1.5;  // r_min = 1.5: budgets below it are infeasible
  CHECK(compare_sweep(o.view(), grid(0.0, 18.0, 37)) == 0);
  // Many ties (integer costs): the objective must agree; the choice may be another optimum.
  Owned t = o;
  for (double& c : t.costs) c = static_cast<double>(rng() % 4);
  compare_sweep(t.view(), grid(1.5, 17.5, 33));
  // One tier: every feasible budget is trivial.
  Owned one;
  one.n = 10;
  one.rates = {4};
  one.costs.assign(10, 1.0);
  CHECK(compare_sweep(one.view(), {0.0, 3.99, 4.0, 9.0}) == 0);
  // No items.
  Owned none;
  none.rates = {0, 16};
  CHECK(solve_exact_budgets(none.view(), {0.0, 1.0}).at(1).status == SolveStatus::Trivial);
  CHECK(solve_exact_budgets(o.view(), {}).empty());
}

TEST_CASE("The parametric sweep equals solve_exact where it brackets lambda* from a sample", "[exact][parametric]") {
  std::mt19937_64 rng(99);
  Owned o = random_instance(rng, 300'000, 0, 0);  // > full_selection_max_items = 2^18
  CHECK(compare_sweep(o.view(), {0.5, 2.0, 3.3, 7.9, 12.0}) == 0);
}

TEST_CASE("The parametric sweep equals solve_exact on the stories260K model's heads", "[exact][parametric][real]") {
  const Llama2cModel model(std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin");
  CaptureOptions copt;
  copt.prompt.generate = 256;
  copt.decode_steps = 8;
  copt.obs_window = 32;
  const CaptureResult cap = capture(model, copt);
  const auto kind = GENERATE(RateKind::Code, RateKind::Total);
  AllocateOptions aopt;
  aopt.rate_kind = kind;
  const std::vector<double> budgets = parse_budget_grid("0:16:0.25");
  int differ = 0, compared = 0;
  for (const HeadData& head : cap.heads) {
    const HeadCosts hc = head_costs(head, cap.meta.rope, aopt);
    // M (the whole ladder) and every option of the families (restricted as the family
    // solvers restrict them).
    FamilyProblem p;
    p.rates = hc.rates;
    p.heads.push_back(FamilyHead{&hc.cost, &hc.a, hc.noise});
    for (const TierOption& option : family_options(aopt.ladder, FamilyChoice::Routed)) {
      const RestrictedCosts rc = restrict_costs(p, {0}, {&option});
      INFO(option.name << " L" << head.layer << ".H" << head.kv_head << " " << to_string(kind));
      differ += compare_sweep(rc.instance(0.0), budgets);
      compared += static_cast<int>(budgets.size());
    }
  }
  // Real costs: ties are rare; every choice that differs is another optimum (checked above).
  CHECK(compared == 20 * 5 * 65);  // 20 heads x (Q:kivi2, Q:kivi4, Q:kivi8, E, M) x 65 budgets
  WARN(differ << " of " << compared << " choices differ (each another optimum of the same objective)");
  CHECK(differ <= compared / 100);
}
