#pragma once
// The figures of a scenario run (MODEL.md section 8), drawn from the saved tables under
// DIR/tables and written to DIR/figures as PNG (900 x 600 px at 2x), PDF (QCustomPlot,
// rendered headless) and SVG (the same QCustomPlot scene painted by Qt's SVG module).
// Nothing is recomputed: `tierlab figure DIR` calls this. Each analysis builds its own
// figures (AnalysisType::figures, scenarios/analyses/*.cpp: what each figure shows is stated
// there); this draws them all.
//
// Headless: when neither DISPLAY nor WAYLAND_DISPLAY nor QT_QPA_PLATFORM is set, the
// platform is set to "offscreen" before the QApplication is created.
#include <string>
#include <vector>

namespace tierlab {

// Renders every figure whose tables exist; returns the files written. Throws InputError
// when DIR/tables/interior.json is missing or unreadable.
std::vector<std::string> render_figures(const std::string& dir);

}  // namespace tierlab
