// Bit-exact KIVI per-channel and per-token key quantizers, their rate accounting,
// the materialisation of a mixed allocation (docs/model.md section 12, convention 9) and KIVI's
// running key cache (quantizer.hpp).
//
// Arithmetic is float32 in the reference order: scale = (mx - mn) / (2^b - 1),
// code = round_half_even(clamp((x - mn) / scale, 0, 2^b - 1)) (torch.round), and
// x^ = code * scale + mn with the product rounded before the sum (no fused
// multiply-add, which -march=native would otherwise allow).
#include "model/quantizers/quantizer.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/tier_quantizer.hpp"

namespace tierlab {

namespace {
// Below this many key elements quantization runs on the calling thread (waking the team
// costs more than the work on small traces).
constexpr long long kParallelMinElements = 1 << 16;

constexpr int kDefaultKiviGroup = 32;
constexpr double kMetaBitsPerGroup = 32.0;  // fp16 scale + fp16 min (or zero point)

int kivi_group(const Tier& t) { return t.group > 0 ? t.group : kDefaultKiviGroup; }
int token_group(const Tier& t, int d) { return t.group > 0 ? std::min(t.group, d) : d; }

struct BlockBits {
  double code = 0.0, meta = 0.0;
};

// Bits of n tokens of dimension d quantized together as one block:
// KIVI (groups of g tokens, a partial last group counts) and per token (channel groups of g).
BlockBits kivi_block_bits(long long n, int d, int bits, long long g) {
  const double elems = double(n) * d;
  const long long groups = (n + g - 1) / g;
  return {bits * elems, kMetaBitsPerGroup * double(groups) * d};
}
BlockBits token_block_bits(long long n, int d, int bits, int g) {
  const double elems = double(n) * d;
  const long long groups_per_token = (d + g - 1) / g;
  return {bits * elems, kMetaBitsPerGroup * double(n) * double(groups_per_token)};
}

// Asymmetric min/max quantize-dequantize of one value given its group's mn and scale.
inline float dequant_one(float x, float mn, float scale, float max_code) {
  if (scale == 0.0f) return x;  // constant group: reproduced exactly (x == mn)
  float c = (x - mn) / scale;
  c = std::clamp(c, 0.0f, max_code);
  c = std::nearbyint(c);  // round half to even in the default rounding mode, as torch.round
  const float prod = c * scale;
  return prod + mn;
}

// KIVI per channel over the rows src[rows[0..n)] (one group); writes dst rows out[0..n).
void kivi_group_quantize(const float* const* src_rows, float* const* dst_rows, int n, int d, int bits,
                         float* mn, float* mx) {
  const float max_code = float((1 << bits) - 1);
  std::copy(src_rows[0], src_rows[0] + d, mn);
  std::copy(src_rows[0], src_rows[0] + d, mx);
  for (int i = 1; i < n; ++i) {
    const float* x = src_rows[i];
    for (int j = 0; j < d; ++j) {
      mn[j] = std::min(mn[j], x[j]);
      mx[j] = std::max(mx[j], x[j]);
    }
  }
  for (int j = 0; j < d; ++j) mx[j] = (mx[j] - mn[j]) / max_code;  // mx now holds the scale
  for (int i = 0; i < n; ++i) {
    const float* x = src_rows[i];
    float* y = dst_rows[i];
    for (int j = 0; j < d; ++j) y[j] = dequant_one(x[j], mn[j], mx[j], max_code);
  }
}

// Per-token: within row x, channel groups of g (partial last group allowed).
void token_row_quantize(const float* x, float* y, int d, int g, int bits) {
  const float max_code = float((1 << bits) - 1);
  for (int j0 = 0; j0 < d; j0 += g) {
    const int j1 = std::min(d, j0 + g);
    float mn = x[j0], mx = x[j0];
    for (int j = j0 + 1; j < j1; ++j) {
      mn = std::min(mn, x[j]);
      mx = std::max(mx, x[j]);
    }
    const float scale = (mx - mn) / max_code;
    for (int j = j0; j < j1; ++j) y[j] = dequant_one(x[j], mn, scale, max_code);
  }
}

// Destination of row i of a block: row i of a block matrix (scatter false) or row
// tokens[i] of a T x d matrix (scatter true).
struct RowSink {
  MatrixRM& out;
  const std::vector<int>& tokens;
  bool scatter;
  float* operator()(long long i) const { return out.row(scatter ? tokens[i] : i).data(); }
};

// KIVI per channel: consecutive groups of g of the listed rows.
void kivi_rows(const MatrixRM& keys, const std::vector<int>& tokens, int bits, int g, const RowSink& out_row) {
  const int d = static_cast<int>(keys.cols());
  const long long n = static_cast<long long>(tokens.size());
  const long long n_groups = (n + g - 1) / g;
#pragma omp parallel if (n * d >= kParallelMinElements)
  {
    std::vector<float> mn(d), mx(d);
    std::vector<const float*> src(g);
    std::vector<float*> dst(g);
#pragma omp for schedule(static)
    for (long long grp = 0; grp < n_groups; ++grp) {
      const long long i0 = grp * g;
      const int m = static_cast<int>(std::min<long long>(g, n - i0));
      for (int i = 0; i < m; ++i) {
        src[i] = keys.row(tokens[i0 + i]).data();
        dst[i] = out_row(i0 + i);
      }
      kivi_group_quantize(src.data(), dst.data(), m, d, bits, mn.data(), mx.data());
    }
  }
}

// The built-in tiers. Each quantizes into a RowSink; quantize() and quantize_into() are
// the two sinks (a block matrix, or the rows of the head).
class BuiltinTier : public TierQuantizer {
 public:
  QuantizedBlock quantize(const TierInput& in, const std::vector<int>& tokens) const override {
    QuantizedBlock block;
    block.dequant.resize(static_cast<Eigen::Index>(tokens.size()), in.keys->cols());
    const TierBits b = rows(*in.keys, tokens, RowSink{block.dequant, tokens, false});
    block.code_bits = b.code_bits;
    block.meta_bits = b.meta_bits;
    return block;
  }
  TierBits quantize_into(const TierInput& in, const std::vector<int>& tokens, MatrixRM& out) const override {
    return rows(*in.keys, tokens, RowSink{out, tokens, true});
  }
 protected:
  using TierQuantizer::TierQuantizer;
  virtual void write_rows(const MatrixRM& keys, const std::vector<int>& tokens, const RowSink& out_row) const = 0;

