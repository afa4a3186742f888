#pragma once
// Bit-exact key quantizers (docs/methods.md sections 1 and 2) with their rate accounting.
//
// KIVI per-channel (2402.02750): within a group of G consecutive tokens (of one tier),
// for each channel j: mn = min x, mx = max x, scale = (mx - mn) / (2^b - 1),
// code = round(clamp((x - mn) / scale, 0, 2^b - 1)), x^ = code * scale + mn.
// (scale == 0, a constant channel, reproduces x exactly.) fp16 scale and min per
// channel per group. Computation in float32, as the reference code does.
//
// Per-token (values-style, QuaRot's axis): within one token, per group of n channels,
// the same asymmetric min/max scheme; fp16 scale and zero per token per group.
//
// Mixed allocations follow docs/model.md convention 9 (section 12): the tokens assigned to one tier are
// grouped among themselves in position order, G at a time, and metadata is counted
// for the groups actually formed (a partial last group counts as a group).
//
// Every tier goes through TierQuantizer (tier_quantizer.hpp). The functions below come in
// two forms: on a key matrix alone (evict, exact, kivi, token, and the published tiers
// that read keys only: turboquant, quarot), and on the head with the trace's RoPE
// (HeadData + RopeParams from TraceMeta::rope), which every tier accepts; a tier that
// needs the head (kvquant, kvcobra) throws InputError from the key-only form.
#include <cstdint>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

// The dequantized rows of one block of tokens at one finite tier, with the bits spent.
struct QuantizedBlock {
  MatrixRM dequant;        // tokens.size() x d, same row order as tokens
  double code_bits = 0.0;  // total code bits of the block
  double meta_bits = 0.0;  // total metadata bits of the block
};

// Quantize keys.row(tokens[i]) (tokens ascending) as one block at `tier`
// (KIVI: consecutive groups of G of these tokens; per-token: each row alone).
QuantizedBlock quantize_block(const MatrixRM& keys, const std::vector<int>& tokens, const Tier& tier);

// Every token at `tier`, grouped by position (the dense endpoint). Exact returns keys.
MatrixRM dense_tier_keys(const MatrixRM& keys, const Tier& tier);
MatrixRM dense_tier_keys(const HeadData& head, const RopeParams& rope, const Tier& tier);

// r(tau) of `tier` for this head: the rate of its dense quantization (tier_quantizer.hpp);
// Tier::nominal_rate(d) where that has a closed form.
Rate nominal_rate(const HeadData& head, const RopeParams& rope, const Tier& tier);

// The keys an allocation yields for one head (tier index per token into ladder):
// evicted rows are left as zeros and flagged in `kept`.
struct MaterializedKeys {
  MatrixRM keys;
  std::vector<std::uint8_t> kept;  // 1 kept, 0 evicted
  Rate rate;                       // bits per element, averaged over all T x d elements
};
MaterializedKeys materialize(const MatrixRM& keys, const RateLadder& ladder,
                             const std::vector<std::uint8_t>& tier_of_token);
// Does any tier of the ladder need the head (kvquant, kvcobra: the head-aware forms only)?
bool ladder_needs_head(const RateLadder& ladder);

MaterializedKeys materialize(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                             const std::vector<std::uint8_t>& tier_of_token);

// Rate of an allocation without materialising it (same accounting as materialize). The
// count-only form needs tiers whose bits depend on the counts alone (not kvquant, kvcobra);
// the head-aware form quantizes the blocks of the tiers whose bits depend on the data.
Rate allocation_rate(int n_tokens, int head_dim, const RateLadder& ladder,
                     const std::vector<std::uint8_t>& tier_of_token);
Rate allocation_rate(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                     const std::vector<std::uint8_t>& tier_of_token);

}  // namespace tierlab

namespace tierlab {

// KIVI's key cache as it runs (prefill, then one token per decode step): groups of G
// tokens are quantized per channel; the most recent tokens stay in a full-precision
// residual which is flushed (quantized) R tokens at a time when it reaches R. After a
// prefill of T tokens, T - (T mod R) are quantized and T mod R stay full precision
// (the reference code's behaviour). R must be a multiple of G.
class KiviKeyCache {
 public:
  KiviKeyCache(int head_dim, int bits, int group = 32, int residual = 128);
  void prefill(const MatrixRM& keys);
  void append(const float* key);           // one decode step
  MatrixRM dequantized() const;            // all tokens so far, in position order
  int n_tokens() const { return n_quantized_ + n_full_; }
  int n_full_precision() const { return n_full_; }
  Rate rate() const;                       // per element over all tokens so far (fp16 window = 16 bits)

 private:
  void flush_();
  int d_, bits_, group_, residual_;
  MatrixRM quantized_;  // dequantized rows already flushed
  MatrixRM full_;       // residual rows
  int n_quantized_ = 0, n_full_ = 0;
  double code_bits_ = 0.0, meta_bits_ = 0.0;
};

}  // namespace tierlab
