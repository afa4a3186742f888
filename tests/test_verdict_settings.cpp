// Verdicts that survive the simulator's own settings (issue 31): a family infeasible at a
// budget is reported as such and carries no verdict; a dense quantizer outside the ladder can
// win the routing of a head; chance-corrected family stability; one generator parameter swept
// within a preset.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/analyses/interior_verdict.hpp"
#include "scenarios/analyses/stats.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/pipeline/dense_routing.hpp"
#include "scenarios/pipeline/head.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "tests/support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult run_yaml(const std::string& yaml, const std::string& name, std::string& out) {
  const Scenario s = parse_scenario(yaml, name + ".yaml");
  RunOptions opt;
  opt.out = tierlab::testing::process_dir("verdict-settings").file(name);
  fs::remove_all(opt.out);
  opt.progress = false;
  out = opt.out;
  return run_scenario(s, opt);
}

}  // namespace

TEST_CASE("a family infeasible at a budget is reported as infeasible in JSON and the budget carries no verdict",
          "[verdicts][infeasible]") {
  // KIVI-2 with its metadata costs 3 total bits per element: Q has no allocation at B = 1 or 2.
  const std::string yaml =
      "name: q-infeasible\n"
      "traces:\n"
      "  synthetic:\n"
      "    presets: [tiny]\n"
      "    seeds: [0, 1, 2, 3, 4]\n"
      "    overrides: {n_layers: 1}\n"
      "ladder: evict,kivi2,kivi4,exact\n"
      "rate_kind: total\n"
      "budgets: [2, 4]\n"
      "primary_budget: 2\n"
      "primary_aggregation: median\n"
      "backend: cpu\n"
      "bootstrap: 100\n";
  std::string out;
  const RunResult r = run_yaml(yaml, "q-infeasible", out);
  REQUIRE(r.tables_written);
  const nlohmann::json in = nlohmann::json::parse(slurp(out + "/tables/interior.json"));
  REQUIRE(in["q_feasible"].size() == 2);
  CHECK(in["q_feasible"][0]["feasible"] == false);
  CHECK(in["q_feasible"][0]["heads_infeasible"] == in["q_feasible"][0]["heads"]);
  CHECK(in["q_feasible"][1]["feasible"] == true);
  // The cells: Q at B = 2 has no rate and no error (null), never 0.
  for (const auto& c : nlohmann::json::parse(slurp(out + "/tables/cells.json")))
    if (c["budget"] == 2) {
      CHECK(c["rates"]["Q"]["total_bits"].is_null());
      CHECK(c["rates"]["Q"]["heads"] == 0);
      CHECK(c["model"]["Q"]["feasible"] == false);
      CHECK_FALSE(c["model"]["Q"].contains("total_bits"));
    }
  const std::string summary = slurp(out + "/summary.md");
  CHECK(summary.find("is withheld: Q is infeasible at B = 2 total bits") != std::string::npos);
  CHECK(summary.find("(Q infeasible: M vs E only, no verdict)") != std::string::npos);
}

TEST_CASE("tierlab solve's JSON says infeasible with no objective or rate, and its message names the right head",
          "[verdicts][infeasible]") {
  SynthParams p = synth_preset("tiny");
  p.seed = 2;
  const tierlab::testing::TempDir tmp("verdict-settings-solve");
  const std::string path = tmp.file("solve.safetensors");
  write_synthetic_trace(p, path);
  const TraceReader trace(path);
  AllocateOptions o;
  o.budget = 1.0;
  o.rate_kind = RateKind::Total;
  o.family = FamilyChoice::Quantize;
  const AllocationReport r = allocate_trace(trace, o);
  REQUIRE_FALSE(r.has_solution());
  const nlohmann::json j = to_json(r);
  CHECK(j["model"]["feasible"] == false);
  for (const char* k : {"objective", "bound", "gap", "rate", "budget_rate"}) CHECK(j["model"][k].is_null());
  for (const auto& s : j["scopes"]) {
    CHECK(s["feasible"] == false);
    CHECK(s["objective"].is_null());
    CHECK(s["rate_used_bits"].is_null());
    CHECK(s["message"].get<std::string>().find("(head 0)") == std::string::npos);  // the scope name says which head
  }
  CHECK(j["message"].get<std::string>().rfind("L", 0) == 0);
}

