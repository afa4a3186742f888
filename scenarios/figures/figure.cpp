#include "scenarios/figures/figure.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <QApplication>
#include <QBuffer>
#include <QSvgGenerator>
#include <QFont>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "model/error.hpp"
#include "model/paths.hpp"
#include "scenarios/run/atomic_file.hpp"
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

// A temporary name beside `path` for an atomic write (renamed over it when complete).
std::string temp_beside(const std::string& path) { return path + ".tmp-" + std::to_string(::getpid()); }

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

// The legend in a row of its own below the axes (never over the data), `columns` entries a
// row; out of the layout when nothing is named (an empty row would still take space).
void place_legend(QCustomPlot& plot, int named, int columns) {
  QCPLayoutGrid* grid = plot.plotLayout();
  QCPLegend* legend = plot.legend;
  if (legend->layout() != nullptr && legend->layout() != grid) {
    legend->layout()->take(legend);
    plot.axisRect()->insetLayout()->simplify();
  }
  if (named == 0) {
    if (legend->layout() == grid) {
      grid->take(legend);
      grid->simplify();
    }
    legend->setVisible(false);
    return;
  }
  if (legend->layout() != grid) {
    grid->addElement(grid->rowCount(), 0, legend);
    grid->setRowStretchFactor(grid->rowCount() - 1, 0.001);
  }
  legend->setVisible(true);
  grid->setMargins(QMargins(4, 0, 4, 4));  // the legend's frame inside the canvas
  legend->setWrap(columns);
  legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  legend->setMargins(QMargins(6, 2, 6, 2));
  legend->setMinimumMargins(QMargins(0, 0, 0, 0));
}

// Every Cells series's rectangles as items (touching cells: a heatmap); the series itself
// becomes an empty graph that carries the legend entry (a filled square).
void draw_cells(const Series& s, QCustomPlot& plot) {
  const QColor color = to_qcolor(s.color);
  for (std::size_t i = 0; i < s.x_lo.size() && i < s.x_hi.size() && i < s.y_lo.size() && i < s.y_hi.size(); ++i) {
    auto* r = new QCPItemRect(&plot);
    r->topLeft->setCoords(s.x_lo[i], s.y_hi[i]);
    r->bottomRight->setCoords(s.x_hi[i], s.y_lo[i]);
    r->setPen(QPen(QColor(255, 255, 255), 1));
    r->setBrush(QBrush(color));
    r->setLayer("grid");  // under the graphs (boundaries), over the background
  }
}

}  // namespace

