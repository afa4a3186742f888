#include "scenarios/figures/figure.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <QApplication>
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

std::string xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string hex(const Rgb& c) { return to_qcolor(c).name().toStdString(); }

std::string opacity(const Rgb& c) {
  return c.a >= 255 ? std::string() : " fill-opacity=\"" + std::to_string(c.a / 255.0) + "\"";
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
  if (fig.ylog) {
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

std::string figure_svg(const Figure& fig, const QCustomPlot& plot) {
  // The same ranges and the ticks QCustomPlot chose, drawn as vector primitives in a fixed
  // layout (margins for the title, the tick labels and the axis labels).
  const int W = kFigureWidth, H = kFigureHeight;
  const double xmin = plot.xAxis->range().lower, xmax = plot.xAxis->range().upper;
  const double ymin = plot.yAxis->range().lower, ymax = plot.yAxis->range().upper;
  const QRect r(115, 48, W - 115 - 20, H - 48 - 72);
  auto px = [&](double x) {
    if (fig.xlog) return r.left() + std::log(x / xmin) / std::log(xmax / xmin) * r.width();
    return r.left() + (x - xmin) / (xmax - xmin) * r.width();
  };
  auto py = [&](double y) {
    if (fig.ylog) return r.bottom() - std::log(y / ymin) / std::log(ymax / ymin) * r.height();
    return r.bottom() - (y - ymin) / (ymax - ymin) * r.height();
  };
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << ' ' << H << "\" font-family=\"DejaVu Sans, sans-serif\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"24\" font-size=\"17\" font-weight=\"bold\" text-anchor=\"middle\">" << xml(fig.title) << "</text>\n";
  s << "<defs><clipPath id=\"plot\"><rect x=\"" << r.left() << "\" y=\"" << r.top() << "\" width=\"" << r.width()
    << "\" height=\"" << r.height() << "\"/></clipPath></defs>\n";
  const QVector<double> xt = plot.xAxis->tickVector(), yt = plot.yAxis->tickVector();
  const QVector<QString> xl = plot.xAxis->tickVectorLabels(), yl = plot.yAxis->tickVectorLabels();
  for (int i = 0; i < xt.size(); ++i) {
    const double x = px(xt[i]);
    s << "<line x1=\"" << x << "\" y1=\"" << r.bottom() << "\" x2=\"" << x << "\" y2=\"" << r.bottom() - 6 << "\" stroke=\"black\"/>"
      << "<text x=\"" << x << "\" y=\"" << r.bottom() + 20 << "\" font-size=\"14\" text-anchor=\"middle\">" << xml(xl[i].toStdString()) << "</text>\n";
  }
  for (int i = 0; i < yt.size(); ++i) {
    const double y = py(yt[i]);
    s << "<line x1=\"" << r.left() << "\" y1=\"" << y << "\" x2=\"" << r.left() + 6 << "\" y2=\"" << y << "\" stroke=\"black\"/>"
      << "<text x=\"" << r.left() - 6 << "\" y=\"" << y + 5 << "\" font-size=\"14\" text-anchor=\"end\">" << xml(yl[i].toStdString()) << "</text>\n";
  }
  s << "<rect x=\"" << r.left() << "\" y=\"" << r.top() << "\" width=\"" << r.width() << "\" height=\"" << r.height()
    << "\" fill=\"none\" stroke=\"black\"/>\n";
  s << "<text x=\"" << r.center().x() << "\" y=\"" << r.bottom() + 46 << "\" font-size=\"16\" text-anchor=\"middle\">" << xml(fig.xlabel) << "</text>\n";
  s << "<text transform=\"translate(" << r.left() - 95 << ',' << r.center().y() << ") rotate(-90)\" font-size=\"16\" text-anchor=\"middle\">"
    << xml(fig.ylabel) << "</text>\n";
  s << "<g clip-path=\"url(#plot)\">\n";
  for (const Series& se : fig.series) {
    const std::string c = hex(se.color);
    if (se.style == Style::Line || se.style == Style::Dashed) {
      s << "<polyline fill=\"none\" stroke=\"" << c << "\" stroke-width=\"" << (se.style == Style::Line ? 2.5 : 2) << '"'
        << (se.style == Style::Dashed ? " stroke-dasharray=\"8,5\"" : "") << " points=\"";
      for (std::size_t i = 0; i < se.x.size(); ++i) s << px(se.x[i]) << ',' << py(se.y[i]) << ' ';
      s << "\"/>\n";
    }
    for (std::size_t i = 0; i < se.x.size(); ++i) {
      if (se.style == Style::Points || se.style == Style::Line)
        s << "<circle cx=\"" << px(se.x[i]) << "\" cy=\"" << py(se.y[i]) << "\" r=\"" << (se.style == Style::Line ? 3 : se.size / 2)
          << "\" fill=\"" << c << '"' << opacity(se.color) << "/>\n";
      else if (se.style == Style::Squares)
        s << "<rect x=\"" << px(se.x[i]) - se.size / 2 << "\" y=\"" << py(se.y[i]) - se.size / 2 << "\" width=\"" << se.size
          << "\" height=\"" << se.size << "\" fill=\"" << c << '"' << opacity(se.color) << "/>\n";
    }
  }
  s << "</g>\n";
  int ly = r.top() + 18;
  const int lx = r.right() - 330;
  for (const Series& se : fig.series) {
    if (se.name.empty()) continue;
    const std::string c = hex(se.color);
    if (se.style == Style::Line || se.style == Style::Dashed)
      s << "<line x1=\"" << lx << "\" y1=\"" << ly - 5 << "\" x2=\"" << lx + 24 << "\" y2=\"" << ly - 5 << "\" stroke=\"" << c
        << "\" stroke-width=\"2\"" << (se.style == Style::Dashed ? " stroke-dasharray=\"6,4\"" : "") << "/>";
    else
      s << "<rect x=\"" << lx + 6 << "\" y=\"" << ly - 11 << "\" width=\"12\" height=\"12\" fill=\"" << c << "\"/>";
    s << "<text x=\"" << lx + 32 << "\" y=\"" << ly << "\" font-size=\"13\">" << xml(se.name) << "</text>\n";
    ly += 20;
  }
  s << "</svg>\n";
  return s.str();
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
  if (wants("png")) {
    if (!plot.savePng(QString::fromStdString(base + ".png"), kFigureWidth, kFigureHeight, 2.0))
      throw InputError("figure: cannot write '" + base + ".png'.");
    files.push_back(base + ".png");
  }
  if (wants("pdf")) {
    if (!plot.savePdf(QString::fromStdString(base + ".pdf"), kFigureWidth, kFigureHeight))
      throw InputError("figure: cannot write '" + base + ".pdf'.");
    files.push_back(base + ".pdf");
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
