// The restricted allocators (solvers/granularity.hpp) against an exhaustive search: on small
// instances every allocation of every token of every head is enumerated, the ones the
// restriction admits (a predicate written from the definition, not from the solver) and that
// meet the budget are kept, and the least objective must equal the solver's.
// Then the granularity analysis of a scenario run (scenarios/analyses/granularity.hpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "model/base/error.hpp"
#include <nlohmann/json.hpp>

#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "solvers/granularity.hpp"
#include "solvers/seed_allocators.hpp"
#include "support.hpp"

using namespace tierlab;

namespace {

struct Instance {
  std::vector<MatrixRMd> costs;
  GranularityProblem p;
};

Instance random_instance(std::uint64_t seed, int layers, int kv, int T, std::vector<double> rates, double B) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Instance in;
  const int m = static_cast<int>(rates.size());
  for (int i = 0; i < layers * kv; ++i) {
    MatrixRMd c(m, T);
    for (int t = 0; t < T; ++t) {
      // Costs falling with the tier, as the surrogate's do, with the exact tier at 0; a few
      // heads whose middle tier is worse than eviction (dominated), as real heads have.
      double prev = 1.0 + 3 * u(rng);
      c(0, t) = prev;
      for (int j = 1; j < m - 1; ++j) c(j, t) = prev = (u(rng) < 0.15 ? 1.3 : 0.6 * u(rng)) * prev;
      c(m - 1, t) = 0.0;
    }
    in.costs.push_back(c);
  }
  in.p.rates = std::move(rates);
  for (const MatrixRMd& c : in.costs) in.p.costs.push_back(&c);
  in.p.n_layers = layers, in.p.n_kv_heads = kv;
  in.p.budget = B;
  in.p.sink = 1, in.p.recent = 1, in.p.age_steps = 2;
  return in;
}

// Whether the restriction admits `a` (a[h][t] = tier), from its definition.
bool admits(Granularity g, const GranularityProblem& p, const std::vector<std::vector<int>>& a) {
  const int H = static_cast<int>(a.size()), T = static_cast<int>(a[0].size()), m = static_cast<int>(p.rates.size());
  const int kv = p.n_kv_heads;
  auto head_bits = [&](int h) {
    double s = 0;
    for (int t = 0; t < T; ++t) s += p.rates[static_cast<std::size_t>(a[h][t])];
    return s;
  };
  auto all_same = [&](const std::function<int(int, int)>& key) {  // tokens with equal key share a tier
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t)
        for (int h2 = 0; h2 < H; ++h2)
          for (int t2 = 0; t2 < T; ++t2)
            if (key(h, t) == key(h2, t2) && a[h][t] != a[h2][t2]) return false;
    return true;
  };
  auto keep_or_evict = [&] {
    for (const auto& row : a)
      for (int j : row)
        if (j != 0 && j != m - 1) return false;
    return true;
  };
  auto age_monotone = [&](int h) {  // tier never increases with age
    for (int t = 0; t < T; ++t)
      for (int t2 = 0; t2 < T; ++t2)
        if (t2 < t && a[h][t2] > a[h][t]) return false;  // t2 older than t
    return true;
  };
  switch (g) {
    case Granularity::Uniform:
      return all_same([](int, int) { return 0; }) && a[0][0] != 0;
    case Granularity::Layer: return all_same([&](int h, int) { return h / kv; });
    case Granularity::Head: return all_same([&](int h, int) { return h; });
    case Granularity::Bands: return all_same([&](int, int t) { return position_band(t, T, p.sink, p.recent); });
    case Granularity::BandsHead: return all_same([&](int h, int t) { return h * 3 + position_band(t, T, p.sink, p.recent); });
    case Granularity::Age:
      return all_same([&](int, int t) { return age_band(t, T, p.age_steps); }) && age_monotone(0);
    case Granularity::AgeHead: {
      if (!all_same([&](int h, int t) { return h * 100 + age_band(t, T, p.age_steps); })) return false;
      for (int h = 0; h < H; ++h)
        if (!age_monotone(h)) return false;
      return true;
    }
    case Granularity::EvictShared: return keep_or_evict() && all_same([&](int h, int t) { return (h / kv) * 1000 + t; });
    case Granularity::EvictHead:
      if (!keep_or_evict()) return false;
      for (int h = 0; h < H; ++h)
        if (head_bits(h) > p.budget * T + 1e-9) return false;
      return true;
    case Granularity::EvictLayer:
      if (!keep_or_evict()) return false;
      for (int l = 0; l < H / kv; ++l) {
        double s = 0;
        for (int h = l * kv; h < (l + 1) * kv; ++h) s += head_bits(h);
        if (s > p.budget * T * kv + 1e-9) return false;
      }
      return true;
    case Granularity::TokenHead:
      for (int h = 0; h < H; ++h)
        if (head_bits(h) > p.budget * T + 1e-9) return false;
      return true;
    case Granularity::Token: return true;
  }
  return false;
}

