// TurboQuant's key quantizer (key_quantizer.hpp, model/quantizers/turboquant.cpp): the Lloyd-Max
// scalar stage against the published N(0,1) table, the random rotation, the rate with
// fractional channel splits, the prod variant's unbiased inner products, and seeds.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/synthetic/synthetic.hpp"

using namespace tierlab;

TEST_CASE("Lloyd-Max on N(0,1) reproduces the published MSE table within 0.5%", "[key_quantizer][turboquant]") {
  // Max (1960) / docs/methods.md section 1: 1 bit 0.3634, 2 bits 0.1175, 3 bits 0.03455, 4 bits 0.009501.
  const double table[4] = {0.3634, 0.1175, 0.03455, 0.009501};
  for (int b = 1; b <= 4; ++b) CHECK(std::abs(lloyd_max_gaussian(b).mse / table[b - 1] - 1.0) < 0.005);
  // 1 bit: levels +-sqrt(2/pi) = +-0.797885, MSE = 1 - 2/pi = 0.363380.
  const LloydMaxCodebook one = lloyd_max_gaussian(1);
  CHECK(one.levels[1] == Approx(std::sqrt(2.0 / M_PI)).epsilon(1e-8));
  CHECK(one.mse == Approx(1.0 - 2.0 / M_PI).epsilon(1e-8));
  // 2 bits: levels +-0.4528, +-1.5104; thresholds 0, +-0.9816.
  const LloydMaxCodebook two = lloyd_max_gaussian(2);
  REQUIRE(two.levels.size() == 4);
  CHECK(two.levels[0] == Approx(-1.5104).margin(1e-4));
  CHECK(two.levels[1] == Approx(-0.4528).margin(1e-4));
  CHECK(two.levels[2] == Approx(0.4528).margin(1e-4));
  CHECK(two.levels[3] == Approx(1.5104).margin(1e-4));
  CHECK(two.thresholds[0] == Approx(-0.9816).margin(1e-4));
  CHECK(two.thresholds[1] == Approx(0.0).margin(1e-9));
  CHECK(two.thresholds[2] == Approx(0.9816).margin(1e-4));
  // The Lloyd-Max MSE sits below the optimal uniform quantizer's (0.1189, 0.03744, 0.01154)
  // and above the Shannon bound 2^(-2b).
  const double uniform[3] = {0.1189, 0.03744, 0.01154};
  for (int b = 2; b <= 4; ++b) {
    CHECK(lloyd_max_gaussian(b).mse < uniform[b - 2]);
    CHECK(lloyd_max_gaussian(b).mse > std::pow(2.0, -2.0 * b));
  }
}

TEST_CASE("The seeded rotation is orthogonal and reproducible", "[key_quantizer][turboquant]") {
  const MatrixRMd R = random_orthogonal(16, 7);
  CHECK((R * R.transpose() - MatrixRMd::Identity(16, 16)).cwiseAbs().maxCoeff() < 1e-12);
  CHECK((random_orthogonal(16, 7) - R).cwiseAbs().maxCoeff() == 0.0);
  CHECK((random_orthogonal(16, 8) - R).cwiseAbs().maxCoeff() > 0.1);
}

TEST_CASE("TurboQuant's rate: b + 16/d, fractional rates by channel split, prod + 32/d", "[key_quantizer][turboquant]") {
  SynthParams p = synth_preset("tiny");
  p.head_dim = 128;
  p.prompt_len = 64;
  const HeadData h = synth_head(p, 0, 0);
  auto rate = [&](const KeyQuantizerParams& params) {
    return make_key_quantizer("turboquant", params)->quantize(h, RopeParams{}).rate();
  };
  CHECK(rate({{"bits", "3"}}).code_bits == Approx(3.0));
  CHECK(rate({{"bits", "3"}}).total_bits == Approx(3.0 + 16.0 / 128));
  CHECK(rate({{"bits", "2.5"}}).code_bits == Approx(2.5));  // 64 x 3 + 64 x 2
  // The paper's "2.5-bit" split: 32 channels x 3 + 96 x 2 = 288 code bits per 128 = 2.25.
  CHECK(rate({{"bits", "2"}, {"high_channels", "32"}}).code_bits == Approx(2.25));
  const ChannelSplit s = turboquant_split(2.25, 128);
  CHECK(s.n_high == 32);
  CHECK(s.high_bits == 3);
  CHECK(rate({{"bits", "3"}, {"variant", "prod"}}).total_bits == Approx(3.0 + 32.0 / 128));
}

