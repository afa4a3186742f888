#pragma once
// Reverse water-filling (continuous bits), then projection onto a tier ladder
// (docs/model.md section 9; RateQuant per head, RDKV per token/channel down to 0 bits: the
// functions are generic over items).
//
// Items i = 0..N-1 with weight w_i >= 0 and distortion model D_i(b) = alpha_i beta_i^(-b)
// (alpha_i > 0, beta_i > 1: one shared model, or one per item). The continuous problem
//   minimise sum_i w_i D_i(b_i)   subject to   (1/N) sum_i b_i = B,  0 <= b_i <= b_max
// has the KKT solution, with the water level theta (the marginal return per bit
// g_i(b) = w_i alpha_i ln(beta_i) beta_i^(-b) equalised across the active items):
//   b_i = clamp( log_{beta_i}( w_i alpha_i ln(beta_i) / theta ), 0, b_max )
// theta is found by bisection on ln theta (mean b decreases in theta), then made exact
// on the final active set A (0 < b_i < b_max) and saturated set U (b_i = b_max):
//   ln theta = ( sum_A ln(w_i alpha_i ln beta_i) / ln beta_i - (N B - b_max |U|) ) / sum_A 1 / ln beta_i
// KKT residuals (relative to theta): inside: |g_i(b_i) - theta| / theta; at 0:
// max(0, g_i(0) - theta) / theta; at b_max: max(0, theta - g_i(b_max)) / theta.
// Items with w_i = 0 get 0 bits; if every weight is 0 the bits are spread evenly
// (b_i = min(B, b_max), theta = 0).
//
// Projection onto a ladder (an MckpInstance: its rates, costs and budget): each b_i
// is rounded to the tier of nearest rate (ties to the lower), then the budget is fixed
// by greedy moves on the instance's costs: while over budget, the down-step k -> k-1
// with the least cost increase per bit freed; then, while the slack allows, the
// up-step k -> k+1 with the largest cost decrease per bit that fits (decrease > 0).
// The projected allocation is feasible, never better than the exact optimum.
#include <limits>
#include <vector>

#include "model/base/linalg.hpp"
#include "solvers/mckp.hpp"

namespace tierlab {

// D(b) = alpha * beta^(-b): distortion (e.g. logit-noise variance, nats^2) at b bits.
struct DistortionModel {
  double alpha = 1.0;
  double beta = 4.0;
};

struct WaterfillProblem {
  std::vector<double> weights;          // w_i >= 0
  std::vector<DistortionModel> models;  // size 1 (shared) or N (per item)
  double budget = 0.0;                  // B, mean bits per item (>= 0)
  double max_bits = std::numeric_limits<double>::infinity();  // b_max (> 0)

  std::size_t items() const { return weights.size(); }
  const DistortionModel& model(std::size_t i) const { return models.size() == 1 ? models[0] : models[i]; }
  void validate() const;  // throws InputError naming the field and value
};

struct ContinuousWaterfill {
  std::vector<double> bits;          // b_i
  double theta = 0.0;                // water level (marginal return per bit)
  std::vector<double> kkt_residual;  // per item, relative to theta
  double max_kkt_residual = 0.0;
  double mean_bits = 0.0;            // (1/N) sum b_i (== B)
  double objective = 0.0;            // sum_i w_i D_i(b_i)
  int iterations = 0;                // bisection steps
  bool saturated = false;            // N B >= b_max * (items with w > 0): every weighted item at b_max
};

ContinuousWaterfill waterfill_continuous(const WaterfillProblem&);

struct WaterfillOptions {
  bool compute_bound = true;  // run the Lagrangian relaxation (exact.hpp) to report the gap
};

// Rounds `bits` onto the instance's ladder and repairs its budget (see above).
MckpResult project_to_ladder(const std::vector<double>& bits, const MckpInstance&, const WaterfillOptions& = {});

struct WaterfillResult {
  ContinuousWaterfill continuous;
  MckpResult projected;
};
// The continuous solution of `problem` and its projection onto `ladder` (whose budget
// and costs are used for the projection; its items must match the problem's).
WaterfillResult waterfill(const WaterfillProblem& problem, const MckpInstance& ladder, const WaterfillOptions& = {});

// The model's cost matrix on a ladder, tier-major (rates.size() x N, as SurrogateCosts):
//   c_ij = w_i alpha_i beta_i^(-r_j)
MatrixRMd model_cost_matrix(const WaterfillProblem&, const std::vector<double>& rates);

}  // namespace tierlab
