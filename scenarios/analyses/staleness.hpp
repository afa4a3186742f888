#pragma once
// Allocation staleness over decode steps (scenario key `staleness`, docs/model.md section 10),
// out of sample: per cell, every head's stale M* (decided from the observation queries after
// prefill) against a fresh M* decided from the queries of the W decode steps before s
// (observation rows filling in while s - 1 < W), both scored exactly on steps s..s+k-1, at
// `budget` (pipeline/staleness_head.hpp states the quantities). Over all cells' heads, per
// step: the median and mean of err_stale(s) / err_fresh(s) (out of sample) and of
// err_stale(s) / err_stale(1) (aging), the median of err_stale(s) / err_insample(s) (the
// in-sample BOUND, fitted on the scored queries), the share of heads where the fresh
// allocation beats the stale one, the Jaccard overlap of the evicted sets and the tier
// agreement, the recomputed-best family's shares (Q, E, M by exact error of the optima
// decided from D(s)) and the share of heads whose recomputed-best family is the one after
// prefill. Cell key "staleness". Tables: staleness.csv/.json (per step), staleness_heads.csv
// (cell x head x step). Figures: staleness (ratios, log), staleness_overlap.
//
// Family stability is reported twice: as the share of heads whose family at s is the one
// after prefill, and chance-corrected, as Cohen's kappa of the two labellings over the heads
// (analyses/stats.hpp) with a bootstrap interval over the cells (over the heads with one
// cell): when one family wins nearly every head, agreement is high by chance alone and
// kappa is near 0.
//
// Keys: steps (increasing, in [1, 4096]), budget (0, 16], window W in [1, 4096] (default:
// each trace's observation window), windows (a list of W: the out-of-sample comparison
// repeated per decision window, cell key "staleness_by_window"; with W = 32 the fresh
// decision at a small s shares most of its rows with the stale one, so short windows are
// what can show staleness within a few steps), horizon k in [1, 4096] (default 1).
#include <vector>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

struct StalenessSpec {
  std::vector<int> steps{1, 2, 4, 8, 16};  // increasing, each in [1, 4096]; steps > S are skipped
  double budget = 2.0;                     // (0, 16]
  int window = 0;                          // W; 0: the trace's observation window
  std::vector<int> windows;                // further W, each in [1, 4096], increasing
  int horizon = 1;                         // k
};

class StalenessAnalysis final : public Analysis {
 public:
  explicit StalenessAnalysis(StalenessSpec s) : spec(std::move(s)) {}
  std::string name() const override { return "staleness"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  StalenessSpec spec;
};

}  // namespace tierlab
