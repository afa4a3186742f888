// Allocation staleness over decode steps, out of sample (scenarios/pipeline/staleness_head.hpp,
// docs/model.md section 10): the overlap measures on hand-computed cases; the fresh decision's query
// set (observation rows filling in, causal limits); the fresh allocation at step s sees no
// query of step s or later; step 1 gives the stale allocation back; the in-sample allocation
// is the surrogate optimum on the scored queries; the recomputed-best family is the argmin of
// the recomputed errors; the horizon averages the scored steps; the scenario key's validation;
// and a tiny run's tables, summary verdict and figures.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/base/error.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/analyses/staleness.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/pipeline/staleness_head.hpp"
#include "tests/support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {

HeadData tiny_head(int layer = 0, int kv_head = 1) { return synth_head(synth_preset("tiny"), layer, kv_head); }

std::vector<int> all_steps(int S) {
  std::vector<int> v;
  for (int s = 1; s <= S; ++s) v.push_back(s);
  return v;
}

const StalenessStep& at(const StalenessHead& r, int step) {
  for (const StalenessStep& st : r.steps)
    if (st.step == step) return st;
  FAIL("step " << step << " is not in the result");
  return r.steps.front();
}

}  // namespace

TEST_CASE("Jaccard of evicted sets and tier agreement on hand-computed allocations") {
  // tiers: 0 = evict. a evicts {0, 1, 4}, b evicts {1, 2, 4}: |n| = 2, |u| = 4.
  const std::vector<std::uint8_t> a{0, 0, 1, 2, 0, 3}, b{1, 0, 0, 2, 0, 1};
  CHECK(evicted_jaccard(a, b) == Approx(0.5));
  CHECK(tier_agreement(a, b) == Approx(3.0 / 6.0));  // tokens 1, 3, 4
  const std::vector<std::uint8_t> none{1, 2, 3};
  CHECK(evicted_jaccard(none, none) == 1.0);  // both sets empty
  CHECK(tier_agreement(none, none) == 1.0);
  CHECK(evicted_jaccard({0, 1}, {1, 0}) == 0.0);
  CHECK_THROWS_AS(tier_agreement(a, none), InputError);
}

TEST_CASE("the fresh decision at step s reads the W steps before s, observation rows filling in with their causal limits") {
  const HeadData head = tiny_head();
  const int T = static_cast<int>(head.keys.rows()), S = static_cast<int>(head.decode_keys.rows());
  const int g = head.group_size, W_obs = static_cast<int>(head.obs_queries.rows()) / g;
  REQUIRE(W_obs == 8);
  REQUIRE(S >= 6);
  // Step 3, W = 4: per query head the last 2 observation rows (positions T-2, T-1), then steps 1, 2.
  const DecisionQueries dq = fresh_decision_queries(head, 3, 4);
  CHECK(dq.observation_rows == 2);
  CHECK(dq.decode_rows == 2);
  REQUIRE(dq.rows.rows() == g * 4);
  for (int j = 0; j < g; ++j) {
    const int r = j * 4;
    CHECK(dq.rows.row(r) == head.obs_queries.row(j * W_obs + 6));
    CHECK(dq.rows.row(r + 1) == head.obs_queries.row(j * W_obs + 7));
    CHECK(dq.rows.row(r + 2) == head.decode_queries.row(j * S + 0));
    CHECK(dq.rows.row(r + 3) == head.decode_queries.row(j * S + 1));
    CHECK(dq.visible[r] == T - 1);  // observation row 6 sits at position T - 8 + 6 = T - 2
    CHECK(dq.visible[r + 1] == T);
    CHECK(dq.visible[r + 2] == T);  // decode rows see the whole prompt
    CHECK(dq.visible[r + 3] == T);
  }
  // Step 1 with W = W_obs: the observation window itself, its own limits.
  const DecisionQueries first = fresh_decision_queries(head, 1, W_obs);
  const CausalQueries obs = observation_queries(head);
  CHECK(first.decode_rows == 0);
  CHECK(first.rows == head.obs_queries);
  CHECK(first.visible == obs.visible);
  // Past the window: decode rows only (steps 3, 4, 5 for s = 6, W = 3).
  const DecisionQueries late = fresh_decision_queries(head, 6, 3);
  CHECK(late.observation_rows == 0);
  REQUIRE(late.rows.rows() == g * 3);
  CHECK(late.rows.row(0) == head.decode_queries.row(2));
  CHECK(late.rows.row(2) == head.decode_queries.row(4));
  // A window longer than the observation window fills in with all of it.
  CHECK(fresh_decision_queries(head, 2, W_obs + 5).observation_rows == W_obs);
  CHECK_THROWS_AS(fresh_decision_queries(head, 0, 4), InputError);
  CHECK_THROWS_AS(fresh_decision_queries(head, 2, 0), InputError);
}

