// Tiers through one interface (model/quantizers/tier_quantizer.hpp): published key quantizers as
// tiers of a mixed ladder, checked against independent assemblies from the key-quantizer
// registry (make_key_quantizer), the surrogate's formula, the exact recomputation and the
// exact solver.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "solvers/exact.hpp"
#include "solvers/oracle.hpp"
#include "solvers/seed_allocators.hpp"

using namespace tierlab;
using Catch::Contains;

namespace {

struct SmallHead {
  HeadData head;
  RopeParams rope;
};

// One head of a small synthetic trace (pre-RoPE keys included, RoPE from its meta).
SmallHead small_head(int T, int layer = 0, int kv_head = 1) {
  SynthParams p = synth_preset("tiny");
  p.head_dim = 32;
  p.prompt_len = T;
  p.obs_window = 16;
  p.decode_steps = 4;
  return {synth_head(p, layer, kv_head), synth_meta(p).rope};
}

// A deterministic mixed allocation over a ladder of m tiers: every tier used.
std::vector<std::uint8_t> mixed_allocation(int T, int m) {
  std::vector<std::uint8_t> tiers(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t) tiers[t] = static_cast<std::uint8_t>((7 * t + t / 5) % m);
  return tiers;
}

std::vector<int> tokens_at(const std::vector<std::uint8_t>& tiers, int j) {
  std::vector<int> out;
  for (std::size_t t = 0; t < tiers.size(); ++t)
    if (tiers[t] == j) out.push_back(static_cast<int>(t));
  return out;
}

bool same_bits(const MatrixRM& a, const MatrixRM& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() && (a.array() == b.array()).all();
}

std::unique_ptr<KeyQuantizer> turboquant(int bits) {
  return make_key_quantizer("turboquant", {{"bits", std::to_string(bits)}});
}

// c_t(tau) = mean_q p_{q,t}^2 ||v_t - o_q||^2 (q.(k^_t - k_t))^2 / d, straight from docs/model.md section 3.
// docs/model.md sections 3 and 12 (convention 4), causal: observation query r = j W + i sits at position T - W + i
// and sees tokens 0..T-W+i (g query heads of W rows).
std::vector<double> tier_cost_by_formula(const HeadData& h, const MatrixRM& dequant) {
  const int T = static_cast<int>(h.keys.rows()), d = static_cast<int>(h.keys.cols());
  std::vector<double> c(static_cast<std::size_t>(T), 0.0);
  const int m = static_cast<int>(h.obs_queries.rows()), W = m / h.group_size;
  for (int r = 0; r < m; ++r) {
    const int seen = T - W + r % W + 1;
    const MatrixRMd K = h.keys.topRows(seen).cast<double>(), V = h.values.topRows(seen).cast<double>();
    const MatrixRMd Kh = dequant.topRows(seen).cast<double>();
    const VectorD q = h.obs_queries.row(r).transpose().cast<double>();
    VectorD s = K * q / std::sqrt(double(d));
    s.array() -= s.maxCoeff();
    VectorD p = s.array().exp();
    p /= p.sum();
    const Eigen::RowVectorXd o = p.transpose() * V;
    for (int t = 0; t < seen; ++t) {
      const double dl = q.dot((Kh.row(t) - K.row(t)).transpose());
      c[t] += p[t] * p[t] * (V.row(t) - o).squaredNorm() * dl * dl / d / m;
    }
  }
  return c;
}

}  // namespace

