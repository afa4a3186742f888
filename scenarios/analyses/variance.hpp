#pragma once
// What moves a verdict: a variance decomposition over the choice of baselines, when the cache is
// compressed, and prompt sampling (docs/model.md section 11; scenario key `variance`; docs/claims.md
// claim (i)). The verdict of one (cell, baseline set, timing) is
//   v = ln( err(allocator) / min_{b in set} err(b) )      (< 0: the allocator wins)
// with err the mean over the cell's heads of the relative output error recomputed on the decode
// steps k+1..S. Factors, fully crossed:
//   prompts    the cells (on a real model, prompts sampled by the model; on synthetic traces a
//              seed is a whole model draw and its prompt);
//   baselines  named sets of the scenario's `methods` (labels), the set the allocator is
//              compared with;
//   timing     when every method's compression is decided: `prefill` (from the observation
//              window, the last W prompt queries: the usual) or `deferred` (k decode steps later,
//              from those k steps' queries; the k appended tokens stay exact in both, so the
//              memory is the same). Both are evaluated on the same steps k+1..S.
// The balanced three-way decomposition: each factor's main-effect sum of squares
// SS_f = sum_levels n_level (mean_level - grand mean)^2, the rest (interactions) as residual,
// each as a share of the total; intervals from resampling whole cells (the scenario's bootstrap
// and seed). Tables: variance.csv (every verdict), variance.json (shares with intervals and the
// differences baselines - prompts and timing - prompts).
#include <map>
#include <string>
#include <vector>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

struct VarianceSpec {
  std::string allocator;                                   // a label of the scenario's methods
  std::map<std::string, std::vector<std::string>> baselines;  // set name -> method labels
  int defer = 0;                                           // k; 0: S / 2
};

class VarianceAnalysis final : public Analysis {
 public:
  explicit VarianceAnalysis(VarianceSpec s) : spec_(std::move(s)) {}
  std::string name() const override { return "variance"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  bool uses_methods() const override { return true; }
  static AnalysisType type();

 private:
  VarianceSpec spec_;
};

}  // namespace tierlab
