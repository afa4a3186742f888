#include "scenarios/figures/figures.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <QApplication>
#include <QFont>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/error.hpp"
#include "scenarios/atomic_file.hpp"

namespace tierlab {

namespace {

constexpr int kWidth = 900, kHeight = 600;
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

enum class Style { Points, Line, Dashed, Squares };

struct Series {
  std::string name;  // empty: not in the legend
  QColor color;
  Style style = Style::Points;
  std::vector<double> x, y;
  double size = 7;
};

struct Figure {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  double xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  bool xlog = false;  // logarithmic x axis
  bool ylog = false;  // logarithmic y axis
};

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

std::string hex(const QColor& c) { return c.name().toStdString(); }

// Renders the figure: PNG and PDF through QCustomPlot, SVG from the same layout.
std::vector<std::string> render(Figure fig, const std::string& base) {
  ensure_app();
  QCustomPlot plot;
  plot.resize(kWidth, kHeight);
  plot.setBackground(Qt::white);
  const QFont label_font(kFont, 12), tick_font(kFont, 11), title_font(kFont, 13, QFont::Bold);
  plot.plotLayout()->insertRow(0);
  auto* title = new QCPTextElement(&plot, QString::fromStdString(fig.title), title_font);
  plot.plotLayout()->addElement(0, 0, title);
  for (const Series& s : fig.series) {
    QCPGraph* g = plot.addGraph();
    g->setData(QVector<double>(s.x.begin(), s.x.end()), QVector<double>(s.y.begin(), s.y.end()), true);
    g->setName(QString::fromStdString(s.name));
    switch (s.style) {
      case Style::Points:
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, s.color, s.color, s.size));
        break;
      case Style::Squares:
        g->setLineStyle(QCPGraph::lsNone);
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, s.color, s.color, s.size));
        break;
      case Style::Line:
        g->setPen(QPen(s.color, 2.5));
        g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, s.color, s.color, 6));
        break;
      case Style::Dashed:
        g->setPen(QPen(s.color, 2, Qt::DashLine));
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
  if (fig.ylog) fig.ymax *= std::pow(fig.ymax / fig.ymin, 0.09 * named);
  else fig.ymax += (fig.ymax - fig.ymin) * 0.09 * named;
  if (fig.ylog) {
    plot.yAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    plot.yAxis->setTicker(ticker);
    plot.yAxis->setNumberFormat("eb");
    plot.yAxis->setNumberPrecision(0);
  }
  if (fig.xlog) {
    plot.xAxis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    ticker->setLogBase(2);
    plot.xAxis->setTicker(ticker);
    plot.xAxis->setNumberFormat("g");
  }
  plot.xAxis->setRange(fig.xmin, fig.xmax);
  plot.yAxis->setRange(fig.ymin, fig.ymax);
  plot.legend->setVisible(true);
  plot.legend->setFont(QFont(kFont, 10));
  plot.legend->setBrush(QColor(255, 255, 255, 220));
  plot.axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
  plot.replot();

  std::vector<std::string> files;
  const QString png = QString::fromStdString(base + ".png"), pdf = QString::fromStdString(base + ".pdf");
  if (!plot.savePng(png, kWidth, kHeight, 2.0)) throw InputError("figure: cannot write '" + base + ".png'.");
  files.push_back(base + ".png");
  if (!plot.savePdf(pdf, kWidth, kHeight)) throw InputError("figure: cannot write '" + base + ".pdf'.");
  files.push_back(base + ".pdf");

  // SVG: the same ranges and the ticks QCustomPlot chose, drawn as vector primitives in a
  // fixed layout (margins for the title, the tick labels and the axis labels).
  const QRect r(115, 48, kWidth - 115 - 20, kHeight - 48 - 72);
  auto px = [&](double x) {
    if (fig.xlog) return r.left() + std::log(x / fig.xmin) / std::log(fig.xmax / fig.xmin) * r.width();
    return r.left() + (x - fig.xmin) / (fig.xmax - fig.xmin) * r.width();
  };
  auto py = [&](double y) {
    if (fig.ylog) return r.bottom() - std::log(y / fig.ymin) / std::log(fig.ymax / fig.ymin) * r.height();
    return r.bottom() - (y - fig.ymin) / (fig.ymax - fig.ymin) * r.height();
  };
  std::ostringstream s;
  s << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth
    << "\" height=\"" << kHeight << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" font-family=\"DejaVu Sans, sans-serif\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << kWidth / 2 << "\" y=\"24\" font-size=\"17\" font-weight=\"bold\" text-anchor=\"middle\">" << xml(fig.title) << "</text>\n";
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
          << "\" fill=\"" << c << "\"/>\n";
      else if (se.style == Style::Squares)
        s << "<rect x=\"" << px(se.x[i]) - se.size / 2 << "\" y=\"" << py(se.y[i]) - se.size / 2 << "\" width=\"" << se.size
          << "\" height=\"" << se.size << "\" fill=\"" << c << "\"/>\n";
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
  write_file_atomically(base + ".svg", s.str());
  files.push_back(base + ".svg");
  return files;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("figure: the table '" + path + "' is missing; run `tierlab run` first.");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("figure: the table '" + path + "' is not valid JSON (" + e.what() + ").");
  }
}

