// Seed allocators (solvers/seed_allocators.hpp): RateQuant, RDKV, routed.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "model/base/error.hpp"
#include "model/surrogate.hpp"
#include "solvers/seed_allocators.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

MatrixRM gaussian(int rows, int cols, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> n(0.0f, scale);
  MatrixRM m(rows, cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) m(i, j) = n(rng);
  return m;
}

// Heads of different key scales so the allocators have something to trade.
std::vector<SurrogateCosts> random_heads(const RateLadder& ladder, int heads, int T, int d) {
  std::mt19937 rng(7);
  std::vector<SurrogateCosts> out;
  for (int h = 0; h < heads; ++h) {
    const MatrixRM k = gaussian(T, d, rng, 0.5f + 0.7f * h), v = gaussian(T, d, rng), q = gaussian(8, d, rng, 0.5f + 0.3f * h);
    out.push_back(surrogate_costs(k, v, all_visible(q, k.rows()), ladder));
  }
  return out;
}

SeedProblem problem_of(const RateLadder& ladder, const std::vector<SurrogateCosts>& heads, double budget, int d) {
  SeedProblem p;
  p.ladder = ladder;
  for (const auto& h : heads) p.heads.push_back(&h);
  p.budget = budget;
  p.head_dim = d;
  p.rate_kind = RateKind::Code;  // the expectations below count code bits
  return p;
}

}  // namespace

TEST_CASE("Seed allocator registry", "[seed]") {
  CHECK(seed_allocator_methods().size() == 4);  // ratequant, rdkv, routed, granularity
  const RateLadder ladder = RateLadder::parse("evict,token2,token4,token8,exact");
  const auto heads = random_heads(ladder, 2, 16, 8);
  const SeedProblem p = problem_of(ladder, heads, 4.0, 8);
  const std::string e = testing::error_of<InputError>([&] { allocate_seed("rate-quant", {}, p); });
  CHECK(e.find("ratequant") != std::string::npos);
  CHECK(e.find("rdkv") != std::string::npos);
  CHECK(e.find("granularity") != std::string::npos);
  const std::string q = testing::error_of<InputError>([&] { allocate_seed("rdkv", {{"kernal", "5"}}, p); });
  CHECK(q.find("kernel") != std::string::npos);
  const std::string k = testing::error_of<InputError>([&] { allocate_seed("kvcobra", {}, p); });
  CHECK(k.find("kvcobra_allocator.hpp") != std::string::npos);
}

TEST_CASE("RateQuant: per-head bits by water-filling meet the budget and the KKT conditions", "[seed]") {
  const RateLadder ladder = RateLadder::parse("evict,token2,token4,token8,exact");
  const int d = 16, T = 32, H = 4;
  const auto heads = random_heads(ladder, H, T, d);
  for (double B : {3.0, 5.0, 8.0}) {
    const SeedProblem p = problem_of(ladder, heads, B, d);
    const SeedAllocation a = allocate_seed("ratequant", {}, p);
    REQUIRE(a.tiers.size() == static_cast<std::size_t>(H));
    CHECK(a.rate_used <= a.rate_budget + 1e-9);
    CHECK(a.mean_rate() <= B + 1e-9);
    // Each head dense at one non-evicting tier.
    for (const auto& t : a.tiers) {
      CHECK(t.front() != 0);
      CHECK(std::all_of(t.begin(), t.end(), [&](std::uint8_t x) { return x == t.front(); }));
    }
    // The continuous stage: mean bits = B, and the closed form with the water level theta
    // from each head's own fit (recomputed here): b_h = clamp(log_beta(w alpha ln beta / theta), 0, 16).
    double mean = 0;
    for (int h = 0; h < H; ++h) {
      const NoiseFit fit = fit_noise(heads[h], QuantizerKind::PerToken);
      const double w = heads[h].weights.a.sum();
      const double b = std::clamp(std::log(w * fit.alpha * std::log(fit.beta) / a.multiplier) / std::log(fit.beta), 0.0, 16.0);
      CHECK(a.continuous_bits[h] == Approx(b).margin(1e-6));
      mean += a.continuous_bits[h] / H;
    }
    CHECK(mean == Approx(B).margin(1e-6));
    CHECK(a.max_kkt_residual < 1e-6);
  }
}