 private:
  TierBits rows(const MatrixRM& keys, const std::vector<int>& tokens, const RowSink& out_row) const {
    write_rows(keys, tokens, out_row);
    return *bits_of_count(static_cast<long long>(tokens.size()), static_cast<int>(keys.cols()));
  }
};

class EvictTier final : public BuiltinTier {
 public:
  explicit EvictTier(const Tier& t) : BuiltinTier(t) {}
  bool token_local() const override { return true; }
  std::optional<Rate> closed_nominal_rate(int) const override { return Rate{0.0, 0.0}; }
  std::optional<TierBits> bits_of_count(long long, int) const override { return TierBits{0.0, 0.0}; }

 private:
  void write_rows(const MatrixRM& keys, const std::vector<int>& tokens, const RowSink& out_row) const override {
    const int d = static_cast<int>(keys.cols());
    for (std::size_t i = 0; i < tokens.size(); ++i) std::fill(out_row(i), out_row(i) + d, 0.0f);
  }
};

class ExactTier final : public BuiltinTier {
 public:
  explicit ExactTier(const Tier& t) : BuiltinTier(t) {}
  bool token_local() const override { return true; }
  std::optional<Rate> closed_nominal_rate(int) const override { return Rate{16.0, 16.0}; }
  std::optional<TierBits> bits_of_count(long long n, int d) const override { return TierBits{16.0 * (double(n) * d), 0.0}; }

