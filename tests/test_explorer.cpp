// tierlab-explorer driven headless (offscreen platform): the computation core against
// independent evaluations, and the window itself (open, budget changes, export, errors).
#include <catch2/catch.hpp>

#include <QApplication>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "gpu/recompute.hpp"
#include "explorer_support.hpp"
#include "gui/explorer_core.hpp"
#include "gui/main_window.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "solvers/waterfill.hpp"

namespace fs = std::filesystem;
using namespace tierlab;
using namespace tierlab::explorer;

namespace {

QApplication& app() { return tierlab::testing::offscreen_app("test_explorer"); }

// A folder of this process, removed at exit.
const fs::path& temp_base() { return tierlab::testing::process_temp_dir("explorer"); }

std::string temp_dir(const std::string& name) {
  const fs::path d = temp_base() / name;
  fs::create_directories(d);
  return d.string();
}

// A small synthetic trace file: 2 layers x 2 KV heads, T = 160, d = 32, S = 6.
std::string small_trace() {
  const std::string path = temp_dir("trace") + "/small.safetensors";
  if (!fs::exists(path)) {
    SynthParams p = synth_preset("tiny");
    p.head_dim = 32;
    p.prompt_len = 160;
    p.obs_window = 12;
    p.decode_steps = 6;
    p.seed = 3;
    write_synthetic_trace(p, path);
  }
  return path;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool close_rel(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)) + 1e-300; }

}  // namespace

