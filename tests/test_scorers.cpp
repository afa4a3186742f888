// Eviction scorers (solvers/scorers.hpp) against small hand-computed cases.
//
// Construction used throughout: with d = 2, a key k_t = (ln a_t, ln b_t) and the query
// (sqrt 2, 0) has logit q.k / sqrt(d) = ln a_t, so its attention over the visible keys is
// a_t / sum a (and (0, sqrt 2) gives b_t / sum b). The expected numbers below are these
// fractions, worked out by hand.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "model/base/error.hpp"
#include "model/synthetic/synthetic.hpp"
#include "solvers/scorers.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

const double kS2 = std::sqrt(2.0);

// keys (ln a_t, ln b_t), values given (or zero), queries rows.
HeadData make_head(const std::vector<double>& a, const std::vector<double>& b,
                   const std::vector<std::vector<double>>& queries,
                   const std::vector<std::vector<double>>& values = {}) {
  HeadData h;
  const int T = static_cast<int>(a.size());
  h.keys.resize(T, 2);
  h.values = MatrixRM::Zero(T, 2);
  for (int t = 0; t < T; ++t) {
    h.keys(t, 0) = static_cast<float>(std::log(a[t]));
    h.keys(t, 1) = static_cast<float>(b.empty() ? 0.0 : std::log(b[t]));
    if (!values.empty()) h.values(t, 0) = static_cast<float>(values[t][0]), h.values(t, 1) = static_cast<float>(values[t][1]);
  }
  h.obs_queries.resize(static_cast<Eigen::Index>(queries.size()), 2);
  for (std::size_t i = 0; i < queries.size(); ++i)
    h.obs_queries(i, 0) = static_cast<float>(queries[i][0]), h.obs_queries(i, 1) = static_cast<float>(queries[i][1]);
  return h;
}

std::vector<int> kept(const HeadKeep& k) {
  std::vector<int> out;
  for (std::size_t t = 0; t < k.size(); ++t)
    if (k[t]) out.push_back(static_cast<int>(t));
  return out;
}

const double kTol = 1e-6;

}  // namespace

TEST_CASE("Budget as a ratio or a token count", "[scorers]") {
  CHECK(Budget::ratio(0.5).keep(6) == 3);
  CHECK(Budget::ratio(0.25).keep(6) == 2);  // 1.5 rounds half up
  CHECK(Budget::ratio(0.2).keep(6) == 1);   // 1.2
  CHECK(Budget::count(3).keep(6) == 3);
  CHECK(Budget::count(10).keep(6) == 6);  // a count above T keeps everything
  CHECK(Budget::parse("count:4").keep(6) == 4);
  CHECK(Budget::parse("ratio:0.5").keep(10) == 5);
  CHECK_THROWS_AS(Budget::parse("0.5"), InputError);
  CHECK_THROWS_AS(Budget::ratio(1.5), InputError);

  // The same keep-set through either form (SnapKV, T = 6).
  const HeadData h = make_head({1, 4, 1, 2, 1, 1}, {}, {{kS2, 0}, {kS2, 0}});
  const ScorerConfig c = make_scorer("snapkv", {{"window", "2"}, {"kernel", "3"}});
  const auto r = plan_eviction(c, {{h}}, Budget::ratio(0.5));
  const auto n = plan_eviction(c, {{h}}, Budget::count(3));
  CHECK(r.keep == n.keep);
  CHECK(r.kept == 3);
}

TEST_CASE("Registry: names, parameters, errors", "[scorers]") {
  CHECK(eviction_scorer_methods().size() == 11);
  const std::string e = testing::error_of<InputError>([] { make_scorer("snapKV"); });
  CHECK(e.find("snapkv") != std::string::npos);
  CHECK(e.find("laprox") != std::string::npos);
  const std::string p = testing::error_of<InputError>([] { make_scorer("snapkv", {{"kernal", "5"}}); });
  CHECK(p.find("kernel") != std::string::npos);
  CHECK_THROWS_AS(make_scorer("snapkv", {{"kernel", "4"}}), InputError);
  CHECK_THROWS_AS(make_scorer("snapkv", {{"gqa", "median"}}), InputError);
  const ScorerConfig c = make_scorer("snapkv");
  CHECK(c.window == 32);
  CHECK(c.param("kernel") == "5");
  CHECK(c.param("reduce") == "sum");
  CHECK(c.param("count_include_pad") == "true");
  CHECK(c.param("group_order") == "after");
  CHECK(make_scorer("streaming").sinks == 4);
  CHECK(make_scorer("dropkv").param("kernel") == "11");
}

