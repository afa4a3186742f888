#pragma once
// Uniform policies: the simplest allocations, named the same way in the CLI and in
// scenario files ("--policy kivi:2").
//
//   exact            every token at the exact tier (error 0; the reference)
//   kivi:B[:gG][:rR] KIVI per-channel B-bit keys, groups of G tokens (default 32); the last
//                    (T mod R) tokens stay full precision as KIVI's residual (R default 128,
//                    r0 disables it). Ladder {evict, kiviB, exact}.
//   token:B[:gN]     per-token B-bit keys, groups of N channels (default d). Ladder {evict, tokenB, exact}.
//   evict:KEEP       eviction endpoint: keep the fraction KEEP in (0,1] of tokens with the
//                    largest single-removal cost c_t(0) exactly, evict the rest. Ladder {evict, exact}.
//                    (Keeping the largest c_t(0) is the surrogate-optimal E allocation.)
#include <cstdint>
#include <string>
#include <vector>

#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "model/base/method_info.hpp"

namespace tierlab {

struct UniformPolicy {
  enum class Kind { Exact, Kivi, Token, Evict } kind = Kind::Exact;
  int bits = 16;
  int group = 0;          // KIVI: tokens per group; token: channels per group (0 = d)
  int residual = 128;     // KIVI residual window R (0 = none)
  double keep = 1.0;      // evict: fraction kept

  static UniformPolicy parse(const std::string& text);  // throws InputError with the valid forms
  std::string name() const;
  RateLadder ladder() const;

  // The tier of every token of one head (indices into ladder()). `weights` is needed
  // only by evict (c_t(0) ranks the tokens); it may be null otherwise.
  std::vector<std::uint8_t> allocate(int n_tokens, const TokenWeights* weights) const;

  // KIVI with a residual window R > 0 keeps the last T mod R of T prompt tokens in full
  // precision (all of them when T < R), where the solver's kivi<b> tier quantizes every
  // token. A sentence saying so, naming the window and the policy that quantizes every
  // token (kivi:B:gG:r0); empty when nothing is left in full precision.
  std::string full_precision_note(int n_tokens) const;
};

// The four policy forms above as the catalogue lists them (scenarios/methods/catalogue.hpp),
// each with the concrete spellings a menu offers ("kivi:2").
std::vector<MethodInfo> uniform_policy_methods();

}  // namespace tierlab
