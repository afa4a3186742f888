// The smoothing study (scenarios/analyses/smoothing.hpp) and the entropy phase map
// (scenarios/analyses/entropy_phase.hpp): span truncation and split counts on hand-made allocations,
// kernel 1 equal to the raw scores, the attention entropy and its binning on hand-computed
// cases, the phase table of a hand-made set of cells, the scenario keys' validation errors,
// and a tiny run whose tables are identical on a rerun and whose figures are produced.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/base/error.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/analyses/entropy_phase.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/analyses/smoothing.hpp"
#include "support.hpp"

using namespace tierlab;
using tierlab::testing::error_of;
using tierlab::testing::slurp;
using tierlab::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// A retrieval head of the tiny preset (it has recorded spans).
HeadData retrieval_head() {
  SynthParams p = synth_preset("tiny");
  p.mix_sink = p.mix_local = p.mix_diffuse = 0;
  p.mix_retrieval = 1;
  return synth_head(p, 0, 0);
}

}  // namespace

TEST_CASE("span truncation and split are counted by hand on a known allocation") {
  // Tiers (0 = evict): spans [0,3) all evicted, [3,6) partly evicted, [6,9) kept at two
  // tiers, [9,12) kept at one tier.
  const std::vector<std::uint8_t> tiers{0, 0, 0, 0, 2, 2, 1, 4, 4, 3, 3, 3};
  const std::vector<Span> spans{{0, 3}, {3, 6}, {6, 9}, {9, 12}};
  const SpanTruncation t = span_truncation(spans, tiers);
  CHECK(t.spans == 4);
  CHECK(t.truncated == 1);      // only [3, 6)
  CHECK(t.fully_evicted == 1);  // [0, 3)
  CHECK(t.rate() == Approx(0.25));
  CHECK(spans_split(spans, tiers) == 2);  // [3, 6) and [6, 9)
  CHECK(spans_split({{4, 6}}, tiers) == 0);
  CHECK_THROWS_AS(spans_split({{10, 13}}, tiers), InputError);
}

TEST_CASE("kernel 1 gives the raw allocation; smoothed allocations never beat raw on the true costs") {
  const HeadData head = retrieval_head();
  REQUIRE(head.spans.size() == 2);
  SmoothingStudyOptions opt;
  opt.budget = 2.0;
  opt.variants = {SmoothingOptions{PoolKind::Avg, 1, Padding::Reflect}, SmoothingOptions{PoolKind::Max, 1, Padding::Zero},
                  SmoothingOptions{PoolKind::Avg, 3, Padding::Reflect}, SmoothingOptions{PoolKind::Max, 5, Padding::Reflect}};
  opt.families = {Family::Mixed, Family::Evict};
  auto backend = make_recomputer(Backend::Cpu);
  const SmoothingHead r = smoothing_head(head, opt, *backend);
  CHECK(r.n_spans == 2);
  REQUIRE(r.outcomes.size() == 8);
  for (int f = 0; f < 2; ++f) {
    const SmoothingOutcome& raw = r.outcomes[static_cast<std::size_t>(4 * f)];
    const SmoothingOutcome& max1 = r.outcomes[static_cast<std::size_t>(4 * f + 1)];
    REQUIRE(raw.feasible);
    CHECK(raw.variant == 0);
    CHECK(max1.tiers == raw.tiers);
    CHECK(max1.decode.rel_error == raw.decode.rel_error);
    CHECK(max1.obs.rel_error == raw.obs.rel_error);
    CHECK(max1.surrogate == raw.surrogate);
    CHECK(raw.decode.rel_error > 0);
    for (int v = 0; v < 4; ++v) {
      const SmoothingOutcome& o = r.outcomes[static_cast<std::size_t>(4 * f + v)];
      REQUIRE(o.feasible);
      CHECK(o.family == (f == 0 ? Family::Mixed : Family::Evict));
      // The raw allocation is the exact optimum of the true costs.
      CHECK(o.surrogate >= raw.surrogate * (1 - 1e-12));
      // Span counts follow the tiers the outcome reports (independent count here).
      int truncated = 0, fully = 0;
      for (const Span& s : head.spans) {
        int ev = 0;
        for (int t = s.begin; t < s.end; ++t) ev += o.tiers[static_cast<std::size_t>(t)] == 0;
        truncated += ev > 0 && ev < s.end - s.begin;
        fully += ev == s.end - s.begin;
      }
      CHECK(o.spans.spans == 2);
      CHECK(o.spans.truncated == truncated);
      CHECK(o.spans.fully_evicted == fully);
      if (f == 1)
        for (std::uint8_t t : o.tiers) CHECK((t == 0 || t == 4));  // E: evict or exact only
    }
  }
  opt.families = {Family::Quantize};
  CHECK_THROWS_WITH(smoothing_head(head, opt, *backend), Catch::Contains("M and/or E"));
}