TEST_CASE("StreamingLLM keeps 4 sinks and the most recent", "[scorers]") {
  std::vector<double> a(10, 1.0);
  const HeadData h = make_head(a, {}, {{kS2, 0}});
  const ScorerConfig c = make_scorer("streaming");
  CHECK(kept(plan_eviction(c, {{h}}, Budget::count(6)).keep[0][0]) == std::vector<int>{0, 1, 2, 3, 8, 9});
  CHECK(kept(plan_eviction(c, {{h}}, Budget::count(3)).keep[0][0]) == std::vector<int>{0, 1, 2});
}

TEST_CASE("SnapKV: window sum/mean and zero padding counted or not at both edges", "[scorers]") {
  // T = 6, W = 2, causal: query 0 (position 4) sees t <= 4: p = (1,4,1,2,1)/9;
  // query 1 (position 5) sees all: p = (1,4,1,2,1,1)/10. Prefix t < 4, summed:
  //   r = (19, 76, 19, 38) / 90.
  const HeadData h = make_head({1, 4, 1, 2, 1, 1}, {}, {{kS2, 0}, {kS2, 0}});
  {
    const VectorD s = head_scores(make_scorer("snapkv", {{"window", "2"}, {"kernel", "1"}}), h);
    CHECK(s(0) == Approx(19.0 / 90).margin(kTol));
    CHECK(s(1) == Approx(76.0 / 90).margin(kTol));
    CHECK(s(2) == Approx(19.0 / 90).margin(kTol));
    CHECK(s(3) == Approx(38.0 / 90).margin(kTol));
    CHECK(std::isinf(s(4)));
    CHECK(std::isinf(s(5)));
    const VectorD m = head_scores(make_scorer("snapkv", {{"window", "2"}, {"kernel", "1"}, {"reduce", "mean"}}), h);
    CHECK(m(1) == Approx(38.0 / 90).margin(kTol));
  }
  // Avg pool k = 3 with the zero padding counted: edges divide by 3,
  //   (0 + 19 + 76)/270, (19 + 76 + 19)/270, (76 + 19 + 38)/270, (19 + 38 + 0)/270.
  const ScorerConfig incl = make_scorer("snapkv", {{"window", "2"}, {"kernel", "3"}});
  const VectorD si = head_scores(incl, h);
  CHECK(si(0) == Approx(95.0 / 270).margin(kTol));
  CHECK(si(1) == Approx(114.0 / 270).margin(kTol));
  CHECK(si(2) == Approx(133.0 / 270).margin(kTol));
  CHECK(si(3) == Approx(57.0 / 270).margin(kTol));
  // Not counted: the edges divide by 2 (the window stops at the prefix end T - W too).
  const ScorerConfig excl = make_scorer("snapkv", {{"window", "2"}, {"kernel", "3"}, {"count_include_pad", "false"}});
  const VectorD se = head_scores(excl, h);
  CHECK(se(0) == Approx(95.0 / 180).margin(kTol));
  CHECK(se(1) == Approx(114.0 / 270).margin(kTol));
  CHECK(se(3) == Approx(57.0 / 180).margin(kTol));
  // Keep 3 = the window + 1: counted padding picks t = 2 (133/270), not counted t = 0 (95/180).
  CHECK(kept(plan_eviction(incl, {{h}}, Budget::count(3)).keep[0][0]) == std::vector<int>{2, 4, 5});
  CHECK(kept(plan_eviction(excl, {{h}}, Budget::count(3)).keep[0][0]) == std::vector<int>{0, 4, 5});
  // Non-causal: both queries see all six keys, r = 2 (1,4,1,2)/10.
  const VectorD nc = head_scores(make_scorer("snapkv", {{"window", "2"}, {"kernel", "1"}, {"causal", "false"}}), h);
  CHECK(nc(1) == Approx(0.8).margin(kTol));
}

