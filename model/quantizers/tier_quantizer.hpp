#pragma once
// One interface through which every tier of a ladder quantizes keys (docs/model.md sections
// 1, 3 and 12), and the registry of the forms a tier name takes.
//
// A TierQuantizer quantizes one block of one head's tokens: the tokens assigned to its
// tier, strictly ascending (docs/model.md convention 9: the tokens of a tier are grouped among
// themselves in position order). It returns the dequantized rows k^_t and the bits
// actually formed, in total bits over the block:
//   code bits   the codes (b per element for b-bit codes; 16 for exact)
//   meta bits   everything else stored: scales, zero points, norms, sparse outliers,
//               codebooks, bases, fp16 sink rows beyond their code bits; a partial last
//               group counts as a group.
// Per element over a head of T tokens x d channels (an allocation sums over its tiers):
//   r_code = sum code / (T d),   r_total = sum (code + meta) / (T d).
//
// The tiers (tier_forms(), one row each; b code bits, 1 <= b <= max of the form):
//   evict              0 bits, the row is removed
//   exact              16 bits per element, k^ = k
//   kivi<b>[g<G>]      KIVI per channel, groups of G (default 32) of the tier's tokens; 32/G meta
//   token<b>[g<n>]     per token, channel groups of n (default d); 32 ceil(d/n)/d meta
//   turboquant<b>      make_key_quantizer("turboquant", {bits = b}), b <= 8: seeded rotation,
//                      Lloyd-Max per coordinate, fp16 norm per token: b + 16/d
//   quarot<b>[g<n>]    make_key_quantizer("quarot", {bits = b, group = n}): Walsh-Hadamard,
//                      per token, fp16 scale + zero per channel group: b + 32/min(n, d), n
//                      default 128; d must be a power of 2
//   kvquant<b>         make_key_quantizer("kvquant", {bits = b}), b <= 8: pre-RoPE per channel,
//                      calibrated on the whole head, sparse outliers, fp16 sink tokens
//   kvcobra<B>         make_key_quantizer("kvcobra", {budget = B}): rank-r key latent, (r, bits)
//                      chosen by the quantizer within B code bits per element, so its code
//                      rate is <= B (B orders the ladder)
// A published tier (the last four) calls KeyQuantizer::quantize(head, rope, tokens) on
// exactly its tier's tokens and counts every item of the result's rate: code_bits and
// the sum of its meta items. What a quantizer stores once per head (kvquant's codebook
// and per-channel ranges, kvcobra's basis) is stored once per tier that uses it and
// charged to that tier's block, so its share falls as 1/n with the tier's n tokens.
//
// Nominal (dense) rate r(tau) of a tier for a head of T tokens x d channels: the rate of
// the dense quantization of the head, every token at tau. kivi and token keep their
// closed forms (tier.hpp: b + 32/G, b + 32 ceil(d/n)/d, full groups); turboquant and
// quarot are per token, so their closed forms equal the dense rate for any T; kvquant
// (outlier count, 1/T shares of the codebook, ranges and sink) and kvcobra (chosen rank
// and bits, basis) depend on the head's data: their nominal rate quantizes the head.
//
// The head: turboquant and quarot read the post-RoPE keys only, so they also run from a
// key matrix alone (TierInput::keys_only, the key-only signatures of quantizer.hpp and
// surrogate.hpp). kvquant (pre-RoPE keys, RoPE) and kvcobra (observation queries,
// pre-RoPE basis, calibration over the head) need the head: given only keys they throw
// InputError saying so.
//
// Not tiers: headq (a side code over a base quantizer, its own parameterised pipeline:
// its code rate is the base's b plus r b_s / d, so a tier would have to name two
// quantizers), rdkv-channel (itself an allocator: it spends a budget across channels
// with 0-bit and 16-bit channels, a knapsack inside the tier, on a curve eps(b)
// calibrated on another model), and the registry's kivi/token (their fp16 residual
// window is a uniform policy's; the kivi<b> and token<b> tiers are the same arithmetic
// without it). docs/methods.md, "Published quantizers as tiers".
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/quantizers/key_quantizer.hpp"
#include "model/base/linalg.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

// What a tier quantizer reads: the post-RoPE keys (T x d) of one head, and the head itself
// with the trace's RoPE parameters when the caller has them.
struct TierInput {
  const MatrixRM* keys = nullptr;    // never null
  const HeadData* head = nullptr;    // the head of these keys, or null (keys only)
  const RopeParams* rope = nullptr;  // null exactly when head is null

  static TierInput keys_only(const MatrixRM& keys) { return {&keys, nullptr, nullptr}; }
  static TierInput of_head(const HeadData& head, const RopeParams& rope) { return {&head.keys, &head, &rope}; }
  int n_tokens() const { return static_cast<int>(keys->rows()); }
  int head_dim() const { return static_cast<int>(keys->cols()); }
};

// Total bits of one block (not per element).
struct TierBits {
  double code_bits = 0.0;
  double meta_bits = 0.0;
};

