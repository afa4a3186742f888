// The ledger of the reference papers' claims (scenarios/analyses/claims.hpp, docs/claims.md):
// the `claim` key is checked with the file, line and key; it never changes a cell's hash; and
// each kind of claim scenario, on tiny inputs, writes its verdict row (whatever the verdict)
// from the run's tables.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/base/error.hpp"
#include "scenarios/analyses/claims.hpp"
#include "scenarios/analyses/interior_verdict.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "support.hpp"

using namespace tierlab;
using tierlab::testing::error_of;
using tierlab::testing::slurp;
using tierlab::testing::TempDir;

namespace {

const std::string kTinyInterior =
    "name: tiny-claims\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [0, 1, 2, 3, 4]\n"
    "    context_lengths: [48, 64]\n"
    "ladder: evict,kivi1,kivi2,kivi4,exact\n"
    "budgets: [2, 3]\n"
    "bootstrap: 200\n";

const std::string kClaimA =
    "claim:\n"
    "  id: a\n"
    "  claim: The dominated share orders the interior's recomputed advantage.\n"
    "  source: Quantize, Evict, or Both?\n"
    "  paper: rho = -0.978 over 25 cells\n";

std::string parse_error(const std::string& yaml) {
  return error_of<InputError>([&] { parse_scenario(yaml, "bad.yaml"); });
}

// Runs yaml in a fresh folder and returns its claim rows (tables/claims.json).
nlohmann::json run_rows(const TempDir& dir, const std::string& yaml) {
  const std::string file = dir.file("s.yaml");
  std::ofstream(file) << yaml;
  const Scenario sc = load_scenario(file);
  RunOptions ro;
  ro.out = dir.file("out");
  ro.backend = Backend::Cpu;
  ro.progress = false;
  REQUIRE(run_scenario(sc, ro).tables_written);
  CHECK(std::filesystem::exists(ro.out + "/claims.md"));
  CHECK_THAT(slurp(ro.out + "/summary.md"), Catch::Contains("## Claims of the reference papers tested here"));
  return nlohmann::json::parse(slurp(ro.out + "/tables/claims.json"))["rows"];
}

// A one-prompt stories260K scenario with `methods` (YAML list lines) and the proxy analysis,
// testing `claim` (a flow mapping); `extra` adds top-level keys.
std::string stories_proxy(const std::string& name, const std::string& methods, const std::string& claim,
                          const std::string& extra = "") {
  const std::string ckpt = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";
  return "name: " + name + "\ntraces:\n  model:\n    checkpoint: " + ckpt +
         "\n    seeds: [0]\n    context_lengths: [48]\n    decode_steps: 8\n"
         "ladder: evict,kivi2,kivi4,kivi8,exact\nbudgets: [2]\nrate_kind: code\nbootstrap: 100\n" + extra +
         "methods:\n" + methods + "proxy:\n  mode: teacher-forced\nclaim: " + claim + "\n";
}

void check_row(const nlohmann::json& row, const std::string& id) {
  INFO(row.dump(2));
  CHECK(row["id"] == id);
  const std::string v = row["verdict"];
  CHECK((v == "reproduced" || v == "partly" || v == "refuted" || v == "not testable here"));
  CHECK_FALSE(row["measured"].get<std::string>().empty());
  CHECK_FALSE(row["why"].get<std::string>().empty());
  CHECK_THAT(row["depends_on"].get<std::string>(), Catch::Contains("rate convention") && Catch::Contains("ladder"));
}

}  // namespace