TEST_CASE("the dense candidate of a quantizer is its largest bits whose dense rate fits the budget",
          "[verdicts][dense-routing]") {
  SynthParams p = synth_preset("tiny");
  p.prompt_len = 64;
  const HeadData head = synth_head(p, 0, 0);
  const RopeParams rope = synth_meta(p).rope;
  // KIVI at G = 32: b + 1 total bits, b code bits.
  CHECK(dense_tier_at_budget(head, rope, "kivi", 4.0, RateKind::Total).name() == "kivi3");
  CHECK(dense_tier_at_budget(head, rope, "kivi", 4.0, RateKind::Code).name() == "kivi4");
  CHECK(dense_tier_at_budget(head, rope, "kivi", 1.5, RateKind::Total).kind == QuantizerKind::Evict);  // none fits
  for (const double B : {2.0, 3.0, 5.0}) {
    const Tier t = dense_tier_at_budget(head, rope, "turboquant", B, RateKind::Total);
    REQUIRE(t.kind != QuantizerKind::Evict);
    CHECK(nominal_rate(head, rope, t).total_bits <= B + 1e-12);
    const Tier up = Tier::parse("turboquant" + std::to_string(t.bits + 1));
    CHECK(nominal_rate(head, rope, up).total_bits > B);
  }
  CHECK_THROWS_WITH(validate_dense_quantizers({"evict"}, "dense_routing"),
                    Catch::Contains("'evict' is not a dense quantizer"));
}

TEST_CASE("a dense quantizer outside the ladder can win the routing of a head, and M wins when nothing beats it",
          "[verdicts][dense-routing]") {
  SynthParams p = synth_preset("tiny");
  p.prompt_len = 128;
  auto cpu = make_recomputer(Backend::Cpu);
  const RopeParams rope = synth_meta(p).rope;
  int dense_wins = 0, m_wins = 0, heads = 0;
  for (int l = 0; l < p.n_layers; ++l)
    for (int h = 0; h < p.n_kv_heads; ++h) {
      const HeadData head = synth_head(p, l, h);
      // A ladder with only eviction and 2-bit KIVI below exact: at B = 6 total bits a dense
      // 5-bit quantizer (TurboQuant) is far finer than anything M can mix at that rate.
      InteriorOptions io;
      io.ladder = RateLadder::parse("evict,kivi2,exact");
      io.budget = 6.0;
      io.dense_quantizers = {"turboquant", "kivi"};
      const SurrogateCosts costs = surrogate_costs(head, rope, observation_queries(head), io.ladder);
      const HeadInterior hi =
          head_interior(head, rope, costs, ladder_rates(head, rope, io.ladder, io.rate_kind), io, *cpu);
      REQUIRE(hi.M.feasible);
      REQUIRE(hi.dense.candidates.size() == 2);
      ++heads;
      // The routers choose by their own measure: the choice has the least score.
      for (const DenseCandidate& c : hi.dense.candidates) {
        CHECK(c.rate.total_bits <= 6.0 + 1e-12);
        if (hi.dense.by_obs.choice == "M") CHECK(hi.M.obs.rel_error <= c.obs.rel_error);
        if (hi.dense.by_surrogate.choice == "M") CHECK(hi.M.surrogate <= c.surrogate);
      }
      if (hi.dense.by_surrogate.choice == "M") ++m_wins;
      else ++dense_wins;
      // Nothing to compete with: M is the routed allocation.
      const DenseRouting none = route_dense(head, rope, {}, 6.0, RateKind::Total, true, hi.M.surrogate, hi.M.obs,
                                            hi.M.decode, *cpu);
      CHECK(none.by_surrogate.choice == "M");
      CHECK(none.by_obs.choice == "M");
      CHECK(none.by_obs.err_decode == hi.M.decode.rel_error);
    }
  INFO(dense_wins << " of " << heads << " heads routed to a dense quantizer");
  CHECK(dense_wins > 0);
}

TEST_CASE("Cohen's kappa is 0 for labels as independent as their marginals and 1 for identical ones",
          "[verdicts][staleness][kappa]") {
  // An exactly independent table: P(a) = (1/2, 1/2), P(b) = (3/4, 1/4), joint = product.
  std::vector<std::string> a, b;
  for (const auto& [x, y, n] : std::vector<std::tuple<std::string, std::string, int>>{
           {"M", "M", 3}, {"M", "Q", 1}, {"Q", "M", 3}, {"Q", "Q", 1}})
    for (int i = 0; i < n; ++i) a.push_back(x), b.push_back(y);
  CHECK(cohen_kappa(a, b) == Approx(0.0).margin(1e-12));
  CHECK(cohen_kappa(a, a) == Approx(1.0));
  // One family for every head at both times: agreement says nothing (undefined, not 1).
  CHECK(std::isnan(cohen_kappa({"M", "M", "M"}, {"M", "M", "M"})));
  // 95% agreement when 95% of heads are M at both times, independently: kappa near 0.
  std::vector<std::string> s, t;
  for (int i = 0; i < 400; ++i) {
    s.push_back(i % 20 == 0 ? "Q" : "M");
    t.push_back(i % 20 == 7 ? "Q" : "M");
  }
  CHECK(cohen_kappa(s, t) < 0.0);
  const Interval iv = bootstrap_kappa(a, a, {}, 200, 1);
  CHECK(iv.lo == Approx(1.0));
}

