#pragma once
// The figures of a scenario run (MODEL.md section 8), drawn from the saved tables under
// DIR/tables (scenarios/analyses.hpp) and written to DIR/figures as PNG (900 x 600 px at
// 2x), PDF (QCustomPlot, rendered headless) and SVG (a vector rendering of the same
// figure: same data, same axis ranges and ticks, written by this library, since Qt's SVG
// module is not a dependency). Nothing is recomputed: `tierlab figure DIR` calls this.
//
//   interior_vs_dominated  per cell: dominated share (x) vs mean interior advantage A (y)
//                          at the primary budget, one colour per preset; Spearman rho and
//                          its bootstrap interval in the title
//   advantage_vs_budget    per head: A vs budget B (points), the mean over heads (line)
//   phase_map              (phase scenarios) winning family per (logit scale, budget), the
//                          surrogate boundary (median R_h(2) = 1) as a dashed line
//   staleness              (scenarios with `staleness`) per decode step s (log x axis): the
//                          median over heads of err_stale / err_fresh, of the Jaccard overlap
//                          of the evicted sets and of the tier agreement; y = 1 dashed
//
// Headless: when neither DISPLAY nor WAYLAND_DISPLAY nor QT_QPA_PLATFORM is set, the
// platform is set to "offscreen" before the QApplication is created.
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "scenarios/figures/figure.hpp"

namespace tierlab {

// advantage_vs_budget from a run's tables: `interior` (tables/interior.json) and `heads`
// (tables/heads.csv by column). Shared by `tierlab figure` and tierlab-explorer. *rows, when
// given, receives for each point of the first series its row in `heads`.
Figure advantage_vs_budget_figure(const nlohmann::json& interior,
                                  const std::map<std::string, std::vector<std::string>>& heads,
                                  std::vector<std::size_t>* rows = nullptr);

// Renders every figure whose tables exist; returns the files written. Throws InputError
// when DIR/tables/interior.json is missing or unreadable.
std::vector<std::string> render_figures(const std::string& dir);

}  // namespace tierlab