TEST_CASE("the fresh allocation at step s is decided only from the queries before s") {
  const HeadData head = tiny_head();
  const int S = static_cast<int>(head.decode_keys.rows()), g = head.group_size;
  StalenessOptions opt;
  opt.budget = 2.0;
  opt.window = 3;
  opt.steps = all_steps(S);
  auto backend = make_recomputer(Backend::Cpu);
  const StalenessHead before = staleness_head(head, opt, *backend);
  REQUIRE(before.steps.size() == static_cast<std::size_t>(S));
  // Change the queries of step s = 4 and later (every query head): new random directions.
  const int s = 4;
  HeadData changed = head;
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int j = 0; j < g; ++j)
    for (int u = s; u <= S; ++u)
      for (Eigen::Index c = 0; c < changed.decode_queries.cols(); ++c)
        changed.decode_queries(j * S + (u - 1), c) = 3.0f * normal(gen);
  const StalenessHead after = staleness_head(changed, opt, *backend);
  REQUIRE(after.steps.size() == before.steps.size());
  for (int u = 1; u <= s; ++u) {
    INFO("step " << u);
    CHECK(at(after, u).fresh_tiers == at(before, u).fresh_tiers);
  }
  CHECK(after.stale_tiers == before.stale_tiers);
  // Not vacuous: step s's scored error and in-sample allocation see the change, and a later
  // step's fresh decision (its window holds the changed steps) does too.
  CHECK(at(after, s).err_fresh != at(before, s).err_fresh);
  CHECK(at(after, s).insample_tiers != at(before, s).insample_tiers);
  bool later_changed = false;
  for (int u = s + 1; u <= S; ++u) later_changed = later_changed || at(after, u).fresh_tiers != at(before, u).fresh_tiers;
  CHECK(later_changed);
}

TEST_CASE("at step 1 with the observation window the fresh allocation is the stale one") {
  const HeadData head = tiny_head();
  StalenessOptions opt;
  opt.budget = 2.0;
  opt.steps = {1, 2, 100};  // 100 is beyond the trace: skipped
  auto backend = make_recomputer(Backend::Cpu);
  const StalenessHead r = staleness_head(head, opt, *backend);
  CHECK(r.window == 8);  // the trace's observation window
  REQUIRE(r.steps.size() == 2);
  const StalenessStep& s1 = r.steps[0];
  CHECK(s1.fresh_tiers == r.stale_tiers);
  CHECK(s1.err_stale > 0);
  CHECK(s1.err_stale == r.err_stale_first);
  CHECK(s1.aging == 1.0);  // err_stale(1) / err_stale(1)
  CHECK(s1.ratio == 1.0);
  CHECK(s1.jaccard == 1.0);
  CHECK(s1.agreement == 1.0);
  CHECK(s1.family_errors.M == s1.err_fresh);
  CHECK(s1.family == r.family_obs);  // the prefill family is step 1's recomputed best
  CHECK(s1.same_family);
  const StalenessStep& s2 = r.steps[1];
  CHECK(s2.aging == Approx(s2.err_stale / r.err_stale_first));
  CHECK(s2.ratio == Approx(s2.err_stale / s2.err_fresh));
  CHECK(s2.ratio_insample == Approx(s2.err_stale / s2.err_insample));
  CHECK(s2.jaccard == evicted_jaccard(r.stale_tiers, s2.fresh_tiers));
  CHECK(s2.agreement == tier_agreement(r.stale_tiers, s2.fresh_tiers));
}