TEST_CASE("explorer core: a budget change moves the water level and the allocation; errors match an independent evaluation") {
  const std::string path = small_trace();
  SourceSpec spec = parse_source(path);
  REQUIRE(spec.kind == SourceKind::Trace);
  auto src = Source::open(spec);
  Engine engine(src, Backend::Cpu);
  TraceReader reader(path);
  const int S = reader.meta().decode_steps;

  for (int head : {0, 3}) {
    Settings s;
    s.layer = head / 2;
    s.kv_head = head % 2;
    s.decode_step = 2;
    s.budget = 1.0;
    WaterfillNumbers lo, hi;
    engine.waterfill(s, &lo);
    s.budget = 4.0;
    engine.waterfill(s, &hi);
    // The water level falls as the budget rises, and the allocation spends more bits.
    REQUIRE(lo.theta > 0);
    REQUIRE(hi.theta > 0);
    CHECK(hi.theta < lo.theta);
    CHECK(hi.tiers != lo.tiers);
    CHECK(hi.rate.code_bits > lo.rate.code_bits);
    CHECK(lo.rate.code_bits <= 1.0 + 1e-9);
    CHECK(hi.rate.code_bits <= 4.0 + 1e-9);
    CHECK(std::isfinite(hi.obs.rel_error));
    CHECK(std::isfinite(hi.step.rel_error));
    CHECK(std::isfinite(lo.obs.rel_error));
    CHECK(lo.obs.rel_error > hi.obs.rel_error);

    // theta against the solvers' own continuous water-filling on the same weights and model.
    const HeadData hd = reader.head(s.layer, s.kv_head);
    const TokenWeights tw = token_weights(hd.keys, hd.values, observation_queries(hd));
    WaterfillProblem wp;
    wp.weights.assign(tw.a.data(), tw.a.data() + tw.a.size());
    wp.models = {DistortionModel{hi.alpha, hi.beta}};
    wp.budget = 4.0;
    wp.max_bits = 16;
    const ContinuousWaterfill cw = waterfill_continuous(wp);
    CHECK(close_rel(cw.theta, hi.theta, 1e-6));

    // The same tiers evaluated by `tierlab eval --allocation`'s path (scenarios/pipeline/evaluation.hpp
    // evaluate_trace with a HeadAllocator: model/quantizers/quantizer.hpp materialize with tier-local
    // groups, its own recomputation of the observation queries and of every decode step).
    const RateLadder ladder = RateLadder::parse(s.ladder);
    const std::vector<std::uint8_t> tiers = engine.allocate(s);
    REQUIRE(tiers == hi.tiers);
    // The keys the view recomputes are materialize's, bit for bit (evicted rows zero).
    const CompressedHead keys = engine.allocation_keys(s);
    const MaterializedKeys mk = materialize(hd.keys, ladder, tiers);
    CHECK(keys.kept == mk.kept);
    CHECK((keys.keys.array() == mk.keys.array()).all());
    CHECK(keys.rate.code_bits == mk.rate.code_bits);
    CHECK(keys.rate.total_bits == mk.rate.total_bits);
    // ... and differ from the dense quantization's rows (the former approximation) for some
    // kept KIVI token: the check above is not vacuous.
    bool differs = false;
    for (int j = 1; j < ladder.exact_index(); ++j) {
      const MatrixRM dense = dense_tier_keys(hd.keys, ladder.tiers[static_cast<std::size_t>(j)]);
      for (std::size_t t = 0; t < tiers.size(); ++t)
        if (tiers[t] == j && (dense.row(static_cast<Eigen::Index>(t)).array() != mk.keys.row(static_cast<Eigen::Index>(t)).array()).any())
          differs = true;
    }
    CHECK(differs);
    std::size_t evicted = 0;
    for (std::size_t t = 0; t < hi.tiers.size(); ++t) evicted += hi.tiers[t] == 0;
    CHECK(close_rel(hi.evicted_fraction, static_cast<double>(evicted) / hi.tiers.size(), 1e-12));
    auto backend = make_recomputer(Backend::Cpu);
    const int target = head;
    const TraceEvaluation ev = evaluate_trace(
        reader, ladder,
        [&](const HeadData& h, const TokenWeights&) {
          if (h.layer * 2 + h.kv_head == target) return tiers;
          return std::vector<std::uint8_t>(static_cast<std::size_t>(h.keys.rows()),
                                           static_cast<std::uint8_t>(ladder.exact_index()));
        },
        *backend);
    const HeadEvaluation& he = ev.heads.at(static_cast<std::size_t>(head));
    CHECK(close_rel(he.obs.rel_error, hi.obs.rel_error, 1e-5));
    CHECK(close_rel(he.obs.attn_tv, hi.obs.attn_tv, 1e-5));
    CHECK(close_rel(he.rate.code_bits, hi.rate.code_bits, 1e-12));
    CHECK(close_rel(he.predicted_abs, hi.surrogate_abs, 1e-6));
    // The decode error is the mean over the steps of the view's per-step error.
    double mean_step = 0, mean_tv = 0;
    for (int step = 1; step <= S; ++step) {
      Settings t = s;
      t.decode_step = step;
      t.recompute_obs = false;
      WaterfillNumbers n;
      engine.waterfill(t, &n);
      CHECK(n.step_used == step);
      CHECK(n.tiers_quantized == 0);  // same allocation: nothing quantized again
      mean_step += n.step.rel_error / S;
      mean_tv += n.step.attn_tv / S;
    }
    CHECK(close_rel(he.decode.rel_error, mean_step, 1e-5));
    CHECK(close_rel(he.decode.attn_tv, mean_tv, 1e-5));
    // obs_error() (the app's follow-up) gives the same number as the full call.
    Settings t = s;
    t.recompute_obs = false;
    engine.waterfill(t);
    CHECK(close_rel(engine.obs_error(t).rel_error, hi.obs.rel_error, 1e-12));
  }
}