TEST_CASE("a claim names an id a to q, the claim in one sentence, its source and the paper's number, and errors name the file, the line and the key") {
  const Scenario ok = parse_scenario(kTinyInterior + kClaimA, "ok.yaml");
  REQUIRE(ok.find<ClaimAnalysis>() != nullptr);
  CHECK(ok.find<ClaimAnalysis>()->claims.at(0).id == "a");

  std::string m = parse_error(kTinyInterior + "claim:\n  id: z\n  claim: x.\n  source: y\n  paper: p\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:11:") && Catch::Contains("claim.id") && Catch::Contains("a to q"));
  m = parse_error(kTinyInterior + "claim:\n  id: a\n  source: y\n  paper: p\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:11:") && Catch::Contains("claim.claim") && Catch::Contains("one sentence"));
  m = parse_error(kTinyInterior + "claim:\n  id: a\n  claim: x.\n  source: y\n  paper: p\n  papr: q\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:15:") && Catch::Contains("papr"));
  // Claims whose analysis the file lacks (every claim, a to q, is measured now).
  m = parse_error(kTinyInterior + "claim:\n  id: i\n  claim: x.\n  source: y\n  paper: p\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:11:") && Catch::Contains("add the key 'variance'"));
  m = parse_error(kTinyInterior + "claim:\n  id: q\n  claim: x.\n  source: y\n  paper: p\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:11:") && Catch::Contains("add the key 'proxy'"));
  m = parse_error(kTinyInterior + "claim:\n  id: d\n  claim: x.\n  source: y\n  paper: p\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:11:") && Catch::Contains("add the key 'staleness'"));
  m = parse_error(kTinyInterior + "claim: [" + "{id: a, claim: x., source: y, paper: p}, {id: a, claim: x., source: y, paper: p}]\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:10:") && Catch::Contains("twice"));
}

TEST_CASE("the claim mapping does not change a cell's hash") {
  const Scenario plain = parse_scenario(kTinyInterior, "s.yaml");
  const Scenario claimed = parse_scenario(kTinyInterior + kClaimA, "s.yaml");
  CHECK(plain.settings_json == claimed.settings_json);
  ContentHashes h;
  for (std::size_t i = 0; i < plain.cells.size(); ++i)
    CHECK(cell_hash(plain, plain.cells[i], h) == cell_hash(claimed, claimed.cells[i], h));
}

TEST_CASE("every scenario file of scenarios/files/claims loads, states a claim and opens with it in a comment") {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(TIERLAB_SOURCE_DIR) + "/scenarios/files/claims")) {
    if (e.path().extension() != ".yaml") continue;
    ++files;
    INFO(e.path().string());
    const Scenario sc = load_scenario(e.path().string());
    REQUIRE(sc.find<ClaimAnalysis>() != nullptr);
    CHECK(slurp(e.path().string()).rfind("# Claim", 0) == 0);
    CHECK_THAT(slurp(e.path().string()), Catch::Contains("small version"));
  }
  CHECK(files >= 4);
}

TEST_CASE("on tiny inputs, claims (a), (c) and (m) in one list produce three verdict rows") {
  TempDir dir("claims-acm");
  const nlohmann::json rows = run_rows(
      dir, kTinyInterior +
               "claim:\n"
               "  - {id: a, claim: The dominated share orders the advantage., source: Q, paper: rho = -0.978}\n"
               "  - {id: c, claim: Longer contexts move a model toward eviction., source: Q, paper: direction}\n"
               "  - {id: m, claim: Joint beats either alone., source: RDKV, paper: joint < either}\n");
  REQUIRE(rows.size() == 3);
  check_row(rows[0], "a");
  check_row(rows[1], "c");
  check_row(rows[2], "m");
  CHECK_THAT(rows[0]["measured"].get<std::string>(), Catch::Contains("rho = ") && Catch::Contains("10 cells"));
  // Each budget is measured, or named where Q does not exist (no verdict there).
  CHECK_THAT(rows[2]["measured"].get<std::string>(), Catch::Contains("B = 3"));
  CHECK_THAT(rows[2]["measured"].get<std::string>() + rows[2]["depends_on"].get<std::string>(),
             Catch::Contains("B = 2: median") || Catch::Contains("Q infeasible at B = 2"));
}

