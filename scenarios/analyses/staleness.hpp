#pragma once
// Allocation staleness over decode steps (scenario key `staleness`, MODEL.md section 7):
// per cell, every head's stale M* (observation queries) against a fresh M* at each listed
// decode step s, at `budget` (pipeline/staleness_head.hpp states the quantities). Over all
// cells' heads, per step: the median and mean of err_stale(s) / err_fresh(s), of the Jaccard
// overlap of the evicted sets and of the tier agreement, and the share of heads whose best
// family equals the observation's. Cell key "staleness". Tables: staleness.csv/.json (per
// step), staleness_heads.csv (cell x head x step). Figures: staleness, staleness_overlap.
#include <vector>

#include "scenarios/analyses/analysis.hpp"

namespace tierlab {

struct StalenessSpec {
  std::vector<int> steps{1, 2, 4, 8, 16};  // increasing, each in [1, 4096]; steps > S are skipped
  double budget = 2.0;                     // (0, 16]
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
