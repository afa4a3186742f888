#include "scenarios/figures/figure.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <QApplication>
#include <QFontMetricsF>
#include <QPaintDevice>
#include <QPaintEngine>
#include <QBuffer>
#include <QSvgGenerator>
#include <QFont>
#include <qcustomplot.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "model/base/error.hpp"
#include "model/io/paths.hpp"
#include "model/base/temporary_name.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/figures/figure_qt.hpp"

namespace tierlab {

namespace {

const char* kFont = "DejaVu Sans";

void ensure_app() {
  if (QCoreApplication::instance()) return;
  if (std::getenv("DISPLAY") == nullptr && std::getenv("WAYLAND_DISPLAY") == nullptr &&
      std::getenv("QT_QPA_PLATFORM") == nullptr)
    qputenv("QT_QPA_PLATFORM", "offscreen");
  if (std::getenv("XDG_RUNTIME_DIR") == nullptr) {
    // Qt warns on stderr without one; a private directory (mode 0700) keeps the CLI quiet.
    const std::string dir = "/tmp/tierlab-runtime-" + std::to_string(::getuid());
    ::mkdir(dir.c_str(), 0700);
    qputenv("XDG_RUNTIME_DIR", QByteArray::fromStdString(dir));
  }
  static int argc = 1;
  static char name[] = "tierlab";
  static char* argv[] = {name, nullptr};
  static QApplication* app = new QApplication(argc, argv);  // lives for the process
  (void)app;
}

// A temporary name beside `path` for an atomic write (renamed over it when complete), unique
// per call (model/base/temporary_name.hpp).
std::string temp_beside(const std::string& path) { return temporary_name(path); }

// Renames the finished temporary file over `path` (never over a device, FIFO or folder:
// writable_destination); removes it and throws on failure.
void publish(const std::string& tmp, const std::string& given) {
  std::error_code ec;
  std::string path;
  try {
    path = writable_destination(given, "figure");
  } catch (...) {
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw InputError("figure: cannot write '" + path + "': " + ec.message() + ".");
  }
}

std::string extension(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  if (!e.empty()) e.erase(0, 1);
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

}  // namespace

QColor to_qcolor(const Rgb& c) { return QColor(c.r, c.g, c.b, c.a); }

namespace {

// Canvas units per point: 1 on a page (the canvas is measured in points), 96/72 on the screen.
double units_per_pt(const FigureStyle& st) { return st.name == "screen" ? 96.0 / 72.0 : 1.0; }

// The figure's text at `pt` points (pixel sizes on the canvas: independent of the device's dpi).
QFont text_font(const FigureStyle& st, double pt, bool bold = false, bool italic = false) {
  QFont f(kFont);
  f.setPixelSize(std::max(1, static_cast<int>(std::lround(pt * units_per_pt(st)))));
  // Unhinted: the same advances at every scale (hinting rounds a 7 px glyph's advance up, so a
  // line measured on the canvas would be wider in a 300 dpi PNG and clipped).
  f.setHintingPreference(QFont::PreferNoHinting);
  f.setBold(bold);
  f.setItalic(italic);
  return f;
}

// A word made only of comparison or arithmetic signs ("=", ">=", "+").
bool is_sign(const QString& w) {
  static const QString signs = QString::fromUtf8("=<>+-*/\u2264\u2265\u2248\u2260\u00b1\u2212\u00d7");
  if (w.isEmpty() || w.size() > 2) return false;
  for (const QChar c : w)
    if (!signs.contains(c)) return false;
  return true;
}

// The words of one paragraph, a sign glued to the words on both sides ("(B = 2)", "R_h(2-bit) >=
// 1" stay on one line) and an interval's words to each other ("[-0.93, -0.49]"), while the
// glued group stays short.
QStringList wrap_units(const QString& para) {
  constexpr int kMaxGlued = 28;  // characters
  const QStringList words = para.split(' ', Qt::SkipEmptyParts);
  QStringList units;
  for (int i = 0; i < words.size(); ++i) {
    if (words[i].startsWith('[') && !words[i].contains(']')) {  // an interval opens here
      QString glued = words[i];
      int j = i + 1;
      while (j < words.size() && glued.size() <= kMaxGlued && !glued.contains(']')) glued += ' ' + words[j++];
      if (glued.contains(']') && glued.size() <= kMaxGlued) {
        units << glued;
        i = j - 1;
        continue;
      }
    }
    if (is_sign(words[i]) && !units.isEmpty() && i + 1 < words.size()) {
      const QString glued = units.back() + ' ' + words[i] + ' ' + words[i + 1];
      if (glued.size() <= kMaxGlued) {
        units.back() = glued;
        ++i;
        continue;
      }
    }
    units << words[i];
  }
  return units;
}

// `text` broken at spaces into lines no wider than `width` canvas units (a word longer than a
// line stays whole; a short formula around a sign is one word: wrap_units).
QString wrapped(const std::string& text, const QFont& font, double width) {
  const QFontMetricsF fm(font);
  QStringList lines;
  for (const QString& para : QString::fromStdString(text).split('\n')) {
    QString line;
    for (const QString& word : wrap_units(para)) {
      const QString tried = line.isEmpty() ? word : line + ' ' + word;
      if (!line.isEmpty() && fm.horizontalAdvance(tried) > width) {
        lines << line;
        line = word;
      } else {
        line = tried;
      }
    }
    lines << line;
  }
  return lines.join('\n');
}

QCPScatterStyle::ScatterShape shape_of(Marker m) {
  switch (m) {
    case Marker::Disc: return QCPScatterStyle::ssDisc;
    case Marker::Square: return QCPScatterStyle::ssSquare;
    case Marker::Triangle: return QCPScatterStyle::ssTriangle;
    case Marker::Diamond: return QCPScatterStyle::ssDiamond;
    case Marker::TriangleDown: return QCPScatterStyle::ssTriangleInverted;
    case Marker::Circle: return QCPScatterStyle::ssCircle;
    case Marker::Cross: return QCPScatterStyle::ssCross;
    case Marker::Plus: return QCPScatterStyle::ssPlus;
    case Marker::None: return QCPScatterStyle::ssNone;
    case Marker::Auto: break;
  }
  return QCPScatterStyle::ssDisc;
}

// The k-th marker of a figure's automatic sequence.
Marker auto_marker(int k) {
  static const Marker seq[] = {Marker::Disc, Marker::Square, Marker::Triangle, Marker::Diamond,
                               Marker::TriangleDown, Marker::Circle, Marker::Cross, Marker::Plus};
  return seq[k % 8];
}

// A text element of the layout found by its object name (the title, the note), or null.
QCPTextElement* named_element(QCustomPlot& plot, const char* name) {
  QCPLayoutGrid* grid = plot.plotLayout();
  for (int i = 0; i < grid->elementCount(); ++i)
    if (auto* t = qobject_cast<QCPTextElement*>(grid->elementAt(i)); t && t->objectName() == name) return t;
  return nullptr;
}

// The title in the first row, the axes, the legend in a row of its own below them (never over
// the data), the note in the last row; rows without content are taken out of the layout.
void lay_out(QCustomPlot& plot, QCPTextElement* title, QCPTextElement* note, bool show_title, bool show_note,
             bool legend) {
  QCPLayoutGrid* grid = plot.plotLayout();
  QCPLegend* lg = plot.legend;
  if (lg->layout() != nullptr && lg->layout() != grid) {
    lg->layout()->take(lg);
    plot.axisRect()->insetLayout()->simplify();
  }
  for (QCPLayoutElement* e : {static_cast<QCPLayoutElement*>(title), static_cast<QCPLayoutElement*>(note),
                              static_cast<QCPLayoutElement*>(lg)})
    if (e != nullptr && e->layout() == grid) grid->take(e);
  grid->simplify();  // the axis rect alone
  int row = 0;
  if (title != nullptr) title->setVisible(show_title);
  if (note != nullptr) note->setVisible(show_note);
  if (!show_title) title = nullptr;
  if (!show_note) note = nullptr;
  if (title != nullptr) {
    grid->insertRow(0);
    grid->addElement(0, 0, title);
    grid->setRowStretchFactor(0, 0.001);
    row = 1;
  }
  ++row;  // the axis rect
  if (legend) {
    grid->addElement(row, 0, lg);
    grid->setRowStretchFactor(row, 0.001);
    ++row;
  }
  lg->setVisible(legend);
  if (note != nullptr) {
    grid->addElement(row, 0, note);
    grid->setRowStretchFactor(row, 0.001);
  }
}

// Drops the points a logarithmic axis cannot show (x or y <= 0) from a reference line.
bool drawable(const Series& s, const Figure& f) {
  for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
    if ((!f.xlog || s.x[i] > 0) && (!f.ylog || s.y[i] > 0)) return true;
  return s.x.empty();
}

// Every Cells series's rectangles as items (touching cells: a heatmap); the series itself
// becomes an empty graph that carries the legend entry (a filled square).
void draw_cells(const Series& s, QCustomPlot& plot, double m) {
  const QColor color = to_qcolor(s.color);
  for (std::size_t i = 0; i < s.x_lo.size() && i < s.x_hi.size() && i < s.y_lo.size() && i < s.y_hi.size(); ++i) {
    auto* r = new QCPItemRect(&plot);
    r->topLeft->setCoords(s.x_lo[i], s.y_hi[i]);
    r->bottomRight->setCoords(s.x_hi[i], s.y_lo[i]);
    r->setPen(QPen(QColor(255, 255, 255), std::max(0.5, m)));
    r->setBrush(QBrush(color));
    r->setLayer("grid");  // under the graphs (boundaries), over the background
  }
}

// Ticks of a logarithmic axis over [lo, hi]: 1, 2 and 5 times the powers of ten, labelled as
// plain numbers, when it spans under three decades; powers of ten (10^k) otherwise. Every log
// axis of every figure follows this one rule (x and y alike, except budgets in powers of 2).
void log_ticks(QCPAxis* axis, double lo, double hi) {
  axis->setScaleType(QCPAxis::stLogarithmic);
  if (lo > 0 && std::log10(hi / lo) < 3) {
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    for (int e = static_cast<int>(std::floor(std::log10(lo))) - 1; e <= static_cast<int>(std::ceil(std::log10(hi))); ++e)
      for (const double mlt : {1.0, 2.0, 5.0}) {
        const double v = mlt * std::pow(10.0, e);
        if (v >= lo && v <= hi) t->addTick(v, QString::number(v, 'g', 6));
      }
    axis->setTicker(t);
  } else {
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    ticker->setSubTickCount(8);
    axis->setTicker(ticker);
    axis->setNumberFormat("eb");
    axis->setNumberPrecision(0);
  }
}

// Labels beside their points: those at one point joined ("a, b"); each at the first of eight
// places around its point (right, left, above, below and the diagonals) that stays inside the
// axes and overlaps no label placed before, the fewest markers breaking ties. A label with no
// such place is not drawn: its text is returned (the caller names it in the note), so no two
// labels ever overlap and none leaves the axes. `only`: when given, just these labels are
// placed (the second pass, after the note grew). Measured with the labels' font on the
// laid-out axes.
std::vector<std::string> place_labels(const Figure& fig, QCustomPlot& plot, const QFont& font, double m,
                                      const std::vector<std::string>* skip) {
  std::vector<Label> labels;
  for (const Label& l : fig.labels) {
    auto same = std::find_if(labels.begin(), labels.end(),
                             [&](const Label& k) { return k.x == l.x && k.y == l.y && k.centred == l.centred; });
    if (same != labels.end()) same->text += ", " + l.text;
    else labels.push_back(l);
  }
  std::vector<std::string> dropped;
  if (labels.empty()) return dropped;
  const QRectF box = plot.axisRect()->rect();
  const QFontMetricsF fm(font);
  std::vector<QRectF> markers, texts;
  const double r = 3.5 * m + 1;  // a marker's half size, and the gap to it
  for (const Series& s : fig.series)
    if (s.style == Style::Points || s.style == Style::Squares || s.style == Style::Line)
      for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        const double px = plot.xAxis->coordToPixel(s.x[i]), py = plot.yAxis->coordToPixel(s.y[i]);
        if (std::isfinite(px) && std::isfinite(py)) markers.push_back(QRectF(px - r, py - r, 2 * r, 2 * r));
      }
  auto area = [](const QRectF& a, const std::vector<QRectF>& others) {
    double sum = 0;
    for (const QRectF& o : others) {
      const QRectF x = a.intersected(o);
      sum += x.width() * x.height();
    }
    return sum;
  };
  auto draw = [&](const QString& text, double x, double y, Qt::Alignment align) {
    auto* t = new QCPItemText(&plot);
    t->position->setType(QCPItemPosition::ptAbsolute);
    t->position->setCoords(x, y);
    t->setPositionAlignment(align);
    t->setPadding(QMargins(0, 0, 0, 0));
    t->setFont(font);
    t->setText(text);
    t->setClipToAxisRect(false);
  };
  const double gap = r + 1;
  // Centred labels (a heatmap's values) first: they belong to their cells.
  for (const bool centred : {true, false})
    for (const Label& l : labels) {
      if (l.centred != centred) continue;
      if (skip != nullptr && std::find(skip->begin(), skip->end(), l.text) != skip->end()) continue;
      const double px = plot.xAxis->coordToPixel(l.x), py = plot.yAxis->coordToPixel(l.y);
      const QString text = QString::fromStdString(l.text);
      const double w = fm.horizontalAdvance(text), h = fm.ascent() + fm.descent();
      if (l.centred) {
        const QRectF rc(px - w / 2, py - h / 2, w, h);
        if (!box.contains(rc) || area(rc, texts) > 0) {
          dropped.push_back(l.text);
          continue;
        }
        texts.push_back(rc.adjusted(-1, -1, 1, 1));
        draw(text, px, py, Qt::AlignCenter);
        continue;
      }
      // (dx, dy): the label's top-left corner relative to the point.
      const std::pair<double, double> places[8] = {{gap, -h / 2},           {-gap - w, -h / 2},
                                                   {-w / 2, -gap - h},      {-w / 2, gap},
                                                   {gap * 0.7, -gap * 0.7 - h}, {-gap * 0.7 - w, -gap * 0.7 - h},
                                                   {gap * 0.7, gap * 0.7},  {-gap * 0.7 - w, gap * 0.7}};
      int best = -1;
      double best_cost = INFINITY;
      for (int k = 0; k < 8; ++k) {
        const QRectF rc(px + places[k].first, py + places[k].second, w, h);
        if (!box.contains(rc) || area(rc, texts) > 0) continue;
        const double cost = area(rc, markers);
        if (cost < best_cost) best_cost = cost, best = k;
        if (cost == 0) break;
      }
      if (best < 0) {
        dropped.push_back(l.text);
        continue;
      }
      const QRectF rc(px + places[best].first, py + places[best].second, w, h);
      texts.push_back(rc.adjusted(-1, -0.5, 1, 0.5));
      draw(text, rc.left(), rc.top(), Qt::AlignLeft | Qt::AlignTop);
    }
  return dropped;
}

}  // namespace

void draw_figure(const Figure& fig, QCustomPlot& plot, const FigureStyle& st) {
  plot.clearPlottables();
  plot.clearItems();
  plot.setBackground(Qt::white);
  const double u = units_per_pt(st), f = st.font_pt;
  // Markers and lines scale with the text: the reference is 10 pt on the screen.
  const double m = f * u / (10.0 * 96.0 / 72.0);
  const QFont label_font = text_font(st, f), tick_font = text_font(st, f - 1), title_font = text_font(st, f + 1, true),
              small_font = text_font(st, f - 1), note_font = text_font(st, f - 1, false, true);
  const double canvas_w = plot.viewport().width();
  QCPTextElement* title = named_element(plot, "title");
  if (title == nullptr && !fig.title.empty()) {
    title = new QCPTextElement(&plot, QString(), title_font);
    title->setObjectName("title");
  }
  if (title != nullptr) {
    title->setFont(title_font);
    title->setText(wrapped(fig.title, title_font, 0.94 * canvas_w - 8 * u));
    // Below the title, room for half a tick label: the y axis's top tick label is centred on the
    // axis's top end and must not reach the title.
    title->setMargins(QMargins(static_cast<int>(4 * u), static_cast<int>(3 * u), static_cast<int>(4 * u),
                               static_cast<int>(std::ceil(0.7 * (f - 1) * u))));
  }
  QCPTextElement* note = named_element(plot, "note");
  if (note == nullptr && !fig.note.empty()) {
    note = new QCPTextElement(&plot, QString(), note_font);
    note->setObjectName("note");
    note->setTextColor(QColor(60, 60, 60));
  }
  if (note != nullptr) {
    note->setFont(note_font);
    note->setText(wrapped(fig.note, note_font, 0.94 * canvas_w - 8 * u));
    note->setMargins(QMargins(static_cast<int>(4 * u), 0, static_cast<int>(4 * u), static_cast<int>(3 * u)));
  }
  int named = 0, marker_k = 0;
  double widest = 0;
  const QFontMetricsF legend_fm(small_font);
  for (const Series& s : fig.series) {
    if (!drawable(s, fig)) continue;
    const QColor color = to_qcolor(s.color);
    QCPGraph* g = plot.addGraph();
    g->setAdaptiveSampling(false);  // every point is drawn (QCustomPlot would thin a dense scatter)
    const bool line = s.style == Style::Line || s.style == Style::Dashed;
    // Points sorted by x (QCustomPlot's graphs assume it); lines keep their order, which every
    // line series gives in increasing x.
    g->setData(QVector<double>(s.x.begin(), s.x.end()), QVector<double>(s.y.begin(), s.y.end()), line);
    // A legend entry never wider than the figure: long names wrap.
    g->setName(wrapped(s.name, small_font, std::max(40.0, canvas_w - 2.2 * f * u - 24 * u)));
    const Marker mk = s.marker != Marker::Auto ? s.marker : s.name.empty() ? Marker::Disc : auto_marker(marker_k);
    const bool filled = mk == Marker::Disc || mk == Marker::Square;
    const QColor fill = filled ? color : QColor(Qt::transparent);
    const double size = std::max(2.0, s.size * m);
    switch (s.style) {
      case Style::Points:
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(shape_of(mk), QPen(color, std::max(0.6, 1.2 * m)), fill, size));
        break;
      case Style::Squares:
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, color, color, size));
        break;
      case Style::Line:
        g->setPen(QPen(color, std::max(0.75, 2.0 * m)));
        g->setScatterStyle(QCPScatterStyle(shape_of(mk), QPen(color, std::max(0.6, 1.2 * m)), fill, std::max(2.0, 6 * m)));
        break;
      case Style::Dashed:
        g->setPen(QPen(color, std::max(0.6, 1.5 * m), Qt::DashLine));
        break;
      case Style::Cells:
        g->data()->clear();  // the cells are items; the graph is the legend entry
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, color, color, std::max(3.0, 9 * m)));
        draw_cells(s, plot, m);
        break;
    }
    if (!s.name.empty() && (s.style == Style::Points || s.style == Style::Line)) ++marker_k;
    if (s.name.empty()) {
      g->removeFromLegend();
    } else {
      ++named;
      for (const QString& line : g->name().split('\n')) widest = std::max(widest, legend_fm.horizontalAdvance(line));
    }
  }
  for (QCPAxis* a : {plot.xAxis, plot.yAxis}) {
    a->setLabelFont(label_font), a->setTickLabelFont(tick_font);
    a->setLabelPadding(static_cast<int>(3 * u)), a->setTickLabelPadding(static_cast<int>(2 * u));
    a->setTickLengthIn(static_cast<int>(3 * u)), a->setSubTickLengthIn(static_cast<int>(1.5 * u));
    a->setPadding(0);
  }
  // The x axis's tick labels start below half a tick label's height, so that they never meet
  // the y axis's lowest tick label at the corner (both axes often start at the same value).
  {
    const QFontMetricsF tm(tick_font);
    plot.xAxis->setTickLabelPadding(static_cast<int>(std::ceil(0.5 * (tm.ascent() + tm.descent()))) + 1);
  }
  // Axis labels wrapped to the axes' extent (estimated before the layout: 85% of the canvas's
  // width, 60% of its height).
  plot.xAxis->setLabel(wrapped(fig.xlabel, label_font, 0.85 * canvas_w));
  plot.yAxis->setLabel(wrapped(fig.ylabel, label_font, 0.6 * plot.viewport().height()));
  if (fig.ylog) log_ticks(plot.yAxis, fig.ymin, fig.ymax);
  else {
    plot.yAxis->setScaleType(QCPAxis::stLinear);
    plot.yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    plot.yAxis->setNumberFormat("gb");
    plot.yAxis->setNumberPrecision(6);
  }
  if (fig.xlog && fig.xlog_base == 10) {
    log_ticks(plot.xAxis, fig.xmin, fig.xmax);
  } else if (fig.xlog) {
    plot.xAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    ticker->setLogBase(2);
    ticker->setSubTickCount(0);
    plot.xAxis->setTicker(ticker);
    plot.xAxis->setNumberFormat("g");
  } else {
    plot.xAxis->setScaleType(QCPAxis::stLinear);
    plot.xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    plot.xAxis->setNumberFormat("gb");
    plot.xAxis->setNumberPrecision(6);
  }
  // Automatic ticks: as many as the axis's length leaves room for at this text size.
  plot.xAxis->ticker()->setTickCount(std::clamp(static_cast<int>(canvas_w / (9 * f * u)), 3, 8));
  plot.yAxis->ticker()->setTickCount(std::clamp(static_cast<int>(plot.viewport().height() / (6 * f * u)), 3, 8));
  // Explicit ticks (category labels) replace the automatic ones on a linear axis.
  const std::pair<QCPAxis*, const std::vector<Tick>*> explicit_ticks[2] = {{plot.xAxis, &fig.xticks},
                                                                           {plot.yAxis, &fig.yticks}};
  for (const auto& [axis, ticks] : explicit_ticks) {
    if (ticks->empty() || axis->scaleType() != QCPAxis::stLinear) continue;
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    for (const Tick& k : *ticks) t->addTick(k.at, QString::fromStdString(k.label));
    axis->setTicker(t);
  }
  plot.xAxis->setRange(fig.xmin, fig.xmax);
  plot.yAxis->setRange(fig.ymin, fig.ymax);
  plot.legend->setFont(small_font);
  plot.legend->setBrush(QColor(255, 255, 255));
  plot.legend->setIconSize(static_cast<int>(2.2 * f * u), static_cast<int>(f * u));
  plot.legend->setIconTextPadding(static_cast<int>(3 * u));
  plot.legend->setBorderPen(QPen(QColor(160, 160, 160), std::max(0.5, 0.75 * u)));
  const double entry = widest + 2.2 * f * u + 3 * u + 12 * u;
  const int fit = std::max(1, static_cast<int>((canvas_w - 10 * u) / entry));
  const int columns = fig.legend_columns > 0 ? fig.legend_columns : std::min(fit, std::max(named, 1));
  plot.legend->setWrap(columns);
  plot.legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  plot.legend->setMargins(QMargins(static_cast<int>(4 * u), static_cast<int>(2 * u), static_cast<int>(4 * u), static_cast<int>(2 * u)));
  plot.legend->setMinimumMargins(QMargins(0, 0, 0, 0));
  plot.legend->setRowSpacing(0);
  plot.legend->setColumnSpacing(static_cast<int>(8 * u));
  // Each entry's text is clipped to its item: room below the text for an underscore ("err_stale"
  // lost its underscores at screen sizes) and descenders.
  for (int i = 0; i < plot.legend->itemCount(); ++i)
    if (QCPAbstractLegendItem* item = plot.legend->item(i))
      item->setMargins(QMargins(0, 0, 0, std::max(1, static_cast<int>(std::lround(0.25 * f * u)))));
  lay_out(plot, title, note, !fig.title.empty(), !fig.note.empty(), named > 0);
  plot.plotLayout()->setMargins(QMargins(static_cast<int>(3 * u), 0, static_cast<int>(6 * u), static_cast<int>(3 * u)));
  plot.plotLayout()->setRowSpacing(static_cast<int>(2 * u));
  plot.axisRect()->setAutoMargins(QCP::msAll);
  plot.axisRect()->setMinimumMargins(QMargins(static_cast<int>(4 * u), static_cast<int>(4 * u), static_cast<int>(8 * u), static_cast<int>(2 * u)));
  plot.replot(QCustomPlot::rpImmediateRefresh);  // lay out, so that labels are placed on the real axes
  const std::vector<std::string> dropped = place_labels(fig, plot, small_font, m, nullptr);
  if (!dropped.empty()) {
    // Named in the note instead (the note grows, the axes shrink: place the rest again).
    std::string names;
    for (const auto& d : dropped) names += (names.empty() ? "" : "; ") + d;
    const std::string text = (fig.note.empty() ? "" : fig.note + " ") + "Not labelled (no room): " + names + ".";
    if (note == nullptr) {
      note = new QCPTextElement(&plot, QString(), note_font);
      note->setObjectName("note");
      note->setTextColor(QColor(60, 60, 60));
      note->setMargins(QMargins(static_cast<int>(4 * u), 0, static_cast<int>(4 * u), static_cast<int>(3 * u)));
    }
    note->setText(wrapped(text, note_font, 0.94 * canvas_w - 8 * u));
    lay_out(plot, title, note, !fig.title.empty(), true, named > 0);
    plot.clearItems();
    for (const Series& s : fig.series)
      if (s.style == Style::Cells && drawable(s, fig)) draw_cells(s, plot, m);
    plot.replot(QCustomPlot::rpImmediateRefresh);
    place_labels(fig, plot, small_font, m, &dropped);
  }
}

