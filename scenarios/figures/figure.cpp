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

// Renames the finished temporary file over `path`; removes it and throws on failure.
void publish(const std::string& tmp, const std::string& path) {
  std::error_code ec;
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

void draw_figure(const Figure& fig, QCustomPlot& plot) {
  plot.clearPlottables();
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
    }
    if (s.name.empty()) g->removeFromLegend();
  }
  plot.xAxis->setLabel(QString::fromStdString(fig.xlabel));
  plot.yAxis->setLabel(QString::fromStdString(fig.ylabel));
  for (QCPAxis* a : {plot.xAxis, plot.yAxis}) a->setLabelFont(label_font), a->setTickLabelFont(tick_font);
  // Headroom above the data for the legend (top right).
  int named = 0;
  for (const Series& se : fig.series) named += se.name.empty() ? 0 : 1;
  double ymax = fig.ymax;
  if (fig.ylog) ymax *= std::pow(fig.ymax / fig.ymin, 0.09 * named);
  else ymax += (fig.ymax - fig.ymin) * 0.09 * named;
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
  plot.legend->setVisible(named > 0);
  plot.legend->setFont(QFont(kFont, 10));
  plot.legend->setBrush(QColor(255, 255, 255, 220));
  plot.axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
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