 private:
  void write_rows(const MatrixRM& keys, const std::vector<int>& tokens, const RowSink& out_row) const override {
    const int d = static_cast<int>(keys.cols());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const float* k = keys.row(tokens[i]).data();
      std::copy(k, k + d, out_row(i));
    }
  }
};

class KiviTier final : public BuiltinTier {
 public:
  explicit KiviTier(const Tier& t) : BuiltinTier(t) {}
  std::optional<Rate> closed_nominal_rate(int) const override {
    return Rate{double(tier().bits), tier().bits + kMetaBitsPerGroup / kivi_group(tier())};
  }
  std::optional<TierBits> bits_of_count(long long n, int d) const override {
    const BlockBits b = kivi_block_bits(n, d, tier().bits, kivi_group(tier()));
    return TierBits{b.code, b.meta};
  }

 private:
  void write_rows(const MatrixRM& keys, const std::vector<int>& tokens, const RowSink& out_row) const override {
    kivi_rows(keys, tokens, tier().bits, kivi_group(tier()), out_row);
  }
};

class TokenTier final : public BuiltinTier {
 public:
  explicit TokenTier(const Tier& t) : BuiltinTier(t) {}
  bool token_local() const override { return true; }  // groups of channels within a token
  std::optional<Rate> closed_nominal_rate(int d) const override {
    if (d <= 0) throw InputError("Tier " + name() + ": head_dim = " + std::to_string(d) + " must be positive.");
    const int n = tier().group > 0 ? tier().group : d;
    const int groups_per_token = (d + n - 1) / n;  // a partial last channel group counts
    return Rate{double(tier().bits), tier().bits + kMetaBitsPerGroup * groups_per_token / d};
  }
  std::optional<TierBits> bits_of_count(long long n, int d) const override {
    const BlockBits b = token_block_bits(n, d, tier().bits, token_group(tier(), d));
    return TierBits{b.code, b.meta};
  }

 private:
  void write_rows(const MatrixRM& keys, const std::vector<int>& tokens, const RowSink& out_row) const override {
    const int d = static_cast<int>(keys.cols());
    const int g = token_group(tier(), d);
    const long long n = static_cast<long long>(tokens.size());
#pragma omp parallel for schedule(static) if (n * d >= kParallelMinElements)
    for (long long i = 0; i < n; ++i) token_row_quantize(keys.row(tokens[i]).data(), out_row(i), d, g, tier().bits);
  }
};

void check_tokens(const MatrixRM& keys, const std::vector<int>& tokens) {
  const long long T = keys.rows();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= T)
      throw InputError("quantize_block: token index " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                       " is outside the keys' " + std::to_string(T) + " rows.");
    if (i > 0 && tokens[i] <= tokens[i - 1])
      throw InputError("quantize_block: token indices must be strictly ascending, but " + std::to_string(tokens[i]) +
                       " follows " + std::to_string(tokens[i - 1]) + ".");
  }
}

Rate per_element(double code, double meta, long long T, int d) {
  const double elems = double(T) * d;
  if (elems <= 0) return {};
  return {code / elems, (code + meta) / elems};
}

}  // namespace

std::unique_ptr<TierQuantizer> make_evict_tier(const Tier& t) { return std::make_unique<EvictTier>(t); }
std::unique_ptr<TierQuantizer> make_exact_tier(const Tier& t) { return std::make_unique<ExactTier>(t); }
std::unique_ptr<TierQuantizer> make_kivi_tier(const Tier& t) { return std::make_unique<KiviTier>(t); }
std::unique_ptr<TierQuantizer> make_token_tier(const Tier& t) { return std::make_unique<TokenTier>(t); }

QuantizedBlock quantize_block(const MatrixRM& keys, const std::vector<int>& tokens, const Tier& tier) {
  auto q = make_tier_quantizer(tier);  // checks the tier
  check_tokens(keys, tokens);
  return q->quantize(TierInput::keys_only(keys), tokens);
}