TEST_CASE("attention entropy on hand-computed cases, and equal-count bins") {
  // d = 1, keys 0 and ln 3, query 1: p = (1/4, 3/4).
  MatrixRM k(2, 1), q(1, 1);
  k << 0.0f, static_cast<float>(std::log(3.0));
  q << 1.0f;
  const double h = -(0.25 * std::log(0.25) + 0.75 * std::log(0.75));
  CHECK(mean_attention_entropy(k, all_visible(q, k.rows())) == Approx(h).epsilon(1e-6));
  // Equal logits over 8 tokens: ln 8; two query rows average.
  MatrixRM k8 = MatrixRM::Zero(8, 2), q2(2, 2);
  q2 << 1.0f, 0.0f, 0.0f, 0.0f;
  CHECK(mean_attention_entropy(k8, all_visible(q2, k8.rows())) == Approx(std::log(8.0)));
  // Equal-count bins by rank: 7 values into 3 bins -> ranks 0..6 -> floor(r * 3 / 7).
  const std::vector<double> x{5.0, 0.1, 3.0, 0.2, 9.0, 0.3, 4.0};  // ranks 5, 0, 3, 1, 6, 2, 4
  CHECK(equal_count_bins(x, 3) == std::vector<int>{2, 0, 1, 0, 2, 0, 1});
  CHECK(equal_count_bins({1.0, 1.0}, 2) == std::vector<int>{0, 1});  // ties keep input order
}

TEST_CASE("the entropy phase table of hand-made cells") {
  // Two cells of two heads; H = 1, 2 | 3, 4 nats; R2 = 2, 1.5 | 0.5, 0.25.
  auto cell = [](const std::string& id, double h0, double h1, double r0, double r1, const char* w2[2], const char* w4[2]) {
    nlohmann::json c = {{"id", id}, {"entropy", {h0, h1}}, {"R2", {r0, r1}}, {"budgets", nlohmann::json::array()}};
    for (int b = 0; b < 2; ++b) {
      nlohmann::json heads = nlohmann::json::array();
      for (int i = 0; i < 2; ++i) heads.push_back({{"layer", 0}, {"kv_head", i}, {"winner", (b == 0 ? w2 : w4)[i]}});
      c["budgets"].push_back({{"budget", b == 0 ? 2.0 : 4.0}, {"heads", heads}});
    }
    return c;
  };
  const char* a2[2] = {"E", "E"};
  const char* a4[2] = {"M", "E"};
  const char* b2[2] = {"M", "M"};
  const char* b4[2] = {"M", "Q"};
  const std::vector<nlohmann::json> cells{cell("a", 1, 2, 2, 1.5, a2, a4), cell("b", 3, 4, 0.5, 0.25, b2, b4)};
  Scenario sc;
  TempDir dir("entropy-phase");
  const std::string summary = write_entropy_phase_tables(sc, 2, cells, dir.path.string());
  const nlohmann::json t = nlohmann::json::parse(slurp(dir.file("phase_entropy.json")));
  REQUIRE(t["rows"].size() == 4);  // 2 bins x 2 budgets
  // Bin 0: H 1, 2 (median 1.5, median R2 1.75); bin 1: H 3, 4 (median 3.5, median R2 0.375).
  CHECK(t["rows"][0]["entropy_median"].get<double>() == Approx(1.5));
  CHECK(t["rows"][0]["entropy_lo"].get<double>() == Approx(1.0));
  CHECK(t["rows"][0]["entropy_hi"].get<double>() == Approx(2.0));
  CHECK(t["rows"][0]["R2_median"].get<double>() == Approx(1.75));
  CHECK(t["rows"][0]["winner"] == "E");
  CHECK(t["rows"][0]["share_E"].get<double>() == Approx(1.0));
  CHECK(t["rows"][1]["winner"] == "tie");  // B = 4: E and M win one head each
  CHECK(t["rows"][1]["share_M"].get<double>() == Approx(0.5));
  CHECK(t["rows"][2]["winner"] == "M");
  CHECK(t["rows"][3]["winner"] == "tie");  // Q and M win one head each
  CHECK(t["rows"][3]["R2_median"].get<double>() == Approx(0.375));
  // Median R2 crosses 1 between (1.5, 1.75) and (3.5, 0.375): 1.5 + 0.75 * 2 / 1.375.
  CHECK(t["boundary_entropy"].get<double>() == Approx(1.5 + 0.75 * 2 / 1.375));
  CHECK(t["recomputed_boundary_E"][0]["entropy"].get<double>() == Approx(2.5));  // share E 1 -> 0 at B = 2
  CHECK(t["recomputed_boundary_E"][1]["entropy"].get<double>() == Approx(1.5));  // exactly 1/2 at the first bin
  CHECK_THAT(summary, Catch::Contains("H = 2.59 nats"));
  CHECK_THAT(slurp(dir.file("phase_entropy_heads.csv")), Catch::Contains("b,0,1,4,1,0.25,4,Q"));
}