void draw_figure(const Figure& fig, QCustomPlot& plot) {
  plot.clearPlottables();
  plot.clearItems();
  plot.setBackground(Qt::white);
  const QFont label_font(kFont, 12), tick_font(kFont, 11), title_font(kFont, 13, QFont::Bold);
  QCPTextElement* title = nullptr;
  if (plot.plotLayout()->rowCount() > 1) title = qobject_cast<QCPTextElement*>(plot.plotLayout()->element(0, 0));
  if (title == nullptr) {
    plot.plotLayout()->insertRow(0);
    title = new QCPTextElement(&plot, QString(), title_font);
    plot.plotLayout()->addElement(0, 0, title);
  }
  title->setText(QString::fromStdString(fig.title));
  title->setFont(title_font);
  for (const Series& s : fig.series) {
    const QColor color = to_qcolor(s.color);
    QCPGraph* g = plot.addGraph();
    g->setData(QVector<double>(s.x.begin(), s.x.end()), QVector<double>(s.y.begin(), s.y.end()), true);
    g->setName(QString::fromStdString(s.name));
    switch (s.style) {
      case Style::Points:
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, s.size));
        break;
      case Style::Squares:
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, color, color, s.size));
        break;
      case Style::Line:
        g->setPen(QPen(color, 2.5));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, color, 6));
        break;
      case Style::Dashed:
        g->setPen(QPen(color, 2, Qt::DashLine));
        break;
      case Style::Cells:
        g->data()->clear();  // the cells are items; the graph is the legend entry
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, color, color, 11));
        draw_cells(s, plot);
        break;
    }
    if (s.name.empty()) g->removeFromLegend();
  }
  plot.xAxis->setLabel(QString::fromStdString(fig.xlabel));
  plot.yAxis->setLabel(QString::fromStdString(fig.ylabel));
  for (QCPAxis* a : {plot.xAxis, plot.yAxis}) a->setLabelFont(label_font), a->setTickLabelFont(tick_font);
  // The axes end where the figure says: the legend has a row of its own below them.
  int named = 0;
  std::size_t longest = 0;
  for (const Series& se : fig.series)
    if (!se.name.empty()) ++named, longest = std::max(longest, se.name.size());
  const double ymax = fig.ymax;
  if (fig.ylog && fig.ymin > 0 && std::log10(ymax / fig.ymin) < 3) {
    // Less than three decades: ticks at 1, 2 and 5 times the powers of ten, labelled as
    // plain numbers (a decade ticker would label 3, 5 and 8 as "3.10^0" ... or only decades).
    plot.yAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    for (int e = static_cast<int>(std::floor(std::log10(fig.ymin))) - 1; e <= static_cast<int>(std::ceil(std::log10(ymax))); ++e)
      for (const double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (v >= fig.ymin && v <= ymax) t->addTick(v, QString::number(v, 'g', 6));
      }
    plot.yAxis->setTicker(t);
  } else if (fig.ylog) {
    plot.yAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    plot.yAxis->setTicker(ticker);
    plot.yAxis->setNumberFormat("eb");
    plot.yAxis->setNumberPrecision(0);
  } else {
    plot.yAxis->setScaleType(QCPAxis::stLinear);
    plot.yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    plot.yAxis->setNumberFormat("gb");
    plot.yAxis->setNumberPrecision(6);
  }
  if (fig.xlog) {
    plot.xAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    ticker->setLogBase(2);
    plot.xAxis->setTicker(ticker);
    plot.xAxis->setNumberFormat("g");
  } else {
    plot.xAxis->setScaleType(QCPAxis::stLinear);
    plot.xAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    plot.xAxis->setNumberFormat("gb");
    plot.xAxis->setNumberPrecision(6);
  }
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
  plot.yAxis->setRange(fig.ymin, ymax);
  // Labels: those at one point joined ("a, b"); each put at the first of four places beside
  // its point (right-above, right-below, left-above, left-below) that overlaps no label
  // placed before and stays on the axes, else the least overlapping one. Sizes are
  // estimated on a 760 x 420 px axis rect (9 pt: about 6 px a character, 13 px a line).
  std::vector<Label> labels;
  for (const Label& l : fig.labels) {
    auto same = std::find_if(labels.begin(), labels.end(), [&](const Label& k) { return k.x == l.x && k.y == l.y; });
    if (same != labels.end()) same->text += ", " + l.text;
    else labels.push_back(l);
  }
  auto frac = [](double v, double lo, double hi, bool log) {
    return log && lo > 0 && v > 0 ? std::log(v / lo) / std::log(hi / lo) : (v - lo) / (hi - lo);
  };
  constexpr double kW = 760, kH = 420;
  std::vector<QRectF> placed;
  for (const Label& l : labels) {
    const double px = kW * frac(l.x, fig.xmin, fig.xmax, fig.xlog), py = kH * frac(l.y, fig.ymin, ymax, fig.ylog);
    const double w = 6.0 * static_cast<double>(l.text.size()) + 5, h = 13;
    int best = 0;
    double best_cost = INFINITY;
    for (int k = 0; k < 4; ++k) {
      const bool left = k >= 2, below = k % 2 == 1;
      const QRectF r(left ? px - 5 - w : px + 5, below ? py - 3 - h : py + 3, w, h);
      double cost = (r.left() < 0 || r.right() > kW || r.top() < 0 || r.bottom() > kH + 20) ? 1e6 : 0;
      for (const QRectF& o : placed) {
        const QRectF x = r.intersected(o);
        cost += x.width() * x.height();
      }
      if (cost < best_cost) best_cost = cost, best = k;
      if (cost == 0) break;
    }
    const bool left = best >= 2, below = best % 2 == 1;
    placed.push_back(QRectF(left ? px - 5 - w : px + 5, below ? py - 3 - h : py + 3, w, h));
    auto* t = new QCPItemText(&plot);
    t->position->setCoords(l.x, l.y);
    t->setPositionAlignment((left ? Qt::AlignRight : Qt::AlignLeft) | (below ? Qt::AlignTop : Qt::AlignBottom));
    t->setPadding(QMargins(left ? 0 : 5, below ? 3 : 0, left ? 5 : 0, below ? 0 : 3));
    t->setFont(QFont(kFont, 9));
    t->setText(QString::fromStdString(l.text));
    t->setClipToAxisRect(false);
  }
  plot.legend->setFont(QFont(kFont, 10));
  plot.legend->setBrush(QColor(255, 255, 255));
  // About 6.5 px a character at 10 pt, 45 px for the marker and gaps, in a 900 px figure (or
  // the window's plot): as many columns as fit.
  const double width = std::max(plot.width(), 600);
  const int columns = std::clamp(static_cast<int>((width - 20) / (6.5 * static_cast<double>(longest) + 45)), 1, 4);
  place_legend(plot, named, fig.legend_columns > 0 ? fig.legend_columns : std::min(columns, std::max(named, 1)));
}

