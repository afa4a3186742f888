// tierlab-explorer's fields take only what was typed and committed (issue 32, item 5), driven
// key by key through the window class headless (offscreen platform): each number field (budget,
// context length, layer, KV head, decode step) and the bits ladder with a partial value (nothing
// computed before Enter), an out-of-range one and a malformed one (refused with the field, the
// text and the valid range; the views keep the last value; nothing clamped, rounded or dropped),
// a valid value clearing the error, the focus leaving a field committing it as Enter does, and a
// scenario's rate kind, ladder and budget taken when it is opened.
#include <catch2/catch.hpp>

#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSpinBox>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "explorer_support.hpp"
#include "gui/explorer_core.hpp"
#include "gui/main_window.hpp"
#include "model/synthetic/synthetic.hpp"

namespace fs = std::filesystem;
using namespace tierlab;
using namespace tierlab::explorer;
using namespace tierlab::testing;

namespace {

QApplication& app() { return offscreen_app("test_explorer_input"); }

// A small synthetic trace file: 2 layers x 2 KV heads, T = 96, d = 16, S = 4.
std::string small_trace() {
  static const std::string path = [] {
    const fs::path d = process_temp_dir("input");
    fs::create_directories(d);
    SynthParams p = synth_preset("tiny");
    p.head_dim = 16;
    p.prompt_len = 96;
    p.obs_window = 8;
    p.decode_steps = 4;
    p.seed = 5;
    const std::string f = (d / "small.safetensors").string();
    write_synthetic_trace(p, f);
    return f;
  }();
  return path;
}

// Selects the field's text and types `text` into it (nothing committed yet).
void retype(QWidget* field, const QString& text) {
  select_all_and_delete(field);
  type_keys(field, text);
}

bool has_series_named(const ViewResult* r, const std::string& prefix) {
  if (!r) return false;
  for (const Figure& f : r->figures)
    for (const Series& s : f.series)
      if (s.name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

TEST_CASE("explorer window: the budget field applies a value only when it is committed, and refuses 100, -3, 0.01, abc and too many decimals with the range") {
  app();
  MainWindow w;
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  auto* field = w.findChild<QDoubleSpinBox*>("budget");
  REQUIRE(field != nullptr);
  REQUIRE(w.settings().budget == 2.0);

  // Partial: typed, not committed, nothing computed.
  retype(field, "3");
  CHECK_FALSE(w.busy());
  CHECK(w.settings().budget == 2.0);
  press_return(field);
  CHECK(w.settings().budget == 3.0);
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().isEmpty());

  for (const char* bad : {"100", "-3", "0.01", "abc", "2.123456"}) {
    INFO(bad);
    retype(field, bad);
    CHECK(field->text().startsWith(bad));  // every keystroke is in the field: 100 is not 10.00, -3 not 3.00
    press_return(field);
    CHECK_FALSE(w.busy());  // nothing recomputed
    CHECK(w.settings().budget == 3.0);
    CHECK(field->value() == 3.0);  // the field shows the value the views keep
    const QString said = w.fieldError("budget");
    CHECK(said.startsWith("budget B: "));
    CHECK(said.contains(bad));
    CHECK(said.contains("0.05 to 16 bits"));
    CHECK(said.contains("the views keep B = 3.00"));
    CHECK(w.lastError() == said);
    CHECK(w.statusText().contains(said));
  }
  // Empty.
  select_all_and_delete(field);
  press_return(field);
  CHECK(w.fieldError("budget").contains("the field is empty"));
  CHECK(w.settings().budget == 3.0);

  // A valid value clears the error state.
  retype(field, "2.5");
  press_return(field);
  CHECK(w.fieldError("budget").isEmpty());
  CHECK(w.lastError().isEmpty());
  CHECK_FALSE(w.statusText().contains("Refused"));
  CHECK(w.settings().budget == 2.5);
  REQUIRE(w.waitIdle());
  CHECK(w.result(WaterfillView)->figures.at(0).title.find("B = 2.5") != std::string::npos);

  // setBudget (tests, scripts, --budget) never clamps either.
  w.setBudget(100);
  CHECK(w.fieldError("budget").contains("100 is outside the valid range 0.05 to 16 bits"));
  CHECK(w.settings().budget == 2.5);
  CHECK_FALSE(w.busy());
}

TEST_CASE("explorer window: the layer, KV head and decode step fields refuse a value outside the source's range or not a whole number, and keep the head") {
  app();
  MainWindow w;
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  struct Case {
    const char* field;
    const char* label;
    const char* range;
  };
  for (const Case& c : {Case{"layer", "layer l", "0 to 1"}, Case{"kv_head", "KV head h", "0 to 1"},
                        Case{"step", "decode step s", "1 to 4"}}) {
    INFO(c.field);
    auto* field = w.findChild<QSpinBox*>(c.field);
    REQUIRE(field != nullptr);
    const Settings before = w.settings();
    const int kept = field->value();
    // Partial: a digit typed is not applied before Enter.
    retype(field, "1");
    CHECK_FALSE(w.busy());
    CHECK(field->value() == kept);
    for (const char* bad : {"9", "-1", "x", "1.5"}) {
      INFO(bad);
      retype(field, bad);
      CHECK(field->text() == bad);  // typed in full: 9 is not refused as a keystroke
      press_return(field);
      CHECK_FALSE(w.busy());
      CHECK(field->value() == kept);
      const Settings now = w.settings();
      CHECK(now.layer == before.layer);
      CHECK(now.kv_head == before.kv_head);
      CHECK(now.decode_step == before.decode_step);
      const QString said = w.fieldError(c.field);
      CHECK(said.startsWith(QString(c.label) + ": "));
      CHECK(said.contains(bad));
      CHECK(said.contains(c.range));
      CHECK(w.lastError() == said);
    }
    retype(field, "1");
    press_return(field);
    CHECK(w.fieldError(c.field).isEmpty());
    CHECK(w.lastError().isEmpty());
    CHECK(field->value() == 1);
    REQUIRE(w.waitIdle());
  }
  CHECK(w.settings().layer == 1);
  CHECK(w.settings().kv_head == 1);
  CHECK(w.settings().decode_step == 1);
  CHECK(w.result(WaterfillView)->figures.at(0).title.find("L1.H1") != std::string::npos);
}

TEST_CASE("explorer window: the bits ladder computes only a committed ladder: 2,4,9 on the way to 2,4,99 is never computed and 2,4,99 is refused") {
  app();
  MainWindow w;
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  auto* box = w.findChild<QComboBox*>("bits");
  REQUIRE(box != nullptr);
  QLineEdit* field = box->lineEdit();
  const std::string ladder = w.settings().ladder;
  REQUIRE(ladder == "evict,kivi2,kivi4,kivi8,exact");

  retype(field, "2,4,9");  // a partial entry that would be a ladder: not computed
  CHECK_FALSE(w.busy());
  CHECK(w.settings().ladder == ladder);
  type_keys(field, "9");
  CHECK(box->styleSheet().contains("#ffe0e0"));  // red while it is not a ladder
  press_return(field);
  CHECK_FALSE(w.busy());
  CHECK(w.settings().ladder == ladder);
  CHECK_FALSE(has_series_named(w.result(WaterfillView), "kivi9"));
  CHECK(w.fieldError("bits").contains("bits ladder: '2,4,99': 99 is outside the valid range 1 to 15"));
  CHECK(w.fieldError("bits").contains("the views keep 2,4,8"));

  struct Bad {
    const char* text;
    const char* why;
  };
  for (const Bad& b : {Bad{"2,a", "'a' is not a whole number"}, Bad{"4,2", "2 does not follow 4"},
                       Bad{"2,,4", "has an empty entry"}, Bad{"0", "0 is outside the valid range 1 to 15"}}) {
    INFO(b.text);
    retype(field, b.text);
    CHECK(field->text() == b.text);  // letters and separators are typed, then judged: never dropped silently
    press_return(field);
    CHECK_FALSE(w.busy());
    CHECK(w.settings().ladder == ladder);
    CHECK(w.fieldError("bits").contains(b.why));
    CHECK(w.fieldError("bits").contains("valid: bit widths from 1 to 15"));
    CHECK(box->findText(b.text) < 0);  // a refused text never joins the list
  }
  retype(field, "2,4");
  press_return(field);
  CHECK(w.fieldError("bits").isEmpty());
  CHECK(w.lastError().isEmpty());
  CHECK(box->styleSheet().isEmpty());
  CHECK(w.settings().ladder == "evict,kivi2,kivi4,exact");
  REQUIRE(w.waitIdle());
}

TEST_CASE("explorer window: the focus leaving a field commits what was typed, as Enter does") {
  app();
  MainWindow w;
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  auto* budget = w.findChild<QDoubleSpinBox*>("budget");
  REQUIRE(budget != nullptr);
  retype(budget, "100");
  leave_field(budget);
  CHECK(w.fieldError("budget").contains("100 is outside the valid range"));
  CHECK(w.settings().budget == 2.0);
  retype(budget, "4");
  leave_field(budget);
  CHECK(w.fieldError("budget").isEmpty());
  CHECK(w.settings().budget == 4.0);
  REQUIRE(w.waitIdle());

  QLineEdit* bits = w.findChild<QComboBox*>("bits")->lineEdit();
  retype(bits, "2,4,99");
  leave_field(bits);
  CHECK(w.fieldError("bits").contains("99 is outside"));
  retype(bits, "4,8");
  leave_field(bits);
  CHECK(w.fieldError("bits").isEmpty());
  CHECK(w.settings().ladder == "evict,kivi4,kivi8,exact");
  REQUIRE(w.waitIdle());
}

TEST_CASE("explorer window: a refused context length leaves the field showing T in its normal state, and a valid value clears the error") {
  app();
  MainWindow w;
  w.show();
  w.openArgument("preset:tiny");
  REQUIRE(w.waitIdle());
  auto* field = w.findChild<QSpinBox*>("context");
  REQUIRE(field != nullptr);
  const int T = w.source()->meta().prompt_len;
  for (const char* bad : {"100000", "8", "-64", "abc"}) {
    INFO(bad);
    const QString said_before = w.lastError();
    retype(field, bad);
    CHECK(field->styleSheet().contains("#ffe0e0"));  // red while typed
    CHECK(w.lastError() == said_before);              // said when committed, not per keystroke
    press_return(field);
    REQUIRE(w.waitIdle());
    CHECK(w.source()->meta().prompt_len == T);
    CHECK(field->value() == T);
    CHECK(field->styleSheet().isEmpty());  // it shows T again, which is valid
    CHECK(w.fieldError("context").contains(bad));
    CHECK(w.fieldError("context").contains("16 to 65536"));
  }
  retype(field, "80");
  CHECK(field->styleSheet().isEmpty());
  press_return(field);
  REQUIRE(w.waitIdle());
  CHECK(w.fieldError("context").isEmpty());
  CHECK(w.lastError().isEmpty());
  CHECK(w.source()->meta().prompt_len == 80);
}

TEST_CASE("explorer window: typeIntoField types as a user does and says whether the field took the text") {
  app();
  MainWindow w;
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  CHECK_FALSE(w.typeIntoField("budget", "-3"));
  CHECK(w.fieldError("budget").contains("-3 is outside the valid range 0.05 to 16 bits"));
  CHECK(w.typeIntoField("budget", "1.25"));
  CHECK(w.settings().budget == 1.25);
  CHECK_FALSE(w.typeIntoField("layer", "9"));
  CHECK(w.fieldError("layer").contains("9 is outside the valid range 0 to 1"));
  CHECK_FALSE(w.typeIntoField("rd_methods", "kivi:9"));
  CHECK(w.fieldError("rd_methods").contains(kRdMethodsField));
  CHECK_FALSE(w.typeIntoField("nonesuch", "1"));
  CHECK(w.lastError().contains("no field named 'nonesuch'"));
  REQUIRE(w.waitIdle());
}

TEST_CASE("explorer window: opening a scenario takes its rate kind, ladder and water-filling budget") {
  app();
  const fs::path dir = process_temp_dir("input") / "scenario";
  fs::create_directories(dir);
  const std::string yaml = (dir / "explorer-input.yaml").string();
  std::ofstream(yaml) << "name: explorer-input\n"
                         "traces:\n"
                         "  synthetic:\n"
                         "    presets: [tiny]\n"
                         "    seeds: [0]\n"
                         "ladder: evict,kivi1,kivi2,kivi4,exact\n"
                         "rate_kind: code\n"
                         "budgets: [1, 3]\n"
                         "primary_budget: 3\n"
                         "backend: cpu\n"
                         "waterfill:\n"
                         "  budget: 3\n";
  MainWindow w;
  w.show();
  REQUIRE(w.settings().rate_kind == kDefaultRateKind);  // the window's own default: the problem's (total)
  REQUIRE(kDefaultRateKind == RateKind::Total);
  SourceSpec spec = parse_source(yaml);
  spec.run_dir = (dir / "run").string();
  w.openSpec(spec);
  REQUIRE(w.waitIdle());
  INFO(w.lastError().toStdString());
  REQUIRE(w.source() != nullptr);
  const Settings s = w.settings();
  CHECK(s.rate_kind == RateKind::Code);  // the scenario's tables count code bits: so do the live views
  CHECK(s.ladder == "evict,kivi1,kivi2,kivi4,exact");
  CHECK(s.budget == 3.0);
  CHECK(w.findChild<QComboBox*>("bits")->currentText() == "1,2,4");
  REQUIRE(w.result(WaterfillView) != nullptr);
  CHECK(w.result(WaterfillView)->info.find("(code)") != std::string::npos);
}