TEST_CASE("published tiers are named, parsed and round-trip; bad ones name the valid forms", "[tier_quantizer]") {
  for (const char* n : {"turboquant2", "turboquant8", "quarot4", "quarot4g16", "kvquant3", "kvcobra2"})
    CHECK(Tier::parse(n).name() == n);
  const Tier t = Tier::parse("turboquant2");
  CHECK(t.kind == QuantizerKind::Published);
  CHECK(t.method == "turboquant");
  CHECK(t.bits == 2);
  CHECK(t.quantizer() == "turboquant");
  CHECK(Tier::parse("kivi4").quantizer() == "kivi");
  CHECK(published_tier_params(Tier::parse("quarot4g16")) == KeyQuantizerParams{{"bits", "4"}, {"group", "16"}});
  CHECK(published_tier_params(Tier::parse("kvcobra2")) == KeyQuantizerParams{{"budget", "2"}});

  const RateLadder ladder = RateLadder::parse("turboquant2,turboquant4");
  CHECK(ladder.name() == "evict,turboquant2,turboquant4,exact");
  CHECK(RateLadder::parse(ladder.name()) .tiers == ladder.tiers);
  CHECK(RateLadder::parse("kivi2,quarot3,kvquant4").name() == "evict,kivi2,quarot3,kvquant4,exact");
  CHECK_THROWS_WITH(RateLadder::parse("turboquant4,turboquant2"), Contains("strictly increase"));

  for (const char* bad : {"turboquant9", "turboquant0", "turboquant2g8", "kvquant3g4", "headq2", "rdkv-channel2"}) {
    INFO(bad);
    CHECK_THROWS_WITH(Tier::parse(bad), Contains(std::string("'") + bad + "'") && Contains("turboquant<b> (1 <= b <= 8") &&
                                           Contains("kvcobra<B>") && Contains("kivi<b>[g<G>]"));
  }
  CHECK_THROWS_WITH(Tier(QuantizerKind::Published, 2, 0, "headq").validate("Tier headq2"),
                    Contains("Tier headq2") && Contains("no tier form"));
  CHECK_THROWS_WITH(make_tier_quantizer(Tier(QuantizerKind::Published, 9, 0, "turboquant")),
                    Contains("turboquant9") && Contains("bits = 9") && Contains("1 <= bits <= 8"));
}

TEST_CASE("a turboquant tier is make_key_quantizer(turboquant) on its tokens, with its real metadata",
          "[tier_quantizer]") {
  const SmallHead s = small_head(80);
  const int d = static_cast<int>(s.head.keys.cols());
  const std::vector<int> tokens = {0, 3, 4, 9, 17, 40, 79};
  for (int b : {2, 4}) {
    INFO("bits " << b);
    const auto tq = make_tier_quantizer(Tier::parse("turboquant" + std::to_string(b)));
    const QuantizedHeadKeys ref = turboquant(b)->quantize(s.head, s.rope, tokens);
    const QuantizedBlock blk = tq->quantize(TierInput::of_head(s.head, s.rope), tokens);
    CHECK(same_bits(blk.dequant, ref.keys));
    CHECK(blk.code_bits == ref.code_bits);
    CHECK(blk.meta_bits == ref.meta_bits());
    CHECK(blk.meta_bits == 16.0 * tokens.size());  // the fp16 norm per token
    // The closed forms used without the data agree with the quantizer's own items.
    const auto counted = tq->bits_of_count(static_cast<long long>(tokens.size()), d);
    REQUIRE(counted);
    CHECK(counted->code_bits == ref.code_bits);
    CHECK(counted->meta_bits == ref.meta_bits());
    CHECK(Tier::parse("turboquant" + std::to_string(b)).nominal_rate(d).total_bits == Approx(b + 16.0 / d));
    // Key-only input: turboquant reads the post-RoPE keys alone, so it gives the same rows.
    CHECK(same_bits(tq->quantize(TierInput::keys_only(s.head.keys), tokens).dequant, ref.keys));
  }
  // An empty block is empty (the registry would read an empty token list as "all").
  CHECK(make_tier_quantizer(Tier::parse("turboquant2"))->quantize(TierInput::of_head(s.head, s.rope), {}).dequant.rows() == 0);
}

