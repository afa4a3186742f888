#pragma once
// One figure, described as data (no Qt types here): a title, axis labels with units, axis
// ranges (linear or logarithmic), series of points, lines, dashed lines, squares or
// contiguous cells (a heatmap), and text labels at data points. The legend sits in a row
// below the axes, so it never covers data and the axes end where the data ends.
// The same description is drawn three ways, so that what a report shows, what
// `tierlab figure` writes and what tierlab-explorer displays are one picture:
//   - PNG, PDF and SVG through QCustomPlot (scenarios/figures/figure_qt.hpp draws it into a
//     QCustomPlot, headless or in a window); the SVG is that same scene painted by Qt's SVG
//     module (QSvgGenerator), so the three files are one drawing;
//   - CSV of the data: one row per point, columns series,x,y.
#include <string>
#include <vector>

namespace tierlab {

struct Rgb {
  int r = 0, g = 0, b = 0, a = 255;
};

// The figures' colour cycle (matplotlib's "tab10" first six).
Rgb palette(int i);
// c with alpha `alpha` (0..255).
Rgb faded(Rgb c, int alpha);

// Cells: filled rectangles [x_lo[i], x_hi[i]] x [y_lo[i], y_hi[i]] around (x[i], y[i]) (a
// heatmap whose neighbouring cells touch); x, y are the cells' centres (the CSV's points).
enum class Style { Points, Line, Dashed, Squares, Cells };

struct Series {
  std::string name;  // empty: not in the legend
  Rgb color;
  Style style = Style::Points;
  std::vector<double> x, y;
  double size = 7;  // marker size in pixels (Points, Squares)
  std::vector<double> x_lo = {}, x_hi = {}, y_lo = {}, y_hi = {};  // Cells only: each cell's extent
};

// A text label next to a data point (e.g. a method's name beside its point).
struct Label {
  double x = 0, y = 0;
  std::string text;
};

// An explicit tick: its position on the axis and its label (e.g. a category name).
struct Tick {
  double at = 0;
  std::string label;
};
// Ticks 1..n labelled with names (a categorical axis).
std::vector<Tick> category_ticks(const std::vector<std::string>& names);
// A logarithmic range [a, b] = [lo / 2, hi * 2] around data in [lo, hi] ([1e-6, 1] when lo
// is not positive or hi not finite; hi = 10 lo when hi <= lo).
void log_range(double lo, double hi, double& a, double& b);

struct Figure {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  std::vector<Tick> xticks, yticks;  // explicit ticks (linear axes only); empty: chosen automatically
  std::vector<Label> labels;         // drawn beside their point
  int legend_columns = 0;            // entries per legend row; 0: as many as fit
  double xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  bool xlog = false;  // logarithmic x axis (ticks at powers of 2)
  bool ylog = false;  // logarithmic y axis (ticks at powers of 10)
};

constexpr int kFigureWidth = 900, kFigureHeight = 600;  // pixels (PNG written at 2x)

// Writes BASE.png, BASE.pdf and BASE.svg (`formats`: any of "png", "pdf", "svg"); returns the
// files written. Creates a QApplication (offscreen platform when there is no display) if
// the process has none. Throws InputError when a file cannot be written.
std::vector<std::string> render_figure(const Figure&, const std::string& base,
                                       const std::vector<std::string>& formats = {"png", "pdf", "svg"});

// Writes one file whose format follows the extension of `path` (.png, .pdf, .svg or .csv).
void export_figure(const Figure&, const std::string& path);

// The figure's data as CSV text: header "series,x,y", then one row per point.
std::string figure_csv(const Figure&);

}  // namespace tierlab