class TierQuantizer {
 public:
  virtual ~TierQuantizer() = default;
  const Tier& tier() const { return tier_; }
  std::string name() const { return tier_.name(); }
  // True when quantize() needs TierInput::head and ::rope (header comment).
  virtual bool needs_head() const { return false; }
  // True when a token's dequantized row depends on its own key alone (exact, evict and the
  // per-token groups of token<b>), never on which other tokens share the tier: the dense
  // quantization of the head then gives every allocation's rows (TierRowCache). False for
  // token-grouped forms (kivi: tier-local groups of G tokens) and the published quantizers.
  virtual bool token_local() const { return false; }
  // Quantize keys.row(tokens[i]) (strictly ascending, the tokens of this tier) as one
  // block: dequant row i is token tokens[i]; the bits actually formed.
  virtual QuantizedBlock quantize(const TierInput& in, const std::vector<int>& tokens) const = 0;
  // The same rows written to out.row(tokens[i]) of a T x d matrix; returns the bits.
  // The default calls quantize() and copies.
  virtual TierBits quantize_into(const TierInput& in, const std::vector<int>& tokens, MatrixRM& out) const;
  // The bits of a block of n tokens of dim d when they depend on n and d alone, else
  // nullopt (then only quantize() knows them).
  virtual std::optional<TierBits> bits_of_count(long long n, int d) const = 0;
  // The closed-form nominal rate at head dim d (tier.hpp), or nullopt when it depends
  // on the head's data (then nominal_rate(TierInput) quantizes the head).
  virtual std::optional<Rate> closed_nominal_rate(int d) const = 0;
  // r(tau) for this head (header comment).
  Rate nominal_rate(const TierInput& in) const;

 protected:
  explicit TierQuantizer(Tier tier) : tier_(std::move(tier)) {}
  // Throws InputError naming the tier when it needs the head and `in` has none.
  void require_head(const TierInput& in) const;

 private:
  Tier tier_;
};

// One form of tier name: "<prefix>" (evict, exact) or "<prefix><b>[g<G>]".
struct TierForm {
  std::string prefix;           // "kivi"; for a published tier, the registered quantizer's name
  QuantizerKind kind = QuantizerKind::Exact;
  bool has_bits = true;         // false: the name is the prefix alone (evict, exact)
  int min_bits = 1, max_bits = 15;
  bool has_group = false;       // accepts g<G>
  int default_group = 0;        // what a name without g<G> means; name() does not write it
  bool needs_head = false;
  std::string form;             // "kivi<b>[g<G>]", for messages and docs
  std::string example;          // "kivi2, kivi4g64"
  // Published tiers: the parameter that b sets ("bits", or kvcobra's "budget") and the one g sets.
  std::string bits_param, group_param;
  std::unique_ptr<TierQuantizer> (*make)(const Tier&) = nullptr;
  // Published tiers whose bits depend on n and d alone (per-token rates); else null.
  std::optional<TierBits> (*bits_of_count)(const Tier&, long long n, int d) = nullptr;
};

const std::vector<TierForm>& tier_forms();
// The form of a tier (by kind, and method for published tiers); throws InputError.
const TierForm& tier_form(const Tier& tier);
// "evict, exact, kivi<b>[g<G>] (1 <= b <= 15, e.g. kivi2, kivi4g64), ..." for messages.
std::string tier_forms_list();
// The key-quantizer parameters a published tier passes to make_key_quantizer.
KeyQuantizerParams published_tier_params(const Tier& tier);

// Checks the tier on its own (bits, group) and builds its quantizer; throws InputError
// naming the tier and the value at fault.
std::unique_ptr<TierQuantizer> make_tier_quantizer(const Tier& tier);

// The built-in tiers (model/quantizers/quantizer.cpp) and the published adapter (tier_quantizer.cpp).
std::unique_ptr<TierQuantizer> make_evict_tier(const Tier&);
std::unique_ptr<TierQuantizer> make_exact_tier(const Tier&);
std::unique_ptr<TierQuantizer> make_kivi_tier(const Tier&);
std::unique_ptr<TierQuantizer> make_token_tier(const Tier&);
std::unique_ptr<TierQuantizer> make_published_tier(const Tier&);

// ---- one head under a ladder, through the interface ---------------------------------
// The forms of quantizer.hpp take a TierInput; the key-only and head-aware signatures
// there call these.

// Every token at `tier` (the dense endpoint), with r(tau) from the same quantization.
struct DenseTier {
  MatrixRM keys;  // T x d; exact returns the keys; evict zeros
  Rate nominal;
};
DenseTier dense_tier(const TierInput& in, const Tier& tier);
MaterializedKeys materialize(const TierInput& in, const RateLadder& ladder,
                             const std::vector<std::uint8_t>& tier_of_token);
// One head's dense rows of its ladder's token-local tiers (TierQuantizer::token_local, with
// bits_of_count), quantized once: materialize with the cache copies those tiers' rows instead
// of quantizing them again for every allocation (the RD curve's many allocations of a head),
// with the same keys and bits. The cache refers to nothing of `in` after construction.
class TierRowCache {
 public:
  TierRowCache(const TierInput& in, const RateLadder& ladder);
  // Tier i's dense rows (T x d), or null when tier i is not cached.
  const MatrixRM* rows(int i) const { return dense_[static_cast<std::size_t>(i)].get(); }
  int cached() const;  // how many tiers are cached

 private:
  std::vector<std::shared_ptr<const MatrixRM>> dense_;
};
MaterializedKeys materialize(const TierInput& in, const RateLadder& ladder, const std::vector<std::uint8_t>& tier_of_token,
                             const TierRowCache& cache);
// Counts bits where bits_of_count() knows them, quantizes the tier's block otherwise.
Rate allocation_rate(const TierInput& in, const RateLadder& ladder, const std::vector<std::uint8_t>& tier_of_token);

}  // namespace tierlab
