// tierlab-explorer's teaching details (issue 15, items 22 and 24), driven through the window
// class headless (offscreen platform), as tests/test_explorer.cpp does: the water level of the
// family shown, a y axis that stays put across family switches, legends beside the data,
// tooltips inside the window, the preset box naming a file as the source, the context field
// refusing (never clamping) a value out of range, and the slow views filling in head by head
// (the live staleness view step by step, the RD curve view the head's curve first).
#include <catch2/catch.hpp>

#include <QApplication>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QSpinBox>
#include <qcustomplot.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "explorer_support.hpp"
#include "gui/explorer_core.hpp"
#include "gui/main_window.hpp"
#include "gpu/recompute.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/staleness_head.hpp"

namespace fs = std::filesystem;
using namespace tierlab;
using namespace tierlab::explorer;

namespace {

QApplication& app() { return tierlab::testing::offscreen_app("test_explorer_teaching"); }

// A small synthetic trace file: 2 layers x 2 KV heads, T = 160, d = 32, S = 6.
std::string small_trace() {
  static const std::string path = [] {
    const fs::path d = tierlab::testing::process_temp_dir("teaching");  // removed at exit
    fs::create_directories(d);
    SynthParams p = synth_preset("tiny");
    p.head_dim = 32;
    p.prompt_len = 160;
    p.obs_window = 12;
    p.decode_steps = 6;
    p.seed = 3;
    const std::string f = (d / "small.safetensors").string();
    write_synthetic_trace(p, f);
    return f;
  }();
  return path;
}

bool has_series(const Figure& f, const std::string& prefix) {
  for (const Series& s : f.series)
    if (s.name.rfind(prefix, 0) == 0) return true;
  return false;
}

// The window's plots of the current tab that are visible.
std::vector<QCustomPlot*> visible_plots(MainWindow& w) {
  std::vector<QCustomPlot*> out;
  for (QCustomPlot* p : w.findChildren<QCustomPlot*>())
    if (p->isVisible()) out.push_back(p);
  return out;
}

void type_into(QWidget* field, const QString& text) {
  for (const QChar c : text) {
    QKeyEvent press(QEvent::KeyPress, Qt::Key_0 + (c.unicode() - '0'), Qt::NoModifier, QString(c));
    QApplication::sendEvent(field, &press);
    QKeyEvent release(QEvent::KeyRelease, Qt::Key_0 + (c.unicode() - '0'), Qt::NoModifier, QString(c));
    QApplication::sendEvent(field, &release);
  }
}

void press_enter(QWidget* field) {
  QKeyEvent press(QEvent::KeyPress, Qt::Key_Return, Qt::NoModifier);
  QApplication::sendEvent(field, &press);
}

}  // namespace

