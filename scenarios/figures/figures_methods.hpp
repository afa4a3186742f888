#pragma once
// The figures of the method analyses (scenarios/mismatch.hpp, scenarios/proxy.hpp), drawn
// from DIR/tables by render_figures (figures.hpp):
//   mismatch_beta        per quantizer (x, one colour each): the fitted beta of every head
//                        (small points), the median (square) and the interquartile range
//                        (vertical line); beta = 4 (6 dB per bit) dashed
//   mismatch_error_B<B>  per budget B: for each actual quantizer Y (x) and each model X
//                        (one colour per X, offset within Y's slot), the recomputed error of
//                        the allocation made with X's noise model, divided by uniform B-bit
//                        Y (log y); the matched model X = Y drawn as a larger square; y = 1 dashed
//   proxy_ranks          per method: its rank by the surrogate (x) against its rank by the
//                        recomputed error and by the replay mean KL (y); y = x dashed; the
//                        Spearman rho values in the title
//   proxy_error          per method: surrogate predicted relative error (x, log) vs recomputed
//                        relative error (y, log), one colour per method kind; y = x dashed
#include <string>
#include <vector>

namespace tierlab {

// Renders the figures whose tables exist (none when neither analysis ran); returns the files.
std::vector<std::string> render_method_figures(const std::string& dir);

}  // namespace tierlab