TEST_CASE("the in-sample allocation is the surrogate optimum on the scored step's queries") {
  // err_insample(s) <= err_fresh(s) is not asserted: the exact error is not the surrogate, and
  // it need not hold. What holds is that on step s's own surrogate costs M*_in(s) is the
  // optimum, so its objective is at most that of the out-of-sample allocations.
  auto backend = make_recomputer(Backend::Cpu);
  for (int kv = 0; kv < 2; ++kv) {
    const HeadData head = tiny_head(1, kv);
    const int T = static_cast<int>(head.keys.rows()), S = static_cast<int>(head.decode_keys.rows());
    StalenessOptions opt;
    opt.budget = 2.0;
    opt.window = 2;
    opt.steps = all_steps(S);
    const StalenessHead r = staleness_head(head, opt, *backend);
    REQUIRE(r.steps.size() == static_cast<std::size_t>(S));
    for (const StalenessStep& st : r.steps) {
      INFO("head " << kv << " step " << st.step);
      // The objectives, recomputed here from step s's queries.
      MatrixRM q(head.group_size, head.keys.cols());
      for (int j = 0; j < head.group_size; ++j) q.row(j) = head.decode_queries.row(j * S + (st.step - 1));
      const SurrogateCosts sc = surrogate_costs(head, opt.rope, all_visible(q, T), opt.ladder);
      const auto objective = [&](const std::vector<std::uint8_t>& tiers) {
        double sum = 0;
        for (std::size_t t = 0; t < tiers.size(); ++t) sum += sc.cost(tiers[t], static_cast<Eigen::Index>(t));
        return sum;
      };
      CHECK(st.surrogate_fresh == Approx(objective(st.fresh_tiers)).epsilon(1e-12));
      CHECK(st.surrogate_insample == Approx(objective(st.insample_tiers)).epsilon(1e-12));
      const double slack = 1e-9 * std::abs(st.surrogate_fresh) + 1e-300;
      CHECK(st.surrogate_insample <= st.surrogate_fresh + slack);
      CHECK(st.surrogate_insample <= st.surrogate_stale + slack);
    }
  }
}

TEST_CASE("the recomputed-best family is the argmin of the recomputed errors") {
  // Hand-made errors: the least wins; NaN (infeasible) is skipped; below the floor all tie,
  // and ties go to Q, then E.
  CHECK(recomputed_best_family({0.3, 0.2, 0.25}) == "E");
  CHECK(recomputed_best_family({0.3, 0.4, 0.25}) == "M");
  CHECK(recomputed_best_family({kStaleNaN, 0.4, 0.5}) == "E");
  CHECK(recomputed_best_family({0.2, 0.2, 0.2}) == "Q");
  CHECK(recomputed_best_family({1e-15, 1e-16, 0.0}) == "Q");
  CHECK(recomputed_best_family({kStaleNaN, kStaleNaN, kStaleNaN}).empty());
  // On every head and step of a synthetic trace.
  const SynthParams p = synth_preset("tiny");
  auto backend = make_recomputer(Backend::Cpu);
  StalenessOptions opt;
  opt.budget = 2.0;
  opt.steps = all_steps(p.decode_steps);
  int heads = 0;
  for (int l = 0; l < p.n_layers; ++l)
    for (int h = 0; h < p.n_kv_heads; ++h) {
      const StalenessHead r = staleness_head(synth_head(p, l, h), opt, *backend);
      for (const StalenessStep& st : r.steps) {
        INFO("head " << l << "." << h << " step " << st.step);
        const FamilyErrors& e = st.family_errors;
        REQUIRE(std::isfinite(e.M));
        CHECK(e.M == st.err_fresh);  // the fresh allocation is M*_s
        // argmin written out: the smallest error, earlier letter on ties.
        std::string best;
        double lo = INFINITY;
        for (const auto& [err, letter] : {std::pair{e.Q, "Q"}, std::pair{e.E, "E"}, std::pair{e.M, "M"}})
          if (!std::isnan(err) && std::max(err, kFamilyErrorFloor) < lo) lo = std::max(err, kFamilyErrorFloor), best = letter;
        CHECK(st.family == best);
        CHECK(st.same_family == (st.family == r.family_obs));
      }
      CHECK(r.family_obs == recomputed_best_family(r.prefill_errors));
      ++heads;
    }
  CHECK(heads == 4);
}