TEST_CASE("on tiny inputs, the stop-budget claim (b) produces its verdict row, and with one preset names nothing to compare") {
  {
    TempDir dir("claims-b1");
    const nlohmann::json rows =
        run_rows(dir, kTinyInterior + "claim: {id: b, claim: The stop depends on the architecture., source: Q, paper: differs}\n");
    REQUIRE(rows.size() == 1);
    check_row(rows[0], "b");
    CHECK(rows[0]["verdict"] == "not testable here");
    CHECK_THAT(rows[0]["why"].get<std::string>(), Catch::Contains("fewer than two presets"));
  }
  TempDir dir("claims-b2");
  const nlohmann::json rows = run_rows(
      dir, "name: tiny-b\ntraces:\n  synthetic:\n    presets: [tiny, llama-like]\n    seeds: [0, 1]\n"
           "    context_lengths: [96]\n    overrides: {n_layers: 1, n_kv_heads: 2, decode_steps: 4, spans_per_head: 1}\n"
           "ladder: evict,kivi1,kivi2,kivi4,exact\nbudgets: [2, 4, 8, 12]\nbootstrap: 100\n"
           "claim: {id: b, claim: The stop depends on the architecture., source: Q, paper: differs}\n");
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "b");
  CHECK_THAT(rows[0]["measured"].get<std::string>(),
             Catch::Contains("tiny B = ") && Catch::Contains("llama-like B = ") && Catch::Contains("budgets swept 2, 4, 8, 12"));
}

TEST_CASE("on stories260K, the proxy claim (g) produces its verdict row from the replay ranks") {
  TempDir dir("claims-g");
  const nlohmann::json rows = run_rows(
      dir, stories_proxy("tiny-g",
                         "  - {quantizer: kivi, bits: [2, 4]}\n  - {quantizer: turboquant, bits: 2}\n"
                         "  - {quantizer: quarot, bits: 2, group: 8}\n  - {scorer: snapkv, keep: \"ratio:0.5\"}\n"
                         "  - {family: M, budget: 2}\n",
                         "{id: g, claim: Output distortion ranks methods weakly., source: Q, paper: weak}"));
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "g");
  CHECK_THAT(rows[0]["measured"].get<std::string>(),
             Catch::Contains("Spearman(output error, replay KL)") && Catch::Contains("rotated (2 TurboQuant/QuaRot entries)"));
}

TEST_CASE("on stories260K, the HeadQ claim (q) produces its verdict row with the removed shares") {
  TempDir dir("claims-q");
  const nlohmann::json rows = run_rows(
      dir, stories_proxy("tiny-q",
                         "  - {quantizer: kivi, bits: [2, 3]}\n  - {quantizer: headq, base: kivi, base.bits: 2, rank: 2}\n",
                         "{id: q, claim: The side code removes most of the excess error., source: HeadQ, paper: most}"));
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "q");
  CHECK_THAT(rows[0]["measured"].get<std::string>(),
             Catch::Contains("base kivi bits=2") && Catch::Contains("of the base's removed") &&
                 Catch::Contains("kivi bits=3 at the same 3 code bits"));
  CHECK(rows[0]["verdict"] != "not testable here");
}

TEST_CASE("on stories260K, the KV-COBRA claim (n) compares the allocation with uniform at equal code bits") {
  TempDir dir("claims-n");
  const nlohmann::json rows = run_rows(
      dir, stories_proxy("tiny-n", "  - {quantizer: kvcobra, params: {budget: [1, 2, 3]}}\n  - {seed: kvcobra, budget: 2}\n",
                         "{id: n, claim: Co-optimising dominates uniform., source: KV-COBRA, paper: dominates}"));
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "n");
  CHECK_THAT(rows[0]["measured"].get<std::string>(), Catch::Contains("vs uniform") && Catch::Contains("(3 uniform entries)"));
}

TEST_CASE("on tiny inputs, the Hadamard claim (o) measures the channel variances before and after the rotation") {
  TempDir dir("claims-o");
  const nlohmann::json rows =
      run_rows(dir, kTinyInterior + "channel_variance: {}\n"
                                    "claim: {id: o, claim: The rotation equalises channel variance., source: KV-COBRA, paper: equal}\n");
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "o");
  CHECK_THAT(rows[0]["measured"].get<std::string>(), Catch::Contains("SVD latent") && Catch::Contains("raw keys"));
  // The decorrelated latent rotated by D H has equal variances exactly (its covariance's diagonal
  // is the mean eigenvalue everywhere): the table says 1 to rounding.
  const nlohmann::json t = nlohmann::json::parse(slurp(dir.file("out") + "/tables/channel_variance.json"));
  CHECK(t["latent_par_after"]["median"].get<double>() == Approx(1.0).epsilon(1e-4));
  CHECK(t["latent_par_before"]["median"].get<double>() > 1.0);
}