TEST_CASE("a mixed allocation over TurboQuant tiers materializes to the hand-assembled keys at the real rate",
          "[tier_quantizer]") {
  const SmallHead s = small_head(96);
  const int T = static_cast<int>(s.head.keys.rows()), d = static_cast<int>(s.head.keys.cols());
  const RateLadder ladder = RateLadder::parse("evict,turboquant2,turboquant4,exact");
  const std::vector<std::uint8_t> tiers = mixed_allocation(T, ladder.size());

  // Independent assembly: each tier's tokens through the registry, rows placed by hand.
  MatrixRM hand = MatrixRM::Zero(T, d);
  std::vector<std::uint8_t> kept(static_cast<std::size_t>(T), 1);
  double code = 0.0, meta = 0.0;
  for (int t : tokens_at(tiers, 0)) kept[t] = 0;
  for (int j : {1, 2}) {
    const std::vector<int> toks = tokens_at(tiers, j);
    REQUIRE(!toks.empty());
    const QuantizedHeadKeys q = turboquant(j == 1 ? 2 : 4)->quantize(s.head, s.rope, toks);
    for (std::size_t i = 0; i < toks.size(); ++i) hand.row(toks[i]) = q.keys.row(static_cast<Eigen::Index>(i));
    code += q.code_bits;
    meta += q.meta_bits();
  }
  const std::vector<int> exact = tokens_at(tiers, 3);
  for (int t : exact) hand.row(t) = s.head.keys.row(t);
  code += 16.0 * double(exact.size()) * d;

  const MaterializedKeys m = materialize(s.head, s.rope, ladder, tiers);
  CHECK(same_bits(m.keys, hand));
  CHECK(m.kept == kept);
  CHECK(m.rate.code_bits == Approx(code / (double(T) * d)).epsilon(1e-14));
  CHECK(m.rate.total_bits == Approx((code + meta) / (double(T) * d)).epsilon(1e-14));
  // The same rate without materialising, with and without the head, and the key-only form.
  const Rate by_head = allocation_rate(s.head, s.rope, ladder, tiers);
  const Rate by_count = allocation_rate(T, d, ladder, tiers);
  CHECK(by_head.total_bits == m.rate.total_bits);
  CHECK(by_count.total_bits == m.rate.total_bits);
  CHECK(by_count.code_bits == m.rate.code_bits);
  CHECK(same_bits(materialize(s.head.keys, ladder, tiers).keys, hand));

  // Exact recomputation (CPU reference): the materialized keys and the hand-assembled
  // ones give the same errors, bit for bit.
  auto rc = make_recomputer(Backend::Cpu);
  Selection sel(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t) sel[t] = kept[t] ? 1 : 0;
  HeadBatch ours{HeadProblem{&s.head.decode_queries, &s.head.keys, &s.head.values, {&m.keys}, {}}, {sel}};
  HeadBatch theirs{HeadProblem{&s.head.decode_queries, &s.head.keys, &s.head.values, {&hand}, {}}, {sel}};
  const EvalResult r = rc->evaluate({ours, theirs});
  REQUIRE(r.ok);
  const ErrorMetrics& a = r.errors[0][0];
  const ErrorMetrics& b = r.errors[1][0];
  CHECK(a.rel_error == b.rel_error);
  CHECK(a.abs_error == b.abs_error);
  CHECK(a.attn_tv == b.attn_tv);
  CHECK(a.logit_error == b.logit_error);
  CHECK(a.rel_error > 0.0);
  CHECK(std::isfinite(a.rel_error));
}

TEST_CASE("the surrogate cost of a turboquant tier is c_t of the dense turboquant keys", "[tier_quantizer]") {
  const SmallHead s = small_head(64);
  const int d = static_cast<int>(s.head.keys.cols());
  const RateLadder ladder = RateLadder::parse("evict,turboquant2,turboquant4,exact");
  const SurrogateCosts costs = surrogate_costs(s.head, s.rope, observation_queries(s.head), ladder);
  for (int j : {1, 2}) {
    const int b = j == 1 ? 2 : 4;
    INFO("turboquant" << b);
    const QuantizedHeadKeys dense = turboquant(b)->quantize(s.head, s.rope);  // every token
    const std::vector<double> c = tier_cost_by_formula(s.head, dense.keys);
    for (int t = 0; t < static_cast<int>(c.size()); ++t) CHECK(costs.cost(j, t) == Approx(c[t]).epsilon(1e-9).margin(1e-300));
    CHECK(costs.rates[j].code_bits == b);
    CHECK(costs.rates[j].total_bits == Approx(dense.rate().total_bits));
    CHECK(costs.rates[j].total_bits == Approx(b + 16.0 / d));
  }
  // The key-only form gives the same costs for a tier that reads keys only.
  const SurrogateCosts key_only = surrogate_costs(s.head.keys, s.head.values, observation_queries(s.head), ladder);
  CHECK((key_only.cost.array() == costs.cost.array()).all());
  // And the fit n_h(b) runs per quantizer family on a ladder that mixes two.
  const RateLadder two = RateLadder::parse("turboquant2,quarot3,turboquant4");
  const SurrogateCosts c2 = surrogate_costs(s.head, s.rope, observation_queries(s.head), two);
  const NoiseFit fit = fit_noise(c2, "turboquant");
  CHECK(fit.beta > 1.0);
  CHECK(fit(2) == Approx(c2.noise.row(1).mean()));
  CHECK_THROWS_WITH(fit_noise(c2, "quarot"), Contains("1 finite tiers of quantizer 'quarot'"));
}