void draw_figure(const Figure& fig, QCustomPlot& plot) { draw_figure(fig, plot, FigureStyle::screen()); }

std::string figure_svg(const Figure& fig, QCustomPlot& plot) {
  // Qt's SVG generator paints the same QCustomPlot scene as the PNG and the PDF: one
  // drawing in three formats (gridlines, framed legend, markers and text alike). The canvas
  // is in points: at 72 dpi the SVG's width and height are the page size.
  const int w = plot.width(), h = plot.height();
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  QSvgGenerator gen;
  gen.setOutputDevice(&buffer);
  gen.setSize(QSize(w, h));
  gen.setViewBox(QRect(0, 0, w, h));
  gen.setResolution(72);
  gen.setTitle(QString::fromStdString(fig.title).toHtmlEscaped());  // Qt writes it into <title> as it is
  gen.setDescription(QStringLiteral("tierlab figure"));
  QCPPainter painter;
  if (!painter.begin(&gen)) throw InputError("figure: the SVG generator could not start painting '" + fig.title + "'.");
  plot.toPainter(&painter, w, h);
  painter.end();
  return bytes.toStdString();
}

namespace {

// A paint device that paints nothing and records what would be painted: each text's box on the
// canvas and each ellipse's centre (the markers of discs and circles).
class RecordingEngine : public QPaintEngine {
 public:
  RecordingEngine() : QPaintEngine(QPaintEngine::AllFeatures) {}
  bool begin(QPaintDevice*) override { return true; }
  bool end() override { return true; }
  void updateState(const QPaintEngineState&) override {}
  void drawPixmap(const QRectF&, const QPixmap&, const QRectF&) override {}
  void drawPolygon(const QPointF*, int, PolygonDrawMode) override {}
  void drawPath(const QPainterPath&) override {}
  void drawRects(const QRectF*, int) override {}
  void drawLines(const QLineF*, int) override {}
  void drawEllipse(const QRectF& r) override { ellipses.push_back(state->transform().mapRect(r).center()); }
  void drawTextItem(const QPointF& p, const QTextItem& ti) override {
    const QFontMetricsF fm(ti.font());
    const QString text = ti.text();
    const QRectF r(p.x(), p.y() - fm.ascent(), fm.horizontalAdvance(text), fm.ascent() + fm.descent());
    const QRectF on = state->transform().mapRect(r);
    texts.push_back({text.toStdString(), on.left(), on.top(), on.right(), on.bottom()});
  }
  Type type() const override { return QPaintEngine::User; }
  std::vector<TextBox> texts;
  std::vector<QPointF> ellipses;
};

class RecordingDevice : public QPaintDevice {
 public:
  RecordingDevice(int w, int h) : w_(w), h_(h) {}
  QPaintEngine* paintEngine() const override { return &engine; }
  mutable RecordingEngine engine;