TEST_CASE("on tiny inputs, the HeadQ claim (p) compares score-space error and key MSE as predictors of attention KL") {
  TempDir dir("claims-p");
  const nlohmann::json rows = run_rows(
      dir, kTinyInterior + "score_error:\n  quantizers: [kivi, token]\n  bits: [2, 4]\n"
                           "claim: {id: p, claim: Score-space error predicts KL better than key MSE., source: HeadQ, paper: far better}\n");
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "p");
  CHECK_THAT(rows[0]["measured"].get<std::string>(), Catch::Contains("within one bit width") && Catch::Contains("key MSE"));
  // Every (head, quantizer, bits) row: 10 cells x 4 heads x 2 quantizers x 2 bit widths.
  const nlohmann::json t = nlohmann::json::parse(slurp(dir.file("out") + "/tables/score_error.json"));
  CHECK(t["rows"].get<int>() == 10 * 4 * 2 * 2);
  CHECK(t["rho_score_kl"].get<double>() > 0);  // more bits, less of every error
}

TEST_CASE("on stories260K, the dense-quantization claim (f) compares the best quantizer with M* per model") {
  TempDir dir("claims-f");
  const nlohmann::json rows = run_rows(
      dir, stories_proxy("tiny-f",
                         "  - {quantizer: kivi, bits: 2, residual: 0}\n  - {quantizer: token, bits: 2}\n"
                         "  - {family: M, budget: 2}\n",
                         "{id: f, claim: Dense quantization beats the allocator., source: Q, paper: dense better}"));
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "f");
  CHECK_THAT(rows[0]["measured"].get<std::string>(), Catch::Contains("stories260K: best dense ") && Catch::Contains(" vs M* "));
  // One model: the dependence on the model is named as untested.
  CHECK_THAT(rows[0]["why"].get<std::string>(), Catch::Contains("one model"));
}

TEST_CASE("on stories260K, the routing claim (e) compares routed with the eviction scorers and M*") {
  TempDir dir("claims-e");
  const nlohmann::json rows = run_rows(
      dir, stories_proxy("tiny-e",
                         "  - {family: routed, budget: 2}\n  - {family: M, budget: 2}\n"
                         "  - {scorer: snapkv, keep: \"ratio:0.125\"}\n",
                         "{id: e, claim: Routed beats every eviction method., source: Q, paper: beats}", "primary_budget: 2\n"));
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "e");
  CHECK_THAT(rows[0]["measured"].get<std::string>(),
             Catch::Contains("routed* B=2") && Catch::Contains("snapkv keep=ratio:0.125") && Catch::Contains("heads to Q at B = 2"));
}

TEST_CASE("on tiny inputs, the staleness claim (d) produces its verdict row") {
  TempDir dir("claims-d");
  const nlohmann::json rows = run_rows(
      dir, "name: tiny-d\ntraces:\n  synthetic:\n    presets: [tiny]\nstaleness:\n  steps: [1, 2, 4, 8]\n"
           "claim: {id: d, claim: The family is stable while the allocation goes stale., source: Q, paper: 4096 steps}\n");
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "d");
  CHECK_THAT(rows[0]["measured"].get<std::string>(), Catch::Contains("kappa"));
}

TEST_CASE("the staleness claim (d) says for every decision window whether the allocation goes stale") {
  TempDir dir("claims-d-windows");
  const nlohmann::json rows = run_rows(
      dir, "name: tiny-dw\ntraces:\n  synthetic:\n    presets: [tiny]\n    overrides: {decode_steps: 16}\n"
           "staleness:\n  steps: [1, 2, 4, 8, 16]\n  windows: [2, 8]\n"
           "claim: {id: d, claim: The family is stable while the allocation goes stale., source: Q, paper: 4096 steps}\n");
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "d");
  const std::string m = rows[0]["measured"].get<std::string>();
  CHECK_THAT(m, Catch::Contains("by decision window") && Catch::Contains("W = 2: ") && Catch::Contains("W = 8: "));
  CHECK_THAT(rows[0]["why"].get<std::string>(), Catch::Contains("decision window"));
  // The row reads the windows' JSON table, the same numbers as the CSV.
  const nlohmann::json w = nlohmann::json::parse(slurp(dir.file("out") + "/tables/staleness_windows.json"));
  CHECK(w.at("rows").size() == 10);  // 2 windows x 5 steps
}

