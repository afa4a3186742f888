// The explorer's named methods on the RD curve (issue 18) and its menus read from the method
// registries (issue 13), driven through the engine and the window headless (offscreen
// platform), as tests/test_explorer.cpp does: a method's point in the view is the one
// `tierlab solve --budgets --method` computes for the same head and text (scenarios/scenario/
// rd_methods.hpp, one implementation); a text the library refuses is refused at the field; the
// quantizer, solver and methods menus offer exactly the registries' names.
#include <catch2/catch.hpp>

#include <QApplication>
#include <QComboBox>
#include <QLineEdit>
#include <QMenu>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "explorer_support.hpp"
#include "gui/explorer_core.hpp"
#include "gui/main_window.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "scenarios/methods/rd_methods.hpp"
#include "solvers/families.hpp"
#include "solvers/kvcobra_allocator.hpp"
#include "solvers/scorers.hpp"
#include "solvers/seed_allocators.hpp"

namespace fs = std::filesystem;
using namespace tierlab;
using namespace tierlab::explorer;

namespace {

QApplication& app() { return tierlab::testing::offscreen_app("test_explorer_methods"); }

// A folder of this process, removed at exit.
const fs::path& temp_base() { return tierlab::testing::process_temp_dir("explorer-methods"); }

// A synthetic trace of `layers` x `kv_heads` heads, T = 256 (more than KIVI's 128-token fp16
// residual window, so that kivi:2 quantizes some keys), d = 32, S = 6.
std::string trace_of(int layers, int kv_heads) {
  fs::create_directories(temp_base());
  const std::string path = (temp_base() / ("t" + std::to_string(layers) + "x" + std::to_string(kv_heads) + ".safetensors")).string();
  if (!fs::exists(path)) {
    SynthParams p = synth_preset("tiny");
    p.n_layers = layers;
    p.n_kv_heads = kv_heads;
    p.head_dim = 32;
    p.prompt_len = 256;
    p.obs_window = 32;  // SnapKV's default window
    p.decode_steps = 6;
    p.seed = 7;
    write_synthetic_trace(p, path);
  }
  return path;
}

const Series* series_named(const Figure& f, const std::string& name) {
  for (const Series& se : f.series)
    if (se.name == name) return &se;
  return nullptr;
}

// The curve options of the view's head curve (or its model-wide one), as `tierlab solve
// --budgets GRID --families quantize,evict,mixed --recompute --queries step --decode-step s` sets them.
RdCurveOptions cli_options(const Settings& s, const char* grid, Scope scope) {
  RdCurveOptions o;
  o.budgets = parse_budget_grid(grid);
  o.families = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
  o.solve.ladder = RateLadder::parse(s.ladder);
  o.solve.rate_kind = s.rate_kind;
  o.solve.scope = scope;
  o.queries = RdQueries::Step;
  o.decode_step = s.decode_step;
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("explorer core: a named method on the RD curve is the point tierlab solve --method gives for the same head and text") {
  const std::string path = trace_of(1, 1);
  auto src = Source::open(parse_source(path));
  Engine engine(src, Backend::Cpu);
  Settings s;
  s.decode_step = 2;
  s.rd_methods = "kivi:2; {scorer: snapkv, keep: ratio:0.25}; {quantizer: kivi, bits: 2}";
  const ViewResult v = engine.rd_curve(s);
  REQUIRE(v.figures.size() == 1);
  const Figure& f = v.figures[0];
  // The library's points, as tierlab solve computes them (a trace, parse_rd_methods, rd_method_points).
  TraceReader trace(path);
  const RdCurveOptions o = cli_options(s, kRdCurveGrid, Scope::Head);
  const RdCurve curve = rd_curve(trace, o);
  const std::vector<std::string> texts = {"kivi:2", "{scorer: snapkv, keep: ratio:0.25}", "{quantizer: kivi, bits: 2}"};
  CHECK(rd_method_texts(s.rd_methods) == texts);
  auto cpu = make_recomputer(Backend::Cpu);
  const std::vector<RdMethodPoint> want = rd_method_points(trace, curve, parse_rd_methods(texts, "--method", o), cpu.get());
  REQUIRE(want.size() == 3);
  for (std::size_t k = 0; k < want.size(); ++k) {
    INFO(texts[k]);
    const Series* se = series_named(f, texts[k]);
    REQUIRE(se != nullptr);
    REQUIRE(se->x.size() == 1);
    CHECK(se->x[0] == Approx(want[k].x).epsilon(1e-12));
    CHECK(se->y[0] == Approx(want[k].error).epsilon(1e-9));
    CHECK(want[k].error > 0);
    bool labelled = false;
    for (const Label& l : f.labels) labelled = labelled || (l.text == want[k].label && l.x == se->x[0]);
    CHECK(labelled);
    bool hovered = false;
    for (const HoverPoint& h : v.hover.at(0))
      if (h.text.rfind(want[k].label + ": rate", 0) == 0) {
        hovered = true;
        CHECK((h.text.find("above the hull") != std::string::npos) == want[k].above_hull);
      }
    CHECK(hovered);
    const std::size_t at = v.info.find("  " + want[k].label + ": rate");
    REQUIRE(at != std::string::npos);
    const std::string line = v.info.substr(at, v.info.find('\n', at) - at);
    CHECK((line.find("above the hull") != std::string::npos) == want[k].above_hull);
  }
  // The same through the tierlab binary, where it is built.
  const std::string bin = std::string(TIERLAB_BINARY_DIR) + "/tierlab";
  if (!fs::exists(bin)) {
    WARN("tierlab is not built; the library's points stood in for the command's");
    return;
  }
  const std::string out = (temp_base() / "solve.json").string();
  const std::string cmd = "'" + bin + "' solve '" + path +
                          "' --budgets 0:16:0.25 --families quantize,evict,mixed --recompute --queries step --decode-step 2 "
                          "--method kivi:2 --method '{scorer: snapkv, keep: ratio:0.25}' --json > '" + out + "' 2>/dev/null";
  const int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  const nlohmann::json j = nlohmann::json::parse(slurp(out));
  REQUIRE(j["methods"].size() == 2);
  for (std::size_t k = 0; k < 2; ++k) {
    const Series* se = series_named(f, texts[k]);
    REQUIRE(se != nullptr);
    CHECK(se->x[0] == Approx(j["methods"][k]["rate"].get<double>()).epsilon(1e-12));
    CHECK(se->y[0] == Approx(j["methods"][k]["error"].get<double>()).epsilon(1e-9));
    CHECK(j["methods"][k]["above_hull"].get<bool>() == want[k].above_hull);
  }
}

TEST_CASE("explorer core: the model-wide RD curve carries each method's mean over every head, and a scorer without keep a curve") {
  const std::string path = trace_of(2, 2);
  auto src = Source::open(parse_source(path));
  Engine engine(src, Backend::Cpu);
  Settings s;
  s.rd_methods = "kivi:2; {scorer: snapkv}";
  const ViewResult v = engine.rd_curve(s);
  REQUIRE(v.figures.size() == 2);
  TraceReader trace(path);
  const RdCurveOptions o = cli_options(s, kRdModelGrid, Scope::Model);
  const RdCurve curve = rd_curve(trace, o);
  auto cpu = make_recomputer(Backend::Cpu);
  const std::vector<std::string> texts = rd_method_texts(s.rd_methods);
  const std::vector<RdMethodPoint> want = rd_method_points(trace, curve, parse_rd_methods(texts, "--method", o), cpu.get());
  // kivi:2, then snapkv at the keep ratios B/16 of the model grid's budgets 1..16
  REQUIRE(want.size() == 17);
  const Series* kivi = series_named(v.figures[1], "kivi:2");
  REQUIRE(kivi != nullptr);
  REQUIRE(kivi->x.size() == 1);
  CHECK(kivi->x[0] == Approx(want[0].x).epsilon(1e-12));
  CHECK(kivi->y[0] == Approx(want[0].error).epsilon(1e-9));
  const Series* snap = series_named(v.figures[1], "{scorer: snapkv}");
  REQUIRE(snap != nullptr);
  std::vector<double> ys;
  for (std::size_t k = 1; k < want.size(); ++k)
    if (want[k].error > 0) ys.push_back(want[k].error);  // keep 1: exact, off the log axis
  REQUIRE(snap->y.size() == ys.size());
  for (std::size_t k = 0; k < ys.size(); ++k) CHECK(snap->y[k] == Approx(ys[k]).epsilon(1e-9));
  CHECK(v.info.find("{scorer: snapkv}: 16 points") != std::string::npos);
  // The head's figure has them too, on the head's finer grid (64 keep ratios).
  const Series* head_snap = series_named(v.figures[0], "{scorer: snapkv}");
  REQUIRE(head_snap != nullptr);
  CHECK(head_snap->x.size() >= 60);
  // Another head than (0, 0): its points are those of that head alone (a one-head model).
  s.layer = 1, s.kv_head = 1;
  const ViewResult w = engine.rd_curve(s);
  HeadData head = trace.head(1, 1);
  const RdCurveOptions oh = cli_options(s, kRdCurveGrid, Scope::Head);
  const RdCurve hc = rd_curve(std::vector<const HeadData*>{&head}, trace.meta().rope, oh);
  head.layer = 0, head.kv_head = 0;
  MethodContext mc;
  mc.rope = trace.meta().rope;
  mc.group_size = trace.meta().group_size;
  const std::vector<RdMethodPoint> hp = rd_method_points({{head}}, mc, hc, parse_rd_methods(texts, "--method", oh), cpu.get());
  const Series* k11 = series_named(w.figures[0], "kivi:2");
  REQUIRE(k11 != nullptr);
  CHECK(k11->y.at(0) == Approx(hp.at(0).error).epsilon(1e-9));
  const Series* s11 = series_named(w.figures[0], "{scorer: snapkv}");
  REQUIRE(s11 != nullptr);
  CHECK(s11->y.at(0) == Approx(hp.at(1).error).epsilon(1e-9));
  // Heads out of their positions are refused with a sentence.
  head.layer = 1;
  CHECK_THROWS_WITH(rd_method_points({{head}}, mc, hc, parse_rd_methods(texts, "--method", oh), cpu.get()),
                    Catch::Contains("heads[layer][kv_head] must hold head (layer, kv_head)"));
}

TEST_CASE("explorer window: the RD methods field refuses a text the library refuses, at the field, keeping the last good methods") {
  app();
  MainWindow w;
  w.show();
  w.openArgument(QString::fromStdString(trace_of(1, 1)));
  REQUIRE(w.waitIdle());
  w.setCurrentView(RdCurveView);
  REQUIRE(w.waitIdle());
  CHECK(QString::fromStdString(w.settings().rd_methods) == QString(kDefaultRdMethods));
  REQUIRE(w.result(RdCurveView) != nullptr);
  REQUIRE(series_named(w.result(RdCurveView)->figures.at(0), "kivi:2") != nullptr);
  auto* field = w.findChild<QLineEdit*>("rd_methods");
  REQUIRE(field != nullptr);
  for (const char* bad : {"kivi:9", "{quantizer: bogus}", "kivi:2; kivi:2"}) {
    INFO(bad);
    w.setRdMethods(bad);
    CHECK(w.lastError().contains(kRdMethodsField));
    CHECK(w.lastError().contains(QString(bad).section(';', 0, 0)));
    CHECK(w.lastError().contains(QString("keeps '") + kDefaultRdMethods + "'"));
    CHECK(field->styleSheet().contains("#ffe0e0"));
    CHECK(QString::fromStdString(w.settings().rd_methods) == QString(kDefaultRdMethods));
    CHECK_FALSE(w.busy());  // nothing recomputed
  }
  w.setRdMethods("{quantizer: kivi, bits: 4}");
  CHECK(field->styleSheet().isEmpty());
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().isEmpty());
  const ViewResult* r = w.result(RdCurveView);
  REQUIRE(r != nullptr);
  CHECK(series_named(r->figures.at(0), "{quantizer: kivi, bits: 4}") != nullptr);
  CHECK(series_named(r->figures.at(0), "kivi:2") == nullptr);
  CHECK(w.infoText().contains("kivi bits=4: rate"));
}

TEST_CASE("explorer window: the quantizer, solver, family and methods menus offer exactly the registries' names") {
  app();
  MainWindow w;
  // Quantizers: every tier form with a bit width (model/quantizers/tier_quantizer.hpp tier_forms).
  auto* quantizer = w.findChild<QComboBox*>("quantizer");
  REQUIRE(quantizer != nullptr);
  QStringList want_q, got_q;
  for (const TierForm& f : tier_forms())
    if (f.has_bits) want_q << QString::fromStdString(f.prefix);
  for (int i = 0; i < quantizer->count(); ++i) got_q << quantizer->itemData(i).toString();
  CHECK(got_q == want_q);
  // Every registered key quantizer with a tier form is offered as one.
  for (const KeyQuantizerEntry& e : key_quantizer_registry())
    for (const TierForm& f : tier_forms())
      if (f.kind == QuantizerKind::Published && f.prefix == e.info.name) CHECK(got_q.contains(QString::fromStdString(e.info.name)));
  // Solvers: solvers/families.hpp family_solvers().
  auto* solver = w.findChild<QComboBox*>("solver");
  REQUIRE(solver != nullptr);
  QStringList want_s, got_s;
  for (const FamilySolver fs : family_solvers()) want_s << QString::fromStdString(std::string(to_string(fs)));
  for (int i = 0; i < solver->count(); ++i) got_s << solver->itemText(i);
  CHECK(got_s == want_s);
  // Families: solvers/families.hpp family_choices().
  auto* family = w.findChild<QComboBox*>("family");
  REQUIRE(family != nullptr);
  QStringList want_f, got_f;
  for (const FamilyChoice f : family_choices()) want_f << QString::fromStdString(std::string(to_string(f)));
  for (int i = 0; i < family->count(); ++i) got_f << family->itemData(i).toString();
  CHECK(got_f == want_f);
  CHECK(want_f.size() == 4);
  // Methods on the RD curve: the catalogue (every key quantizer, eviction scorer, seed allocator and
  // uniform policy of the registries), in the forms a scenario takes.
  QStringList want_m;
  for (const KeyQuantizerEntry& e : key_quantizer_registry()) want_m << QString::fromStdString("{quantizer: " + e.info.name + "}");
  for (const ScorerEntry& e : scorer_registry()) want_m << QString::fromStdString("{scorer: " + e.info.name + "}");
  std::vector<MethodInfo> seeds = seed_allocator_methods();
  seeds.push_back(kvcobra_allocator_method());
  for (const MethodInfo& m : seeds) want_m << QString::fromStdString("{seed: " + m.name + ", budget: 2}");
  for (const char* p : {"exact", "kivi:2", "kivi:4", "token:4", "evict:0.25"}) want_m << p;  // the uniform policies
  CHECK(w.rdMethodChoices() == want_m);
  auto* menu = w.findChild<QMenu*>("rd_methods_menu");
  REQUIRE(menu != nullptr);
  CHECK(menu->title().contains("Methods on the RD curve"));
  // Each one is an entry the field accepts (the library's reading).
  Settings s;
  for (const QString& text : w.rdMethodChoices()) {
    INFO(text.toStdString());
    s.rd_methods = text.toStdString();
    CHECK_NOTHROW(check_rd_methods(s));
  }
}

TEST_CASE("explorer core: every method the menu offers is computed on the RD curve") {
  const std::string path = trace_of(1, 1);
  auto src = Source::open(parse_source(path));
  Engine engine(src, Backend::Cpu);
  Settings s;
  for (const RdMethodChoice& c : rd_method_choices()) {
    INFO(c.text);
    s.rd_methods = c.text;
    ViewResult v;
    REQUIRE_NOTHROW(v = engine.rd_curve(s));
    CHECK(v.info.find("Named methods") != std::string::npos);
  }
}

TEST_CASE("explorer core: a method the trace cannot run is named in the RD view's text, and the curve is still drawn") {
  fs::create_directories(temp_base());
  const std::string path = (temp_base() / "short_window.safetensors").string();
  SynthParams p = synth_preset("tiny");
  p.n_layers = 1, p.n_kv_heads = 1, p.obs_window = 8;  // SnapKV's default window is 32
  write_synthetic_trace(p, path);
  Engine engine(Source::open(parse_source(path)), Backend::Cpu);
  Settings s;
  s.rd_methods = "kivi:2; {scorer: snapkv}";
  const ViewResult v = engine.rd_curve(s);
  REQUIRE(v.figures.size() == 1);
  CHECK(series_named(v.figures[0], "mixed") != nullptr);
  CHECK(series_named(v.figures[0], "kivi:2") == nullptr);
  CHECK(v.info.find("Named methods not drawn: methods on the RD curve '{scorer: snapkv}'") != std::string::npos);
  CHECK(v.info.find("window = 32") != std::string::npos);
  s.rd_methods = kDefaultRdMethods;  // the window's default runs on any trace
  const ViewResult d = engine.rd_curve(s);
  CHECK(series_named(d.figures[0], "kivi:2") != nullptr);
  CHECK(series_named(d.figures[0], "{scorer: snapkv, window: 0, keep: ratio:0.125}") != nullptr);
}

TEST_CASE("explorer core: with named methods the RD view is delivered in stages, each curve before its methods") {
  Engine engine(Source::open(parse_source(trace_of(2, 2))), Backend::Cpu);
  Settings s;
  s.rd_methods = kDefaultRdMethods;
  std::vector<ViewResult> parts;
  const ViewResult full = engine.rd_curve(s, {}, nullptr, [&](const ViewResult& r) { parts.push_back(r); });
  REQUIRE(parts.size() == 3);
  // 0: the head's curve, its methods and the model curve being computed
  CHECK(series_named(parts[0].figures.at(0), "kivi:2") == nullptr);
  CHECK(parts[0].info.find("computing: the named methods on the head's curve") != std::string::npos);
  CHECK(parts[0].figures.at(1).title.find("being computed") != std::string::npos);
  // 1: the head's methods drawn, the model curve still being computed
  CHECK(series_named(parts[1].figures.at(0), "kivi:2") != nullptr);
  CHECK(parts[1].figures.at(1).title.find("being computed") != std::string::npos);
  // 2: the model curve drawn, its methods being computed
  CHECK(series_named(parts[2].figures.at(1), "mixed") != nullptr);
  CHECK(series_named(parts[2].figures.at(1), "kivi:2") == nullptr);
  CHECK(parts[2].info.find("computing: the named methods on the model-wide curve (4 heads)") != std::string::npos);
  // final: everything, nothing said to be computing
  CHECK(series_named(full.figures.at(1), "kivi:2") != nullptr);
  CHECK(full.info.find("computing") == std::string::npos);
  // The head's figure of stage 1 is the final one.
  CHECK(parts[1].figures[0].series.size() == full.figures[0].series.size());
  for (std::size_t k = 0; k < full.figures[0].series.size(); ++k) {
    CHECK(parts[1].figures[0].series[k].x == full.figures[0].series[k].x);
    CHECK(parts[1].figures[0].series[k].y == full.figures[0].series[k].y);
  }
  // Cached: a budget change sends no partial result.
  parts.clear();
  s.budget = 4;
  engine.rd_curve(s, {}, nullptr, [&](const ViewResult& r) { parts.push_back(r); });
  CHECK(parts.empty());
}