TEST_CASE("explorer window: with family E or Q the water-filling view shows no mixed water level, on the same axes") {
  app();
  MainWindow w;
  w.resize(1200, 800);
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  // In code bits, where family Q has its 2-bit option at B = 2 (in total bits it costs more).
  w.findChild<QComboBox*>("rate_kind")->setCurrentText("code");
  REQUIRE(w.waitIdle());
  w.setBudget(2.0);
  REQUIRE(w.waitIdle());
  const Figure mixed = w.result(WaterfillView)->figures.at(0);
  const Figure mixed_bits = w.result(WaterfillView)->figures.at(1);
  // The plots' pixel layout too: the same legend rows whatever the family.
  auto axis_rects = [&w] {
    QApplication::processEvents();
    std::vector<QRect> r;
    for (QCustomPlot* p : visible_plots(w)) {
      p->replot();
      p->replot();  // QCustomPlot sizes its margins from the tick labels of the last replot
      r.push_back(p->axisRect()->rect());
    }
    return r;
  };
  std::vector<std::vector<QRect>> rects_of;  // per family shown: the plots' axis rects
  CHECK(has_series(mixed, "water level theta"));
  CHECK(has_series(mixed_bits, "continuous b_t"));
  CHECK(mixed.title.find("water level theta = ") != std::string::npos);

  for (const char* family : {"evict", "quantize"}) {
    INFO(family);
    w.setFamily(family);
    REQUIRE(w.waitIdle());
    const ViewResult* r = w.result(WaterfillView);
    REQUIRE(r != nullptr);
    const Figure& lv = r->figures.at(0);
    // (a) the level shown is the family's: Q and E have none, and the title and text say so.
    CHECK_FALSE(has_series(lv, "water level theta"));
    CHECK_FALSE(has_series(r->figures.at(1), "continuous b_t"));
    const std::string says = std::string("family ") + (family[0] == 'e' ? "E" : "Q") + " has no water level";
    CHECK(lv.title.find(", no water level") != std::string::npos);  // short: the text says the rest
    CHECK(r->info.find(says) != std::string::npos);
    // (b) g_t(0) does not change with the family: neither does the y axis.
    CHECK(lv.ymin == mixed.ymin);
    CHECK(lv.ymax == mixed.ymax);
    CHECK(lv.xmin == mixed.xmin);
    CHECK(lv.xmax == mixed.xmax);
    rects_of.push_back(axis_rects());
  }
  w.setFamily("mixed");
  REQUIRE(w.waitIdle());
  CHECK(has_series(w.result(WaterfillView)->figures.at(0), "water level theta"));
  // The plots keep their size and place too: the legend keeps its rows whatever the family.
  const std::vector<QRect> mixed_rects = axis_rects();
  REQUIRE(mixed_rects.size() == 2);
  for (const auto& rects : rects_of) {
    REQUIRE(rects.size() == mixed_rects.size());
    for (std::size_t k = 0; k < rects.size(); ++k) {
      INFO("plot " << k << ": " << rects[k].x() << "," << rects[k].y() << " " << rects[k].width() << "x" << rects[k].height()
                   << " vs M's " << mixed_rects[k].x() << "," << mixed_rects[k].y() << " " << mixed_rects[k].width() << "x"
                   << mixed_rects[k].height());
      CHECK(rects[k] == mixed_rects[k]);
    }
  }
}

TEST_CASE("explorer window: legends sit below the axes, never over the data, and the axes end at the data's range") {
  app();
  MainWindow w;
  w.resize(1200, 800);
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  for (int v : {static_cast<int>(WaterfillView), static_cast<int>(HeadMapView), static_cast<int>(DominanceView)}) {
    w.setCurrentView(v);
    REQUIRE(w.waitIdle());
    QApplication::processEvents();
    const std::vector<QCustomPlot*> plots = visible_plots(w);
    REQUIRE(!plots.empty());
    const ViewResult* r = w.result(v);
    REQUIRE(r != nullptr);
    for (std::size_t k = 0; k < plots.size() && k < r->figures.size(); ++k) {
      INFO("view " << view_name(v) << ", plot " << k);
      QCustomPlot* p = plots[k];
      p->replot();
      REQUIRE(p->legend->visible());
      CHECK(p->legend->layout() == p->plotLayout());  // a row of its own, not inside the axis rect
      CHECK_FALSE(p->legend->outerRect().intersects(p->axisRect()->rect()));
      CHECK(p->legend->outerRect().top() >= p->axisRect()->outerRect().bottom());
    }
    // No headroom added above the data for a legend inside the axes.
    const Figure& f = r->figures.at(0);
    bool found = false;
    for (QCustomPlot* p : plots)
      if (p->yAxis->range().upper == Approx(f.ymax)) found = true;
    CHECK(found);
  }
}

