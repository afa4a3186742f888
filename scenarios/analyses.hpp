#pragma once
// The analyses of a scenario run (MODEL.md section 8), computed from the cell files.
//
// (a) Interior advantage vs dominated share, across cells at the primary budget:
//     Spearman rho = Pearson correlation of the mid-ranks (ties averaged) of the cells'
//     dominated share and median A over the cell's heads (A is unbounded below: one head
//     where an endpoint is nearly exact dominates a mean) (cells where either is NaN left out); a percentile
//     bootstrap interval [2.5%, 97.5%] over `resamples` resamples of the cells with
//     replacement (std::mt19937_64 seeded by the scenario's seed; resamples whose ranks
//     are constant are skipped). Controlling for the model: the mid-ranks minus each
//     preset's mean rank, then their Pearson correlation. Per head: A vs budget (mean, median, share of heads with
//     A > 0, the family wins); the interior "stops paying" at the smallest budget from which
//     the median A over heads <= 0 for every larger budget (A is unbounded below, so a few
//     heads can dominate a mean); per context length T: the median of the cells' median A and the share of E wins.
// (b) Dominance phase map (scenarios with logit_scales): for each (logit scale, budget),
//     the winning family by exact recomputation (most heads) and the share of heads won by
//     each family; the surrogate's boundary is the logit scale where the median over heads
//     of R_h(2-bit tier) crosses 1 (linear interpolation between the swept scales).
// (d) Water-filling picture (scenarios with `waterfill`): the chosen head's tokens sorted by
//     weight a_t, with g_t(0) = a_t alpha ln(beta) (the marginal return per bit at 0 bits),
//     the continuous bits b_t and the water level theta (solvers/waterfill.hpp).
// (e) Allocation staleness over decode steps (scenarios with `staleness`, MODEL.md section 7,
//     scenarios/staleness.hpp): per decode step s over all cells' heads, the median and mean
//     of err_stale(s) / err_fresh(s), of the Jaccard overlap of the evicted sets and of the
//     tier agreement, and the share of heads whose best family equals the observation's.
////
// Outputs under DIR/tables: cells.csv/.json (one row per cell x budget), heads.csv (one row
// per cell x budget x head), budgets.csv (A vs budget), interior.json (rho and interval,
// stop budget, per T), phase.csv/.json (phase maps only), waterfill.csv/.json (waterfill only),
// staleness.csv/.json (per step) and staleness_heads.csv (per cell x head x step) (staleness only);
// phase_entropy*.csv/.json (the phase map over attention entropy x budget, scenarios/entropy_phase.hpp),
// smoothing*.csv/.json (smoothed vs raw scores, scenarios/smoothing_study.hpp);
// DIR/summary.md.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario.hpp"

namespace tierlab {

std::vector<double> mid_ranks(const std::vector<double>& x);
double spearman(const std::vector<double>& x, const std::vector<double>& y);  // NaN when n < 2 or constant

struct Interval {
  double lo = 0, hi = 0;
  int used = 0;  // resamples with a defined rho
};
Interval bootstrap_spearman(const std::vector<double>& x, const std::vector<double>& y, int resamples,
                            std::uint64_t seed);

// Writes the tables and summary.md from the cells (cell JSON as written by the runner).
void write_analyses(const Scenario&, const std::vector<nlohmann::json>& cells, const std::string& out);

}  // namespace tierlab
