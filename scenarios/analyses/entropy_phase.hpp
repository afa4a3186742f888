#pragma once
// The dominance phase map over attention entropy x budget (docs/model.md section 11, item 2).
//
// Attention entropy of a head (nats), measured on its observation queries (the queries the
// allocation is decided from), over the T prompt tokens:
//   H_h = mean over query rows q (g query heads x W positions) of  -sum_t p_{q,t} ln p_{q,t},
//   p_q = softmax_t(q.k_t / sqrt(d))
// (0 for attention on one token, ln T for uniform attention).
//
// Phase table. The heads of all cells are sorted by H_h and cut into `bins` equal-count bins
// (head i of n in ascending order goes to bin floor(i * bins / n); attention entropies are
// skewed toward 0, so equal-width bins would leave most heads in one bin). For each (bin,
// budget B): the heads in the bin, the share won by each family by exact recomputation (the
// cell's per-head winner on the verdict query set, scenarios/run/runner.hpp), the winning family
// (most heads; ties to Q, then E), the median and mean H of the bin's heads and the median
// R_h(2-bit) = sum_t c_t(2-bit) / sum_t c_t(evict) of its heads.
//   surrogate boundary   the entropy where the bins' median R_h(2) crosses 1, by linear
//                        interpolation between the median entropies of adjacent bins (the
//                        first crossing from low entropy); NaN when it does not cross
//   recomputed boundary  per budget, the entropy where the share of heads won by E crosses
//                        1/2 (same interpolation; first crossing from low entropy)
// Outputs: DIR/tables/phase_entropy.csv/.json and phase_entropy_heads.csv (one row per cell x
// head x budget: H, R_h(2), winner).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario/analysis.hpp"
#include "model/base/linalg.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

struct Scenario;

// H_h above for one head (keys T x d, queries rows x d with their causal mask: each row's
// entropy over the tokens it sees); computed in double.
double mean_attention_entropy(const MatrixRM& keys, const CausalQueries& queries);

// H_h of every head of a trace, in (layer, kv_head) order (the cell's "entropy" array).
nlohmann::json head_entropies(const TraceReader& trace);

// Equal-count bins: the bin of every value (floor(rank * bins / n), rank = position in the
// stable ascending order; ties keep their input order).
std::vector<int> equal_count_bins(const std::vector<double>& x, int bins);

// Writes the tables from the cells (each with "entropy", "R2" and per-budget head winners);
// returns the summary.md section ("" when no cell has entropies).
std::string write_entropy_phase_tables(const Scenario& sc, int bins, const std::vector<nlohmann::json>& cells,
                                       const std::string& tables_dir);

class EntropyPhaseAnalysis final : public Analysis {
 public:
  explicit EntropyPhaseAnalysis(int b) : bins(b) {}
  std::string name() const override { return "entropy_phase"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  int bins = 8;  // equal-count bins of attention entropy, in [2, 40] (key entropy_bins)
};

}  // namespace tierlab