std::string figure_svg(const Figure& fig, QCustomPlot& plot) {
  // Qt's SVG generator paints the same QCustomPlot scene as the PNG and the PDF: one
  // drawing in three formats (gridlines, framed legend, markers and text alike).
  QByteArray bytes;
  QBuffer buffer(&bytes);
  buffer.open(QIODevice::WriteOnly);
  QSvgGenerator gen;
  gen.setOutputDevice(&buffer);
  gen.setSize(QSize(kFigureWidth, kFigureHeight));
  gen.setViewBox(QRect(0, 0, kFigureWidth, kFigureHeight));
  gen.setResolution(96);  // as the offscreen screen the PNG is drawn for: same font sizes
  gen.setTitle(QString::fromStdString(fig.title).toHtmlEscaped());  // Qt writes it into <title> as it is
  gen.setDescription(QStringLiteral("tierlab figure"));
  QCPPainter painter;
  if (!painter.begin(&gen)) throw InputError("figure: the SVG generator could not start painting '" + fig.title + "'.");
  plot.toPainter(&painter, kFigureWidth, kFigureHeight);
  painter.end();
  return bytes.toStdString();
}

std::vector<std::string> render_figure(const Figure& fig, const std::string& base, const std::vector<std::string>& formats) {
  auto wants = [&](const char* f) { return std::find(formats.begin(), formats.end(), f) != formats.end(); };
  for (const auto& f : formats)
    if (f != "png" && f != "pdf" && f != "svg")
      throw InputError("figure: unknown format '" + f + "' for '" + base + "' (valid: png, pdf, svg).");
  ensure_app();
  QCustomPlot plot;
  plot.resize(kFigureWidth, kFigureHeight);
  draw_figure(fig, plot);
  plot.replot();
  std::vector<std::string> files;
  // Each file is written under a temporary name and renamed when complete, so a figure is
  // either the new one or absent, never half written.
  if (wants("png")) {
    const std::string path = base + ".png", tmp = temp_beside(path);
    if (!plot.savePng(QString::fromStdString(tmp), kFigureWidth, kFigureHeight, 2.0, -1, 96, QCP::ruDotsPerInch)) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw InputError("figure: cannot write '" + path + "'.");
    }
    publish(tmp, path);
    files.push_back(path);
  }
  if (wants("pdf")) {
    const std::string path = base + ".pdf", tmp = temp_beside(path);
    if (!plot.savePdf(QString::fromStdString(tmp), kFigureWidth, kFigureHeight)) {
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

void export_figure(const Figure& fig, const std::string& path) {
  const std::string ext = extension(path);
  if (ext == "csv") {
    write_file_atomically(path, figure_csv(fig));
    return;
  }
  if (ext != "png" && ext != "pdf" && ext != "svg")
    throw InputError("export: unknown file type '" + path + "' (valid extensions: .png, .pdf, .svg, .csv).");
  const std::string base = path.substr(0, path.size() - ext.size() - 1);
  const std::string want = base + "." + ext;
  render_figure(fig, base, {ext});
  if (want != path) std::filesystem::rename(want, path);  // upper-case extension given
}

}  // namespace tierlab