TEST_CASE("explorer window: a tooltip is kept inside the window") {
  app();
  // The placement alone: right of and below the cursor when it fits, else left of / above.
  const QRect win(100, 50, 800, 600);
  CHECK(tooltip_position(win, QPoint(300, 300), QSize(200, 80)) == QPoint(302, 316));
  const QPoint right = tooltip_position(win, QPoint(890, 300), QSize(200, 80));
  CHECK(right.x() + 200 <= 900);
  const QPoint corner = tooltip_position(win, QPoint(895, 640), QSize(200, 80));
  CHECK(corner.x() + 200 <= 900);
  CHECK(corner.y() + 80 <= 650);
  CHECK(tooltip_position(win, QPoint(110, 60), QSize(900, 700)).x() >= 100);

  // Through the window: hover the rightmost token of the water-filling plot.
  MainWindow w;
  w.resize(1000, 700);
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  QApplication::processEvents();
  const std::vector<QCustomPlot*> plots = visible_plots(w);
  REQUIRE(!plots.empty());
  QCustomPlot* plot = plots.front();
  plot->replot();
  const auto& hover = w.result(WaterfillView)->hover.at(0);
  REQUIRE(!hover.empty());
  const HoverPoint* far = &hover.front();
  for (const HoverPoint& h : hover)
    if (h.x > far->x) far = &h;
  const QPointF at(plot->xAxis->coordToPixel(far->x), plot->yAxis->coordToPixel(far->y));
  QMouseEvent move(QEvent::MouseMove, at, plot->mapToGlobal(at), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
  QApplication::sendEvent(plot, &move);
  QApplication::processEvents();
  QWidget* tip = nullptr;
  for (QWidget* t : QApplication::topLevelWidgets())
    if (t->objectName() == "qtooltip_label" && t->isVisible()) tip = t;
  REQUIRE(tip != nullptr);
  const QRect window(w.mapToGlobal(QPoint(0, 0)), w.size());
  INFO("tip " << tip->geometry().x() << "," << tip->geometry().y() << " " << tip->width() << "x" << tip->height());
  CHECK(window.contains(tip->geometry()));
}

TEST_CASE("explorer window: the preset box shows that a file is the source") {
  app();
  MainWindow w;
  w.show();
  w.openArgument("preset:tiny");
  REQUIRE(w.waitIdle());
  CHECK(w.presetShown() == "tiny");
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  REQUIRE(w.source() != nullptr);
  CHECK(w.presetShown() == "(file)");  // not the preset of before
  w.openArgument("preset:tiny");
  REQUIRE(w.waitIdle());
  CHECK(w.presetShown() == "tiny");
}

TEST_CASE("explorer window: the context length field refuses a value out of range with the range, never clamps it") {
  app();
  MainWindow w;
  w.show();
  w.openArgument("preset:tiny");
  REQUIRE(w.waitIdle());
  REQUIRE(w.source() != nullptr);
  const int T = w.source()->meta().prompt_len;
  auto* field = w.findChild<QSpinBox*>("context");
  REQUIRE(field != nullptr);
  REQUIRE(field->isEnabled());
  field->setFocus();
  field->selectAll();
  type_into(field, "100000");
  CHECK(field->text() == "100000");  // every digit typed is there: not silently 10000
  press_enter(field);  // refused when committed, never on a keystroke
  CHECK(w.lastError().contains("100000"));
  CHECK(w.lastError().contains("16 to 65536"));
  REQUIRE(w.waitIdle());
  CHECK(w.source()->meta().prompt_len == T);  // nothing reopened at a clamped length
  CHECK(field->value() == T);
  CHECK(w.statusText().contains("16 to 65536"));
  CHECK(w.statusText().contains("100000"));

  // Below the range: said when editing ends; a value in range reopens the preset.
  field->selectAll();
  type_into(field, "8");
  press_enter(field);
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().contains("8 is outside the valid range 16 to 65536"));
  CHECK(w.source()->meta().prompt_len == T);
  field->selectAll();
  type_into(field, "96");
  press_enter(field);
  REQUIRE(w.waitIdle());
  CHECK(w.lastError().isEmpty());
  CHECK(w.source()->meta().prompt_len == 96);
}

TEST_CASE("explorer core: the head map and the live interior view deliver partial results head by head") {
  SourceSpec spec = parse_source(small_trace());
  auto src = Source::open(spec);
  Engine engine(src);
  engine.set_partial_interval(0);
  Settings s;
  std::vector<ViewResult> parts;
  const PartialView collect = [&](const ViewResult& r) { parts.push_back(r); };
  const ViewResult full = engine.head_map(s, nullptr, {}, nullptr, collect);
  const int heads = src->meta().n_heads();
  REQUIRE(static_cast<int>(parts.size()) == heads - 1);
  for (int k = 0; k < heads - 1; ++k) {
    INFO(k);
    CHECK(parts[k].hover.at(0).size() == static_cast<std::size_t>(k + 1));  // one more head each time
    CHECK(parts[k].info.find("computing: " + std::to_string(k + 1) + " of " + std::to_string(heads)) != std::string::npos);
  }
  CHECK(full.hover.at(0).size() == static_cast<std::size_t>(heads));
  CHECK(full.info.find("so far") == std::string::npos);

  parts.clear();
  const ViewResult in = engine.interior(s, {}, nullptr, collect);
  REQUIRE(static_cast<int>(parts.size()) == heads);  // the head's curve first, then head by head
  CHECK(parts.front().figures.at(0).series.at(0).x.size() == in.figures.at(0).series.at(0).x.size());
  CHECK(parts.front().figures.at(1).title.find("0 of " + std::to_string(heads) + " heads so far") != std::string::npos);
  CHECK(in.figures.at(1).title.find("so far") == std::string::npos);

  // The library's progress type counts the heads.
  std::vector<std::pair<int, int>> ticks;
  engine.head_map(s, nullptr, [&](int done, int total) { ticks.push_back({done, total}); });
  REQUIRE(!ticks.empty());
  CHECK(ticks.back() == std::make_pair(heads, heads));
}