TEST_CASE("SnapKV under GQA: group mean before or after max pooling differ", "[scorers]") {
  // g = 2, W = 1, T = 5: query head 0 attends a = (7,1,1,1,1)/11, head 1 b = (1,1,6,1,1)/10.
  // Prefix t < 4: x0 = (7,1,1,1)/11, x1 = (.1,.1,.6,.1). Max pool k = 3:
  //   after  (pool, then mean): (7,7,1,1)/11 and (.1,.6,.6,.6) -> t1 = (7/11 + .6)/2 wins
  //   before (mean, then pool): m = ((7/11+.1)/2, (1/11+.1)/2, (1/11+.6)/2, (1/11+.1)/2)
  //          -> (m0, m0, m2, m2): t0 and t1 tie at m0, the earlier t0 is kept
  const HeadData h = make_head({7, 1, 1, 1, 1}, {1, 1, 6, 1, 1}, {{kS2, 0}, {0, kS2}});
  MethodParams p = {{"window", "1"}, {"kernel", "3"}, {"pool", "max"}, {"group_size", "2"}};
  const ScorerConfig after = make_scorer("snapkv", p);
  p["group_order"] = "before";
  const ScorerConfig before = make_scorer("snapkv", p);
  const VectorD sa = head_scores(after, h), sb = head_scores(before, h);
  const double m0 = (7.0 / 11 + 0.1) / 2, m2 = (1.0 / 11 + 0.6) / 2;
  const std::vector<double> ea = {m0, (7.0 / 11 + 0.6) / 2, m2, m2}, eb = {m0, m0, m2, m2};
  for (int t = 0; t < 4; ++t) {
    CHECK(sa(t) == Approx(ea[t]).margin(kTol));
    CHECK(sb(t) == Approx(eb[t]).margin(kTol));
  }
  CHECK(kept(plan_eviction(after, {{h}}, Budget::count(2)).keep[0][0]) == std::vector<int>{1, 4});
  CHECK(kept(plan_eviction(before, {{h}}, Budget::count(2)).keep[0][0]) == std::vector<int>{0, 4});
  // Average pooling is linear: the order does not matter.
  p["pool"] = "avg";
  const VectorD b2 = head_scores(make_scorer("snapkv", p), h);
  p["group_order"] = "after";
  const VectorD a2 = head_scores(make_scorer("snapkv", p), h);
  for (int t = 0; t < 4; ++t) CHECK(a2(t) == Approx(b2(t)).margin(1e-12));
  // GQA max or sum instead of mean, no pooling: max(7/11, .1), max(1/11, .1), max(1/11, .6).
  MethodParams np = {{"window", "1"}, {"kernel", "1"}, {"group_size", "2"}, {"gqa", "max"}};
  const VectorD mx = head_scores(make_scorer("snapkv", np), h);
  CHECK(mx(0) == Approx(7.0 / 11).margin(kTol));
  CHECK(mx(1) == Approx(0.1).margin(kTol));
  CHECK(mx(2) == Approx(0.6).margin(kTol));
  np["gqa"] = "sum";
  CHECK(head_scores(make_scorer("snapkv", np), h)(2) == Approx(1.0 / 11 + 0.6).margin(kTol));
}

