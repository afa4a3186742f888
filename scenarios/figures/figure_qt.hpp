#pragma once
// Drawing a Figure (scenarios/figures/figure.hpp) into a QCustomPlot: used by the headless
// renderer of `tierlab figure` and by tierlab-explorer's live views, so both show the same
// picture. Qt types appear only here, in figure.cpp, scenarios/run/render_figures.cpp and in gui/.
#include <string>

#include "scenarios/figures/figure.hpp"

class QCustomPlot;
class QColor;

namespace tierlab {

QColor to_qcolor(const Rgb&);

// Replaces the plot's content with the figure: graphs, title (a text element in a first
// layout row, added once and reused), axis labels and fonts, scales, ranges (with headroom
// above the data for the legend at the top right), legend. Does not resize or replot.
// `style` sets the text size (and the markers and lines with it); the plot's size is the
// canvas (in points on a page, screen pixels for FigureStyle::screen(), the default). Lays the
// plot out once (a replot) to place the point labels on the real axes.
void draw_figure(const Figure&, QCustomPlot& plot, const FigureStyle& style);
void draw_figure(const Figure&, QCustomPlot& plot);

// The SVG text of the figure as drawn in `plot` by draw_figure (its tick positions and labels),
// at the plot's size taken as points.
std::string figure_svg(const Figure&, QCustomPlot& plot);

}  // namespace tierlab