 protected:
  int metric(PaintDeviceMetric m) const override {
    switch (m) {
      case PdmWidth: return w_;
      case PdmHeight: return h_;
      case PdmWidthMM: return static_cast<int>(w_ * 25.4 / 72);
      case PdmHeightMM: return static_cast<int>(h_ * 25.4 / 72);
      case PdmNumColors: return INT_MAX;
      case PdmDepth: return 32;
      case PdmDpiX: case PdmDpiY: case PdmPhysicalDpiX: case PdmPhysicalDpiY: return 72;
      case PdmDevicePixelRatio: return 1;
      case PdmDevicePixelRatioScaled: return static_cast<int>(QPaintDevice::devicePixelRatioFScale());
      default: return 0;
    }
  }

 private:
  int w_, h_;
};

// The plot of `fig` at `style`'s canvas (the height resolved when auto).
void drawn(const Figure& fig, const FigureStyle& style, QCustomPlot& plot) {
  style.validate("figure style");
  ensure_app();
  const int w = static_cast<int>(std::lround(style.width_pt));
  int h = style.height_pt > 0 ? static_cast<int>(std::lround(style.height_pt)) : static_cast<int>(std::lround(0.9 * style.width_pt));
  // A hidden widget gets its resize event only when shown: the viewport (what QCustomPlot lays
  // out in) is set here.
  plot.resize(w, h);
  plot.setViewport(QRect(0, 0, w, h));
  draw_figure(fig, plot, style);
  if (style.height_pt == 0) {
    // The axes' box 0.62 x the width; the title, legend and note as tall as they need.
    const int extra = h - plot.axisRect()->height();
    h = std::max(72, extra + static_cast<int>(std::lround(0.62 * style.width_pt)));
    plot.resize(w, h);
    plot.setViewport(QRect(0, 0, w, h));
    draw_figure(fig, plot, style);
  }
  plot.replot();
}

}  // namespace

