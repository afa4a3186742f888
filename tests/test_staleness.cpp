// Allocation staleness over decode steps (scenarios/pipeline/staleness_head.hpp, MODEL.md section 7):
// the overlap measures on hand-computed cases, the identity case (a decode step whose query
// set is the observation set gives the stale allocation back: ratio 1, Jaccard 1, tier
// agreement 1, same family), the scenario key's validation, and a tiny run's tables and figure.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/error.hpp"
#include "model/synthetic.hpp"
#include "scenarios/analyses/staleness.hpp"
#include "scenarios/figures/figures.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/pipeline/staleness_head.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

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

TEST_CASE("a decode step whose queries are the observation queries keeps the stale allocation") {
  const SynthParams p = synth_preset("tiny");
  HeadData head = synth_head(p, 0, 1);
  const int S = static_cast<int>(head.decode_keys.rows());
  const int g = static_cast<int>(head.decode_queries.rows()) / S;
  REQUIRE(S >= 4);
  // The observation set becomes exactly step 3's g query rows (same rows, same order).
  MatrixRM obs(g, head.keys.cols());
  for (int j = 0; j < g; ++j) obs.row(j) = head.decode_queries.row(j * S + 2);
  head.obs_queries = obs;
  StalenessOptions opt;
  opt.budget = 2.0;
  opt.steps = {1, 3, S, S + 5};  // S + 5 is beyond the trace: skipped
  auto backend = make_recomputer(Backend::Cpu);
  const StalenessHead r = staleness_head(head, opt, *backend);
  REQUIRE(r.steps.size() == 3);
  CHECK(r.steps[0].step == 1);
  CHECK(r.steps[2].step == S);
  const StalenessStep& s3 = r.steps[1];
  REQUIRE(s3.step == 3);
  CHECK(s3.fresh_tiers == r.stale_tiers);
  CHECK(s3.ratio == 1.0);
  CHECK(s3.err_stale == s3.err_fresh);
  CHECK(s3.err_fresh > 0);
  CHECK(s3.jaccard == 1.0);
  CHECK(s3.agreement == 1.0);
  CHECK(s3.same_family);
  CHECK(s3.family == r.family_obs);
  // Step 1's queries differ from the observation set: on this seeded trace its fresh
  // allocation differs (a solver that ignored the step's queries would not).
  CHECK(r.steps[0].fresh_tiers != r.stale_tiers);
  for (const StalenessStep& st : r.steps) {
    // The reported overlaps are those of the reported allocations.
    CHECK(st.jaccard == evicted_jaccard(r.stale_tiers, st.fresh_tiers));
    CHECK(st.agreement == tier_agreement(r.stale_tiers, st.fresh_tiers));
    CHECK(st.ratio == Approx(st.err_stale / st.err_fresh));
    CHECK(st.same_family == (st.family == r.family_obs));
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
  CHECK(error_of("staleness:\n  step: [1]\n").rfind("s.yaml:6:", 0) == 0);
  CHECK(error_of("staleness: 3\n").rfind("s.yaml:5:", 0) == 0);
  const Scenario s = parse_scenario(head + "staleness: {steps: [1, 2, 8], budget: 3}\n", "s.yaml");
  REQUIRE(s.find<StalenessAnalysis>() != nullptr);
  CHECK(s.find<StalenessAnalysis>()->spec.steps == std::vector<int>{1, 2, 8});
  CHECK(s.find<StalenessAnalysis>()->spec.budget == 3.0);
  CHECK(parse_scenario(head, "s.yaml").find<StalenessAnalysis>() == nullptr);
}

TEST_CASE("a run with staleness writes its tables, summary section and figure") {
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
  RunOptions opt;
  opt.out = std::string(TIERLAB_BINARY_DIR) + "/test_staleness_out";
  fs::remove_all(opt.out);
  opt.progress = false;
  const RunResult r = run_scenario(s, opt);
  REQUIRE(r.tables_written);
  std::ifstream in(opt.out + "/tables/staleness.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  REQUIRE(j["rows"].size() == 4);
  CHECK(j["rows"][0]["step"] == 1);
  CHECK(j["rows"][0]["heads"] == 4);  // tiny: 2 layers x 2 KV heads
  for (const auto& row : j["rows"]) {
    CHECK(row["median_jaccard"].get<double>() >= 0.0);
    CHECK(row["median_jaccard"].get<double>() <= 1.0);
    CHECK(row["median_agreement"].get<double>() <= 1.0);
  }
  std::ifstream sm(opt.out + "/summary.md");
  std::stringstream ss;
  ss << sm.rdbuf();
  CHECK(ss.str().find("Allocation staleness over decode steps") != std::string::npos);
  const std::vector<std::string> files = render_figures(opt.out);
  CHECK(fs::exists(opt.out + "/figures/staleness.png"));
  CHECK(fs::exists(opt.out + "/figures/staleness.svg"));
}