TEST_CASE("explorer core: every solver, family, smoothing kernel and quantizer gives a feasible allocation") {
  auto src = Source::open(parse_source(small_trace()));
  Engine engine(src, Backend::Cpu);
  for (const char* ladder : {"evict,kivi2,kivi4,kivi8,exact", "evict,token2,token4,exact"})
    for (FamilySolver solver : family_solvers())
      for (FamilyChoice fam : {FamilyChoice::Mixed, FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Routed})
        for (int k : {1, 5}) {
          Settings s;
          s.ladder = ladder;
          s.solver = solver;
          s.family = fam;
          s.smoothing = k;
          s.budget = 3.0;
          s.layer = 1;
          WaterfillNumbers n;
          INFO(ladder << " " << to_string(solver) << " " << to_string(fam) << " k=" << k);
          const ViewResult v = engine.waterfill(s, &n);
          REQUIRE(!n.tiers.empty());
          CHECK(n.rate.code_bits <= 3.0 + 1e-9);
          CHECK(std::isfinite(n.obs.rel_error));
          CHECK(std::isfinite(n.step.rel_error));
          CHECK(v.figures.size() == 2);
          if (fam == FamilyChoice::Evict) {  // only evict or exact
            const int exact = RateLadder::parse(ladder).exact_index();
            for (auto t : n.tiers) CHECK((t == 0 || t == exact));
          }
        }
  // Views other than the water-filling one, live on a trace without a scenario.
  Settings s;
  std::vector<HeadMapEntry> map;
  const ViewResult hm = engine.head_map(s, &map);
  CHECK(map.size() == 4);
  for (const auto& e : map) CHECK((e.family == 'Q' || e.family == 'E' || e.family == 'M'));
  // The head map's ticks: integer heads and layers only, labelled.
  REQUIRE(hm.figures.size() == 1);
  const Figure& hf = hm.figures[0];
  REQUIRE(hf.xticks.size() == 2);
  REQUIRE(hf.yticks.size() == 2);
  CHECK(hf.xticks[1].at == 1.0);
  CHECK(hf.xticks[1].label == "H1");
  CHECK(hf.yticks[0].at == 0.0);
  CHECK(hf.yticks[0].label == "L0");
  CHECK(engine.interior(s).figures.size() == 2);
  CHECK(engine.dominance(s).figures.size() == 1);
  CHECK(engine.staleness(s).figures.at(0).series.at(0).x.size() >= 3);
}

TEST_CASE("explorer core: the per-head caches stay under their limit, with the same results") {
  auto src = Source::open(parse_source(small_trace()));
  Engine unbounded(src, Backend::Cpu), bounded(src, Backend::Cpu);
  Settings s;
  s.budget = 2.5;
  std::vector<HeadMapEntry> want, got;
  unbounded.head_map(s, &want);
  CHECK(unbounded.cached_heads() == 4);
  // About one head's data and entries (T = 160, d = 32: some 100 kB a head).
  const std::size_t limit = 150 * 1024;
  bounded.set_cache_limit(limit);
  for (int round = 0; round < 2; ++round) {
    bounded.head_map(s, &got);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].option == want[i].option);
      CHECK(got[i].objective == want[i].objective);
      CHECK(got[i].R2 == want[i].R2);
    }
    CHECK(bounded.cached_heads() < 4);
    CHECK(bounded.cached_heads() >= 1);  // the head in use stays
    CHECK(bounded.cache_bytes() <= limit);
  }
  // The water-filling view across heads under the limit gives the unbounded engine's numbers.
  for (int head : {0, 3, 1, 0}) {
    s.layer = head / 2, s.kv_head = head % 2;
    WaterfillNumbers a, b;
    unbounded.waterfill(s, &a);
    bounded.waterfill(s, &b);
    CHECK(a.tiers == b.tiers);
    CHECK(a.obs.rel_error == b.obs.rel_error);
    CHECK(a.step.rel_error == b.step.rel_error);
    CHECK(bounded.cached_heads() <= 2);
  }
  bounded.set_cache_limit(0);  // drops all but the head in use
  CHECK(bounded.cached_heads() <= 1);
}

TEST_CASE("explorer core: sources and their errors") {
  CHECK(parse_source("tiny").kind == SourceKind::Synthetic);
  CHECK(parse_source("preset:llama-like:512").context_length == 512);
  CHECK(parse_source("x.yaml").kind == SourceKind::Scenario);
  CHECK(parse_source("m.bin").kind == SourceKind::Model);
  CHECK_THROWS_WITH(parse_source("preset:nonesuch"), Catch::Contains("tiny") && Catch::Contains("nonesuch"));
  CHECK_THROWS_WITH(Source::open(parse_source("/nonexistent/trace.safetensors")), Catch::Contains("/nonexistent/trace.safetensors"));
  const std::string bad = temp_dir("bad") + "/bad.yaml";
  std::ofstream(bad) << "name: bad\ntraces:\n  synthetic:\n    presets: [tiny]\nbudgetz: [2]\n";
  CHECK_THROWS_WITH(Source::open(parse_source(bad)), Catch::Contains("bad.yaml") && Catch::Contains("budgetz"));
}

