// The local surrogate (surrogate.hpp) against an independent slow implementation,
// the exactness of c_t(0) for one removal, and the noise fit.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"

using namespace tierlab;

namespace {

struct Head {
  MatrixRM K, V, Q;
};

Head random_head(int T, int d, int dv, int m, double logit_scale, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Head h{MatrixRM(T, d), MatrixRM(T, dv), MatrixRM(m, d)};
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < d; ++j) h.K(t, j) = nd(gen) * (j == 1 ? 6.0f : 1.0f);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < dv; ++j) h.V(t, j) = nd(gen);
  for (int q = 0; q < m; ++q)
    for (int j = 0; j < d; ++j) h.Q(q, j) = static_cast<float>(nd(gen) * logit_scale);
  return h;
}

// Slow reference, plain loops in long double: attention and output of one query.
struct Attn {
  std::vector<long double> p;
  std::vector<long double> o;
};

Attn attend(const MatrixRM& K, const MatrixRM& V, const float* q, const std::vector<bool>& keep) {
  const int T = K.rows(), d = K.cols(), dv = V.cols();
  std::vector<long double> s(T, 0.0L);
  long double mx = -INFINITY;
  for (int t = 0; t < T; ++t) {
    if (!keep[t]) continue;
    long double acc = 0.0L;
    for (int j = 0; j < d; ++j) acc += (long double)q[j] * K(t, j);
    s[t] = acc / std::sqrt((long double)d);
    mx = std::max(mx, s[t]);
  }
  Attn a{std::vector<long double>(T, 0.0L), std::vector<long double>(dv, 0.0L)};
  long double z = 0.0L;
  for (int t = 0; t < T; ++t)
    if (keep[t]) z += (a.p[t] = std::exp(s[t] - mx));
  for (int t = 0; t < T; ++t) {
    a.p[t] /= z;
    for (int j = 0; j < dv; ++j) a.o[j] += a.p[t] * V(t, j);
  }
  return a;
}

long double dist2(const MatrixRM& V, int t, const std::vector<long double>& o) {
  long double s = 0.0L;
  for (int j = 0; j < V.cols(); ++j) s += (V(t, j) - o[j]) * (V(t, j) - o[j]);
  return s;
}

bool close(double got, long double want, double rel = 1e-9) {
  return std::abs(got - (double)want) <= rel * std::abs((double)want) + 1e-300;
}

}  // namespace

TEST_CASE("surrogate costs match a slow long-double implementation of the header formulas", "[surrogate]") {
  const RateLadder ladder = RateLadder::parse("kivi2,token3,kivi4g16");
  for (unsigned seed : {1u, 2u, 3u}) {
    const int T = 37 + 11 * seed, d = 8, dv = 6, m = 70;  // m > 64 crosses a query chunk
    const Head h = random_head(T, d, dv, m, 1.5, seed);
    const SurrogateCosts sc = surrogate_costs(h.K, h.V, all_visible(h.Q, h.K.rows()), ladder);
    REQUIRE(sc.cost.rows() == ladder.size());
    REQUIRE(sc.cost.cols() == T);

    std::vector<MatrixRM> khat;
    for (const Tier& t : ladder.tiers) khat.push_back(dense_tier_keys(h.K, t));

    const std::vector<bool> all(T, true);
    std::vector<long double> a(T, 0), ev(T, 0), att(T, 0);
    std::vector<std::vector<long double>> cost(ladder.size(), std::vector<long double>(T, 0));
    std::vector<std::vector<long double>> noise = cost;
    long double on2 = 0;
    for (int q = 0; q < m; ++q) {
      const Attn at = attend(h.K, h.V, h.Q.row(q).data(), all);
      for (int j = 0; j < dv; ++j) on2 += at.o[j] * at.o[j] / m;
      for (int t = 0; t < T; ++t) {
        const long double p = at.p[t], w = p * p * dist2(h.V, t, at.o);
        a[t] += w / m;
        att[t] += p / m;
        ev[t] += w / ((1 - p) * (1 - p)) / m;
        for (int i = 1; i + 1 < ladder.size(); ++i) {
          long double dl = 0;
          for (int j = 0; j < d; ++j) dl += (long double)h.Q(q, j) * ((long double)khat[i](t, j) - h.K(t, j));
          noise[i][t] += dl * dl / d / m;
          cost[i][t] += w * dl * dl / d / m;
        }
      }
    }
    CHECK(close(sc.output_norm2, on2));
    for (int t = 0; t < T; ++t) {
      INFO("seed " << seed << " token " << t);
      CHECK(close(sc.weights.a[t], a[t]));
      CHECK(close(sc.weights.attention[t], att[t]));
      CHECK(close(sc.weights.evict_cost[t], ev[t]));
      CHECK(close(sc.cost(0, t), ev[t]));
      CHECK(sc.cost(ladder.exact_index(), t) == 0.0);
      for (int i = 1; i + 1 < ladder.size(); ++i) {
        CHECK(close(sc.noise(i, t), noise[i][t]));
        CHECK(close(sc.cost(i, t), cost[i][t]));
      }
    }
    // token_weights is the same computation without tiers.
    const TokenWeights tw = token_weights(h.K, h.V, all_visible(h.Q, h.K.rows()));
    CHECK(tw.a.isApprox(sc.weights.a, 1e-12));
    CHECK(tw.evict_cost.isApprox(sc.weights.evict_cost, 1e-12));
    // Nominal rates of the ladder.
    CHECK(sc.rates[1].total_bits == Approx(3.0));
    CHECK(sc.rates[2].total_bits == Approx(3.0 + 32.0 / d));
  }
}