TEST_CASE("RDKV: reflect-pooled scores, argmin per token, lambda by bisection", "[seed]") {
  const RateLadder ladder = RateLadder::parse("evict,token2,token4,token8,exact");
  SECTION("hand case") {
    // Attention (1,0,0,0,0,0): reflect avg pool k5 -> (.2,.2,.2,0,0,0). At B = 4 bits
    // (24 bits for 6 tokens) the three scored tokens cannot all have 16 bits (48); at
    // 8 bits each (24) the budget is met exactly, zero-score tokens take 0 bits.
    SurrogateCosts c;
    c.ladder = ladder;
    c.cost = MatrixRMd::Zero(ladder.size(), 6);
    c.noise = MatrixRMd::Zero(ladder.size(), 6);
    c.weights.attention = VectorD::Zero(6);
    c.weights.attention(0) = 1.0;
    c.weights.a = VectorD::Zero(6);
    c.weights.evict_cost = VectorD::Zero(6);
    SeedProblem p;
    p.ladder = ladder;
    p.heads = {&c};
    p.budget = 4.0;
    p.head_dim = 8;
    p.rate_kind = RateKind::Code;  // 24 code bits over 6 tokens
    const SeedAllocation a = allocate_seed("rdkv", {}, p);
    CHECK(a.tiers[0] == std::vector<std::uint8_t>{3, 3, 3, 0, 0, 0});
    CHECK(a.rate_used == Approx(24.0));
    // Without smoothing only token 0 has a score: it takes 16 bits.
    const SeedAllocation raw = allocate_seed("rdkv", {{"kernel", "1"}}, p);
    CHECK(raw.tiers[0] == std::vector<std::uint8_t>{4, 0, 0, 0, 0, 0});
    // A ladder with bits outside the paper's table needs eps.
    p.ladder = RateLadder::parse("evict,token3,exact");
    CHECK_THROWS_AS(allocate_seed("rdkv", {}, p), InputError);
  }
  SECTION("budget respected and each token at its argmin") {
    const int d = 16, T = 40;
    const auto heads = random_heads(ladder, 3, T, d);
    for (double B : {0.5, 2.0, 5.0, 10.0}) {
      const SeedProblem p = problem_of(ladder, heads, B, d);
      const SeedAllocation a = allocate_seed("rdkv", {}, p);
      CHECK(a.mean_rate() <= B + 1e-9);
      const std::vector<double> eps = {1.0, 0.0955, 4.02e-3, 1.40e-5, 0.0}, bits = {0, 2, 4, 8, 16};
      for (std::size_t h = 0; h < heads.size(); ++h) {
        std::vector<double> x(heads[h].weights.attention.data(), heads[h].weights.attention.data() + T);
        // independent reflect-padded average pool, kernel 5
        std::vector<double> s(T);
        for (int t = 0; t < T; ++t) {
          double acc = 0;
          for (int u = t - 2; u <= t + 2; ++u) acc += x[u < 0 ? -u : (u >= T ? 2 * (T - 1) - u : u)];
          s[t] = acc / 5;
        }
        for (int t = 0; t < T; ++t) {
          const int j = a.tiers[h][t];
          for (int k = 0; k < 5; ++k)
            CHECK(s[t] * eps[j] + a.multiplier * bits[j] <= s[t] * eps[k] + a.multiplier * bits[k] + 1e-12);
        }
      }
    }
  }
}

TEST_CASE("Routed allocator meets the budget with one family per head", "[seed]") {
  const RateLadder ladder = RateLadder::parse("evict,token2,token4,exact");
  const int d = 16, T = 24;
  const auto heads = random_heads(ladder, 3, T, d);
  for (const char* scope : {"head", "model"}) {
    const SeedProblem p = problem_of(ladder, heads, 3.0, d);
    const SeedAllocation a = allocate_seed("routed", {{"scope", scope}}, p);
    REQUIRE(a.tiers.size() == 3);
    CHECK(a.mean_rate() <= 3.0 + 1e-9);
    CHECK(a.objective >= 0);
  }
}
