#pragma once
// Allocations restricted to what a serving engine can express (docs/model.md section 9,
// "Restricted granularities"; the `granularity` analysis). Each is the EXACT surrogate optimum
// under its restriction: the same per-token costs c_t(tau) of every KV head (section 3), the
// same ladder, the same nominal rates r_j (metadata counted when the rate kind is total bits),
// one model-wide budget B bits per key element (heads trade it unless the restriction fixes
// each head's or layer's share).
//
// Heads are numbered layer-major, i = l n_kv + h, and all have the same T tokens. Tier j of
// the ladder: 0 = evict (r_0 = 0), m-1 = exact, bits strictly increasing in between.
//
//   uniform       one tier, not evict, for every token of every head (engine: one cache dtype)
//   layer         one tier per layer, all its heads and tokens (budget traded across layers)
//   head          one tier per KV head (budget traded across heads)
//   bands         tokens in three position bands -- the first `sink`, the last `recent`, the
//                 middle -- each band one tier, the same three tiers for every head
//   bands_head    the same bands, each head its own three tiers
//   age           tokens in `age_steps` equal bands by age a = T-1-t (newest first), the tier
//                 never increasing with age, the same schedule for every head
//   age_head      the same, each head its own schedule
//   evict_shared  keep (exact) or evict only; one keep mask per layer shared by its heads
//                 (an engine's union mode: a token kept is kept for every head of the layer)
//   evict_head    keep or evict, each head its own mask, each head the same budget B
//   evict_layer   keep or evict, each head its own mask, budget traded within a layer
//   token_head    the full ladder per token, each head the same budget B (per-head mixed)
//   token         the full ladder per token, heads trading budget: M* at model scope, the
//                 unrestricted optimum every restriction's allocation is also an allocation of
//
// Solved as multiple-choice knapsacks (solvers/mckp.hpp, solved by solve_exact): an item is a
// layer, a head, a (layer, token) or a token, and its options are the tiers or, for bands and
// age, every admissible tuple of tiers (options of equal rate collapsed to the cheapest for
// that item); a restriction with one item for the whole model (uniform, bands, age) is
// enumerated. Since every restriction's feasible set is contained in token's, its objective is
// never below token's (tests/test_granularity.cpp checks each against an exhaustive search).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/base/linalg.hpp"
#include "solvers/exact.hpp"
#include "solvers/mckp.hpp"

namespace tierlab {

enum class Granularity {
  Uniform, Layer, Head, Bands, BandsHead, Age, AgeHead, EvictShared, EvictHead, EvictLayer, TokenHead, Token
};
// Every restriction, in the order above.
const std::vector<Granularity>& all_granularities();
std::string_view to_string(Granularity);  // "uniform", "layer", ... as in the table above
// The restriction named `name`; InputError listing the names otherwise.
Granularity parse_granularity(std::string_view name);
// Whether an engine can express it (everything but token_head and token, the references).
bool is_engine_axis(Granularity);

struct GranularityProblem {
  std::vector<double> rates;              // r_j, one per ladder tier (bits per element)
  std::vector<const MatrixRMd*> costs;    // per head (layer-major), m x T tier-major c_t(tau_j)
  int n_layers = 0, n_kv_heads = 0;
  double budget = 0.0;                    // B, bits per key element, over the whole model
  int sink = 4;                           // tokens in the first band (bands, bands_head)
  int recent = 64;                        // tokens in the last band
  int age_steps = 4;                      // bands by age (age, age_head)
  ExactOptions exact;
  int tokens() const;                     // T
  // Shapes (n_layers n_kv_heads cost matrices of m rows and equal T columns, T >= 1), rates
  // (m >= 2, tier 0 at 0 bits, strictly increasing), budget finite and >= 0, sink, recent
  // >= 0, age_steps >= 1. Throws InputError naming the field and value.
  void validate() const;
};

struct GranularAllocation {
  Granularity granularity = Granularity::Token;
  SolveStatus status = SolveStatus::Infeasible;  // Optimal; Feasible when the exact solver gave no proof
  double objective = 0.0;                        // sum over heads and tokens of c_t(tau_t)
  double rate = 0.0;                             // mean nominal rate per element over the model
  std::vector<std::vector<std::uint8_t>> tiers;  // per head, per token: the tier index
  std::string message;                           // why infeasible, or the solver's word
  bool feasible() const { return status != SolveStatus::Infeasible; }
};

GranularAllocation solve_granularity(const GranularityProblem&, Granularity);

// The band of token t (0 = sink, 1 = middle, 2 = recent; the sink wins where they overlap) and
// the age band (0 = newest) -- the definitions the solver and its tests share.
int position_band(int t, int T, int sink, int recent);
int age_band(int t, int T, int age_steps);

}  // namespace tierlab