TEST_CASE("H2O accumulates attention over decode steps", "[scorers]") {
  // Prompt a = (1,2,1), one window query at position 2 (sees all): acc = (.25,.5,.25).
  const HeadData h = make_head({1, 2, 1}, {}, {{kS2, 0}});
  const ScorerConfig c = make_scorer("h2o", {{"recent_fraction", "0.34"}});  // round(0.34 * 3) = 1 recent
  H2OCache cache(c, h, Budget::count(3));
  REQUIRE(cache.capacity() == 3);
  CHECK(cache.scores()[1] == Approx(0.5).margin(kTol));
  MatrixRM q(1, 2);
  q << static_cast<float>(kS2), 0.f;
  // Step 1: new key with a = 4: p = (1,2,1,4)/8 -> acc = (.375,.75,.375,.5); keep the recent
  // token 3 and the two heaviest of 0..2: 1 (.75) then 0 (.375, the tie goes to the earlier).
  VectorF k(2), v = VectorF::Zero(2);
  k << static_cast<float>(std::log(4.0)), 0.f;
  cache.step(q, k, v);
  CHECK(cache.scores()[0] == Approx(0.375).margin(kTol));
  CHECK(cache.scores()[1] == Approx(0.75).margin(kTol));
  CHECK(cache.scores()[3] == Approx(0.5).margin(kTol));
  CHECK(cache.alive() == std::vector<std::uint8_t>{1, 1, 0, 1});
  // Step 2: new key a = 1; alive 0,1,3,4 with (1,2,4,1)/8: acc0 = .5, acc1 = 1, acc3 = 1,
  // acc4 = .125. Keep recent 4, heavy 1 and 3.
  k << 0.f, 0.f;
  cache.step(q, k, v);
  CHECK(cache.scores()[0] == Approx(0.5).margin(kTol));
  CHECK(cache.scores()[1] == Approx(1.0).margin(kTol));
  CHECK(cache.scores()[3] == Approx(1.0).margin(kTol));
  CHECK(cache.scores()[4] == Approx(0.125).margin(kTol));
  CHECK(cache.alive() == std::vector<std::uint8_t>{0, 1, 0, 1, 1});
  // Prefill plan: count 2, one recent (t = 2) + the heaviest (t = 1).
  CHECK(kept(plan_eviction(make_scorer("h2o"), {{h}}, Budget::count(2)).keep[0][0]) == std::vector<int>{1, 2});
}

TEST_CASE("TOVA: one shared top-k per layer, re-scored in decode", "[scorers]") {
  // Two KV heads, last query: head 0 (6,1,1,1,1)/10, head 1 (1,5,1,1,2)/10;
  // layer score = (.35,.3,.1,.1,.15): both heads keep {0, 1} at count 2 (head 1 alone
  // would keep {1, 4}).
  const HeadData h0 = make_head({6, 1, 1, 1, 1}, {}, {{kS2, 0}});
  const HeadData h1 = make_head({1, 5, 1, 1, 2}, {}, {{kS2, 0}});
  const ScorerConfig c = make_scorer("tova");
  const auto plan = plan_eviction(c, {{h0, h1}}, Budget::count(2));
  CHECK(plan.scores[0][0](0) == Approx(0.35).margin(kTol));
  CHECK(plan.scores[0][1](4) == Approx(0.15).margin(kTol));
  CHECK(kept(plan.keep[0][0]) == std::vector<int>{0, 1});
  CHECK(kept(plan.keep[0][1]) == std::vector<int>{0, 1});
  // Decode: new token a = 3 (head 0), 4 (head 1). Over {0, 1, new}: head 0 (6,1,3)/10,
  // head 1 (1,5,4)/10, mean (.35,.3,.35): token 1 goes.
  TovaCache cache(c, {h0, h1}, Budget::count(2));
  MatrixRM q(1, 2);
  q << static_cast<float>(kS2), 0.f;
  VectorF k0(2), k1(2), v = VectorF::Zero(2);
  k0 << static_cast<float>(std::log(3.0)), 0.f;
  k1 << static_cast<float>(std::log(4.0)), 0.f;
  cache.step({q, q}, {k0, k1}, {v, v});
  CHECK(cache.last_scores()[5] == Approx(0.35).margin(kTol));
  CHECK(cache.last_scores()[1] == Approx(0.3).margin(kTol));
  CHECK(cache.alive() == std::vector<std::uint8_t>{1, 0, 0, 0, 0, 1});
}