CanvasSize figure_canvas(const Figure& fig, const FigureStyle& style) {
  style.validate("figure style");
  ensure_app();  // before the first widget
  QCustomPlot plot;
  drawn(fig, style, plot);
  return {static_cast<double>(plot.width()), static_cast<double>(plot.height())};
}

namespace {

// What painting `fig` at `style` paints, recorded (nothing drawn); `axes`: the axis rect.
struct Recorded {
  std::vector<TextBox> texts;
  std::vector<QPointF> ellipses;
  QRectF axes;
};

Recorded record(const Figure& fig, const FigureStyle& style) {
  style.validate("figure style");
  ensure_app();  // before the first widget
  QCustomPlot plot;
  drawn(fig, style, plot);
  RecordingDevice dev(plot.width(), plot.height());
  QCPPainter painter;
  if (!painter.begin(&dev)) throw InputError("figure: cannot record the painting of '" + fig.title + "'.");
  plot.toPainter(&painter, plot.width(), plot.height());
  painter.end();
  return {std::move(dev.engine.texts), std::move(dev.engine.ellipses), QRectF(plot.axisRect()->rect())};
}

}  // namespace

std::vector<TextBox> figure_text_boxes(const Figure& fig, const FigureStyle& style) {
  std::vector<TextBox> out;
  for (const TextBox& t : record(fig, style).texts)
    if (t.text.find_first_not_of(' ') != std::string::npos) out.push_back(t);
  return out;
}