TEST_CASE("staleness reports the out-of-sample comparison per decision window with kappa",
          "[verdicts][staleness]") {
  const std::string yaml =
      "name: staleness-windows\n"
      "traces:\n"
      "  synthetic:\n"
      "    presets: [tiny]\n"
      "    seeds: [0]\n"
      "    overrides: {n_layers: 1, decode_steps: 8, query_drift_reversion: 0.2}\n"
      "budgets: [2]\n"
      "backend: cpu\n"
      "bootstrap: 100\n"
      "staleness:\n"
      "  steps: [1, 2, 4, 8]\n"
      "  budget: 2\n"
      "  windows: [1, 2, 4]\n";
  std::string out;
  REQUIRE(run_yaml(yaml, "staleness-windows", out).tables_written);
  const std::string csv = slurp(out + "/tables/staleness_windows.csv");
  CHECK(csv.rfind("window,step,median_ratio,share_fresh_better,kappa\n", 0) == 0);
  for (const char* w : {"\n1,2,", "\n2,2,", "\n4,8,"}) CHECK(csv.find(w) != std::string::npos);
  const nlohmann::json st = nlohmann::json::parse(slurp(out + "/tables/staleness.json"));
  CHECK(st["rows"][0].contains("kappa"));
  const std::string summary = slurp(out + "/summary.md");
  CHECK(summary.find("### By decision window") != std::string::npos);
  CHECK(summary.find("Cohen's kappa") != std::string::npos);
}

TEST_CASE("bounded drift: mean reversion keeps decode queries near their start, and 0 leaves traces unchanged",
          "[verdicts][synthetic]") {
  SynthParams p = synth_preset("tiny");
  p.decode_steps = 512;
  p.query_drift = 0.5;
  const HeadData walk = synth_head(p, 0, 0);
  SynthParams q = p;
  q.query_drift_reversion = 0.1;
  const HeadData bounded = synth_head(q, 0, 0);
  // The random walk's distance from the first decode query grows like sqrt(s); reverting
  // drift stays within its stationary spread.
  auto spread = [](const HeadData& h, int s) { return (h.decode_queries.row(s) - h.decode_queries.row(0)).norm(); };
  CHECK(spread(bounded, 511) < spread(walk, 511));
  // Cell identity: the parameter appears only when set.
  CHECK_FALSE(synth_params_json(p).contains("query_drift_reversion"));
  CHECK(synth_params_json(q)["query_drift_reversion"] == 0.1);
  q.query_drift_reversion = 1.0;
  CHECK_THROWS_WITH(q.validate(), Catch::Contains("query_drift_reversion"));
}

TEST_CASE("a generator parameter swept within a preset gives one cell per value and a dose-response section",
          "[verdicts][sweep]") {
  const std::string yaml =
      "name: dose\n"
      "traces:\n"
      "  synthetic:\n"
      "    presets: [tiny]\n"
      "    seeds: [0, 1]\n"
      "    overrides: {n_layers: 1}\n"
      "    sweep: {outlier_token_rate: [0, 0.05, 0.2]}\n"
      "ladder: evict,kivi1,kivi2,kivi4,exact\n"
      "budgets: [2]\n"
      "primary_aggregation: median\n"
      "backend: cpu\n"
      "bootstrap: 100\n";
  const Scenario s = parse_scenario(yaml, "dose.yaml");
  REQUIRE(s.cells.size() == 6);
  CHECK(s.cells[0].id == "tiny-s0-T64-outlier_token_rate0");
  CHECK(s.cells[2].synth.outlier_token_rate == 0.05);
  std::string out;
  REQUIRE(run_yaml(yaml, "dose", out).tables_written);
  const std::string summary = slurp(out + "/summary.md");
  CHECK(summary.find("## Dose-response: outlier_token_rate varied within a preset") != std::string::npos);
  CHECK_THROWS_WITH(parse_scenario("name: x\ntraces:\n  synthetic:\n    presets: [tiny]\n    sweep: {bogus: [1]}\n", "x.yaml"),
                    Catch::Contains("unknown key 'bogus' in traces.synthetic.sweep"));
}

TEST_CASE("traces.model takes a list of checkpoints: one cell per model, prompt seed and length, models as clusters",
          "[verdicts][zoo]") {
  const std::string src = TIERLAB_SOURCE_DIR;
  const std::string yaml = "name: two-models\n"
                           "traces:\n"
                           "  model:\n"
                           "    - {checkpoint: " + src + "/data/stories260K/stories260K.bin, seeds: [0, 1], context_lengths: [32]}\n"
                           "    - {checkpoint: " + src + "/data/zoo/kjv-l4-mha-d32/kjv-l4-mha-d32.bin, seeds: [0], context_lengths: [32, 64]}\n"
                           "budgets: [2]\n";
  const Scenario s = parse_scenario(yaml, "two.yaml");
  REQUIRE(s.cells.size() == 4);
  CHECK(s.cells[0].id == "stories260K-s0-T32");
  CHECK(s.cells[2].id == "kjv-l4-mha-d32-s0-T32");
  CHECK(s.cells[3].model_name == "kjv-l4-mha-d32");
  CHECK_THROWS_WITH(parse_scenario("name: x\ntraces:\n  model: []\n", "x.yaml"), Catch::Contains("empty list"));
}
