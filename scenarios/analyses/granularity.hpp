#pragma once
// What each serving engine's granularity captures (docs/model.md section 11; scenario key
// `granularity`). Per cell and budget B (total bits unless the file says code), every KV head's
// surrogate costs on its observation queries; each restriction of solvers/granularity.hpp
// solved exactly at one model-wide B; every allocation materialised and its relative output
// error recomputed exactly per head, on the decode queries (the observation queries when the
// trace has none). With err(.) the mean over heads,
//   share(restriction) = (err(uniform) - err(restriction)) / (err(uniform) - err(token)),
// the share of M*'s (token's) gain over the best uniform quantizer that the restriction
// captures: 1 for token by definition, 0 for uniform; undefined when no uniform tier fits B or
// when M* does not beat uniform. The same ratio on the surrogate objectives is at most 1 for
// every restriction (solved exactly, a restriction's allocations are allocations of token).
// Tables: granularity.csv (per cell, budget, restriction) and granularity.json (per preset,
// budget and restriction: the pooled share with a 95% cluster-bootstrap interval, clusters =
// (cell, layer), heads pooled over the preset's cells; the engine axis that captures most).
// Figure per preset: captured share against B, one line per restriction. Each cell also
// stores every allocation in an engine's terms (per layer a tier, per head a tier, per band
// its tier, per head its age schedule, keep masks as token ranges), exported by write_tables
// as DIR/tables/granularity_allocations.json (docs/trace-format.md).
#include <string>
#include <vector>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

struct GranularitySpec {
  std::vector<double> budgets;           // empty: the scenario's budgets
  int sink = 4, recent = 64, age_steps = 4;
  std::vector<std::string> restrictions; // empty: all (solvers/granularity.hpp)
};

class GranularityAnalysis final : public Analysis {
 public:
  explicit GranularityAnalysis(GranularitySpec s) : spec_(std::move(s)) {}
  std::string name() const override { return "granularity"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

 private:
  GranularitySpec spec_;
};

}  // namespace tierlab