std::size_t painted_markers(const Figure& fig_in, const FigureStyle& style) {
  // Every point marker made a disc (the recorder counts ellipses); the legend's icons are
  // outside the axes and not counted.
  Figure fig = fig_in;
  for (Series& s : fig.series)
    if (s.style == Style::Points || s.style == Style::Line || s.style == Style::Squares) s.marker = Marker::Disc, s.style = s.style == Style::Squares ? Style::Points : s.style;
  const Recorded r = record(fig, style);
  const QRectF box = r.axes.adjusted(-1, -1, 1, 1);
  return static_cast<std::size_t>(std::count_if(r.ellipses.begin(), r.ellipses.end(), [&](const QPointF& c) { return box.contains(c); }));
}

std::vector<std::string> layout_faults(const std::vector<TextBox>& boxes, CanvasSize size, double slack) {
  std::vector<std::string> out;
  for (const TextBox& b : boxes)
    if (b.x0 < -slack || b.y0 < -slack || b.x1 > size.width + slack || b.y1 > size.height + slack) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " at [%.1f, %.1f] x [%.1f, %.1f] is outside the %.0f x %.0f pt canvas", b.x0, b.x1,
                    b.y0, b.y1, size.width, size.height);
      out.push_back("'" + b.text + "'" + buf);
    }
  for (std::size_t i = 0; i < boxes.size(); ++i)
    for (std::size_t j = i + 1; j < boxes.size(); ++j) {
      const TextBox &a = boxes[i], &b = boxes[j];
      const double ox = std::min(a.x1, b.x1) - std::max(a.x0, b.x0), oy = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
      if (ox > slack && oy > slack) out.push_back("'" + a.text + "' overlaps '" + b.text + "'");
    }
  return out;
}