// The least objective over every allocation the restriction admits within the budget (+inf
// when none).
double exhaustive(Granularity g, const Instance& in) {
  const GranularityProblem& p = in.p;
  const int H = static_cast<int>(p.costs.size()), T = p.tokens(), m = static_cast<int>(p.rates.size());
  std::vector<std::vector<int>> a(static_cast<std::size_t>(H), std::vector<int>(static_cast<std::size_t>(T), 0));
  const long long n = static_cast<long long>(std::pow(m, H * T));
  double best = std::numeric_limits<double>::infinity();
  for (long long code = 0; code < n; ++code) {
    long long c = code;
    double bits = 0, obj = 0;
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        a[h][t] = static_cast<int>(c % m), c /= m;
        bits += p.rates[static_cast<std::size_t>(a[h][t])];
        obj += (*p.costs[static_cast<std::size_t>(h)])(a[h][t], t);
      }
    if (bits > p.budget * H * T + 1e-9 || obj >= best) continue;
    if (admits(g, p, a)) best = obj;
  }
  return best;
}

}  // namespace

TEST_CASE("every restricted allocator equals an exhaustive search over the allocations its restriction admits") {
  // 2 layers x 2 KV heads x 3 tokens over evict, a 3-bit tier and exact: 3^12 allocations.
  int checked = 0, infeasible = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed)
    for (double B : {1.5, 3.0, 6.0, 10.0}) {
      const Instance in = random_instance(seed, 2, 2, 3, {0.0, 3.0, 16.0}, B);
      for (Granularity g : all_granularities()) {
        INFO("seed " << seed << ", B = " << B << ", " << to_string(g));
        const GranularAllocation a = solve_granularity(in.p, g);
        const double oracle = exhaustive(g, in);
        if (!std::isfinite(oracle)) {
          CHECK_FALSE(a.feasible());
          ++infeasible;
          continue;
        }
        REQUIRE(a.status == SolveStatus::Optimal);
        CHECK(a.objective == Approx(oracle).epsilon(1e-12).margin(1e-12));
        CHECK(a.rate <= B + 1e-9);
        ++checked;
      }
    }
  CHECK(checked > 100);
  CHECK(infeasible > 0);  // uniform at B = 1.5: no tier but eviction fits
}

TEST_CASE("with a four-tier ladder and four age bands the band and age restrictions still match the exhaustive search") {
  // 1 layer x 2 heads x 4 tokens over 4 tiers: 4^8 allocations; bands of 1 + 2 + 1 tokens.
  for (std::uint64_t seed = 10; seed <= 12; ++seed) {
    Instance in = random_instance(seed, 1, 2, 4, {0.0, 2.0, 5.0, 16.0}, 5.5);
    in.p.age_steps = 4;
    for (Granularity g : {Granularity::Bands, Granularity::BandsHead, Granularity::Age, Granularity::AgeHead,
                          Granularity::Head, Granularity::Token}) {
      INFO("seed " << seed << ", " << to_string(g));
      const GranularAllocation a = solve_granularity(in.p, g);
      REQUIRE(a.feasible());
      CHECK(a.objective == Approx(exhaustive(g, in)).epsilon(1e-12).margin(1e-12));
    }
  }
}

