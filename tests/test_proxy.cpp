// Proxy vs end task (scenarios/analyses/proxy.hpp): rank correlations on hand-computed cases, the
// generic-compressor replay path against the ladder path, and a whole run (tables, figures,
// summary, determinism) on a tiny synthetic scenario with the methods and mismatch keys.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "model/base/error.hpp"
#include "scenarios/analyses/stats.hpp"
#include "scenarios/run/tables.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/analyses/proxy.hpp"
#include "scenarios/pipeline/replay.hpp"
#include "scenarios/run/runner.hpp"
#include "support.hpp"

using namespace tierlab;
using tierlab::testing::slurp;
namespace fs = std::filesystem;

namespace {

ProxyMethodResult method(const std::string& label, double s, double e, double kl, double agreement) {
  ProxyMethodResult r;
  r.label = label;
  r.kind = "quantizer";
  r.surrogate = s, r.error = e, r.mean_kl = kl, r.agreement = agreement;
  r.replayed = true;
  return r;
}

const nlohmann::json* find_pair(const nlohmann::json& corr, const std::string& x, const std::string& y) {
  for (const auto& c : corr)
    if (c["x"] == x && c["y"] == y) return &c;
  return nullptr;
}

const char* kTiny =
    "name: tiny-methods\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [0, 1]\n"
    "budgets: [2]\n"
    "rate_kind: code\n"  // methods at equal key code bits, as the published methods compare
    "methods:\n"
    "  - {quantizer: kivi, bits: [2, 4], residual: 0}\n"
    "  - {quantizer: turboquant, bits: 3}\n"
    "  - {scorer: snapkv, keep: \"ratio:0.5\", window: 8}\n"
    "  - {scorer: streaming, keep: \"ratio:0.25\"}\n"
    "  - {seed: ratequant, budget: 2}\n"
    "  - {policy: \"token:2\"}\n"
    "  - {family: M, budget: [2, 4]}\n"
    "  - {family: E, budget: 2}\n"
    "proxy: {}\n"
    "mismatch:\n"
    "  quantizers: [{quantizer: kivi, residual: 0}, token]\n"
    "  bits: [2, 3, 4]\n"
    "  budgets: [3]\n"
    "backend: cpu\n"
    "bootstrap: 200\n";

}  // namespace

TEST_CASE("Kendall tau-b and Spearman rho on hand-computed cases") {
  // One adjacent swap in each half: d = (1, -1, 1, -1, 0), rho = 1 - 6 * 4 / (5 * 24) = 0.8;
  // 10 pairs, 2 discordant: tau = (8 - 2) / 10 = 0.6.
  CHECK(spearman({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}) == Approx(0.8));
  CHECK(kendall_tau_b({1, 2, 3, 4, 5}, {2, 1, 4, 3, 5}) == Approx(0.6));
  // Ties: pairs (1,2) tied in x, (2,3) tied in y, the other 4 concordant: 4 / sqrt(5 * 5) = 0.8.
  CHECK(kendall_tau_b({1, 1, 2, 3}, {1, 2, 2, 3}) == Approx(0.8));
  CHECK(kendall_tau_b({1, 2, 3}, {3, 2, 1}) == Approx(-1.0));
  CHECK(std::isnan(kendall_tau_b({1, 1, 1}, {1, 2, 3})));
  CHECK(std::isnan(kendall_tau_b({1}, {1})));
}

TEST_CASE("proxy rank correlations over methods") {
  // surrogate 1 2 3 4, error 1 3 2 4 (one swap), KL reversed, agreement follows the error.
  const std::vector<ProxyMethodResult> ms = {method("a", 0.1, 0.01, 4, 0.9), method("b", 0.2, 0.03, 3, 0.7),
                                             method("c", 0.3, 0.02, 2, 0.8), method("d", 0.4, 0.04, 1, 0.6)};
  const nlohmann::json corr = proxy_correlations(ms, 200, 1);
  const nlohmann::json* se = find_pair(corr, "surrogate", "error");
  REQUIRE(se);
  CHECK((*se)["spearman"].get<double>() == Approx(0.8));  // d = (0, 1, -1, 0): 1 - 6 * 2 / 60
  CHECK((*se)["kendall"].get<double>() == Approx(4.0 / 6.0));
  CHECK((*se)["methods"].get<int>() == 4);
  CHECK((*se)["ci_lo"].get<double>() <= 0.8);
  CHECK((*se)["ci_hi"].get<double>() >= 0.8);
  const nlohmann::json* ek = find_pair(corr, "error", "kl");
  REQUIRE(ek);
  CHECK((*ek)["spearman"].get<double>() == Approx(-0.8));
  const nlohmann::json* ed = find_pair(corr, "error", "disagreement");
  REQUIRE(ed);
  CHECK((*ed)["spearman"].get<double>() == Approx(1.0));
  CHECK((*ed)["kendall"].get<double>() == Approx(1.0));
  // Without replay only the surrogate-error pair is reported.
  std::vector<ProxyMethodResult> no = ms;
  for (auto& m : no) m.replayed = false;
  const nlohmann::json c2 = proxy_correlations(no, 200, 1);
  REQUIRE(c2.size() == 1);
  CHECK(c2[0]["x"] == "surrogate");
}