std::vector<std::string> render_figure(const Figure& fig, const std::string& base, const FigureStyle& style) {
  auto wants = [&](const char* f) { return std::find(style.formats.begin(), style.formats.end(), f) != style.formats.end(); };
  for (const auto& f : style.formats)
    if (f != "png" && f != "pdf" && f != "svg")
      throw InputError("figure: unknown format '" + f + "' for '" + base + "' (valid: png, pdf, svg).");
  style.validate("figure style");
  ensure_app();  // before the first widget
  QCustomPlot plot;
  drawn(fig, style, plot);
  const int w = plot.width(), h = plot.height();
  std::vector<std::string> files;
  // Each file is written under a temporary name and renamed when complete, so a figure is
  // either the new one or absent, never half written.
  if (wants("png")) {
    const std::string path = base + ".png", tmp = temp_beside(path);
    if (!plot.savePng(QString::fromStdString(tmp), w, h, style.dpi / 72.0, -1, style.dpi, QCP::ruDotsPerInch)) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw InputError("figure: cannot write '" + path + "'.");
    }
    publish(tmp, path);
    files.push_back(path);
  }
  if (wants("pdf")) {
    const std::string path = base + ".pdf", tmp = temp_beside(path);
    if (!plot.savePdf(QString::fromStdString(tmp), w, h)) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw InputError("figure: cannot write '" + path + "'.");
    }
    publish(tmp, path);
    files.push_back(path);
  }
  if (wants("svg")) {
    write_file_atomically(base + ".svg", figure_svg(fig, plot));
    files.push_back(base + ".svg");
  }
  return files;
}

std::vector<std::string> render_figure(const Figure& fig, const std::string& base, const std::vector<std::string>& formats) {
  FigureStyle style;
  style.formats = formats;
  return render_figure(fig, base, style);
}

void export_figure(const Figure& fig, const std::string& path, const FigureStyle& style_in) {
  const std::string ext = extension(path);
  if (ext == "csv") {
    write_file_atomically(path, figure_csv(fig));
    return;
  }
  if (ext != "png" && ext != "pdf" && ext != "svg")
    throw InputError("export: unknown file type '" + path + "' (valid extensions: .png, .pdf, .svg, .csv).");
  const std::string base = path.substr(0, path.size() - ext.size() - 1);
  const std::string want = base + "." + ext;
  FigureStyle style = style_in;
  style.formats = {ext};
  render_figure(fig, base, style);
  if (want != path) std::filesystem::rename(want, path);  // upper-case extension given
}

}  // namespace tierlab
