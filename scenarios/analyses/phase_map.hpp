#pragma once
// The dominance phase map over logit scale x budget (docs/model.md section 11, item 2); on when the
// scenario sweeps traces.synthetic.logit_scales. From the interior analysis's cell keys: for
// each (logit scale, budget), the winning family by exact recomputation (most heads) and the
// share of heads won by each family; the surrogate's boundary is the logit scale where the
// median over heads of R_h(2-bit tier) crosses 1 (linear interpolation between the swept
// scales). Tables: phase.csv/.json. Figure: phase_map (phase_map_figure).
#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

// The phase map figure of a run's tables/phase.json: a heatmap of the outcome per (logit
// scale, budget) (Q, E or M wins, or a tie of equal shares), the recomputed boundary (per
// budget, the cell edge from which E wins) and the surrogate's (median R_h(2) = 1, dashed).
// The explorer's dominance view draws the same figure.
Figure phase_map_figure(const nlohmann::json& phase);

class PhaseMapAnalysis final : public Analysis {
 public:
  std::string name() const override { return "phase_map"; }
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();
};

}  // namespace tierlab