TEST_CASE("explorer window: switching to a slow view never shows the previous view's text") {
  app();
  MainWindow w;
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  const QString waterfill_text = w.infoText();
  REQUIRE(waterfill_text.contains("noise model"));
  w.setCurrentView(HeadMapView);
  CHECK(w.infoText() != waterfill_text);  // at once, before the map is computed
  CHECK(w.infoText().contains("computing the Layer x head map view"));
  REQUIRE(w.waitIdle());
  CHECK(w.infoText().contains("layers x"));
  w.setBudget(3.0);  // the map recomputes: its old numbers (B = 2) do not stand in meanwhile
  CHECK(w.infoText().contains("computing"));
  REQUIRE(w.waitIdle());
  CHECK(w.infoText().contains("B = 3"));
}

TEST_CASE("explorer window: the head map is drawn head by head before its final result") {
  app();
  MainWindow w;
  w.setPartialInterval(0);  // every head (the default paces them at 400 ms)
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  const int heads = w.source()->meta().n_heads();
  std::vector<std::pair<std::size_t, bool>> drawn;  // heads shown, final
  QObject::connect(&w, &MainWindow::viewDrawn, [&](int view, bool final) {
    if (view == HeadMapView) drawn.push_back({w.result(HeadMapView)->hover.at(0).size(), final});
  });
  w.setCurrentView(HeadMapView);
  REQUIRE(w.waitIdle());
  REQUIRE(static_cast<int>(drawn.size()) == heads);
  for (int k = 0; k + 1 < heads; ++k) {
    CHECK(drawn[k].first == static_cast<std::size_t>(k + 1));
    CHECK_FALSE(drawn[k].second);
  }
  CHECK(drawn.back().first == static_cast<std::size_t>(heads));
  CHECK(drawn.back().second);
  CHECK(w.infoText().contains("so far") == false);
}

TEST_CASE("explorer core: the water-filling view states the measured and the nominal rate, and says when the measured total "
          "exceeds B") {
  SourceSpec spec = parse_source(small_trace());
  Engine engine(Source::open(spec));
  Settings s;
  s.rate_kind = RateKind::Total;
  s.budget = 2;
  WaterfillNumbers num;
  const ViewResult v = engine.waterfill(s, &num);
  CHECK(v.info.find("total bits measured") != std::string::npos);
  CHECK(v.info.find(" nominal (total)") != std::string::npos);
  CHECK(v.info.find("nominal = the total rate the solver counted against B = 2") != std::string::npos);
  // The note on a measured total over B appears exactly when the measured total exceeds B.
  const bool over = num.rate.total_bits > 2 * (1 + 1e-9);
  CHECK((v.info.find("exceeds B = 2 by the partial groups") != std::string::npos) == over);
  s.rate_kind = RateKind::Code;
  CHECK(engine.waterfill(s, &num).info.find("B counts code bits only") != std::string::npos);
}

namespace {

// The points of every series of every figure, and the hover texts (two results are the same
// view when these are equal).
std::vector<std::vector<double>> points_of(const ViewResult& r) {
  std::vector<std::vector<double>> out;
  for (const Figure& f : r.figures)
    for (const Series& se : f.series) out.push_back(se.x), out.push_back(se.y);
  return out;
}
std::vector<std::string> hover_texts(const ViewResult& r) {
  std::vector<std::string> out;
  for (const auto& fig : r.hover)
    for (const HoverPoint& h : fig) out.push_back(h.text);
  return out;
}

}  // namespace

