#pragma once
// The operational rate-distortion curve of every cell (scenario key `rd_curve`; issue 18,
// scenarios/pipeline/rd_curve.hpp): over a budget grid, each family's surrogate optimum in
// the chosen scope (head by default, as every front door, solvers/problem.hpp; `scope: model`:
// the heads trade budget), its exactly recomputed
// error (mean over the cell's heads) and its surrogate prediction, the ladder points (every
// token at one tier) and the lower convex hull of all operating points. The scenario's
// ladder and rate_kind apply (x = the measured rate in that kind). Tables: rd_curve.csv,
// rd_curve_ladder.csv, rd_curve_hull.csv, rd_curve.json. Figures: rd_curve_<cell> per cell
// (the recomputed curves, the hull, the ladder points; dashed: the surrogate). With the
// scenario's `methods` (KIVI, an eviction scorer at a keep ratio, ...): each a single
// operating point beside the curves (rd_curve_methods.csv; above_hull: worse than the best
// mix of the families' points at its rate).
#include <string>
#include <vector>

#include "scenarios/scenario/analysis.hpp"
#include "scenarios/pipeline/rd_curve.hpp"

namespace tierlab {

struct RdCurveSpec {
  std::vector<double> budgets = parse_budget_grid("0:8:0.5");  // rd_curve.budgets: "A:B:STEP"
  Scope scope = ProblemOptions{}.scope;                         // rd_curve.scope
  RdQueries queries = RdQueries::Decode;                        // rd_curve.queries
  std::vector<FamilyChoice> families{FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed,
                                     FamilyChoice::Routed};     // rd_curve.families
  std::vector<std::string> cells;  // rd_curve.cells: the cell ids to compute it for (empty: every cell)
};

class RdCurveAnalysis final : public Analysis {
 public:
  explicit RdCurveAnalysis(RdCurveSpec s) : spec(std::move(s)) {}
  std::string name() const override { return "rd_curve"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  // The scenario's `methods` are drawn as single operating points (decode or obs queries).
  bool uses_methods() const override { return true; }
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  RdCurveSpec spec;
};

}  // namespace tierlab
