#pragma once
// Which key error predicts attention damage (docs/model.md section 11; scenario key `score_error`;
// docs/claims.md claim (p), HeadQ): for every KV head of every cell and every listed key quantizer at every listed bit width,
// with K the prompt's post-RoPE keys, K^ the quantizer's dequantized keys and the head's decode
// queries q (each of its g query heads, S steps; attention over the T prompt tokens):
//   key MSE        ||K^ - K||_F^2 / ||K||_F^2 (relative)
//   score error    score_space_error(q, K, K^) (model/quantizers/key_quantizer.hpp: the variance
//                  over tokens of q . (k - k^) / sqrt(d), mean over queries)
//   attention KL   mean over queries of KL(p || p^), p = softmax(q K^T / sqrt(d)), p^ the same on K^.
// Tables: score_error.csv (one row per cell, head, quantizer, bits) and score_error.json with the
// Spearman correlation of each predictor with the KL over all rows, and the difference
// rho(score, KL) - rho(MSE, KL) with a percentile interval from resampling heads (a head keeps all
// its rows).
#include <string>
#include <vector>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

struct ScoreErrorSpec {
  std::vector<std::string> quantizers = {"kivi", "token", "quarot", "turboquant", "kvquant"};
  std::vector<int> bits = {2, 3, 4};
};

class ScoreErrorAnalysis final : public Analysis {
 public:
  explicit ScoreErrorAnalysis(ScoreErrorSpec s) : spec(std::move(s)) {}
  std::string name() const override { return "score_error"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  ScoreErrorSpec spec;
};

}  // namespace tierlab