TEST_CASE("explorer core: the live staleness view delivers its steps as they are scored, and the same final result") {
  auto src = Source::open(parse_source(small_trace()));
  Engine engine(src);
  engine.set_partial_interval(0);
  Settings s;
  s.decode_step = 3;  // steps 1, 2, 3, 4, 6 (S = 6)
  std::vector<ViewResult> parts;
  const ViewResult full = engine.staleness(s, {}, nullptr, [&](const ViewResult& r) { parts.push_back(r); });
  const int total = 5;
  REQUIRE(static_cast<int>(parts.size()) == total - 1);
  const std::vector<std::string> final_hover = hover_texts(full);
  REQUIRE(full.hover.at(0).size() == static_cast<std::size_t>(total));
  for (int k = 0; k < total - 1; ++k) {
    INFO(k);
    const std::string counted = std::to_string(k + 1) + " of " + std::to_string(total) + " steps so far";
    CHECK(parts[k].figures.at(0).title.find(counted) != std::string::npos);
    CHECK(parts[k].info.find("computing: " + counted) != std::string::npos);
    REQUIRE(parts[k].hover.at(0).size() == static_cast<std::size_t>(k + 1));  // one more step each time
    for (int i = 0; i <= k; ++i) CHECK(parts[k].hover[0][i].text == full.hover[0][i].text);  // the final's first steps
  }
  CHECK(full.figures.at(0).title.find("so far") == std::string::npos);
  CHECK(full.info.find("computing") == std::string::npos);
  // The same as without partial results (a fresh engine: nothing cached), and as the library's.
  Engine plain(src);
  const ViewResult same = plain.staleness(s);
  CHECK(points_of(same) == points_of(full));
  CHECK(hover_texts(same) == final_hover);
  CHECK(same.info == full.info);
  StalenessOptions so;
  so.steps = {1, 2, 3, 4, 6};
  so.budget = s.budget;
  so.rope = src->meta().rope;
  auto cpu = make_recomputer(Backend::Cpu);
  TraceReader trace(small_trace());
  int told = 0;
  const StalenessHead sh = staleness_head(trace.head(0, 0), so, *cpu, [&](const StalenessHead& r) {
    CHECK(static_cast<int>(r.steps.size()) == ++told);
  });
  CHECK(told == total);
  const StalenessHead quiet = staleness_head(trace.head(0, 0), so, *cpu);
  REQUIRE(sh.steps.size() == quiet.steps.size());
  for (std::size_t i = 0; i < sh.steps.size(); ++i) {
    CHECK(sh.steps[i].ratio == quiet.steps[i].ratio);  // bit for bit
    CHECK(sh.steps[i].err_stale == quiet.steps[i].err_stale);
    CHECK(sh.steps[i].fresh_tiers == quiet.steps[i].fresh_tiers);
  }
  const Series& ratio = full.figures.at(0).series.at(0);
  REQUIRE(ratio.y.size() <= sh.steps.size());
  std::size_t j = 0;
  for (const StalenessStep& st : sh.steps)
    if (std::isfinite(st.ratio) && st.ratio > 0) CHECK(ratio.y.at(j++) == st.ratio);
}

TEST_CASE("explorer core: the RD curve view delivers the head's curve before the model-wide one, then the same result") {
  auto src = Source::open(parse_source(small_trace()));
  Engine engine(src);
  Settings s;
  s.layer = 1, s.kv_head = 1;
  std::vector<ViewResult> parts;
  const PartialView collect = [&](const ViewResult& r) { parts.push_back(r); };
  const ViewResult full = engine.rd_curve(s, {}, nullptr, collect);
  REQUIRE(parts.size() == 1);
  const ViewResult& head_first = parts[0];
  REQUIRE(head_first.figures.size() == 2);
  CHECK(head_first.figures[1].title.find("being computed") != std::string::npos);
  CHECK(head_first.figures[1].series.empty());
  CHECK(head_first.info.find("computing: the model (4 heads share B) curve") != std::string::npos);
  REQUIRE(full.figures.size() == 2);
  CHECK(full.figures[1].title.find("being computed") == std::string::npos);
  CHECK(full.info.find("computing") == std::string::npos);
  // The head's figure shown at once is the final one.
  ViewResult head_only = full, first_only = head_first;
  head_only.figures.resize(1), head_only.hover.resize(1);
  first_only.figures.resize(1), first_only.hover.resize(1);
  CHECK(points_of(first_only) == points_of(head_only));
  CHECK(hover_texts(first_only) == hover_texts(head_only));
  // Equal to the call without partial results; once cached, no partial result is sent.
  Engine plain(src);
  const ViewResult same = plain.rd_curve(s);
  CHECK(points_of(same) == points_of(full));
  CHECK(hover_texts(same) == hover_texts(full));
  parts.clear();
  s.budget = 5;
  engine.rd_curve(s, {}, nullptr, collect);
  CHECK(parts.empty());
}