TEST_CASE("Ada-KV: layer-wide top-k with a floor per head", "[scorers]") {
  // T = 9, W = 1 (window = t 8), no pooling. Head 0: a = (10 x7, 1, 1) / 72 -> prefix
  // .1389 for t < 7, .0139 at 7; head 1 uniform 1/9. Count 5 -> 4 free slots per head.
  std::vector<double> a0 = {10, 10, 10, 10, 10, 10, 10, 1, 1}, a1(9, 1.0);
  const HeadData h0 = make_head(a0, {}, {{kS2, 0}}), h1 = make_head(a1, {}, {{kS2, 0}});
  // Floor 0: the 8 slots all go to head 0's 7 heavy tokens and head 1's first: 8 and 2 kept.
  auto p0 = plan_eviction(make_scorer("adakv", {{"window", "1"}, {"kernel", "1"}, {"floor", "0"}}), {{h0, h1}},
                          Budget::count(5));
  CHECK(p0.head_budget[0] == std::vector<int>{8, 2});
  // Floor 0.5: each head first gets 2; the other 4 go to head 0: 7 and 3 kept.
  auto p5 = plan_eviction(make_scorer("adakv", {{"window", "1"}, {"kernel", "1"}, {"floor", "0.5"}}), {{h0, h1}},
                          Budget::count(5));
  CHECK(p5.head_budget[0] == std::vector<int>{7, 3});
  CHECK(kept(p5.keep[0][1]) == std::vector<int>{0, 1, 8});
  CHECK(p5.kept == 10);
}

TEST_CASE("PyramidKV: layer budgets decrease linearly with depth", "[scorers]") {
  // L = 3, T = 50, W = 2, count 22: F = 20, m = 20 / 20 = 1, M = 39, s = 19:
  // F_l = 39, 20, 1 -> kept 41, 22, 3.
  std::vector<double> a(50, 1.0);
  const HeadData h = make_head(a, {}, {{kS2, 0}, {kS2, 0}});
  const auto plan = plan_eviction(make_scorer("pyramidkv", {{"window", "2"}}), {{h}, {h}, {h}}, Budget::count(22));
  CHECK(plan.head_budget[0][0] == 41);
  CHECK(plan.head_budget[1][0] == 22);
  CHECK(plan.head_budget[2][0] == 3);
  // One layer: the plain SnapKV budget.
  CHECK(plan_eviction(make_scorer("pyramidkv", {{"window", "2"}}), {{h}}, Budget::count(22)).kept == 22);
}

