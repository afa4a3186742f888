#pragma once
// The figures of a scenario run (docs/model.md section 11), drawn from the saved tables under
// DIR/tables and written to DIR/figures as PNG, PDF (QCustomPlot, rendered headless) and SVG
// (the same QCustomPlot scene painted by Qt's SVG module), at the FigureStyle's page size
// (default: 89 mm wide, 8 pt text, PNG at 300 dpi).
// Nothing is recomputed: `tierlab figure DIR` calls this. Each analysis builds its own
// figures (AnalysisType::figures, scenarios/analyses/*.cpp: what each figure shows is stated
// there); this draws them all.
//
// Headless: when neither DISPLAY nor WAYLAND_DISPLAY nor QT_QPA_PLATFORM is set, the
// platform is set to "offscreen" before the QApplication is created.
#include <string>
#include <vector>

#include "scenarios/figures/figure.hpp"
#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

// What render_figures did: the files written, and per figure not drawn "NAME: why" (a
// figure without content, e.g. a correlation over a single cell, is not written).
struct FiguresWritten {
  std::vector<std::string> files;
  std::vector<std::string> skipped;
  // "NAME: fault" for every text of a written figure that leaves the canvas or overlaps another
  // (layout_faults, figure.hpp): empty when every figure is laid out cleanly at its style.
  std::vector<std::string> layout;
};

// One analysis's figures from the run's tables (AnalysisType::figures). A table that parses
// but does not hold what tierlab writes (a key missing, a value of another kind, an array
// shorter than its neighbour) is an InputError naming the analysis, its tables folder and the
// JSON fault, never a crash: the builders read tables with at() and get<>(), which throw.
// Every caller (render_figures_of_run, the explorer, Python's run_figures) goes through here.
std::vector<NamedFigure> analysis_figures(const AnalysisType& t, const std::string& dir);

// Renders every figure whose tables exist and that has content; returns the files written.
// Throws InputError when DIR/tables/interior.json is missing or unreadable.
// `style`: the page size, text size, formats and resolution (figure.hpp FigureStyle).
FiguresWritten render_figures_of_run(const std::string& dir, const FigureStyle& style = FigureStyle{});
std::vector<std::string> render_figures(const std::string& dir, const FigureStyle& style = FigureStyle{});  // ... .files

}  // namespace tierlab
