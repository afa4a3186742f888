#pragma once
// Distortion-model mismatch (docs/model.md section 11, item 5): does it matter whose noise model
// an allocator uses?
//
// Per cell, head h (all layers x KV heads) and quantizer X of the scenario's
// mismatch.quantizers, at every bit width b of mismatch.bits, X quantizes all the head's
// prompt keys (model/quantizers/key_quantizer.hpp, parameter bits = b) and we measure on the
// observation queries q (g W rows):
//   mean logit noise   n_h^X(b) = mean_t mean_q (q.(k^_t - k_t))^2 / d               [nats^2]
//   surrogate          s_h^X(b) = sum_t c_t(k^_t) / mean_q ||o_q||^2                 (relative)
// and recompute exactly on the decode queries (observation queries when S = 0)
//   error              e_h^X(b) = mean relative output error ||o^ - o||^2 / ||o||^2.
// The noise model n_h^X(b) = alpha_h^X (beta_h^X)^(-b) is fitted by least squares on log n
// over b (model/surrogate.hpp fit_noise); its weight is w_h = sum_t a_t / mean_q ||o_q||^2,
// so that w_h n_h(b) predicts the head's relative error.
//
// Allocation with model X at budget B (RateQuant's problem, per-head bits, solved exactly):
//   b^X = argmin_{b_h in bits} sum_h w_h alpha_h^X (beta_h^X)^(-b_h)  s.t.  sum_h b_h <= B H
// (allocate_bits_exact: dynamic programming over heads and integer total bits). Evaluated
// with the actual quantizer Y: err(X -> Y) = mean_h e_h^Y(b^X_h) (exact recomputation; the
// cached per-bit errors are the errors of the allocation, since each head is dense at one
// width), surrogate mean_h s_h^Y(b^X_h), and Y's model prediction mean_h w_h n_h^Y(b^X_h).
// Reference allocations for Y: "uniform" (b_h = B), "matched" (X = Y), and "measured"
// (minimising Y's measured surrogate sum_h s_h^Y(b_h), no fitted model).
// Cell JSON key "mismatch": per head the fits and per-bit measurements, per budget the
// allocations. Tables (write_mismatch_tables): mismatch_beta.csv/.json (beta per quantizer:
// median and IQR over all heads of all cells), mismatch_fits.csv (per head),
// mismatch.csv/.json (per budget, actual Y, model X: error, ratios to uniform and matched).
#include <atomic>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario/analysis.hpp"
#include "gpu/recompute.hpp"
#include "model/io/trace.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

// Exact per-head bit allocation: choose k_h in [0, K) per head minimising sum_h cost[h][k_h]
// subject to sum_h bits[k_h] <= total_bits (bits non-negative integers). Ties go to the
// fewer total bits, then to the lexicographically smaller choice. Returns the bit widths
// per head; empty when even the smallest widths exceed the budget.
std::vector<int> allocate_bits_exact(const std::vector<std::vector<double>>& cost, const std::vector<int>& bits,
                                     int total_bits);

// The scenario key `mismatch`.
struct MismatchSpec {
  std::vector<MethodSpec> quantizers;    // kind quantizer, without `bits` (the analysis sets it)
  std::vector<int> bits{2, 3, 4, 6, 8};  // bit widths measured and allocated, increasing, in [1, 8]
  std::vector<double> budgets{3, 4};     // mean bits per head; each one of `bits`
};

// The per-cell part: fits, per-bit measurements and the allocations.
nlohmann::json mismatch_cell(const Scenario&, const MismatchSpec&, const TraceReader&, Recomputer&, const std::atomic<bool>* stop = nullptr);

// Writes the mismatch tables under dir (= DIR/tables) from the cells' "mismatch" keys and
// returns the summary.md section (empty when the scenario has no mismatch analysis).
std::string write_mismatch_tables(const Scenario&, const MismatchSpec&, const std::vector<nlohmann::json>& cells,
                                  const std::string& dir);

class MismatchAnalysis final : public Analysis {
 public:
  explicit MismatchAnalysis(MismatchSpec s) : spec(std::move(s)) {}
  std::string name() const override { return "mismatch"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  MismatchSpec spec;
};

}  // namespace tierlab