TEST_CASE("explorer window: the live staleness and RD curve views are drawn in parts before their final result") {
  app();
  MainWindow w;
  w.setPartialInterval(0);
  w.show();
  w.openArgument(QString::fromStdString(small_trace()));
  REQUIRE(w.waitIdle());
  const QString waterfill_text = w.infoText();
  std::vector<std::pair<std::size_t, bool>> drawn;  // staleness steps shown, final
  std::vector<std::pair<std::string, bool>> rd;     // the model figure's title, final
  QObject::connect(&w, &MainWindow::viewDrawn, [&](int view, bool final) {
    if (view == StalenessView) drawn.push_back({w.result(StalenessView)->hover.at(0).size(), final});
    if (view == RdCurveView) rd.push_back({w.result(RdCurveView)->figures.at(1).title, final});
  });
  w.setCurrentView(StalenessView);
  CHECK(w.infoText() != waterfill_text);
  CHECK(w.infoText().contains("computing the"));
  REQUIRE(w.waitIdle());
  const std::size_t steps = 4;  // 1, 2, 4, 6 (S = 6, decode step 1)
  REQUIRE(drawn.size() == steps);
  for (std::size_t k = 0; k + 1 < steps; ++k) {
    CHECK(drawn[k].first == k + 1);
    CHECK_FALSE(drawn[k].second);
  }
  CHECK(drawn.back() == std::make_pair(steps, true));
  CHECK_FALSE(w.infoText().contains("so far"));
  const QString staleness_text = w.infoText();
  w.setCurrentView(RdCurveView);
  CHECK(w.infoText() != staleness_text);
  REQUIRE(w.waitIdle());
  // With the field's default methods: the head's curve, its methods, the model curve, then all.
  REQUIRE(rd.size() == 4);
  for (std::size_t k = 0; k < 3; ++k) CHECK_FALSE(rd[k].second);
  CHECK(rd[0].first.find("being computed") != std::string::npos);
  CHECK(rd[1].first.find("being computed") != std::string::npos);
  CHECK(rd[2].first.find("being computed") == std::string::npos);
  CHECK(rd[3].first.find("being computed") == std::string::npos);
  CHECK(rd[3].second);
  CHECK_FALSE(w.infoText().contains("computing"));
}

TEST_CASE("explorer core: the live interior view keeps each head's advantage, so a head change computes only the new head's curve") {
  auto src = Source::open(parse_source(small_trace()));
  Engine engine(src);
  Settings s;  // B = 2, one of the head curve's budgets
  const ViewResult first = engine.interior(s);
  const int heads = src->meta().n_heads();
  CHECK(engine.cached_advantages() == static_cast<std::size_t>(9 + heads - 1));  // the head's 9 budgets, the others at B
  s.layer = 1;  // another head: its 9 budgets, 8 of them new
  const ViewResult second = engine.interior(s);
  CHECK(engine.cached_advantages() == static_cast<std::size_t>(9 + heads - 1 + 8));
  // The same numbers as an engine that computes everything afresh.
  Engine fresh(src);
  const ViewResult want = fresh.interior(s);
  CHECK(points_of(second) == points_of(want));
  CHECK(hover_texts(second) == hover_texts(want));
  // Back to the first head: nothing computed.
  s.layer = 0;
  const ViewResult again = engine.interior(s);
  CHECK(engine.cached_advantages() == static_cast<std::size_t>(9 + heads - 1 + 8));
  CHECK(points_of(again) == points_of(first));
}