TEST_CASE("c_t(0) is the exact squared output change of removing token t alone", "[surrogate]") {
  // Moderate and very sharp heads (the sharp one has p close to 1 for some tokens,
  // where 1 - p cancels in floating point).
  for (double scale : {1.0, 4.0, 40.0}) {
    const int T = 24, d = 8, dv = 5, m = 6;
    const Head h = random_head(T, d, dv, m, scale, 100 + static_cast<unsigned>(scale));
    double max_p = 0;
    for (int q = 0; q < m; ++q) {
      const MatrixRM one_q = h.Q.row(q);
      const TokenWeights tw = token_weights(h.K, h.V, all_visible(one_q, h.K.rows()));
      const Attn full = attend(h.K, h.V, h.Q.row(q).data(), std::vector<bool>(T, true));
      for (int t = 0; t < T; ++t) {
        max_p = std::max(max_p, (double)full.p[t]);
        std::vector<bool> keep(T, true);
        keep[t] = false;
        const Attn removed = attend(h.K, h.V, h.Q.row(q).data(), keep);
        long double change = 0, o_norm2 = 0;
        for (int j = 0; j < dv; ++j) {
          change += (removed.o[j] - full.o[j]) * (removed.o[j] - full.o[j]);
          o_norm2 += full.o[j] * full.o[j];
        }
        INFO("scale " << scale << " query " << q << " token " << t << " p " << (double)full.p[t]);
        // Compare ||o^ - o||: relative 1e-8, plus the long-double resolution of the
        // direct difference o^ - o (about 1e-19 ||o||), which limits tokens with tiny p.
        const double got = std::sqrt(tw.evict_cost[t]), want = (double)std::sqrt(change);
        CHECK(std::abs(got - want) <= 1e-8 * want + 1e-16 * (double)std::sqrt(o_norm2));
      }
    }
    if (scale == 40.0) CHECK(max_p > 1 - 1e-6);  // the sharp head does reach p ~ 1
  }
}

TEST_CASE("a finite tier's cost is a_t n_t when there is one query", "[surrogate]") {
  const Head h = random_head(30, 8, 8, 1, 1.0, 7);
  const SurrogateCosts sc = surrogate_costs(h.K, h.V, all_visible(h.Q, h.K.rows()), RateLadder::kivi({2, 4}));
  for (int t = 0; t < 30; ++t)
    for (int i = 1; i <= 2; ++i) CHECK(sc.cost(i, t) == Approx(sc.weights.a[t] * sc.noise(i, t)).epsilon(1e-12));
}

TEST_CASE("fit_noise recovers alpha and beta of exact synthetic data", "[surrogate]") {
  const double alpha = 0.7, beta = 4.2;
  std::vector<double> bits = {2, 3, 4, 8}, n;
  for (double b : bits) n.push_back(alpha * std::pow(beta, -b));
  const NoiseFit f = fit_noise(bits, n);
  CHECK(f.alpha == Approx(alpha).epsilon(1e-12));
  CHECK(f.beta == Approx(beta).epsilon(1e-12));
  CHECK(f.residual == Approx(0.0).margin(1e-12));
  CHECK(f(5.0) == Approx(alpha * std::pow(beta, -5.0)).epsilon(1e-12));

  // Off-model data: log n = log a - b log beta + e with e = +0.1, -0.1, +0.1, -0.1 at
  // b = 1..4: the least-squares slope picks up the alternation's correlation with b.
  std::vector<double> b2 = {1, 2, 3, 4}, n2;
  const double e[] = {0.1, -0.1, 0.1, -0.1};
  for (int i = 0; i < 4; ++i) n2.push_back(std::exp(std::log(alpha) - b2[i] * std::log(beta) + e[i]));
  const NoiseFit g = fit_noise(b2, n2);
  // Centred x = -1.5, -0.5, 0.5, 1.5 ; slope change = sum x e / sum x^2 = -0.2 / 5 = -0.04;
  // intercept change at mean x 2.5: 0 - (-0.04)(2.5) = +0.1.
  CHECK(std::log(g.beta) == Approx(std::log(beta) + 0.04).epsilon(1e-12));
  CHECK(std::log(g.alpha) == Approx(std::log(alpha) + 0.1).epsilon(1e-12));
  // Residuals e - (0.1 - 0.04 b) = 0.04, -0.12, 0.12, -0.04 -> RMS sqrt(0.032 / 4)
  CHECK(g.residual == Approx(std::sqrt(0.032 / 4)).epsilon(1e-10));

  CHECK_THROWS_AS(fit_noise({2}, {0.1}), InputError);
  CHECK_THROWS_AS(fit_noise({2, 2}, {0.1, 0.2}), InputError);
  CHECK_THROWS_AS(fit_noise({2, 4}, {0.1, 0.0}), InputError);  // n = 0 is not usable
  CHECK_THROWS_AS(fit_noise({2, 4}, {0.1}), InputError);
}