TEST_CASE("the full per-token allocation is never worse than any restriction under the surrogate, on larger instances") {
  for (std::uint64_t seed = 20; seed <= 24; ++seed) {
    Instance in = random_instance(seed, 3, 4, 200, {0.0, 3.0, 5.0, 9.0, 16.0}, 4.0);
    in.p.sink = 4, in.p.recent = 32, in.p.age_steps = 4;
    const GranularAllocation full = solve_granularity(in.p, Granularity::Token);
    REQUIRE(full.status == SolveStatus::Optimal);
    for (Granularity g : all_granularities()) {
      INFO("seed " << seed << ", " << to_string(g));
      const GranularAllocation a = solve_granularity(in.p, g);
      REQUIRE(a.feasible());
      CHECK(a.rate <= 4.0 + 1e-9);
      CHECK(full.objective <= a.objective * (1 + 1e-12) + 1e-12);
      // Each head's tiers as the restriction says: one tier per head for `head`.
      if (g == Granularity::Head)
        for (const auto& row : a.tiers) CHECK(std::all_of(row.begin(), row.end(), [&](auto j) { return j == row[0]; }));
    }
  }
}

TEST_CASE("a granularity problem names the field and value it refuses") {
  Instance in = random_instance(1, 1, 2, 3, {0.0, 3.0, 16.0}, 4);
  in.p.rates = {1.0, 3.0, 16.0};
  CHECK_THROWS_WITH(solve_granularity(in.p, Granularity::Head), Catch::Contains("rates[0] = 1"));
  in.p.rates = {0.0, 3.0, 16.0};
  in.p.age_steps = 0;
  CHECK_THROWS_WITH(solve_granularity(in.p, Granularity::Age), Catch::Contains("age_steps = 0"));
  in.p.age_steps = 2;
  in.p.n_kv_heads = 3;
  CHECK_THROWS_WITH(solve_granularity(in.p, Granularity::Head), Catch::Contains("must be n_layers x n_kv_heads"));
  CHECK_THROWS_WITH(parse_granularity("per-token"), Catch::Contains("known: uniform, layer, head"));
}

// ---- the granularity analysis of a scenario run ------------------------------------------

namespace {

nlohmann::json run_granularity(const tierlab::testing::TempDir& dir, const std::string& extra) {
  const std::string file = dir.file("g.yaml");
  std::ofstream(file) << "name: tiny-granularity\n"
                         "traces:\n  synthetic:\n    presets: [tiny]\n    seeds: [0, 1]\n    context_lengths: [64]\n"
                         "    overrides: {n_layers: 2, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
                         "ladder: evict,kivi2,kivi4,exact\nbudgets: [3, 6]\nbootstrap: 200\n"
                      << extra;
  const Scenario sc = load_scenario(file);
  RunOptions ro;
  ro.out = dir.file("out");
  ro.backend = Backend::Cpu;
  ro.progress = false;
  REQUIRE(run_scenario(sc, ro).tables_written);
  return nlohmann::json::parse(tierlab::testing::slurp(ro.out + "/tables/granularity.json"));
}

}  // namespace