TEST_CASE("replay through a generic compressor equals the ladder path for the same policy") {
  const std::string ck = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";
  const Llama2cModel model(ck);
  ReplayOptions opt;
  opt.prompt.generate = 48;
  opt.prompt.temperature = 0.8f;
  opt.prompt.seed = 5;
  opt.decode_steps = 12;
  MethodSpec spec;
  spec.kind = MethodSpec::Kind::Policy;
  spec.name = "kivi:2:r0";
  spec.label = "kivi:2:r0";
  MethodContext ctx;
  ctx.group_size = model.config().group_size();
  const ReplayResult a = replay(model, opt, KeyCompression::from_policy(UniformPolicy::parse("kivi:2:r0")));
  const ReplayResult b = replay(model, opt, KeyCompression::from_compressor(make_model_compressor(spec, ctx), spec.label));
  CHECK(a.agreement == b.agreement);
  CHECK(a.mean_kl == b.mean_kl);
  CHECK(a.key_rate.total_bits == b.key_rate.total_bits);
  // An exact "compression" reproduces the full cache.
  spec.name = spec.label = "exact";
  const ReplayResult e = replay(model, opt, KeyCompression::from_compressor(make_model_compressor(spec, ctx), "exact"));
  CHECK(e.agreement == 1.0);
  CHECK(e.mean_kl == Approx(0.0).margin(1e-9));
  // A pre-RoPE quantizer gets its pre-RoPE keys in the replay.
  spec.kind = MethodSpec::Kind::Quantizer;
  spec.name = "kvquant";
  spec.params = {{"bits", "8"}};
  const ReplayResult k = replay(model, opt, KeyCompression::from_compressor(make_model_compressor(spec, ctx), "kvquant"));
  CHECK(k.agreement >= 0.75);
  CHECK(k.key_rate.code_bits == Approx(8.0));
}

TEST_CASE("a run with methods, proxy and mismatch writes tables, figures and summary lines, deterministically") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  const Scenario s = parse_scenario(kTiny, "tiny.yaml");
  const tierlab::testing::TempDir tmp("proxy");
  std::string tables[2];
  for (int run = 0; run < 2; ++run) {
    RunOptions opt;
    opt.out = tmp.file("run" + std::to_string(run));
    opt.progress = false;
    opt.jobs = run + 1;  // the tables do not depend on --jobs
    const RunResult r = run_scenario(s, opt);
    REQUIRE(r.tables_written);
    for (const char* t : {"proxy.csv", "proxy_cells.csv", "proxy.json", "mismatch.csv", "mismatch_beta.csv", "mismatch_fits.csv"}) {
      INFO(t);
      REQUIRE(fs::exists(opt.out + "/tables/" + t));
      tables[run] += slurp(opt.out + "/tables/" + t);
    }
    const std::string summary = slurp(opt.out + "/summary.md");
    CHECK_THAT(summary, Catch::Contains("## Proxy vs end task") && Catch::Contains("surrogate vs error: rho = "));
    CHECK_THAT(summary, Catch::Contains("## Distortion-model mismatch") && Catch::Contains("| kivi residual=0 |"));
    if (run == 0) {
      const FiguresWritten drawn = render_figures_of_run(opt.out);
      std::string faults;
      for (const auto& x : drawn.layout) faults += x + "\n";
      INFO(faults);
      CHECK(drawn.layout.empty());  // no text off the canvas or over another (figure.hpp layout_faults)
      for (const char* base : {"proxy_ranks", "proxy_error", "mismatch_beta", "mismatch_error_B3"})
        for (const char* ext : {".png", ".svg", ".pdf"}) {
          const std::string p = opt.out + "/figures/" + base + ext;
          INFO(p);
          REQUIRE(fs::exists(p));
          CHECK(fs::file_size(p) > 2000);
        }
      CHECK_THAT(slurp(opt.out + "/figures/proxy_ranks.svg"), Catch::Contains("rank by the surrogate"));
      CHECK_THAT(slurp(opt.out + "/figures/mismatch_beta.svg"), Catch::Contains("beta per head and quantizer"));
      CHECK_THAT(slurp(opt.out + "/figures/mismatch_error_B3.svg"), Catch::Contains("matched model"));
    }
  }
  CHECK(tables[0] == tables[1]);
  // 10 methods per cell, 2 cells: the table lists every method once, in the scenario's order.
  const std::string proxy = slurp(tmp.file("run0/tables/proxy.csv"));
  CHECK(std::count(proxy.begin(), proxy.end(), '\n') == 1 + 10);
  CHECK_THAT(proxy, Catch::StartsWith("method,kind,") && Catch::Contains("\nkivi bits=2 residual=0,quantizer,"));
}