TEST_CASE("explorer window: open a trace, change the budget, export every view, survive bad input") {
  app();
  const std::string path = small_trace();
  MainWindow w;
  w.resize(1200, 800);
  w.show();
  w.openArgument(QString::fromStdString(path));
  REQUIRE(w.waitIdle());
  REQUIRE(w.source() != nullptr);
  REQUIRE(w.lastError().isEmpty());
  REQUIRE(w.result(WaterfillView) != nullptr);

  w.setBudget(1.0);
  REQUIRE(w.waitIdle());
  const WaterfillNumbers a = w.waterfillNumbers();
  w.setBudget(3.5);
  REQUIRE(w.waitIdle());
  const WaterfillNumbers b = w.waterfillNumbers();
  CHECK(b.theta < a.theta);
  CHECK(b.tiers != a.tiers);
  CHECK(std::isfinite(b.step.rel_error));
  CHECK(std::isfinite(b.obs.rel_error));  // the follow-up recomputation arrived
  CHECK(w.result(WaterfillView)->info.find("recomputed, obs queries") != std::string::npos);
  CHECK(w.settings().budget == Approx(3.5));

  // Rapid changes: each supersedes the last; the final state is the last request's.
  for (double B : {0.5, 1.5, 2.5, 6.0, 2.0}) w.setBudget(B);
  REQUIRE(w.waitIdle());
  CHECK(w.waterfillNumbers().rate.code_bits <= 2.0 + 1e-9);
  CHECK(w.result(WaterfillView)->figures.at(0).title.find("B = 2 ") != std::string::npos);

  const std::string out = temp_dir("export");
  for (int v = 0; v < ViewCount; ++v) {
    w.setCurrentView(v);
    REQUIRE(w.waitIdle());
    INFO("view " << view_name(v) << ": " << w.lastError().toStdString());
    REQUIRE(w.result(v) != nullptr);
    const std::string base = out + "/explorer-" + view_name(v);
    for (const char* ext : {".png", ".svg", ".pdf", ".csv"}) {
      const QStringList files = w.exportView(v, QString::fromStdString(base + ext));
      REQUIRE(!files.isEmpty());
      for (const QString& f : files) {
        const std::string data = slurp(f.toStdString());
        INFO(f.toStdString());
        REQUIRE(data.size() > 100);
        if (std::string(ext) == ".png") CHECK(data.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
        if (std::string(ext) == ".pdf") CHECK(data.compare(0, 5, "%PDF-") == 0);
        if (std::string(ext) == ".svg") {
          CHECK(data.find("<svg") != std::string::npos);
          CHECK(data.find("<text") != std::string::npos);
          const Figure& fig = w.result(v)->figures.at(0);
          if (f.toStdString() == base + ext) CHECK(data.find(fig.xlabel.substr(0, 12)) != std::string::npos);
        }
        if (std::string(ext) == ".csv") {
          CHECK(data.compare(0, 11, "series,x,y\n") == 0);
          CHECK(std::count(data.begin(), data.end(), '\n') > 3);
        }
      }
    }
  }
  // The water-filling view has two figures: the second goes to STEM-2.EXT.
  CHECK(fs::exists(out + "/explorer-waterfill-2.png"));

  // A head picked elsewhere is used by the views.
  w.setCurrentView(WaterfillView);
  w.setHead(1, 1);
  REQUIRE(w.waitIdle());
  CHECK(w.result(WaterfillView)->figures.at(0).title.find("L1.H1") != std::string::npos);

  // Bad input: the message is shown, nothing crashes, the open source stays usable.
  const std::string bad = temp_dir("bad") + "/garbage.safetensors";
  std::ofstream(bad) << "this is not a safetensors file";
  w.openArgument(QString::fromStdString(bad));
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().toStdString().find("garbage.safetensors") != std::string::npos);
  CHECK(w.statusText().startsWith("Error"));
  REQUIRE(w.source() != nullptr);
  w.openArgument("preset:nonesuch");
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().contains("nonesuch"));
  w.openArgument("/nonexistent/scenario.yaml");
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().contains("/nonexistent/scenario.yaml"));
  w.setLadderBits("kivi", "2,x");
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().contains("bits ladder: '2,x': 'x' is not a whole number; valid: bit widths from 1 to 15"));
  CHECK(w.statusText().contains("kivi<b>") == false);  // plain text, about the field, not a tier 'kivix'
  w.setLadderBits("kivi", "2,99");
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().contains("99 is outside the valid range 1 to 15"));
  w.setLadderBits("kivi", "2,4");
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().isEmpty());
  w.setBudget(2.0);
  REQUIRE(w.waitIdle());
  CHECK(std::isfinite(w.waterfillNumbers().step.rel_error));

  // Nothing to export before anything was computed is an error in the window, not a crash.
  MainWindow empty;
  CHECK(empty.exportView(HeadMapView, QString::fromStdString(out + "/none.png")).isEmpty());
  CHECK(!empty.lastError().isEmpty());
}