TEST_CASE("fit_noise over a ladder fits mean_t n_t of that quantizer's tiers", "[surrogate]") {
  const Head h = random_head(128, 16, 16, 8, 1.0, 12);
  const RateLadder ladder = RateLadder::parse("kivi2,token3,kivi4,kivi8");
  const SurrogateCosts sc = surrogate_costs(h.K, h.V, all_visible(h.Q, h.K.rows()), ladder);
  const NoiseFit f = fit_noise(sc, QuantizerKind::KiviPerChannel);
  const NoiseFit g = fit_noise({2, 4, 8}, {sc.noise.row(1).mean(), sc.noise.row(3).mean(), sc.noise.row(4).mean()});
  CHECK(f.alpha == g.alpha);
  CHECK(f.beta == g.beta);
  CHECK(f.beta > 2.0);  // noise falls steeply with bits (about 4x per bit for uniform quantizers)
  CHECK_THROWS_WITH(fit_noise(sc, QuantizerKind::PerToken), Catch::Contains("at least two"));
}

TEST_CASE("surrogate inputs are checked", "[surrogate]") {
  const Head h = random_head(10, 4, 4, 2, 1.0, 1);
  CHECK_THROWS_AS(token_weights(h.K, MatrixRM(9, 4), all_visible(h.Q, h.K.rows())), InputError);
  CHECK_THROWS_AS(token_weights(h.K, h.V, all_visible(MatrixRM(2, 5), h.K.rows())), InputError);
  CHECK_THROWS_AS(token_weights(h.K, h.V, all_visible(MatrixRM(0, 4), h.K.rows())), InputError);
}

TEST_CASE("a causal mask changes which token the surrogate would evict first", "[surrogate][causal]") {
  // T = 4, d = 1, W = 2 observation queries at positions 2 and 3. Keys (0, 0, 0, 3); query 0
  // (q = 2) sees tokens 0..2 only, query 1 (q = -2) sees all four. Unmasked, query 0 would put
  // ~0.99 of its mass on token 3 (logit 6); causally token 3 gets only query 1's e^-6/(3+e^-6).
  MatrixRM K(4, 1), V(4, 1), Q(2, 1);
  K << 0, 0, 0, 3;
  V << 1, 5, 2, 4;
  Q << 2, -2;
  const CausalQueries causal{&Q, {3, 4}};
  const TokenWeights c = token_weights(K, V, causal);
  const TokenWeights u = token_weights(K, V, all_visible(Q, 4));
  const double e6 = std::exp(-6.0);
  CHECK(c.attention[3] == Approx(0.5 * e6 / (3 + e6)));
  CHECK(c.attention[0] == Approx(0.5 * (1.0 / 3 + 1.0 / (3 + e6))));
  CHECK(u.attention[3] > 0.49);
  // c_t(0): causally token 3 is the cheapest to evict, unmasked the dearest.
  Eigen::Index cheapest_c = 0, cheapest_u = 0;
  c.evict_cost.minCoeff(&cheapest_c);
  u.evict_cost.minCoeff(&cheapest_u);
  CHECK(cheapest_c == 3);
  CHECK(cheapest_u != 3);
  CHECK(u.evict_cost.maxCoeff() == u.evict_cost[3]);
  // A limit outside 1..T is refused.
  CHECK_THROWS_AS(token_weights(K, V, CausalQueries{&Q, {0, 4}}), InputError);
  CHECK_THROWS_AS(token_weights(K, V, CausalQueries{&Q, {3}}), InputError);
}
