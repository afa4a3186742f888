#pragma once
// The interior analysis (docs/model.md sections 6 and 11, item 1); every scenario has it.
//
// Per cell, for each budget B of the scenario: interior_advantage (pipeline/advantage.hpp)
// per head: A on the decode and observation queries and by the surrogate, each family's
// recomputed error, and the winning family (the least error on the verdict query set; ties
// go to the endpoint, Q before E); the cell's winner (most heads); the dominated share and
// R_h(2-bit tier) = sum_t c_t(2-bit) / sum_t c_t(evict) per head (model/dominance.hpp).
// Cell JSON keys: R2, R2_median, budgets, dominated_share.
//
// Across cells at the primary budget: Spearman rho = Pearson correlation of the mid-ranks
// (ties averaged) of the cells' dominated share and median A over the cell's heads (A is
// unbounded below: one head where an endpoint is nearly exact dominates a mean; cells where
// either is NaN left out), a percentile bootstrap interval (analyses/stats.hpp) seeded by the
// scenario's seed; controlling for the model: the mid-ranks minus each preset's mean rank,
// then their Pearson correlation. Per budget: A over heads (mean, median, share with A > 0,
// family wins); the interior "stops paying" at the smallest budget from which the median A
// over heads <= 0 for every larger budget; per context length T: the median of the cells'
// median A and the share of E wins.
//
// Tables: cells.csv/.json (cell x budget), heads.csv (cell x budget x head), budgets.csv,
// interior.json. Figures: interior_vs_dominated, advantage_vs_budget.
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

class InteriorAnalysis final : public Analysis {
 public:
  // `dense_routing: [turboquant, kivi, kvquant]`: per head, the reference paper's router
  // between M* and these dense quantizers outside the ladder (pipeline/dense_routing.hpp);
  // heads JSON keys dense_surrogate, dense_obs (the choice) and err_dense_surrogate,
  // err_dense_obs (its error on the verdict query set).
  std::vector<std::string> dense_quantizers;
  std::string name() const override { return "interior"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();
};

// The median over a cell's heads of A at one budget (NaN when no head has A defined).
double cell_median_advantage(const nlohmann::json& budget);

// The five summaries of a cell at one budget (the sensitivity table; docs/model.md section 6):
//   routed        A_model of the reference paper's allocator: routed per KV head with one
//                 model-wide budget against the pooled endpoints (pipeline/advantage.hpp)
//   median        median over heads of A (heads where A is reported)
//   sum           A of the cell's summed errors: 1 - sum_h err_M / min(sum_h err_Q, sum_h err_E)
//                 (the per-head-budget variant of routed: per head M* contains the endpoints)
//                 (a family left out unless feasible on every head; floor = heads x floor)
//   wins          share of the decided heads (a winner, not a tie below the floor) won by M
//   clipped_mean  mean over heads of A clipped to [-1, 1]
struct CellAggregates {
  double median = std::numeric_limits<double>::quiet_NaN(), sum = median, wins = median, clipped_mean = median;
  double routed = median;
  double of(const std::string& name) const;  // "routed" | "median" | "sum" | "wins" | "clipped_mean"
};
CellAggregates cell_aggregates(const nlohmann::json& budget, double floor);

// advantage_vs_budget from a run's tables: `interior` (tables/interior.json) and `heads`
// (tables/heads.csv by column). Shared by `tierlab figure` and tierlab-explorer. *rows, when
// given, receives for each point of the first series its row in `heads`. The x axis holds the
// swept budgets as evenly spaced categories 1..n (ticks labelled with B); the median is drawn last.
Figure advantage_vs_budget_figure(const nlohmann::json& interior,
                                  const std::map<std::string, std::vector<std::string>>& heads,
                                  std::vector<std::size_t>* rows = nullptr);

}  // namespace tierlab