TEST_CASE("explorer window: a scenario without tables is run from the window, then its views read the tables") {
  app();
  const std::string dir = temp_dir("scenario");
  const std::string yaml = dir + "/explorer-test.yaml";
  std::ofstream(yaml) << "name: explorer-test\n"
                         "traces:\n"
                         "  synthetic:\n"
                         "    presets: [tiny]\n"
                         "    seeds: [0, 1]\n"
                         "    logit_scales: [1, 8]\n"
                         "    overrides:\n"
                         "      decode_steps: 4\n"
                         "budgets: [2, 4]\n"
                         "primary_budget: 2\n"
                         "backend: cpu\n"
                         "bootstrap: 100\n"
                         "waterfill:\n"
                         "  layer: 1\n"
                         "  kv_head: 1\n"
                         "staleness:\n"
                         "  steps: [1, 2, 4]\n"
                         "  budget: 2\n";
  SourceSpec spec = parse_source(yaml);
  spec.run_dir = dir + "/run";
  MainWindow w;
  w.show();
  w.openSpec(spec);
  REQUIRE(w.waitIdle());
  INFO(w.lastError().toStdString());
  REQUIRE(w.source() != nullptr);
  REQUIRE(w.source()->is_scenario());
  CHECK_FALSE(w.source()->has_tables());
  CHECK(w.settings().layer == 1);  // the scenario's water-filling head
  CHECK(w.settings().kv_head == 1);
  REQUIRE(w.result(WaterfillView) != nullptr);  // the trace views work on the scenario's cell

  w.runScenario();
  REQUIRE(w.waitIdle(600000));
  REQUIRE(w.lastError().isEmpty());
  REQUIRE(w.source()->has_tables());
  CHECK(fs::exists(dir + "/run/tables/phase.json"));
  // Run does what `tierlab run` does: figures and summary.md too, and says so.
  CHECK(fs::exists(dir + "/run/figures/phase_map.svg"));
  CHECK(fs::exists(dir + "/run/summary.md"));
  CHECK(w.statusText().contains("figures and summary.md in"));

  w.setCurrentView(InteriorView);
  REQUIRE(w.waitIdle());
  REQUIRE(w.result(InteriorView) != nullptr);
  INFO("title: " << w.result(InteriorView)->figures.at(0).title << " / y: " << w.result(InteriorView)->figures.at(0).ylabel);
  // tierlab run's own figure (its builder): its title (no rho for 4 cells, as summary.md) and its y label.
  CHECK(w.result(InteriorView)->figures.at(0).title.rfind("Interior advantage vs dominated share", 0) == 0);
  CHECK(w.result(InteriorView)->figures.at(0).ylabel.rfind("cell's ", 0) == 0);
  CHECK(w.result(InteriorView)->figures.at(0).ylabel.find("median over heads of A") == std::string::npos);  // the figure's label: the routed A
  CHECK(w.result(InteriorView)->info.find("From the scenario run") != std::string::npos);
  w.setCurrentView(DominanceView);
  REQUIRE(w.waitIdle());
  const ViewResult* d = w.result(DominanceView);
  REQUIRE(d != nullptr);
  CHECK(d->figures.at(0).title.find("phase map") != std::string::npos);
  REQUIRE(d->hover.at(0).size() == 4);  // 2 logit scales x 2 budgets, each with its numbers
  CHECK(d->hover[0][0].text.find("share of heads won") != std::string::npos);
  w.setCurrentView(StalenessView);
  REQUIRE(w.waitIdle());
  REQUIRE(w.result(StalenessView) != nullptr);
  CHECK(w.result(StalenessView)->figures.at(0).title.find("scenario run") != std::string::npos);
  CHECK(w.result(StalenessView)->figures.at(0).series.at(0).x.size() == 3);  // steps 1, 2, 4

  // The staleness view: the ratio on a log axis, the overlaps (0..1) in a figure of their own.
  REQUIRE(w.result(StalenessView)->figures.size() == 2);
  CHECK(w.result(StalenessView)->figures[0].ylog);
  CHECK(w.result(StalenessView)->figures[1].ymax <= 1.2);
  CHECK(w.windowTitle().startsWith("tierlab-explorer: "));

  // The run folder's own scenario.yaml opens that run (not out/<name> of the current folder).
  MainWindow again;
  again.openArgument(QString::fromStdString(dir + "/run/scenario.yaml"));
  REQUIRE(again.waitIdle());
  REQUIRE(again.source() != nullptr);
  CHECK(again.source()->run_dir() == dir + "/run");
  CHECK(again.source()->has_tables());
}