TEST_CASE("on tiny inputs, the smoothing claim (h) produces its verdict row") {
  TempDir dir("claims-h");
  const nlohmann::json rows = run_rows(
      dir, "name: tiny-h\ntraces:\n  synthetic:\n    presets: [tiny]\n    overrides: {mix_retrieval: 2}\n"
           "smoothing:\n  kernels: [1, 3]\n  budgets: [1, 2]\n"
           "claim: {id: h, claim: Smoothing removes most truncation., source: Q, paper: 40% -> 10%}\n");
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "h");
}

TEST_CASE("on tiny inputs, the RateQuant claims (j), (k), (l) produce their verdict rows") {
  TempDir dir("claims-jkl");
  const nlohmann::json rows = run_rows(
      dir, "name: tiny-jkl\ntraces:\n  synthetic:\n    presets: [tiny]\n"
           "mismatch:\n  quantizers: [{quantizer: kivi, residual: 0}, token, turboquant]\n  bits: [2, 3, 4]\n  budgets: [3]\n"
           "claim:\n"
           "  - {id: j, claim: beta differs across quantizers., source: RateQuant, paper: 3.6 to 5.3}\n"
           "  - {id: k, claim: A mismatched model is worse than uniform., source: RateQuant, paper: worse}\n"
           "  - {id: l, claim: Calibration beats uniform., source: RateQuant, paper: 2.5 bits}\n");
  REQUIRE(rows.size() == 3);
  check_row(rows[0], "j");
  check_row(rows[1], "k");
  check_row(rows[2], "l");
}

TEST_CASE("on stories260K, the variance claim (i) decomposes its verdict over baselines, timing and prompts") {
  TempDir dir("claims-i");
  const std::string ckpt = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";
  const nlohmann::json rows = run_rows(
      dir, "name: tiny-i\ntraces:\n  model:\n    checkpoint: " + ckpt +
               "\n    seeds: [0, 1, 2]\n    context_lengths: [48]\n    decode_steps: 8\n"
               "ladder: evict,kivi2,kivi4,kivi8,exact\nbudgets: [2]\nrate_kind: code\nbootstrap: 100\n"
               "methods:\n  - {family: M, budget: 2, label: M}\n  - {scorer: h2o, keep: 'ratio:0.125', label: h2o}\n"
               "  - {quantizer: kivi, bits: 2, residual: 0, label: kivi2}\n"
               "variance: {allocator: M, baselines: {eviction: [h2o], quantizers: [kivi2]}, defer: 4}\n"
               "claim: {id: i, claim: Baselines and timing move verdicts more than prompts., source: Q, paper: decomposition}\n");
  REQUIRE(rows.size() == 1);
  check_row(rows[0], "i");
  const nlohmann::json t = nlohmann::json::parse(slurp(dir.file("out") + "/tables/variance.json"));
  double total = 0;
  for (const auto& f : t.at("factors")) total += f.at("share").get<double>();
  CHECK(total == Approx(1.0));  // the main effects and the interactions partition the variance
  CHECK(t.at("cells") == 3);
}

TEST_CASE("a variance section names the label it cannot find") {
  const std::string e = parse_error(kTinyInterior + "methods:\n  - {family: M, budget: 2, label: M}\n"
                                                    "variance: {allocator: M, baselines: {a: [h2o], b: [M]}}\n");
  CHECK_THAT(e, Catch::Contains("variance.baselines.a"));
  CHECK_THAT(e, Catch::Contains("'h2o', not a label of the scenario's methods"));
}

