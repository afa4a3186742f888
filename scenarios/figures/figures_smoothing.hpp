#pragma once
// Figures of the smoothing study and of the entropy phase map, drawn from the saved tables
// (scenarios/smoothing_study.hpp, scenarios/entropy_phase.hpp) with the Figure API:
//
//   smoothing_truncation_F  (tables/smoothing.json; F = M or E, one figure per family) span
//                           truncation rate (truncated spans / spans, %) vs pooling kernel k
//                           (k = 1: raw scores), one line per budget B (colour) and pooling
//                           (avg solid, max dashed)
//   smoothing_error_F       the same lines for the mean over heads of the relative output
//                           error (exact recomputation, verdict query set) divided by the raw
//                           scores' mean error at the same budget (every line starts at 1;
//                           y = 1 dashed)
//   phase_map_entropy       (tables/phase_entropy.json) winning family by exact recomputation
//                           per (attention entropy bin, budget), squares at the bins' centres;
//                           the surrogate boundary (bins' median R_h(2) = 1) dashed
#include <string>
#include <vector>

namespace tierlab {

// Renders the figures above whose tables exist under DIR/tables; returns the files written.
std::vector<std::string> render_smoothing_figures(const std::string& dir);

}  // namespace tierlab