// heads.csv: the columns by name.
std::map<std::string, std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("figure: the table '" + path + "' is missing; run `tierlab run` first.");
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  {
    std::stringstream ss(line);
    std::string x;
    while (std::getline(ss, x, ',')) names.push_back(x);
  }
  std::map<std::string, std::vector<std::string>> cols;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string x;
    for (std::size_t i = 0; i < names.size() && std::getline(ss, x, ','); ++i) cols[names[i]].push_back(x);
  }
  return cols;
}

double val(const nlohmann::json& j, const char* k) {
  return j.contains(k) && !j[k].is_null() ? j[k].get<double>() : std::nan("");
}

const QColor kPalette[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(214, 39, 40),
                           QColor(148, 103, 189), QColor(140, 86, 75)};

void pad_range(double& lo, double& hi, double frac) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = -1, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const double p = (hi - lo) * frac;
  lo -= p, hi += p;
}

std::string fmt(double v, const char* f = "%.3g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return std::isfinite(v) ? b : "n/a";
}

}  // namespace

std::vector<std::string> render_figures(const std::string& dir) {
  namespace fs = std::filesystem;
  const nlohmann::json in = read_json(dir + "/tables/interior.json");
  fs::create_directories(dir + "/figures");
  std::vector<std::string> files;
  const std::string verdict = in.value("queries", std::string("decode"));

  // 1. interior advantage vs dominated share, per cell.
  {
    Figure f;
    f.title = "Interior advantage vs dominated share (B = " + fmt(val(in, "primary_budget")) + "): rho = " +
              fmt(val(in, "rho"), "%.2f") + " [" + fmt(val(in, "ci_lo"), "%.2f") + ", " + fmt(val(in, "ci_hi"), "%.2f") +
              "], n = " + std::to_string(in["n_cells"].get<int>());
    f.xlabel = "dominated share (fraction of the cell's heads with R_h(2-bit) >= 1)";
    f.ylabel = "median over heads of A (" + verdict + " queries)";
    std::map<std::string, Series> by;
    double ylo = INFINITY, yhi = -INFINITY;
    for (const auto& p : in["points"]) {
      const double x = val(p, "dominated_share"), y = val(p, "A");
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      Series& s = by[p["preset"].get<std::string>()];
      s.x.push_back(x), s.y.push_back(y);
      ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
    int k = 0;
    for (auto& [name, s] : by) {
      s.name = name;
      s.color = kPalette[k++ % 6];
      s.size = 10;
      f.series.push_back(s);
    }
    ylo = std::min(ylo, 0.0), yhi = std::max(yhi, 0.0);
    pad_range(ylo, yhi, 0.12);
    f.xmin = -0.05, f.xmax = 1.05, f.ymin = ylo, f.ymax = yhi;
    f.series.push_back({"", QColor(120, 120, 120), Style::Dashed, {-1, 2}, {0, 0}, 1});
    for (auto& x : render(f, dir + "/figures/interior_vs_dominated")) files.push_back(x);
  }

  // 2. per-head advantage vs budget.
  {
    const auto cols = read_csv(dir + "/tables/heads.csv");
    Figure f;
    f.title = "Per-head interior advantage vs budget";
    f.xlabel = "budget B (bits per key element)";
    f.ylabel = "interior advantage A (" + verdict + " queries)";
    Series pts{"heads (one point per head and cell)", QColor(31, 119, 180, 90), Style::Points, {}, {}, 6};
    const auto& bs = cols.at("budget");
    const auto& as = cols.at("A");
    std::vector<double> budgets;
    for (const auto& b : in["budgets"]) budgets.push_back(b["budget"].get<double>());
    double bspan = budgets.size() > 1 ? (*std::max_element(budgets.begin(), budgets.end()) - *std::min_element(budgets.begin(), budgets.end())) : 1;
    double ylo = 0, yhi = 1;
    for (std::size_t i = 0; i < bs.size() && i < as.size(); ++i) {
      const double a = std::strtod(as[i].c_str(), nullptr), b = std::strtod(bs[i].c_str(), nullptr);
      if (!std::isfinite(a)) continue;
      pts.x.push_back(b + (static_cast<double>(i % 9) - 4) * 0.006 * bspan);  // deterministic jitter
      pts.y.push_back(a);
    }
    Series mean{"median over heads", QColor(214, 39, 40), Style::Line, {}, {}, 6};
    for (const auto& b : in["budgets"])
      if (std::isfinite(val(b, "median_A_heads"))) mean.x.push_back(val(b, "budget")), mean.y.push_back(val(b, "median_A_heads"));
    // A is unbounded below (err(M*) >> the endpoints): clip the axis at the 5th percentile.
    std::vector<double> sorted = pts.y;
    std::sort(sorted.begin(), sorted.end());
    int below = 0;
    if (!sorted.empty()) {
      const double p5 = sorted[sorted.size() / 20];
      ylo = std::min(0.0, std::max(p5, -2.0));
      for (double& y : pts.y)
        if (y < ylo) y = ylo, ++below;
    }
    if (below > 0) f.title += " (" + std::to_string(below) + " heads with A < " + fmt(ylo, "%.2g") + " drawn at the bottom edge)";
    f.series = {pts, mean, {"", QColor(120, 120, 120), Style::Dashed, {-100, 100}, {0, 0}, 1}};
    pad_range(ylo, yhi, 0.08);
    double xlo = budgets.empty() ? 0 : *std::min_element(budgets.begin(), budgets.end());
    double xhi = budgets.empty() ? 1 : *std::max_element(budgets.begin(), budgets.end());
    pad_range(xlo, xhi, 0.08);
    f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
    for (auto& x : render(f, dir + "/figures/advantage_vs_budget")) files.push_back(x);
  }

  // 3. phase map.
  if (fs::exists(dir + "/tables/phase.json")) {
    const nlohmann::json ph = read_json(dir + "/tables/phase.json");
    Figure f;
    f.title = "Dominance phase map: winning family by exact recomputation";
    f.xlabel = "logit scale (multiplier of query norms, unitless)";
    f.ylabel = "budget B (bits per key element)";
    Series q{"Q wins (quantize only)", kPalette[0], Style::Squares, {}, {}, 26};
    Series e{"E wins (evict only)", kPalette[1], Style::Squares, {}, {}, 26};
    Series m{"M wins (mixed tiers)", kPalette[2], Style::Squares, {}, {}, 26};
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (const auto& r : ph["rows"]) {
      const double x = val(r, "logit_scale"), y = val(r, "budget");
      const std::string w = r["winner"].get<std::string>();
      Series* s = w == "Q" ? &q : w == "E" ? &e : w == "M" ? &m : nullptr;
      if (s) s->x.push_back(x), s->y.push_back(y);
      xlo = std::min(xlo, x), xhi = std::max(xhi, x), ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
    pad_range(ylo, yhi, 0.12);
    f.xlog = xlo > 0;
    if (f.xlog) xlo /= 1.4, xhi *= 1.4;
    else pad_range(xlo, xhi, 0.1);
    f.series = {q, e, m};
    const double bnd = val(ph, "boundary_logit_scale");
    if (std::isfinite(bnd))
      f.series.push_back({"surrogate boundary: median R_h(2) = 1", QColor(0, 0, 0), Style::Dashed, {bnd, bnd}, {ylo - 10, yhi + 10}, 1});
    f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
    for (auto& x : render(f, dir + "/figures/phase_map")) files.push_back(x);
  }

  // 4. the water-filling picture of one head.
  if (fs::exists(dir + "/tables/waterfill.json")) {
    const nlohmann::json w = read_json(dir + "/tables/waterfill.json");
    const double theta = val(w, "theta"), B = val(w, "budget");
    const std::string head = w["cell"].get<std::string>() + " L" + std::to_string(w["layer"].get<int>()) + ".H" +
                             std::to_string(w["kv_head"].get<int>());
    Series g{"marginal return at 0 bits, w_t alpha ln(beta)", kPalette[0], Style::Points, {}, {}, 5};
    Series bits{"bits per token b_t", kPalette[0], Style::Line, {}, {}, 4};
    double glo = INFINITY, ghi = 0, bhi = 0;
    const double n = static_cast<double>(w["rows"].size());
    for (const auto& r : w["rows"]) {
      const double x = val(r, "rank"), g0 = val(r, "g0"), b = val(r, "bits");
      if (g0 > 0) g.x.push_back(x), g.y.push_back(g0), glo = std::min(glo, g0), ghi = std::max(ghi, g0);
      bits.x.push_back(x), bits.y.push_back(b), bhi = std::max(bhi, b);
    }
    Figure f1;
    f1.title = "Reverse water-filling, " + head + ": water level theta = " + fmt(theta, "%.3g");
    f1.xlabel = "token rank by weight a_t (1 = heaviest)";
    f1.ylabel = "marginal return per bit (squared output / bit, log)";
    if (theta > 0) glo = std::min(glo, theta), ghi = std::max(ghi, theta);
    f1.ylog = glo > 0 && ghi > glo;
    f1.ymin = f1.ylog ? glo / 3 : 0, f1.ymax = f1.ylog ? ghi * 3 : 1;
    f1.xmin = 0, f1.xmax = n + 1;
    f1.series = {g};
    if (theta > 0) f1.series.push_back({"water level theta (tokens below get 0 bits)", kPalette[3], Style::Dashed, {0, n + 1}, {theta, theta}, 1});
    for (auto& x : render(f1, dir + "/figures/waterfill_level")) files.push_back(x);
    Figure f2;
    f2.title = "Bits per token after water-filling, " + head + ", B = " + fmt(B) + " bits per element";
    f2.xlabel = "token rank by weight a_t (1 = heaviest)";
    f2.ylabel = "bits per key element of the token";
    f2.series = {bits, {"budget B (mean bits)", kPalette[3], Style::Dashed, {0, n + 1}, {B, B}, 1}};
    f2.xmin = 0, f2.xmax = n + 1, f2.ymin = 0, f2.ymax = std::max(bhi, B) * 1.1 + 0.1;
    for (auto& x : render(f2, dir + "/figures/waterfill_bits")) files.push_back(x);
  }
  // 5. allocation staleness over decode steps.
  if (fs::exists(dir + "/tables/staleness.json")) {
    const nlohmann::json st = read_json(dir + "/tables/staleness.json");
    Series ratio{"median error ratio err_stale / err_fresh", kPalette[3], Style::Line, {}, {}, 6};
    Series jac{"median Jaccard of evicted sets", kPalette[0], Style::Line, {}, {}, 6};
    Series agr{"median tier agreement", kPalette[2], Style::Line, {}, {}, 6};
    double xlo = INFINITY, xhi = 0, yhi = 1;
    for (const auto& r : st["rows"]) {
      const double x = val(r, "step");
      xlo = std::min(xlo, x), xhi = std::max(xhi, x);
      const std::pair<Series*, const char*> cols[3] = {{&ratio, "median_ratio"}, {&jac, "median_jaccard"}, {&agr, "median_agreement"}};
      for (const auto& [s, key] : cols) {
        const double y = val(r, key);
        if (std::isfinite(y)) s->x.push_back(x), s->y.push_back(y), yhi = std::max(yhi, y);
      }
    }
    if (std::isfinite(xlo) && xhi > 0) {
      Figure f;
      f.title = "Allocation staleness over decode steps, B = " + fmt(val(st, "budget")) + " bits per element";
      f.xlabel = "decode step s (log)";
      f.ylabel = "error ratio, or overlap in [0, 1]";
      f.xlog = true;
      f.xmin = xlo / 1.3, f.xmax = xhi * 1.3;
      f.ymin = 0, f.ymax = yhi * 1.08;
      f.series = {ratio, jac, agr, {"", QColor(120, 120, 120), Style::Dashed, {f.xmin, f.xmax}, {1, 1}, 1}};
      for (auto& x : render(f, dir + "/figures/staleness")) files.push_back(x);
    }
  }
  return files;
}

}  // namespace tierlab