TEST_CASE("the exact solver solves a TurboQuant ladder and matches the oracle", "[tier_quantizer][solver]") {
  const SmallHead s = small_head(48);
  const int T = static_cast<int>(s.head.keys.rows()), d = static_cast<int>(s.head.keys.cols());
  const RateLadder ladder = RateLadder::parse("evict,turboquant2,turboquant4,exact");
  const SurrogateCosts costs = surrogate_costs(s.head, s.rope, observation_queries(s.head), ladder);
  std::vector<double> rates;
  for (const Rate& r : costs.rates) rates.push_back(rate_of(r, RateKind::Total));
  CHECK(rates == std::vector<double>{0.0, 2.0 + 16.0 / d, 4.0 + 16.0 / d, 16.0});
  for (double budget : {1.0, 3.0, 6.0}) {
    INFO("budget " << budget);
    const MckpInstance inst{rates, CostView::of_tier_major(costs.cost), budget};
    const MckpResult ex = solve_exact(inst);
    const MckpResult oracle = solve_oracle(inst);
    REQUIRE(ex.has_solution());
    CHECK(ex.status == SolveStatus::Optimal);
    CHECK(ex.objective == Approx(oracle.objective).epsilon(1e-12));
    // Per-token rates: the materialized allocation spends exactly what the solver counted.
    const MaterializedKeys m = materialize(s.head, s.rope, ladder, ex.choice);
    CHECK(m.rate.total_bits == Approx(ex.rate_used / T).epsilon(1e-12));
    CHECK(m.rate.total_bits <= budget + 1e-12);
  }
}

TEST_CASE("kvquant and kvcobra tiers need the head: the key-only forms say so, the head-aware ones work",
          "[tier_quantizer]") {
  const SmallHead s = small_head(96);
  const int T = static_cast<int>(s.head.keys.rows()), d = static_cast<int>(s.head.keys.cols());
  const RateLadder ladder = RateLadder::parse("evict,kvquant2,kvcobra4,exact");
  const std::vector<std::uint8_t> tiers = mixed_allocation(T, ladder.size());

  CHECK_THROWS_WITH(surrogate_costs(s.head.keys, s.head.values, observation_queries(s.head), ladder),
                    Contains("Tier kvquant2 needs the head") && Contains("HeadData and RopeParams"));
  CHECK_THROWS_WITH(materialize(s.head.keys, ladder, tiers), Contains("needs the head"));
  CHECK_THROWS_WITH(dense_tier_keys(s.head.keys, Tier::parse("kvcobra4")), Contains("Tier kvcobra4 needs the head"));
  CHECK_THROWS_WITH(allocation_rate(T, d, ladder, tiers), Contains("kvquant2") && Contains("head is needed"));
  CHECK_THROWS_WITH(Tier::parse("kvquant2").nominal_rate(d), Contains("kvquant2") && Contains("head is needed"));

  // Head-aware: each tier's rows and bits are the registry's on that tier's tokens.
  const MaterializedKeys m = materialize(s.head, s.rope, ladder, tiers);
  const auto kvq = make_key_quantizer("kvquant", {{"bits", "2"}});
  const auto kvc = make_key_quantizer("kvcobra", {{"budget", "4"}});
  const QuantizedHeadKeys q1 = kvq->quantize(s.head, s.rope, tokens_at(tiers, 1));
  const QuantizedHeadKeys q2 = kvc->quantize(s.head, s.rope, tokens_at(tiers, 2));
  const std::vector<int> exact = tokens_at(tiers, 3);
  double code = q1.code_bits + q2.code_bits + 16.0 * double(exact.size()) * d;
  double total = code + q1.meta_bits() + q2.meta_bits();
  for (int i = 0; i < static_cast<int>(q1.keys.rows()); ++i)
    CHECK(same_bits(m.keys.row(tokens_at(tiers, 1)[i]), q1.keys.row(i)));
  for (int i = 0; i < static_cast<int>(q2.keys.rows()); ++i)
    CHECK(same_bits(m.keys.row(tokens_at(tiers, 2)[i]), q2.keys.row(i)));
  CHECK(m.rate.code_bits == Approx(code / (double(T) * d)).epsilon(1e-14));
  CHECK(m.rate.total_bits == Approx(total / (double(T) * d)).epsilon(1e-14));
  CHECK(allocation_rate(s.head, s.rope, ladder, tiers).total_bits == m.rate.total_bits);

  // Nominal rate: the rate of the dense quantization of the head (every token at the tier).
  const Rate kvq_nominal = nominal_rate(s.head, s.rope, Tier::parse("kvquant2"));
  CHECK(kvq_nominal.total_bits == Approx(kvq->quantize(s.head, s.rope).rate().total_bits).epsilon(1e-14));
  CHECK(kvq_nominal.total_bits > 2.0);
  const Rate kvc_nominal = nominal_rate(s.head, s.rope, Tier::parse("kvcobra4"));
  CHECK(kvc_nominal.code_bits <= 4.0);
  CHECK(kvc_nominal.code_bits > 0.0);
  const SurrogateCosts costs = surrogate_costs(s.head, s.rope, observation_queries(s.head), ladder);
  CHECK(costs.rates[1].total_bits == kvq_nominal.total_bits);
  CHECK(costs.rates[2].total_bits == kvc_nominal.total_bits);
}