TEST_CASE("a granularity run reports every restriction's captured share: M* one, uniform zero, none above M* under the surrogate") {
  const tierlab::testing::TempDir dir("granularity-run");
  const nlohmann::json t = run_granularity(dir, "granularity: {sink: 2, recent: 8, age_steps: 2}\n");
  int rows = 0;
  for (const auto& r : t.at("rows")) {
    INFO(r.dump());
    const std::string g = r.at("restriction").get<std::string>();
    const double share = r.at("share").is_number() ? r.at("share").get<double>() : NAN;
    if (g == "token") CHECK(share == Approx(1.0));
    if (g == "uniform") CHECK(share == Approx(0.0).margin(1e-12));
    if (r.at("surrogate_share_median").is_number()) CHECK(r.at("surrogate_share_median").get<double>() <= 1 + 1e-9);
    ++rows;
  }
  CHECK(rows == 2 * static_cast<int>(all_granularities().size()));  // one preset, two budgets
  const std::string summary = tierlab::testing::slurp(dir.file("out") + "/summary.md");
  CHECK_THAT(summary, Catch::Contains("## What each engine granularity captures"));
  CHECK_THAT(summary, Catch::Contains("the engine axis that captures most is"));
  // The allocations in an engine's terms: per layer a tier name, per band its tier.
  const nlohmann::json a = nlohmann::json::parse(tierlab::testing::slurp(dir.file("out") + "/tables/granularity_allocations.json"));
  const nlohmann::json& cell = a.at("tiny-s0-T64").at("6");
  CHECK(cell.at("layer").at("layers").size() == 2);
  CHECK(cell.at("bands").at("bands").contains("sink"));
  CHECK(cell.at("age_head").at("heads").at(0).at(0).size() == 2);
}

TEST_CASE("a granularity section names the key and value it refuses") {
  const auto err = [](const std::string& g) {
    return tierlab::testing::error_of<InputError>([&] {
      parse_scenario("name: x\ntraces:\n  synthetic:\n    presets: [tiny]\nbudgets: [3]\n" + g, "g.yaml");
    });
  };
  CHECK_THAT(err("granularity: {restrictions: [per-token]}\n"), Catch::Contains("unknown granularity 'per-token'"));
  CHECK_THAT(err("granularity: {age_steps: 0}\n"), Catch::Contains("granularity.age_steps"));
  CHECK_THAT(err("granularity: {window: 3}\n"), Catch::Contains("window"));
}

TEST_CASE("the granularity seed allocator is the restricted solver, reached by name like every seed allocator") {
  // Surrogate costs of 2 layers x 2 heads of a tiny synthetic trace, through allocate_seed.
  SynthParams sp = synth_preset("tiny");
  sp.n_layers = 2, sp.n_kv_heads = 2, sp.head_dim = 16, sp.prompt_len = 64, sp.obs_window = 8, sp.decode_steps = 1;
  const TraceMeta meta = synth_meta(sp);
  const RateLadder ladder = RateLadder::parse("evict,kivi2,kivi4,exact");
  std::vector<SurrogateCosts> costs;
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) {
      const HeadData head = synth_head(sp, l, h);
      costs.push_back(surrogate_costs(head, meta.rope, observation_queries(head), ladder));
    }
  SeedProblem sp2;
  sp2.ladder = ladder;
  for (const auto& c : costs) sp2.heads.push_back(&c);
  sp2.budget = 4, sp2.head_dim = 16, sp2.n_kv_heads = 2;
  GranularityProblem gp;
  gp.rates = ladder_rates(sp2);
  for (const auto& c : costs) gp.costs.push_back(&c.cost);
  gp.n_layers = 2, gp.n_kv_heads = 2, gp.budget = 4;
  for (const char* r : {"layer", "bands_head", "age", "evict_shared", "token"}) {
    INFO(r);
    const SeedAllocation a = allocate_seed("granularity", {{"restriction", r}}, sp2);
    const GranularAllocation g = solve_granularity(gp, parse_granularity(r));
    REQUIRE(a.status == SolveStatus::Optimal);
    CHECK(a.tiers == g.tiers);
    CHECK(a.objective == Approx(g.objective).epsilon(1e-12));
    CHECK(a.mean_rate() <= 4 + 1e-9);
  }
  CHECK_THROWS_WITH(allocate_seed("granularity", {{"restriction", "per-token"}}, sp2), Catch::Contains("unknown granularity"));
  sp2.n_kv_heads = 3;
  CHECK_THROWS_WITH(allocate_seed("granularity", {{"restriction", "layer"}}, sp2), Catch::Contains("SeedProblem.n_kv_heads = 3"));
}