TEST_CASE("a claim's robustness variations are the scenario with its keys replaced, and fold into its row") {
  TempDir dir("claims-vary");
  const std::string file = dir.file("v.yaml");
  std::ofstream(file) << kTinyInterior + "rate_kind: total\nclaim:\n  id: a\n  claim: x.\n  source: y\n  paper: p\n"
                                         "  vary: [{rate_kind: code}, {ladder: 'evict,kivi2,kivi4,exact'}]\n";
  const Scenario sc = load_scenario(file);
  const std::vector<Scenario> vs = claim_variations(sc);
  REQUIRE(vs.size() == 2);
  CHECK(vs[0].name == "tiny-claims-vary1");
  CHECK(vs[0].rate_kind == RateKind::Code);
  CHECK(vs[1].ladder.name() == "evict,kivi2,kivi4,exact");
  const ClaimAnalysis* a = vs[0].find<ClaimAnalysis>();
  REQUIRE(a);
  CHECK(a->claims.at(0).variant == "rate_kind=code");
  CHECK(a->variations.empty());  // a variation has none of its own
  // Folding: a reproduced claim that one variation does not reproduce is partly, the variation named.
  ClaimVerdict base;
  base.spec.id = "a", base.scenario = file, base.standing = ClaimStanding::Reproduced, base.why = "holds";
  ClaimVerdict code = base, ladder = base;
  code.spec.variant = "rate_kind=code", code.standing = ClaimStanding::Refuted;
  ladder.spec.variant = "ladder=evict,kivi2,kivi4,exact";
  const std::string t = claims_table({base, code, ladder});
  CHECK_THAT(t, Catch::Contains("**partly**: reproduced under the file's settings, not under every variation "
                                "(rate_kind=code: refuted; ladder=evict,kivi2,kivi4,exact: reproduced)"));
  CHECK(t.find("| (a)") == t.rfind("| (a)"));  // one row
  const std::string same = claims_table({base, ladder});
  CHECK_THAT(same, Catch::Contains("**reproduced**: holds; the same under ladder=evict,kivi2,kivi4,exact: reproduced"));
  CHECK_THAT(parse_error(kTinyInterior + "claim: {id: a, claim: x., source: y, paper: p, vary: [{nmae: 3}]}\n"),
             Catch::Contains("'nmae' is not a top-level key of this scenario"));
}

TEST_CASE("a claim's dose-response runs one preset with one generator setting swept, and its numbers join the row") {
  TempDir dir("claims-dose");
  const std::string file = dir.file("d.yaml");
  std::ofstream(file) << "name: dose\ntraces:\n  synthetic:\n    presets: [tiny]\n    seeds: [0, 1]\n"
                         "    context_lengths: [48]\nladder: evict,kivi1,kivi2,kivi4,exact\nbudgets: [2, 4]\nbootstrap: 100\n"
                         "claim:\n  id: b\n  claim: x.\n  source: y\n  paper: p\n"
                         "  dose: {preset: tiny, seeds: [0, 1, 2], logit_scales: [2, 8]}\n";
  const Scenario sc = load_scenario(file);
  const std::vector<Scenario> vs = claim_variations(sc);
  REQUIRE(vs.size() == 1);
  REQUIRE(vs[0].cells.size() == 6);  // 1 preset x 3 seeds x 2 doses
  for (const auto& c : vs[0].cells) {
    CHECK(c.synth.preset == "tiny");
    CHECK((c.logit_scale == 2 || c.logit_scale == 8));
  }
  const ClaimAnalysis* a = vs[0].find<ClaimAnalysis>();
  REQUIRE(a);
  CHECK(a->claims.at(0).variant == "dose-response of logit_scale [2, 8] within tiny");
  // A sweep key instead of logit_scales.
  std::ofstream(file) << "name: dose\ntraces:\n  synthetic:\n    presets: [tiny]\n    context_lengths: [48]\n"
                         "claim: {id: b, claim: x., source: y, paper: p, dose: {preset: tiny, outlier_token_rate: [0, 0.03]}}\n";
  const std::vector<Scenario> sw = claim_variations(load_scenario(file));
  REQUIRE(sw.size() == 1);
  REQUIRE(sw[0].cells.size() == 2);
  CHECK(sw[0].cells[0].sweep_key == "outlier_token_rate");
  // The per-model verdicts group the cells by preset AND dose.
  const nlohmann::json c1 = {{"preset", "tiny"}, {"logit_scale", 2.0}}, c2 = {{"preset", "tiny"}, {"logit_scale", nullptr}},
                       c3 = {{"preset", "tiny"}, {"sweep_key", "outlier_token_rate"}, {"sweep_value", 0.03}};
  CHECK(model_group_of(c1) == "tiny logit_scale=2");
  CHECK(model_group_of(c2) == "tiny");
  CHECK(model_group_of(c3) == "tiny outlier_token_rate=0.03");
  CHECK(model_group_less("tiny logit_scale=3", "tiny logit_scale=12"));  // doses in numeric order
  CHECK_FALSE(model_group_less("tiny logit_scale=12", "tiny logit_scale=3"));
  CHECK(model_group_less("a-like", "b-like"));
  // Folding: the dose-response's numbers go beside the file's.
  ClaimVerdict base, dose;
  base.spec.id = dose.spec.id = "b", base.scenario = dose.scenario = file;
  base.measured = "stop per preset", dose.measured = "stop per dose";
  dose.spec.variant = "dose-response of logit_scale [2, 8] within tiny";
  CHECK_THAT(claims_table({base, dose}), Catch::Contains("stop per preset; dose-response of logit_scale [2, 8] within tiny: stop per dose"));
  // Refusals name the key.
  CHECK_THAT(parse_error(kTinyInterior + "claim: {id: b, claim: x., source: y, paper: p, dose: {preset: qwen-like, logit_scales: [1, 2]}}\n"),
             Catch::Contains("'qwen-like' is not one of this scenario's traces.synthetic.presets"));
  CHECK_THAT(parse_error(kTinyInterior + "claim: {id: b, claim: x., source: y, paper: p, dose: {preset: tiny, logit_scales: [1, 2], "
                                         "outlier_token_rate: [0]}}\n"),
             Catch::Contains("ONE generator setting"));
  CHECK_THAT(parse_error(kTinyInterior + "claim: {id: b, claim: x., source: y, paper: p, dose: {preset: tiny, logit_scales: [1]}}\n"),
             Catch::Contains("at least two values"));
}