TEST_CASE("seed allocators run on a published ladder with data-dependent rates", "[tier_quantizer][solver]") {
  const SmallHead a = small_head(64, 0, 0), b = small_head(64, 0, 1);
  const RateLadder ladder = RateLadder::parse("evict,kvquant2,turboquant4,exact");
  const SurrogateCosts ca = surrogate_costs(a.head, a.rope, observation_queries(a.head), ladder);
  const SurrogateCosts cb = surrogate_costs(b.head, b.rope, observation_queries(b.head), ladder);
  SeedProblem pr;
  pr.ladder = ladder;
  pr.heads = {&ca, &cb};
  pr.budget = 3.0;
  pr.rate_kind = RateKind::Total;
  pr.head_dim = 32;
  const std::vector<double> r = ladder_rates(pr);
  CHECK(r[1] == Approx(0.5 * (ca.rates[1].total_bits + cb.rates[1].total_bits)));  // kvquant: mean of the heads
  CHECK(r[2] == 4.0 + 16.0 / 32);                                                  // turboquant: closed form
  const SeedAllocation s = allocate_seed("routed", {}, pr);
  CHECK(s.tiers.size() == 2);
  CHECK(s.rate_used <= s.rate_budget + 1e-9);
}

TEST_CASE("A token-local tier quantizes each token alone, so its rows are shared across allocations with the same keys and "
          "bits") {
  const SmallHead h = small_head(200);
  const RateLadder ladder = RateLadder::parse("evict,token2,kivi3,token4g16,turboquant5,exact");
  const TierInput in = TierInput::of_head(h.head, h.rope);
  // Every tier that declares itself token-local: a token's row is the same in any set of tokens.
  const std::vector<std::uint8_t> some = mixed_allocation(200, 3);
  for (const Tier& tier : ladder.tiers) {
    const auto q = make_tier_quantizer(tier);
    if (!q->token_local() || tier.kind == QuantizerKind::Evict) continue;
    INFO(tier.name());
    std::vector<int> all(200), part = tokens_at(some, 1);
    for (int t = 0; t < 200; ++t) all[static_cast<std::size_t>(t)] = t;
    const QuantizedBlock whole = q->quantize(in, all), sub = q->quantize(in, part);
    for (std::size_t i = 0; i < part.size(); ++i) CHECK((whole.dequant.row(part[i]).array() == sub.dequant.row(i).array()).all());
  }
  const TierRowCache cache(in, ladder);
  CHECK(cache.cached() == 2);  // token2 and token4g16; kivi3 groups tokens, turboquant is not declared
  CHECK(cache.rows(1) != nullptr);
  CHECK(cache.rows(2) == nullptr);
  CHECK(cache.rows(3) != nullptr);
  for (int shift = 0; shift < 6; ++shift) {
    std::vector<std::uint8_t> tiers = mixed_allocation(200, ladder.size());
    std::rotate(tiers.begin(), tiers.begin() + 17 * shift, tiers.end());
    const MaterializedKeys plain = materialize(in, ladder, tiers), shared = materialize(in, ladder, tiers, cache);
    INFO(shift);
    CHECK(same_bits(plain.keys, shared.keys));
    CHECK(plain.kept == shared.kept);
    CHECK(plain.rate.code_bits == shared.rate.code_bits);
    CHECK(plain.rate.total_bits == shared.rate.total_bits);
  }
}