TEST_CASE("smoothing and entropy_bins keys: defaults, and errors with the line and the choices") {
  const std::string head = "name: s\ntraces:\n  synthetic:\n    presets: [tiny]\n";
  const Scenario d = parse_scenario(head + "smoothing: {budgets: 1}\n", "s.yaml");
  REQUIRE(d.find<SmoothingAnalysis>() != nullptr);
  CHECK(d.find<SmoothingAnalysis>()->spec.kernels == std::vector<int>{1, 3, 5, 7});
  CHECK(d.find<SmoothingAnalysis>()->spec.pooling.size() == 2);
  CHECK(d.find<SmoothingAnalysis>()->spec.budgets == std::vector<double>{1.0});
  CHECK(d.find<SmoothingAnalysis>()->spec.families.size() == 2);
  CHECK(d.find<EntropyPhaseAnalysis>() == nullptr);
  const Scenario e = parse_scenario(head + "entropy_bins: 5\nsmoothing:\n  families: [E]\n  padding: zero\n", "s.yaml");
  REQUIRE(e.find<EntropyPhaseAnalysis>() != nullptr);
  CHECK(e.find<EntropyPhaseAnalysis>()->bins == 5);
  CHECK(e.find<SmoothingAnalysis>()->spec.families == std::vector<Family>{Family::Evict});
  CHECK(e.find<SmoothingAnalysis>()->spec.padding == Padding::Zero);
  CHECK(parse_scenario(head + "    logit_scales: [1, 2]\n", "s.yaml").find<EntropyPhaseAnalysis>() != nullptr);

  auto err = [&](const std::string& tail) {
    return error_of<InputError>([&] { parse_scenario(head + tail, "bad.yaml"); });
  };
  std::string m = err("smoothing:\n  kernels: [1, 4]\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:6:"));
  CHECK_THAT(m, Catch::Contains("must be odd"));
  m = err("smoothing:\n  pooling: [avg, median]\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:6:"));
  CHECK_THAT(m, Catch::Contains("avg, max"));
  m = err("smoothing:\n  padding: circular\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:6:"));
  CHECK_THAT(m, Catch::Contains("zero, reflect, replicate, none"));
  m = err("smoothing:\n  families: [M, Q]\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:6:"));
  CHECK_THAT(m, Catch::Contains("M (mixed tiers), E (evict only)"));
  m = err("smoothing:\n  kernel: 3\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:6:"));
  CHECK_THAT(m, Catch::Contains("kernels, pooling, padding, budgets, families"));
  m = err("smoothing:\n  kernels: 65\n");
  CHECK_THAT(m, Catch::Contains("[1, 63]"));
  m = err("smoothing:\n  budgets: [1, 0]\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:6:"));
  m = err("smoothing: [3, 5]\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:5:"));
  m = err("entropy_bins: 1\n");
  CHECK_THAT(m, Catch::StartsWith("bad.yaml:5:"));
  CHECK_THAT(m, Catch::Contains("[2, 40]"));
}

