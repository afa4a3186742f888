#pragma once
// Seed allocators: published bit-allocation methods, on top of the solvers
// (waterfill.hpp, families.hpp). Each reads the heads' surrogate costs on one RateLadder
// (model/surrogate.hpp: cost(j, t) = c_t(tau_j), weights a_t) and a budget B in bits per
// key element (code or total rate, RateKind), and returns a tier per token per head.
// Sources and variants: docs/methods.md, "Seed allocators".
//
//   ratequant  (arXiv 2605.06675) per-HEAD bits, each head dense at one tier. Per head h
//              the noise model n_h(b) = alpha_h beta_h^(-b) is fitted on the head's own
//              quantizer (fit_noise over the ladder's finite tiers of one quantizer family, Tier::quantizer():
//              per-quantizer alpha, beta), weight w_h = sum_t a_t, and reverse
//              water-filling over heads
//                b_h = clamp( log_{beta_h}( w_h alpha_h ln(beta_h) / theta ), 0, b_max )
//              with mean_h b_h = B, b_max = the exact tier's rate; then projected onto the
//              ladder's non-evicting tiers (the knapsack over heads with costs
//              sum_t c_t(tau)); heads must have equal T. KKT residuals come from the
//              continuous solution (waterfill.hpp).
//   rdkv       (arXiv 2605.08317, Junkai1860/RDKV) per TOKEN: s_t = the token score
//              (score = attention: mean_q p_{q,t} (default) | weight: a_t), smoothed per head by a
//              reflect-padded average pool of kernel 5 (smoothing.hpp); every token takes
//                j_t = argmin_j  s~_t eps(b_j) + lambda r_j     (ties to the lower rate)
//              over the ladder (paper: bits {0,2,4,8,16}), eps(b) the calibrated key NMSE
//              (default: the paper's Llama-3.1-8B values eps(0) = 1, eps(2) = 0.0955,
//              eps(4) = 4.02e-3, eps(8) = 1.40e-5, eps(16) = 0; or a list), and lambda >= 0
//              is bisected (geometrically, 200 steps) to the least value whose mean rate
//              over all tokens of the heads given is <= B. The paper allocates keys per
//              CHANNEL (the key quantizer
//              rdkv-channel, model/quantizers/rdkv_channel.cpp); tierlab's tiers are per token, so this
//              is the per-token variant.
//   routed     docs/model.md section 6 (solvers/families.hpp): each head picks the family
//              Q, E or M; scope head (own budget B T_h, default) or model (pooled).
//   granularity  docs/model.md section 9, "Restricted granularities" (solvers/granularity.hpp):
//              the exact surrogate optimum under one engine granularity (restriction = uniform,
//              layer, head, bands, bands_head, age, age_head, evict_shared, evict_head,
//              evict_layer, token_head, token) over the heads given, trading B across them
//              unless the restriction fixes a head's or layer's share.
//   (kvcobra, KV-COBRA's per-head (rank, bits), is not a tier allocation on a ladder: it
//   lives in solvers/kvcobra_allocator.hpp; allocate_seed("kvcobra") says so.)
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "solvers/mckp.hpp"
#include "solvers/scorers.hpp"
#include "solvers/problem.hpp"

namespace tierlab {

struct SeedProblem {
  RateLadder ladder;
  std::vector<const SurrogateCosts*> heads;  // costs on `ladder`, owned by the caller
  double budget = 0.0;                        // B, bits per key element
  RateKind rate_kind = kDefaultRateKind;
  int head_dim = 0;                           // d, for the tiers' nominal rates
  // KV heads per layer when `heads` are a whole model's, layer-major (the `granularity`
  // allocator's per-layer restrictions read it); 0: the heads are taken as one layer.
  int n_kv_heads = 0;
  void validate() const;                      // InputError naming the field
};

// The solve summary (mckp.hpp) with objective = sum_h sum_t c_t(tier) (surrogate units),
// rate_used = sum over tokens of r (bits), rate_budget = B * tokens (bits); the bound, gap
// and lambda fields are left unset (the allocators prove no bound; see multiplier).
struct SeedAllocation : SolveSummary {
  std::string method;   // name with parameters
  std::vector<std::vector<std::uint8_t>> tiers;  // per head, per token (ladder indices)
  std::vector<double> continuous_bits;           // ratequant: b_h per head
  double multiplier = 0.0;                       // ratequant: theta; rdkv: lambda
  double max_kkt_residual = 0.0;                 // ratequant (continuous)
  std::int64_t tokens = 0;
  double mean_rate() const { return tokens > 0 ? rate_used / static_cast<double>(tokens) : 0.0; }
};

// "ratequant", "rdkv", "routed"; InputError lists valid names and parameters.
const std::vector<MethodInfo>& seed_allocator_methods();
SeedAllocation allocate_seed(std::string_view name, const MethodParams& params, const SeedProblem& problem);

// The tier rates r_j of a problem's ladder on its rate kind: the closed-form nominal rate
// where the tier has one (Tier::nominal_rate(d)); for a tier whose rate depends on the
// head's data (kvquant, kvcobra; model/quantizers/tier_quantizer.hpp) the mean over the problem's
// heads of their dense rates (SurrogateCosts::rates).
std::vector<double> ladder_rates(const SeedProblem& problem);

}  // namespace tierlab
