#pragma once
// The water-filling picture of one head (scenario key `waterfill`, docs/model.md sections 9 and 11,
// solvers/waterfill.hpp): the chosen head's token weights w_t = a_t, its noise model
// n_h(b) = alpha beta^(-b) (pipeline/head.hpp fit_head_noise), continuous reverse
// water-filling at `budget` bits per token (b_max = 16). In the tables the tokens are sorted
// by weight a_t, with g_t(0) = a_t alpha ln(beta) (the marginal return per bit at 0 bits),
// the continuous bits b_t and the water level theta. Tables: waterfill.csv/.json. Figures:
// waterfill_level, waterfill_bits.
#include <string>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

struct WaterfillSpec {
  std::string cell;  // a cell id (default: the first cell)
  int layer = 0, kv_head = 0;
  double budget = 2.0;
};

class WaterfillAnalysis final : public Analysis {
 public:
  explicit WaterfillAnalysis(WaterfillSpec s) : spec(std::move(s)) {}
  std::string name() const override { return "waterfill"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  WaterfillSpec spec;
};

}  // namespace tierlab