TEST_CASE("a variation onto trained models is named by the models, and its numbers join the row") {
  TempDir dir("claims-trained");
  const std::string file = dir.file("t.yaml");
  const std::string ckpt = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";
  std::ofstream(file) << kTinyInterior + "claim:\n  id: a\n  claim: x.\n  source: y\n  paper: p\n"
                                         "  vary: [{traces: {model: [{checkpoint: " + ckpt +
                                         ", seeds: [0], context_lengths: [48], decode_steps: 4}]}}]\n";
  const std::vector<Scenario> vs = claim_variations(load_scenario(file));
  REQUIRE(vs.size() == 1);
  CHECK(vs[0].cells.size() == 1);
  CHECK(vs[0].find<ClaimAnalysis>()->claims.at(0).variant == "on trained models stories260K");
  ClaimVerdict base, trained;
  base.spec.id = trained.spec.id = "a", base.scenario = trained.scenario = file;
  base.measured = "rho synthetic", trained.measured = "rho trained", trained.standing = ClaimStanding::Refuted;
  trained.spec.variant = "on trained models stories260K";
  const std::string t = claims_table({base, trained});
  CHECK_THAT(t, Catch::Contains("rho synthetic; on trained models stories260K: rho trained"));
  CHECK_THAT(t, Catch::Contains("on trained models stories260K: refuted"));
}

TEST_CASE("the claims table gathers rows sorted by id, one line of settings each") {
  ClaimVerdict a, b;
  a.spec.id = "m", a.spec.claim = "joint | beats", a.standing = ClaimStanding::Refuted, a.depends_on = "x";
  b.spec.id = "a", b.spec.claim = "share orders", b.standing = ClaimStanding::NotTestable, b.depends_on = "y";
  const std::string t = claims_table({a, b});
  CHECK(t.find("| (a)") < t.find("| (m)"));
  CHECK_THAT(t, Catch::Contains("**not testable here**") && Catch::Contains("joint / beats"));
  CHECK(ClaimVerdict::from_json(a.to_json()).standing == ClaimStanding::Refuted);
}