TEST_CASE("DropKV, OBCache and LaProx on one hand-computed head", "[scorers]") {
  // One query sees a = (1,2,1): p = (.25,.5,.25), z = (0, ln 2, 0); values (1,0),(0,1),(0,0);
  // o = (.25,.5); ||v - o||^2 = (.8125, .3125, .3125).
  const HeadData h = make_head({1, 2, 1}, {}, {{kS2, 0}}, {{1, 0}, {0, 1}, {0, 0}});
  // DropKV: (p/(1-p))^2 ||v-o||^2 = (.8125/9, .3125, .3125/9).
  const VectorD d = head_scores(make_scorer("dropkv", {{"window", "1"}, {"kernel", "1"}}), h);
  CHECK(d(0) == Approx(0.8125 / 9).margin(kTol));
  CHECK(d(1) == Approx(0.3125).margin(kTol));
  CHECK(d(2) == Approx(0.3125 / 9).margin(kTol));
  // Default kernel 11, zero padding counted: every entry = (sum of the three) / 11.
  const VectorD d11 = head_scores(make_scorer("dropkv", {{"window", "1"}}), h);
  const double sum = 0.8125 / 9 + 0.3125 + 0.3125 / 9;
  for (int t = 0; t < 3; ++t) CHECK(d11(t) == Approx(sum / 11).margin(kTol));
  // OBCache: value p^2 ||v||^2 = (.0625, .25, 0); key (p z)^2 ||v-o||^2 = (0, (.5 ln 2)^2 .3125, 0).
  const double key1 = std::pow(0.5 * std::log(2.0), 2) * 0.3125;
  const VectorD ov = head_scores(make_scorer("obcache", {{"window", "1"}, {"score", "value"}}), h);
  const VectorD ok = head_scores(make_scorer("obcache", {{"window", "1"}, {"score", "key"}}), h);
  const VectorD oj = head_scores(make_scorer("obcache", {{"window", "1"}}), h);
  CHECK(ov(0) == Approx(0.0625).margin(kTol));
  CHECK(ov(1) == Approx(0.25).margin(kTol));
  CHECK(ov(2) == Approx(0.0).margin(kTol));
  CHECK(ok(0) == Approx(0.0).margin(kTol));
  CHECK(ok(1) == Approx(key1).margin(kTol));
  CHECK(oj(1) == Approx(0.25 + key1).margin(kTol));
  // LaProx: c_t(0) (= DropKV's term for one query) over ||o||^2 = .3125.
  const auto plan = plan_eviction(make_scorer("laprox"), {{h}}, Budget::count(1));
  CHECK(plan.scores[0][0](0) == Approx(0.8125 / 9 / 0.3125).margin(kTol));
  CHECK(plan.scores[0][0](1) == Approx(1.0).margin(kTol));
  CHECK(kept(plan.keep[0][0]) == std::vector<int>{1});
  // Model-wide: a second layer with uniform attention (1,1,1)/3: costs (5/36, 5/36, 2/36)
  // over ||o||^2 = 2/9 -> (.625, .625, .25); values scaled by 10 change nothing. With one
  // slot per head (two in all) the pool takes L0 t1 (1.0) and L1 t0 (.625).
  HeadData u = make_head({1, 1, 1}, {}, {{kS2, 0}}, {{10, 0}, {0, 10}, {0, 0}});
  const auto mw = plan_eviction(make_scorer("laprox"), {{h}, {u}}, Budget::count(1));
  CHECK(mw.scores[1][0](0) == Approx(0.625).margin(kTol));
  CHECK(mw.scores[1][0](2) == Approx(0.25).margin(kTol));
  CHECK(kept(mw.keep[0][0]) == std::vector<int>{1});
  CHECK(kept(mw.keep[1][0]) == std::vector<int>{0});
  // With two slots per head (four in all): 1.0, .625, .625, then L0 t0 (.289) before L1 t2 (.25).
  const auto mw2 = plan_eviction(make_scorer("laprox"), {{h}, {u}}, Budget::count(2));
  CHECK(kept(mw2.keep[0][0]) == std::vector<int>{0, 1});
  CHECK(kept(mw2.keep[1][0]) == std::vector<int>{0, 1});
}

TEST_CASE("Expected Attention: mean and covariance of the window queries", "[scorers]") {
  // Queries (sqrt2, 2) and (sqrt2, -2): mu = (sqrt2, 0), Sigma = diag(0, 4). With keys
  // (x, y): exponent x + 4 y^2 / 4 = x + y^2. Keys (0,0), (ln 2, 0), (0, 1) -> (1, 2, e),
  // normalised, times ||v|| = (1, 2, 1).
  HeadData h;
  h.keys.resize(3, 2);
  h.keys << 0.f, 0.f, static_cast<float>(std::log(2.0)), 0.f, 0.f, 1.f;
  h.values.resize(3, 2);
  h.values << 1.f, 0.f, 0.f, 2.f, 0.f, 1.f;
  h.obs_queries.resize(2, 2);
  h.obs_queries << static_cast<float>(kS2), 2.f, static_cast<float>(kS2), -2.f;
  const double Z = 3.0 + std::exp(1.0);
  const VectorD s = head_scores(make_scorer("expected", {{"window", "2"}}), h);
  CHECK(s(0) == Approx(1.0 / Z).margin(kTol));
  CHECK(s(1) == Approx(4.0 / Z).margin(kTol));
  CHECK(s(2) == Approx(std::exp(1.0) / Z).margin(kTol));
  const VectorD n = head_scores(make_scorer("expected", {{"window", "2"}, {"use_covariance", "false"}}), h);
  CHECK(n(0) == Approx(0.25).margin(kTol));
  CHECK(n(1) == Approx(1.0).margin(kTol));
  CHECK(n(2) == Approx(0.25).margin(kTol));
}