TEST_CASE("a tiny smoothing + entropy run: identical tables on a rerun, summary lines and figures") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  TempDir dir("smoothing-run");
  const std::string yaml = dir.file("tiny.yaml");
  std::ofstream(yaml) << "name: tiny-smoothing\n"
                         "traces:\n  synthetic:\n    presets: [tiny]\n    seeds: [0]\n    logit_scales: [0.5, 4]\n"
                         "    overrides: {mix_retrieval: 2}\n"
                         "budgets: [2, 4]\nsmoothing:\n  kernels: [1, 3]\n  pooling: [avg, max]\n  budgets: [1, 2]\n";
  const Scenario sc = load_scenario(yaml);
  std::string tables[2];
  for (int run = 0; run < 2; ++run) {
    RunOptions ro;
    ro.out = dir.file("out" + std::to_string(run));
    ro.backend = Backend::Cpu;
    ro.progress = false;
    const RunResult r = run_scenario(sc, ro);
    REQUIRE(r.tables_written);
    for (const char* t : {"smoothing.csv", "smoothing_heads.csv", "smoothing.json", "phase_entropy.csv",
                          "phase_entropy_heads.csv"})
      tables[run] += slurp(ro.out + "/tables/" + t);
  }
  CHECK(tables[0] == tables[1]);
  const std::string out = dir.file("out0");
  const nlohmann::json t = nlohmann::json::parse(slurp(out + "/tables/smoothing.json"));
  REQUIRE(t["rows"].size() == 12);  // (M, E) x (B = 1, 2) x (raw, avg3, max3)
  CHECK(t["rows"][0]["variant"] == "raw");
  CHECK(t["rows"][0]["spans"].get<int>() > 0);
  CHECK(t["rows"][0]["median_err_ratio_to_raw"].get<double>() == 1.0);
  const std::string summary = slurp(out + "/summary.md");
  CHECK_THAT(summary, Catch::Contains("## Smoothed scores: span truncation and error"));
  CHECK_THAT(summary, Catch::Contains("- M*, B = 1: raw scores truncate"));
  CHECK_THAT(summary, Catch::Contains("## Dominance phase map (attention entropy x budget)"));
  const FiguresWritten drawn = render_figures_of_run(out);
  {
    std::string faults;
    for (const auto& x : drawn.layout) faults += x + "\n";
    INFO(faults);
    CHECK(drawn.layout.empty());  // no text off the canvas or over another (figure.hpp layout_faults)
  }
  for (const char* name : {"smoothing_truncation_M", "smoothing_truncation_E", "smoothing_error_M", "smoothing_error_E", "phase_map_entropy"}) {
    const std::string png = slurp(out + "/figures/" + name + ".png");
    REQUIRE(png.size() > 1000);
    CHECK(png.substr(1, 3) == "PNG");
    CHECK(slurp(out + "/figures/" + name + ".pdf").substr(0, 4) == "%PDF");
  }
  CHECK_THAT(slurp(out + "/figures/smoothing_truncation_E.svg"), Catch::Contains("span truncation rate"));
  // Axis labels wrap to the figure's width: their words, not necessarily on one line.
  CHECK_THAT(slurp(out + "/figures/smoothing_error_M.svg"), Catch::Contains("mean error (smoothed)"));
  CHECK_THAT(slurp(out + "/figures/phase_map_entropy.svg"), Catch::Contains("median attention entropy"));
}