TEST_CASE("a horizon of k steps scores each allocation on the mean over steps s..s+k-1") {
  const HeadData head = tiny_head(1, 0);
  const int S = static_cast<int>(head.decode_keys.rows());
  auto backend = make_recomputer(Backend::Cpu);
  StalenessOptions one;
  one.steps = all_steps(S);
  StalenessOptions three = one;
  three.horizon = 3;
  const StalenessHead r1 = staleness_head(head, one, *backend), r3 = staleness_head(head, three, *backend);
  REQUIRE(r3.steps.size() == static_cast<std::size_t>(S));
  // The stale allocation does not depend on s: its k-step error is the mean of its 1-step ones
  // (each step has g rows); the last steps are cut at S.
  for (int s = 1; s <= S; ++s) {
    INFO("step " << s);
    const int last = std::min(S, s + 2);
    double sum = 0;
    for (int u = s; u <= last; ++u) sum += at(r1, u).err_stale;
    CHECK(at(r3, s).scored_steps == last - s + 1);
    CHECK(at(r3, s).err_stale == Approx(sum / (last - s + 1)).epsilon(1e-6));
    CHECK(at(r3, s).fresh_tiers == at(r1, s).fresh_tiers);  // the decision does not depend on k
  }
}

TEST_CASE("the staleness key is validated with the file and line") {
  const std::string head =
      "name: s\n"
      "traces:\n"
      "  synthetic:\n"
      "    presets: [tiny]\n";
  auto error_of = [&](const std::string& tail) {
    try {
      parse_scenario(head + tail, "s.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("staleness: {steps: [1, 4, 2]}\n").rfind("s.yaml:5:", 0) == 0);
  CHECK(error_of("staleness: {steps: [1, 4, 2]}\n").find("increasing") != std::string::npos);
  CHECK(error_of("staleness: {steps: [0]}\n").find("staleness.steps") != std::string::npos);
  CHECK(error_of("staleness: {budget: 17}\n").find("staleness.budget") != std::string::npos);
  CHECK(error_of("staleness: {window: 0}\n").find("staleness.window") != std::string::npos);
  CHECK(error_of("staleness: {horizon: 0}\n").find("staleness.horizon") != std::string::npos);
  CHECK(error_of("staleness:\n  step: [1]\n").rfind("s.yaml:6:", 0) == 0);
  CHECK(error_of("staleness: 3\n").rfind("s.yaml:5:", 0) == 0);
  const Scenario s = parse_scenario(head + "staleness: {steps: [1, 2, 8], budget: 3, window: 4, horizon: 2}\n", "s.yaml");
  REQUIRE(s.find<StalenessAnalysis>() != nullptr);
  CHECK(s.find<StalenessAnalysis>()->spec.steps == std::vector<int>{1, 2, 8});
  CHECK(s.find<StalenessAnalysis>()->spec.budget == 3.0);
  CHECK(s.find<StalenessAnalysis>()->spec.window == 4);
  CHECK(s.find<StalenessAnalysis>()->spec.horizon == 2);
  const Scenario d = parse_scenario(head + "staleness: {steps: [1]}\n", "s.yaml");
  CHECK(d.find<StalenessAnalysis>()->spec.window == 0);  // the trace's observation window
  CHECK(d.find<StalenessAnalysis>()->spec.horizon == 1);
  CHECK(parse_scenario(head, "s.yaml").find<StalenessAnalysis>() == nullptr);
  // The per-head options check themselves too (the explorer builds them by hand).
  StalenessOptions bad;
  bad.horizon = 0;
  CHECK_THROWS_AS(bad.validate(), InputError);
  bad = StalenessOptions{};
  bad.window = -1;
  CHECK_THROWS_AS(bad.validate(), InputError);
  bad = StalenessOptions{};
  bad.steps = {1, 4, 4};
  CHECK_THROWS_AS(bad.validate(), InputError);
  CHECK_NOTHROW(StalenessOptions{}.validate());
}

TEST_CASE("a run with staleness writes its tables, summary verdict and figures") {
  const Scenario s = parse_scenario(
      "name: tiny-staleness\n"
      "traces:\n"
      "  synthetic:\n"
      "    presets: [tiny]\n"
      "    seeds: [0]\n"
      "budgets: [2]\n"
      "backend: cpu\n"
      "bootstrap: 100\n"
      "staleness: {steps: [1, 2, 4, 8], budget: 2}\n",
      "tiny.yaml");
  const tierlab::testing::TempDir tmp("staleness");
  RunOptions opt;
  opt.out = tmp.path.string();
  opt.progress = false;
  const RunResult r = run_scenario(s, opt);
  REQUIRE(r.tables_written);
  std::ifstream in(opt.out + "/tables/staleness.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["window"] == "trace");
  CHECK(j["windows"] == nlohmann::json::array({8}));
  CHECK(j["horizon"] == 1);
  REQUIRE(j["rows"].size() == 4);
  CHECK(j["rows"][0]["step"] == 1);
  CHECK(j["rows"][0]["heads"] == 4);  // tiny: 2 layers x 2 KV heads
  CHECK(j["rows"][0]["median_ratio"] == 1.0);  // step 1: fresh is stale
  CHECK(j["rows"][0]["median_aging"] == 1.0);
  CHECK(j["rows"][0]["share_same_family"] == 1.0);
  for (const auto& row : j["rows"]) {
    CHECK(row["median_jaccard"].get<double>() >= 0.0);
    CHECK(row["median_jaccard"].get<double>() <= 1.0);
    CHECK(row["median_agreement"].get<double>() <= 1.0);
    CHECK(row["share_Q"].get<double>() + row["share_E"].get<double>() + row["share_M"].get<double>() ==
          Approx(1.0));
  }
  std::ifstream sm(opt.out + "/summary.md");
  std::stringstream ss;
  ss << sm.rdbuf();
  CHECK(ss.str().find("Allocation staleness over decode steps") != std::string::npos);
  CHECK(ss.str().find("**Verdict.** Out of sample") != std::string::npos);
  CHECK(ss.str().find("bound (in-sample)") != std::string::npos);
  std::ifstream heads(opt.out + "/tables/staleness_heads.csv");
  std::string header;
  std::getline(heads, header);
  CHECK(header.find("err_insample") != std::string::npos);
  CHECK(header.find("family_surrogate") != std::string::npos);
  const FiguresWritten drawn = render_figures_of_run(opt.out);
  const std::vector<std::string>& files = drawn.files;
  (void)files;
  {
    std::string faults;
    for (const auto& x : drawn.layout) faults += x + "\n";
    INFO(faults);
    CHECK(drawn.layout.empty());  // no text off the canvas or over another (figure.hpp layout_faults)
  }
  CHECK(fs::exists(opt.out + "/figures/staleness.png"));
  CHECK(fs::exists(opt.out + "/figures/staleness.svg"));
  CHECK(fs::exists(opt.out + "/figures/staleness_overlap.png"));
}