TEST_CASE("KeyDiff: negative cosine to the mean normalised key", "[scorers]") {
  // Keys (1,0), (0,1), (2,0): kbar = (2/3, 1/3); cos = 2/sqrt5, 1/sqrt5, 2/sqrt5.
  HeadData h;
  h.keys.resize(3, 2);
  h.keys << 1.f, 0.f, 0.f, 1.f, 2.f, 0.f;
  h.values = MatrixRM::Zero(3, 2);
  h.obs_queries = MatrixRM::Zero(1, 2);
  const VectorD s = head_scores(make_scorer("keydiff"), h);
  CHECK(s(0) == Approx(-2.0 / std::sqrt(5.0)).margin(kTol));
  CHECK(s(1) == Approx(-1.0 / std::sqrt(5.0)).margin(kTol));
  CHECK(kept(plan_eviction(make_scorer("keydiff"), {{h}}, Budget::count(1)).keep[0][0]) == std::vector<int>{1});
}

TEST_CASE("Layer-wide selection trades slots between heads (comparable units)", "[scorers]") {
  // DropKV on the hand head above (.8125/9, .3125, .3125/9) and on the same head with values
  // doubled (scores x4: .3611, 1.25, .1389). One slot per head, pooled over the layer: both
  // go to the second head (1.25, .3611 > .3125).
  const HeadData h = make_head({1, 2, 1}, {}, {{kS2, 0}}, {{1, 0}, {0, 1}, {0, 0}});
  const HeadData h2 = make_head({1, 2, 1}, {}, {{kS2, 0}}, {{2, 0}, {0, 2}, {0, 0}});
  MethodParams p = {{"window", "1"}, {"kernel", "1"}, {"recent", "0"}, {"selection", "layer"}};
  const auto layer = plan_eviction(make_scorer("dropkv", p), {{h, h2}}, Budget::count(1));
  CHECK(layer.head_budget[0] == std::vector<int>{0, 2});
  CHECK(kept(layer.keep[0][1]) == std::vector<int>{0, 1});
  p["selection"] = "head";
  const auto head = plan_eviction(make_scorer("dropkv", p), {{h, h2}}, Budget::count(1));
  CHECK(head.head_budget[0] == std::vector<int>{1, 1});
  CHECK(kept(head.keep[0][0]) == std::vector<int>{1});
}

TEST_CASE("every registered scorer runs with its defaults on a trace, given group_size exactly when it takes it") {
  SynthParams p = synth_preset("tiny");
  p.n_layers = 1;
  p.prompt_len = 96;
  p.obs_window = 32;  // the SnapKV family's default window
  std::vector<std::vector<HeadData>> model(1);
  for (int h = 0; h < p.n_kv_heads; ++h) model[0].push_back(synth_head(p, 0, h));
  for (const MethodInfo& m : eviction_scorer_methods()) {
    INFO("scorer " << m.name);
    bool takes_group = false;
    for (const MethodParam& q : m.params) takes_group = takes_group || q.name == "group_size";
    ScorerConfig cfg;
    REQUIRE_NOTHROW(cfg = make_scorer_for_trace(m.name, {}, p.group_size));
    CHECK(cfg.group_size == (takes_group ? p.group_size : 1));
    // A group size the user gives wins.
    if (takes_group) CHECK(make_scorer_for_trace(m.name, {{"group_size", "2"}}, p.group_size).group_size == 2);
    const EvictionPlan plan = plan_eviction(cfg, model, Budget::ratio(0.5));
    CHECK(plan.kept > 0);
    CHECK(plan.kept <= plan.tokens);
  }
}
