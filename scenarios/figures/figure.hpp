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

// The figures' colour cycle: Okabe and Ito's colour-blind-safe palette (blue, orange, bluish
// green, reddish purple, vermillion, sky blue, yellow, black), in an order that never puts red
// beside green. Series drawn as points also differ by marker (Marker::Auto), so no figure
// relies on colour alone.
Rgb palette(int i);
// c with alpha `alpha` (0..255).
Rgb faded(Rgb c, int alpha);

// Cells: filled rectangles [x_lo[i], x_hi[i]] x [y_lo[i], y_hi[i]] around (x[i], y[i]) (a
// heatmap whose neighbouring cells touch); x, y are the cells' centres (the CSV's points).
enum class Style { Points, Line, Dashed, Squares, Cells };

// A point series' marker. Auto: by the series' order among the figure's named point and line
// series (disc, square, triangle, diamond, inverted triangle, circle, cross, plus), so that
// series of one figure differ by shape as well as colour.
enum class Marker { Auto, Disc, Square, Triangle, Diamond, TriangleDown, Circle, Cross, Plus, None };

struct Series {
  std::string name;  // empty: not in the legend
  Rgb color;
  Style style = Style::Points;
  std::vector<double> x, y;
  double size = 7;  // marker size on the reference 900 x 600 screen canvas (scaled with the text)
  std::vector<double> x_lo = {}, x_hi = {}, y_lo = {}, y_hi = {};  // Cells only: each cell's extent
  Marker marker = Marker::Auto;
};

// A text label next to a data point (e.g. a method's name beside its point).
struct Label {
  double x = 0, y = 0;
  std::string text;
  bool centred = false;  // drawn centred on the point (a heatmap cell's value), not beside it
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
  // A line of explanation under the legend (what dashed and solid lines are, what a marker
  // means, a statistic's caveat); wrapped to the figure's width.
  std::string note;
  double xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  bool xlog = false;  // logarithmic x axis (ticks at powers of xlog_base)
  int xlog_base = 2;  // 2 (budgets, logit scales) or 10 (errors: the y axis's rule, 1-2-5 or decades)
  bool ylog = false;  // logarithmic y axis (ticks at powers of 10)
};

constexpr int kFigureWidth = 900, kFigureHeight = 600;  // the explorer's reference canvas (screen pixels)

// How a figure is laid out on a page: its size, its text size, the files written and the PNG's
// resolution. The canvas is measured in points (1/72 in): the PDF and SVG are width_pt x
// height_pt, and the PNG is width_pt * dpi / 72 pixels wide. Every text is font_pt (the title
// one point larger, ticks, legend and labels one point smaller), so a figure placed at its
// width in a document keeps the text size it was made with.
struct FigureStyle {
  FigureStyle() = default;  // not an aggregate: {"svg"} is a list of formats, never a style
  std::string name = "paper";
  double width_pt = 252;   // 89 mm: one column of a two-column paper
  double height_pt = 0;    // 0: as much as the title, legend and note need above an axis box of 0.62 x the width
  double font_pt = 8;
  int dpi = 300;
  std::vector<std::string> formats = {"png", "pdf", "svg"};
  // "paper" (89 mm wide, 8 pt, 300 dpi) or "slides" (10 in wide, 16 pt, 150 dpi); InputError
  // naming `field` and the valid names otherwise.
  static FigureStyle preset(const std::string& name, const std::string& field = "--style");
  // The explorer's window: the screen's 96 dpi, 11 pt text (what the live views draw).
  static FigureStyle screen();
  // Throws InputError naming `where`, the field, its value and the valid range.
  void validate(const std::string& where) const;
};

// A length with its unit ("3.5in", "89mm", "8.9cm", "252pt", "252") in points; InputError
// naming `field`, the value and the accepted forms otherwise (positive, at most 100 in).
double parse_length_pt(const std::string& text, const std::string& field);
// "png,pdf" -> {"png", "pdf"}; InputError naming `field` and the value unless every entry is
// png, pdf or svg and there is at least one.
std::vector<std::string> parse_formats(const std::string& text, const std::string& field);
// "252pt (88.9 mm)".
std::string format_length(double pt);

// Writes BASE.png, BASE.pdf and BASE.svg (`style.formats`); returns the files written. Creates
// a QApplication (offscreen platform when there is no display) if the process has none.
// Throws InputError when a file cannot be written.
std::vector<std::string> render_figure(const Figure&, const std::string& base, const FigureStyle& style = FigureStyle{});
std::vector<std::string> render_figure(const Figure&, const std::string& base, const std::vector<std::string>& formats);

// Writes one file whose format follows the extension of `path` (.png, .pdf, .svg or .csv).
void export_figure(const Figure&, const std::string& path, const FigureStyle& style = FigureStyle{});

// Every text the figure draws (title, note, axis and tick labels, legend entries, point labels)
// with its bounding box on the canvas in points (x right, y down), as painted with `style`.
struct TextBox {
  std::string text;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};
std::vector<TextBox> figure_text_boxes(const Figure&, const FigureStyle& style = FigureStyle{});
// The canvas size in points the figure is drawn on with `style` (height_pt = 0 resolved).
struct CanvasSize {
  double width = 0, height = 0;
};
CanvasSize figure_canvas(const Figure&, const FigureStyle& style = FigureStyle{});
// Layout faults of `boxes` on a canvas of `size`: a text outside the canvas, or two texts that
// overlap by more than `slack` points in both directions; one line each, naming the texts.
std::vector<std::string> layout_faults(const std::vector<TextBox>& boxes, CanvasSize size, double slack = 0.5);

// The number of markers a figure paints for its point series (Points, Squares, Line), as
// painted: what a reader sees, for the test that no figure reduces its data.
std::size_t painted_markers(const Figure&, const FigureStyle& style = FigureStyle{});

// The figure's data as CSV text: header "series,x,y", then one row per point.
std::string figure_csv(const Figure&);

}  // namespace tierlab