TEST_CASE("tierlab solve and the explorer fit the same noise model for the same head, on code and on total bits") {
  const std::string path = small_trace();
  auto src = Source::open(parse_source(path));
  Engine engine(src, Backend::Cpu);
  TraceReader reader(path);
  for (const RateKind kind : {RateKind::Code, RateKind::Total}) {
    AllocateOptions o;
    o.budget = 3.0;
    o.rate_kind = kind;
    o.solver = AllocSolver::Waterfill;
    o.ladder = RateLadder::parse("evict,kivi2,kivi4,kivi8,exact");
    const AllocationReport rep = allocate_trace(reader, o);
    REQUIRE(rep.heads.size() == 4);
    for (const HeadSolveReport& h : rep.heads) {
      Settings s;
      s.layer = h.layer, s.kv_head = h.kv_head;
      s.budget = o.budget;
      s.rate_kind = kind;
      s.ladder = o.ladder.name();
      WaterfillNumbers n;
      engine.waterfill(s, &n);
      INFO("head L" << h.layer << ".H" << h.kv_head << ", rate kind " << to_string(kind));
      CHECK(n.alpha == h.noise_alpha);  // the same function on the same numbers: bit for bit
      CHECK(n.beta == h.noise_beta);
      // And the one convention, computed here from its definition: a log-linear fit on the
      // tiers' rates in the budget's kind.
      const HeadData hd = reader.head(h.layer, h.kv_head);
      const SurrogateCosts c = surrogate_costs(hd, reader.meta().rope, observation_queries(hd), o.ladder);
      std::vector<double> b, nz;
      for (int j = 1; j <= 3; ++j) b.push_back(rate_of(o.ladder.tiers[j].nominal_rate(32), kind)), nz.push_back(c.noise.row(j).mean());
      const NoiseFit f = fit_noise(b, nz);
      CHECK(close_rel(f.beta, h.noise_beta, 1e-12));
    }
  }
}

