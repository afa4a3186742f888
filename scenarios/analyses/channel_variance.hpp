#pragma once
// Per-channel key variance before and after a random-sign Walsh-Hadamard rotation (docs/model.md
// section 11; scenario key `channel_variance`; docs/claims.md claim (o): KV-COBRA rotates its
// latent coordinates so that their variances are equal before quantizing them channel by
// channel). For every KV head of every cell, over the prompt's keys K (T x d, post-RoPE; d a power
// of 2):
//   keys    the variances s_c^2 of K's d channels (each centred), before and after
//           K' = K D H_d (D seeded random signs, H_d orthonormal Walsh-Hadamard: the rotation of
//           model/quantizers/kvcobra.cpp at full rank);
//   latent  the same for the full-rank SVD latent Z = (K - mean) V (V the eigenvectors of K's
//           channel covariance: the coordinates KV-COBRA quantizes), whose variances are the
//           covariance's eigenvalues, before and after Z D H_d.
// Each set of variances is summarised by its peak-to-average ratio max_c s_c^2 / mean_c s_c^2
// (1 = equal) and its coefficient of variation. Tables: channel_variance.csv/.json (per head and
// the medians with quartiles over heads).
#include <string>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

class ChannelVarianceAnalysis final : public Analysis {
 public:
  std::string name() const override { return "channel_variance"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();
};

}  // namespace tierlab
