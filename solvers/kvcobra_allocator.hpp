#pragma once
// KV-COBRA's allocation (arXiv 2609.24298, github.com/seonha01/KV-COBRA, kvcobra/allocation.py
// and method.py): a (rank r_h, bits b_h) per KV head, applied by the kvcobra key quantizer
// (model/quantizers/kvcobra.cpp) with rank=r_h, bits=b_h. Not a tier per token, so it is not one of
// allocate_seed()'s SeedProblem methods; `tierlab eval TRACE --seed kvcobra` runs it.
//
// Per head h the weights w_1 >= w_2 >= ... >= w_d are the quantizer's basis weights
// w_i = qv_i kv_i (query energy times key eigenvalue along basis vector i, sorted,
// kvcobra_direction_weights()). The distortion model (released code, Bennett):
//   D_h(r, b) = sum_{i > r} w_i + q(b) sum_{i <= r} w_i,   q(b) = 2^(-2b) / 12.
// Head budgets B_h are integer bits per token (r b <= B_h, the paper's accounting r b / d
// per element); the average budget is B_avg = floor(B d).
//
// C1 (rank_bits): given B_h, over the even ranks r = max(min_rank, 2), ..., min(d,
//   max(min_rank, B_h // min_bits)) with b = B_h // r (rounding=floor, released) or
//   round-half-even(B_h / r) (rounding=round, legacy), skipped when b < min_bits, capped
//   at max_bits: (r*, b*) = argmin D_h (first minimum). Then the released fix-up:
//   b = clamp(b*, 2, 8), r = max(min_rank, min(d, B_h // b)) (fills the head's budget).
// Cross-head redistribution (redistribute=):
//   waterfill (default, the released C2): B_h = B_avg; `iterations` rounds of: D_h at C1's
//     fixed-up (r, b); mean D; B_h <- max(B_min, B_h + trunc(B_avg (sqrt(D_h / mean D) - 1)
//     damping)); then B_h <- max(B_min, floor(B_h B_avg H / sum B_h)); B_min =
//     max(4, B_avg // 4). Heuristic: the total can miss B_avg H either way.
//   uniform: B_h = B_avg (C1 alone, no C2).
//   optimal: tierlab's documented replacement: over every grid pair (r even in [max(min_rank,
//     2), d], b in [min_bits, max_bits]) minimise sum_h D_h(r_h, b_h) subject to
//     sum_h rate(r_h, b_h) <= B H exactly (the multiple-choice knapsack over heads, solved by
//     solve_exact, certified), rate = r b / d (rate=paper) or pad(r) b / d (rate=code, the
//     codes the quantizer stores, pad(r) = next power of 2).
// Reported per head: r, b, B_h, D_h, its nominal rate r b / d and padded code rate.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/quantizers/key_quantizer.hpp"
#include "model/io/trace.hpp"
#include "solvers/mckp.hpp"
#include "solvers/scorers.hpp"

namespace tierlab {

struct KvcobraAllocOptions {
  double budget = 2.0;                      // B, bits per key element, average over heads
  std::string redistribute = "waterfill";  // waterfill | uniform | optimal
  std::string rate = "paper";               // optimal only: paper (r b / d) | code (pad(r) b / d)
  std::string rounding = "floor";           // C1: floor (released) | round (legacy)
  int min_rank = 2, min_bits = 2, max_bits = 8;
  int iterations = 5;                       // waterfill rounds
  double damping = 0.3;                     // waterfill step
  // Passed to the kvcobra quantizer that applies the allocation:
  std::string basis = "auto";               // auto | pre | post
  std::string basis_cost = "fp16";          // fp16 | offline
  int group = 0;                            // tokens per quantization group (0 = all)
  std::uint64_t seed = 0;                   // random Hadamard signs
  void validate() const;                    // InputError naming the field and value
  std::string name() const;                 // "kvcobra:B=2,redistribute=waterfill,..."
  // From name=value strings (the keys of kvcobra_allocator_method().params).
  static KvcobraAllocOptions from_params(double budget, const MethodParams& params);
};

// D_h(r, b) of the header comment (w descending).
double kvcobra_distortion(const std::vector<double>& w, int rank, int bits);

struct RankBits {
  int rank = 0, bits = 0;
};
// C1 with the released fix-up, for one head at integer budget B_h bits per token.
RankBits kvcobra_rank_bits(const std::vector<double>& w, long long head_budget, int d, const KvcobraAllocOptions&);
// The released C2: integer budgets per head.
std::vector<long long> kvcobra_waterfill_budgets(const std::vector<std::vector<double>>& w, int d,
                                                 const KvcobraAllocOptions&);

struct KvcobraHeadChoice {
  int layer = 0, kv_head = 0;
  int rank = 0, bits = 0;
  long long head_budget = 0;    // B_h, bits per token (optimal: rank * bits)
  double distortion = 0;        // D_h(rank, bits)
  double nominal_rate = 0;      // rank bits / d
  double code_rate = 0;         // pad(rank) bits / d
};

// The solve summary (mckp.hpp) with objective = sum_h D_h and, for redistribute = optimal,
// lower_bound = the exact solver's proven bound on it (NaN for the heuristics).
struct KvcobraAllocation : SolveSummary {
  KvcobraAllocOptions options;
  int head_dim = 0;
  std::vector<KvcobraHeadChoice> heads;
  double nominal_rate = 0;       // mean_h rank bits / d
  double code_rate = 0;          // mean_h pad(rank) bits / d
  // The kvcobra key quantizer at head i's (rank, bits) and the options' quantizer parameters.
  std::unique_ptr<KeyQuantizer> quantizer(std::size_t head_index) const;
  std::string summary() const;   // one line
};

// Allocate from the heads' weights (w[h] descending, all of length d).
KvcobraAllocation allocate_kvcobra(const std::vector<std::vector<double>>& w, int d, const KvcobraAllocOptions&);
// Every head of a trace (layer-major), weights by kvcobra_direction_weights().
KvcobraAllocation allocate_kvcobra(const TraceReader& trace, const KvcobraAllocOptions&);

// For `tierlab methods`: name "kvcobra", kind "seed allocator", its parameters.
MethodInfo kvcobra_allocator_method();

}  // namespace tierlab