TEST_CASE("a mixed allocation over TurboQuant tiers runs through tierlab solve's pipeline and the explorer alike") {
  const std::string path = small_trace();
  TraceReader reader(path);
  AllocateOptions o;
  o.budget = 3.0;
  o.ladder = RateLadder::parse("evict,turboquant2,turboquant4,exact");
  const AllocationReport rep = allocate_trace(reader, o);
  REQUIRE(rep.has_solution());
  auto src = Source::open(parse_source(path));
  Engine engine(src, Backend::Cpu);
  Settings s;
  s.budget = o.budget;
  s.ladder = o.ladder.name();
  WaterfillNumbers n;
  engine.waterfill(s, &n);
  // The explorer solves the same head the same way and counts the same real metadata.
  CHECK(n.tiers == rep.allocation.tiers.at(0));
  CHECK(n.rate.total_bits == Approx(rep.heads.at(0).rate.total_bits).epsilon(1e-12));
  CHECK(n.rate.total_bits > n.rate.code_bits);  // TurboQuant's per-token norm is counted
}

TEST_CASE("explorer core: the RD curve view is the library's curve of the head, cached, with the budget marked") {
  auto src = Source::open(parse_source(small_trace()));
  Engine engine(src, Backend::Cpu);
  Settings s;
  s.layer = 1, s.kv_head = 0, s.budget = 3.1;
  CHECK(engine.rd_curves_computed() == 0);
  const ViewResult a = engine.rd_curve(s);
  CHECK(engine.rd_curves_computed() == 2);  // the head's curve and the model-wide one
  REQUIRE(a.figures.size() == 2);  // the head's curve, and the model-wide one (4 heads)
  const Figure& f = a.figures[0];
  CHECK(a.figures[1].title.find("model (4 heads share B)") != std::string::npos);
  // The library's curve of the same head, computed independently of the engine's caches.
  TraceReader trace(small_trace());
  const HeadData head = trace.head(1, 0);
  RdCurveOptions o;
  o.budgets = parse_budget_grid(kRdCurveGrid);
  o.families = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
  o.solve.ladder = RateLadder::parse(s.ladder);
  o.solve.rate_kind = s.rate_kind;
  o.queries = RdQueries::Step;
  o.decode_step = s.decode_step;
  const RdCurve c = rd_curve(std::vector<const HeadData*>{&head}, trace.meta().rope, o);
  const Series* mixed = nullptr;
  const Series* marker = nullptr;
  for (const Series& se : f.series) {
    if (se.name == "mixed") mixed = &se;
    if (se.name.empty() && se.style == Style::Dashed && se.x.size() == 2 && se.x[0] == se.x[1]) marker = &se;
  }
  REQUIRE(mixed != nullptr);
  REQUIRE(marker != nullptr);
  CHECK(marker->x.front() == Approx(3.1));
  std::vector<double> want;
  for (std::size_t k = 0; k < o.budgets.size(); ++k)
    if (c.at(2, static_cast<int>(k)).error.rel_error > 0) want.push_back(c.at(2, static_cast<int>(k)).error.rel_error);
  REQUIRE(mixed->y.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) CHECK(mixed->y[i] == Approx(want[i]).epsilon(1e-12));
  // The nearest grid budget (3) is the one the numbers quote; a slider move only redraws.
  CHECK(a.info.find("At B = 3 ") != std::string::npos);
  s.budget = 7.9;
  const ViewResult b = engine.rd_curve(s);
  CHECK(b.info.find("At B = 8 ") != std::string::npos);
  CHECK(engine.rd_curves_computed() == 2);  // both curves served from the engine's cache
  // The model-wide curve is the library's over every head of the trace at model scope.
  RdCurveOptions om = o;
  om.budgets = parse_budget_grid(kRdModelGrid);
  om.solve.scope = Scope::Model;
  const RdCurve cm = rd_curve(trace, om);
  const Series* mm = nullptr;
  for (const Series& se : b.figures.at(1).series)
    if (se.name == "mixed") mm = &se;
  REQUIRE(mm != nullptr);
  std::vector<double> wm;
  for (std::size_t k = 0; k < om.budgets.size(); ++k)
    if (cm.at(2, static_cast<int>(k)).error.rel_error > 0) wm.push_back(cm.at(2, static_cast<int>(k)).error.rel_error);
  REQUIRE(mm->y.size() == wm.size());
  for (std::size_t i = 0; i < wm.size(); ++i) CHECK(mm->y[i] == Approx(wm[i]).epsilon(1e-12));
}
