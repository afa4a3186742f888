#pragma once
// The local surrogate of docs/model.md section 3, for one head and one query set.
//
// For query q (row of Q, g*W rows) with exact logits s_t = q.k_t / sqrt(d), attention
// p_{q,t} = softmax(s)_t and output o_q = sum_t p_{q,t} v_t:
//   token weight         a_t       = mean_q p_{q,t}^2 ||v_t - o_q||^2
//   logit noise          n_t(tau)  = mean_q (q.(k^_t(tau) - k_t))^2 / d          [nats^2]
//   cost of finite tier  c_t(tau)  = mean_q p_{q,t}^2 ||v_t - o_q||^2 (q.(k^_t - k_t))^2 / d
//   cost of eviction     c_t(0)    = mean_q p_{q,t}^2 ||v_t - o_q||^2 / (1 - p_{q,t})^2
//   cost of exact        0
// c_t(0) is exact for one removed token: removing t alone gives
// ||o^ - o||^2 = p_t^2 ||v_t - o||^2 / (1 - p_t)^2. Costs are absolute squared-output
// units (divide by ||o||^2 for a relative error). k^_t(tau) is the dense quantization
// of the head's keys at tau (every token at tau; tier_quantizer.hpp dense_tier), for every
// tier kind, published quantizers included, and the tier's rate is its nominal r(tau) for
// this head (the same dense quantization's rate where it has no closed form).
//
// Per-head noise model (fitted by least squares on log n over b):
//   n_h(b) = alpha_h * beta_h^(-b),  n_h(b) = mean_t n_t(tau_b)
#include <string>
#include <limits>
#include <string>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

struct TokenWeights {
  VectorD a;           // a_t
  VectorD evict_cost;  // c_t(0)
  VectorD attention;   // mean_q p_{q,t} (for scorers and plots)
};

// `queries` carries its causal mask (trace.hpp CausalQueries; observation_queries(head)): a query
// gives p = 0 to the tokens it does not see; n_t(tau) averages over the queries that see t.
TokenWeights token_weights(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& queries);

// Costs of every tier of a ladder for every token: cost(i, t) = c_t(ladder.tiers[i]).
struct SurrogateCosts {
  RateLadder ladder;
  std::vector<Rate> rates;  // nominal rate r(tau) of each tier for this head (tier_quantizer.hpp)
  MatrixRMd cost;           // ladder.size() x T; row 0 = c_t(0), last row = 0
  MatrixRMd noise;          // ladder.size() x T; n_t(tau) (row 0 and last row unused = 0)
  TokenWeights weights;
  double output_norm2 = 0;  // mean_q ||o_q||^2, to turn costs into relative errors
};

// On keys alone: every tier but those that need the head (kvquant, kvcobra: InputError).
SurrogateCosts surrogate_costs(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& queries,
                               const RateLadder& ladder);
// On the head (keys, values, and what published quantizers calibrate on) with the trace's
// RoPE; `queries` is the query set with its causal mask (observation_queries(head), or the
// decode queries against the prompt, all_visible).
SurrogateCosts surrogate_costs(const HeadData& head, const RopeParams& rope, const CausalQueries& queries,
                               const RateLadder& ladder);

// n_h(b) = alpha * beta^(-b); residual = RMS of log n - log n_h over the fitted points.
struct NoiseFit {
  double alpha = 0, beta = 0, residual = 0;
  double operator()(double bits) const;
};
// Fit on (bits, mean noise) points; needs at least two distinct bit widths with n > 0.
NoiseFit fit_noise(const std::vector<double>& bits, const std::vector<double>& mean_noise);
// Convenience: fit over the finite tiers of a ladder that share one quantizer kind.
NoiseFit fit_noise(const SurrogateCosts& costs, QuantizerKind kind);
// The same over the finite tiers of one quantizer family (Tier::quantizer(): "kivi",
// "token", "turboquant", ...), so two published quantizers on one ladder fit apart.
NoiseFit fit_noise(const SurrogateCosts& costs, const std::string& quantizer);

// ---- per-head steps shared by every caller ---------------------------------------------

// The rate vector a budget counts: r_j = rate_of(nominal_rate(tier_j), kind) for every tier of
// the ladder (model/quantizers/quantizer.hpp nominal_rate; the head's own dense rate for the published
// quantizers' tiers, whose metadata depends on the head).
std::vector<double> ladder_rates(const HeadData& head, const RopeParams& rope, const RateLadder& ladder, RateKind kind);

// The per-head noise model, ONE convention for every caller (`tierlab solve --solver
// waterfill`, the water-filling analysis, the explorer, the RateQuant seed allocator):
//   n_h(b) = alpha beta^(-b), fitted by least squares of ln n_h(tau_j) = ln mean_t n_t(tau_j)
//   on b_j = rates[j] (the tier's rate in the budget's kind: code bits, or total bits with
//   metadata), over the finite tiers of ONE quantizer: that of the ladder's first finite tier
//   (a ladder mixing quantizers has one curve per quantizer; the others are left out).
// When the fit is impossible (fewer than two such tiers with n > 0) or does not decrease
// (beta <= 1, or alpha not finite and positive), the model is the textbook beta = 4 (6 dB
// per bit) through the lowest such tier with n > 0 (alpha = n_j 4^(b_j); 1e-30 when none),
// and fitted = false with the reason in `note`.
struct HeadNoiseModel {
  double alpha = 1e-30, beta = 4.0;
  double residual = std::numeric_limits<double>::quiet_NaN();  // RMS of the log fit (fitted only)
  bool fitted = false;
  std::string quantizer;  // whose tiers ("kivi")
  std::string note;       // why fitted is false
  double operator()(double bits) const;
};
HeadNoiseModel fit_head_noise(const SurrogateCosts& costs, const std::vector<double>& rates);

}  // namespace tierlab