MatrixRM dense_tier_keys(const MatrixRM& keys, const Tier& tier) {
  return dense_tier(TierInput::keys_only(keys), tier).keys;
}

// ---- KiviKeyCache -----------------------------------------------------------

KiviKeyCache::KiviKeyCache(int head_dim, int bits, int group, int residual)
    : d_(head_dim), bits_(bits), group_(group), residual_(residual) {
  if (head_dim <= 0) throw InputError("KiviKeyCache: head_dim = " + std::to_string(head_dim) + " must be positive.");
  if (bits < 1 || bits > 15) throw InputError("KiviKeyCache: bits = " + std::to_string(bits) + " must be in 1..15.");
  if (group <= 0) throw InputError("KiviKeyCache: group = " + std::to_string(group) + " must be positive.");
  if (residual <= 0 || residual % group != 0)
    throw InputError("KiviKeyCache: residual = " + std::to_string(residual) + " must be a positive multiple of group = " +
                     std::to_string(group) + ".");
  quantized_.resize(0, d_);
  full_.resize(residual_, d_);
}

void KiviKeyCache::prefill(const MatrixRM& keys) {
  if (n_tokens() != 0)
    throw InputError("KiviKeyCache: prefill was called on a cache that already holds " + std::to_string(n_tokens()) +
                     " tokens; prefill starts an empty cache.");
  if (keys.cols() != d_)
    throw InputError("KiviKeyCache: prefill keys have " + std::to_string(keys.cols()) + " columns but head_dim is " +
                     std::to_string(d_) + ".");
  const long long T = keys.rows();
  const long long n_q = T - T % residual_;  // the reference quantizes all but T mod R tokens
  std::vector<int> rows(static_cast<std::size_t>(n_q));
  for (long long t = 0; t < n_q; ++t) rows[t] = static_cast<int>(t);
  quantized_.resize(n_q, d_);
  kivi_rows(keys, rows, bits_, group_, RowSink{quantized_, rows, false});
  const BlockBits b = kivi_block_bits(n_q, d_, bits_, group_);
  code_bits_ += b.code;
  meta_bits_ += b.meta;
  n_quantized_ = static_cast<int>(n_q);
  n_full_ = static_cast<int>(T - n_q);
  for (int i = 0; i < n_full_; ++i) full_.row(i) = keys.row(n_q + i);
}

void KiviKeyCache::append(const float* key) {
  full_.row(n_full_) = Eigen::Map<const Eigen::RowVectorXf>(key, d_);
  ++n_full_;
  if (n_full_ == residual_) flush_();
}

void KiviKeyCache::flush_() {
  std::vector<int> rows(static_cast<std::size_t>(n_full_));
  for (int i = 0; i < n_full_; ++i) rows[i] = i;
  MatrixRM block(n_full_, d_);
  kivi_rows(full_, rows, bits_, group_, RowSink{block, rows, false});
  const BlockBits b = kivi_block_bits(n_full_, d_, bits_, group_);
  quantized_.conservativeResize(n_quantized_ + n_full_, d_);
  quantized_.bottomRows(n_full_) = block;
  code_bits_ += b.code;
  meta_bits_ += b.meta;
  n_quantized_ += n_full_;
  n_full_ = 0;
}

MatrixRM KiviKeyCache::dequantized() const {
  MatrixRM out(n_tokens(), d_);
  out.topRows(n_quantized_) = quantized_.topRows(n_quantized_);
  out.bottomRows(n_full_) = full_.topRows(n_full_);
  return out;
}

Rate KiviKeyCache::rate() const {
  const double window = 16.0 * double(n_full_) * d_;
  return per_element(code_bits_ + window, meta_bits_, n_tokens(), d_);
}

bool ladder_needs_head(const RateLadder& ladder) {
  for (const Tier& t : ladder.tiers)
    if (tier_form(t).needs_head) return true;
  return false;
}

}  // namespace tierlab