TEST_CASE("TurboQuant prod gives unbiased inner products; mse shrinks them", "[key_quantizer][turboquant]") {
  // One key, one query, averaged over 400 seeds: E[<q, k^>] = <q, k> for prod (QJL), while the
  // 1-bit mse quantizer is biased towards 0 (it keeps E|u_j| sqrt(2/pi) of each coordinate).
  const int d = 32;
  SeededNormal g(123);
  HeadData h;
  h.keys.resize(1, d);
  VectorD q(d);
  for (int j = 0; j < d; ++j) {
    h.keys(0, j) = static_cast<float>(g.normal());
    q(j) = g.normal();
  }
  for (int j = 0; j < d; ++j) q(j) += h.keys(0, j);  // correlated, so <q, k> is well away from 0
  const double exact = q.dot(h.keys.row(0).transpose().cast<double>());
  auto mean_ip = [&](const std::string& variant, int bits) {
    double s = 0.0, s2 = 0.0;
    const int n = 400;
    for (int seed = 0; seed < n; ++seed) {
      const auto tq = make_key_quantizer(
          "turboquant", {{"bits", std::to_string(bits)}, {"variant", variant}, {"seed", std::to_string(seed)}});
      const double ip = q.dot(tq->quantize(h, RopeParams{}).keys.row(0).transpose().cast<double>());
      s += ip;
      s2 += ip * ip;
    }
    const double mean = s / n;
    return std::make_pair(mean, std::sqrt((s2 / n - mean * mean) / n));  // mean, its standard error
  };
  const auto [prod_mean, prod_se] = mean_ip("prod", 2);
  CHECK(std::abs(prod_mean - exact) < 4.0 * prod_se);
  const auto [mse_mean, mse_se] = mean_ip("mse", 1);
  CHECK(mse_mean < exact - 8.0 * mse_se);
  CHECK(std::abs(mse_mean / exact - 2.0 / M_PI) < 0.1);  // shrinkage ~ E[|g|]^2 = 2/pi
}

TEST_CASE("TurboQuant is deterministic per seed and improves with bits", "[key_quantizer][turboquant]") {
  SynthParams p = synth_preset("tiny");
  p.head_dim = 32;
  p.prompt_len = 128;
  const HeadData h = synth_head(p, 1, 0);
  const auto a = make_key_quantizer("turboquant", {{"seed", "5"}})->quantize(h, RopeParams{});
  const auto b = make_key_quantizer("turboquant", {{"seed", "5"}})->quantize(h, RopeParams{});
  const auto c = make_key_quantizer("turboquant", {{"seed", "6"}})->quantize(h, RopeParams{});
  CHECK((a.keys - b.keys).cwiseAbs().maxCoeff() == 0.0f);
  CHECK((a.keys - c.keys).cwiseAbs().maxCoeff() > 0.0f);
  for (const char* variant : {"mse", "prod"}) {
    double prev = INFINITY;
    for (int bits : {2, 3, 4, 6}) {
      const auto q = make_key_quantizer("turboquant", {{"bits", std::to_string(bits)}, {"variant", variant}});
      const double err = score_space_error(h.obs_queries, h.keys, q->quantize(h, RopeParams{}).keys);
      CHECK(err < prev);
      prev = err;
    }
  }
}
