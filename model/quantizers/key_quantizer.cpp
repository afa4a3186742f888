// The key-quantizer registry, the shared helpers, and the KIVI / per-token wrappers of
// the existing stateless quantizers (key_quantizer.hpp).
#include "model/quantizers/key_quantizer.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/base/text.hpp"
#include "model/quantizers/quantizer.hpp"

namespace tierlab {

// The registry's entries, each defined in its quantizer's file (listed in key_quantizer_registry()).
const KeyQuantizerEntry& kivi_key_quantizer_entry();
const KeyQuantizerEntry& token_key_quantizer_entry();
const KeyQuantizerEntry& quarot_key_quantizer_entry();
const KeyQuantizerEntry& kvquant_key_quantizer_entry();
const KeyQuantizerEntry& turboquant_key_quantizer_entry();
const KeyQuantizerEntry& kvcobra_key_quantizer_entry();
const KeyQuantizerEntry& headq_key_quantizer_entry();
const KeyQuantizerEntry& rdkv_channel_key_quantizer_entry();

double QuantizedHeadKeys::meta_bits() const {
  double s = 0.0;
  for (const auto& m : meta) s += m.bits;
  return s;
}

Rate QuantizedHeadKeys::rate() const {
  const double elems = double(keys.rows()) * double(keys.cols());
  if (elems <= 0) return {};
  return {code_bits / elems, (code_bits + meta_bits()) / elems};
}

// ---- helpers ------------------------------------------------------------------------

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

int next_power_of_two(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

void walsh_hadamard(float* x, int n) {
  if (!is_power_of_two(n))
    throw InputError("walsh_hadamard: the length " + std::to_string(n) + " is not a power of 2.");
  for (int h = 1; h < n; h <<= 1)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = static_cast<float>(1.0 / std::sqrt(double(n)));
  for (int i = 0; i < n; ++i) x[i] *= s;
}

void apply_rope(float* x, int d, double pos, const RopeParams& rope, int sign) {
  const int rd = rope.rotary_dim > 0 ? std::min(rope.rotary_dim, d) : d;
  const int pairs = rd / 2;
  const bool half = rope.style == "half";
  if (!half && rope.style != "interleaved")
    throw InputError("apply_rope: rope style '" + rope.style + "' is not one of interleaved, half.");
  for (int i = 0; i < pairs; ++i) {
    const double a = sign * pos * std::pow(rope.theta, -2.0 * i / rd);
    const double c = std::cos(a), s = std::sin(a);
    const int ia = half ? i : 2 * i, ib = half ? i + pairs : 2 * i + 1;
    const double u = x[ia], v = x[ib];
    x[ia] = static_cast<float>(u * c - v * s);
    x[ib] = static_cast<float>(u * s + v * c);
  }
}

namespace {
double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }
double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
}  // namespace

namespace {
LloydMaxCodebook compute_lloyd_max(int bits) {
  const int L = 1 << bits;
  std::vector<double> c(L), t(L - 1);
  // Start at the high-rate (Panter-Dite) optimum: level density proportional to phi^(1/3),
  // i.e. the quantiles (i + 1/2)/L of N(0, 3); Lloyd's iterations then converge quickly.
  for (int i = 0; i < L; ++i) {
    const double target = (i + 0.5) / L;
    double lo = -40.0, hi = 40.0;
    for (int k = 0; k < 200; ++k) {
      const double mid = 0.5 * (lo + hi);
      (Phi(mid / std::sqrt(3.0)) < target ? lo : hi) = mid;
    }
    c[i] = 0.5 * (lo + hi);
  }
  // Cell [a, b]: mass P = Phi(b) - Phi(a), first moment M1 = phi(a) - phi(b),
  // second moment M2 = P + a phi(a) - b phi(b) (with x phi(x) -> 0 at +-inf).
  auto xphi = [](double x) { return std::isinf(x) ? 0.0 : x * phi(x); };
  for (int it = 0; it < 100000; ++it) {
    for (int i = 0; i + 1 < L; ++i) t[i] = 0.5 * (c[i] + c[i + 1]);
    double change = 0.0;
    for (int i = 0; i < L; ++i) {
      const double a = i == 0 ? -INFINITY : t[i - 1], b = i == L - 1 ? INFINITY : t[i];
      const double P = Phi(b) - Phi(a), M1 = phi(a) - phi(b);
      const double nc = M1 / P;
      change = std::max(change, std::abs(nc - c[i]));
      c[i] = nc;
    }
    if (change < 1e-13) break;
  }
  for (int i = 0; i + 1 < L; ++i) t[i] = 0.5 * (c[i] + c[i + 1]);
  double mse = 0.0;
  for (int i = 0; i < L; ++i) {
    const double a = i == 0 ? -INFINITY : t[i - 1], b = i == L - 1 ? INFINITY : t[i];
    const double P = Phi(b) - Phi(a), M1 = phi(a) - phi(b), M2 = P + xphi(a) - xphi(b);
    mse += M2 - 2.0 * c[i] * M1 + c[i] * c[i] * P;
  }
  return {c, t, mse};
}
}  // namespace

LloydMaxCodebook lloyd_max_gaussian(int bits) {
  if (bits < 1 || bits > 8) throw InputError("lloyd_max_gaussian: bits = " + std::to_string(bits) + " must be in 1..8.");
  static LloydMaxCodebook cache[9];  // computed once per bits (up to ~1 s at 8 bits)
  static std::once_flag once[9];
  std::call_once(once[bits], [bits] { cache[bits] = compute_lloyd_max(bits); });
  return cache[bits];
}

double score_space_error(const MatrixRM& queries, const MatrixRM& keys, const MatrixRM& dequant) {
  if (keys.rows() != dequant.rows() || keys.cols() != dequant.cols() || queries.cols() != keys.cols())
    throw InputError("score_space_error: shapes differ (queries " + std::to_string(queries.rows()) + "x" +
                     std::to_string(queries.cols()) + ", keys " + std::to_string(keys.rows()) + "x" +
                     std::to_string(keys.cols()) + ", dequantized " + std::to_string(dequant.rows()) + "x" +
                     std::to_string(dequant.cols()) + ").");
  if (queries.rows() == 0 || keys.rows() == 0) return 0.0;
  const MatrixRMd diff = (keys.cast<double>() - dequant.cast<double>());
  const MatrixRMd e = queries.cast<double>() * diff.transpose() / std::sqrt(double(keys.cols()));  // n_q x T
  double total = 0.0;
  for (Eigen::Index i = 0; i < e.rows(); ++i) {
    const double mean = e.row(i).mean();
    total += (e.row(i).array() - mean).square().mean();
  }
  return total / double(e.rows());
}

std::uint64_t SeededNormal::next_u64() {
  std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double SeededNormal::uniform() { return (double(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

double SeededNormal::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = uniform(), u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = r * std::sin(2.0 * M_PI * u2);
  has_spare_ = true;
  return r * std::cos(2.0 * M_PI * u2);
}

MatrixRMd random_orthogonal(int d, std::uint64_t seed) {
  if (d <= 0) throw InputError("random_orthogonal: dimension " + std::to_string(d) + " must be positive.");
  SeededNormal rng(seed);
  Eigen::MatrixXd g(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) g(i, j) = rng.normal();
  Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
  Eigen::MatrixXd q = qr.householderQ();
  const Eigen::MatrixXd r = qr.matrixQR().triangularView<Eigen::Upper>();
  for (int j = 0; j < d; ++j)
    if (r(j, j) < 0) q.col(j) *= -1.0;
  return q;
}

double kvquant_average_bits(int bits, double outlier_fraction, int T, int d, int pointer_elems) {
  if (T <= 0 || d <= 0 || pointer_elems <= 0)
    throw InputError("kvquant_average_bits: T = " + std::to_string(T) + ", d = " + std::to_string(d) +
                     ", pointer_elems = " + std::to_string(pointer_elems) + " must all be positive.");
  return bits + 32.0 * outlier_fraction + 32.0 / pointer_elems + 32.0 / T + (16.0 - bits) / T +
         16.0 * double(1 << bits) / (double(T) * d);
}

ChannelSplit turboquant_split(double bits, int d) {
  ChannelSplit s;
  s.low_bits = static_cast<int>(std::floor(bits));
  const double frac = bits - s.low_bits;
  s.n_high = static_cast<int>(std::lround(frac * d));
  s.high_bits = s.n_high > 0 ? s.low_bits + 1 : s.low_bits;
  return s;
}

// ---- parameters -------------------------------------------------------------------


std::vector<int> resolve_tokens(const std::string& quantizer, int T, const std::vector<int>& tokens) {
  if (tokens.empty()) {
    std::vector<int> all(static_cast<std::size_t>(T));
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= T)
      throw InputError("Key quantizer '" + quantizer + "': token index " + std::to_string(tokens[i]) +
                       " is outside the head's " + std::to_string(T) + " tokens.");
    if (i > 0 && tokens[i] <= tokens[i - 1])
      throw InputError("Key quantizer '" + quantizer + "': token indices must be strictly ascending, but " +
                       std::to_string(tokens[i]) + " follows " + std::to_string(tokens[i - 1]) + ".");
  }
  return tokens;
}

// ---- KIVI and per-token wrappers ----------------------------------------------------

namespace {

// KIVI (2402.02750): post-RoPE keys per channel in groups of G tokens (quantizer.hpp);
// after prefill the last (n mod R) tokens stay in the fp16 residual window.
// Rate: b + 32/G on the quantized tokens; the window's rows cost 16 bits (b code + 16-b meta).
class KiviKeyQuantizer final : public KeyQuantizer {
 public:
  KiviKeyQuantizer(int bits, int group, int residual, KeyQuantizerParams eff)
      : bits_(bits), group_(group), residual_(residual), eff_(std::move(eff)) {}
  std::string name() const override { return kivi_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override { return kivi_key_quantizer_entry().info.source; }
  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams&, const std::vector<int>& tokens) const override {
    const auto rows = resolve_tokens("kivi", static_cast<int>(head.keys.rows()), tokens);
    const int d = static_cast<int>(head.keys.cols());
    const std::size_t n = rows.size();
    const std::size_t n_window = residual_ > 0 ? n % residual_ : 0;
    const std::vector<int> quant(rows.begin(), rows.end() - n_window);
    QuantizedHeadKeys out;
    out.keys.resize(static_cast<Eigen::Index>(n), d);
    Tier tier{QuantizerKind::KiviPerChannel, bits_, group_};
    if (!quant.empty()) {
      const QuantizedBlock b = quantize_block(head.keys, quant, tier);
      out.keys.topRows(static_cast<Eigen::Index>(quant.size())) = b.dequant;
      out.code_bits += b.code_bits;
      out.meta.push_back({"fp16 scale + min per channel per group", b.meta_bits});
    }
    for (std::size_t i = quant.size(); i < n; ++i) out.keys.row(static_cast<Eigen::Index>(i)) = head.keys.row(rows[i]);
    out.code_bits += double(n_window) * d * bits_;
    out.meta.push_back({"fp16 residual window beyond code bits", double(n_window) * d * (16 - bits_)});
    return out;
  }

 private:
  int bits_, group_, residual_;
  KeyQuantizerParams eff_;
};

// Per-token (values-style): each token alone, channel groups of n (0 = d); rate b + 32 ceil(d/n)/d.
class TokenKeyQuantizer final : public KeyQuantizer {
 public:
  TokenKeyQuantizer(int bits, int group, KeyQuantizerParams eff) : bits_(bits), group_(group), eff_(std::move(eff)) {}
  std::string name() const override { return token_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override { return token_key_quantizer_entry().info.source; }
  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams&, const std::vector<int>& tokens) const override {
    const auto rows = resolve_tokens("token", static_cast<int>(head.keys.rows()), tokens);
    const QuantizedBlock b = quantize_block(head.keys, rows, Tier{QuantizerKind::PerToken, bits_, group_});
    QuantizedHeadKeys out;
    out.keys = b.dequant;
    out.code_bits = b.code_bits;
    out.meta.push_back({"fp16 scale + zero per token per group", b.meta_bits});
    return out;
  }

 private:
  int bits_, group_;
  KeyQuantizerParams eff_;
};

}  // namespace

const KeyQuantizerEntry& kivi_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"kivi", "key quantizer",
       "post-RoPE keys per channel, groups of G tokens, fp16 residual window; b + 32/G",
       "arXiv 2402.02750, github.com/jy-yuan/KIVI",
       {{"bits", "2", "code bits"},
       {"group", "32", "tokens per group G"},
       {"residual", "128", "fp16 residual window R, a multiple of G (0 = none)"}}},
      &make_kivi_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_kivi_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(kivi_key_quantizer_entry(), params);
  const int bits = r.get_int("bits", 1, 15);
  const int group = r.get_int("group", 1, 1 << 20);
  const int residual = r.get_int("residual", 0, 1 << 20);
  r.finish();
  if (residual % group != 0)
    throw InputError("Key quantizer 'kivi': residual = " + std::to_string(residual) +
                     " must be a multiple of group = " + std::to_string(group) + ".");
  return std::make_unique<KiviKeyQuantizer>(bits, group, residual, r.effective());
}

const KeyQuantizerEntry& token_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"token", "key quantizer",
       "post-RoPE keys per token, channel groups of n; b + 32 ceil(d/n)/d",
       "asymmetric min/max per token (KIVI values, QuaRot axis)",
       {{"bits", "4", "code bits"}, {"group", "0", "channels per group n (0 = d)"}}},
      &make_token_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_token_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(token_key_quantizer_entry(), params);
  const int bits = r.get_int("bits", 1, 15);
  const int group = r.get_int("group", 0, 1 << 20);
  r.finish();
  return std::make_unique<TokenKeyQuantizer>(bits, group, r.effective());
}

// ---- registry ---------------------------------------------------------------------
// The list of the entries; each is declared next to its quantizer's factory (kivi and token
// above, the others in their own source files), so adding a parameter touches one place.

const std::vector<KeyQuantizerEntry>& key_quantizer_registry() {
  static const std::vector<KeyQuantizerEntry> registry{
      kivi_key_quantizer_entry(),       token_key_quantizer_entry(),   quarot_key_quantizer_entry(),
      kvquant_key_quantizer_entry(),    turboquant_key_quantizer_entry(), kvcobra_key_quantizer_entry(),
      headq_key_quantizer_entry(),      rdkv_channel_key_quantizer_entry()};
  return registry;
}

const KeyQuantizerEntry& key_quantizer_entry(const std::string& name) {
  for (const auto& e : key_quantizer_registry())
    if (e.info.name == name) return e;
  std::string list;
  for (const auto& e : key_quantizer_registry()) list += (list.empty() ? "" : ", ") + e.info.name;
  throw InputError("Unknown key quantizer '" + name + "'; valid names are " + list + ".");
}

std::unique_ptr<KeyQuantizer> make_key_quantizer(const std::string& name, const KeyQuantizerParams& params) {
  return key_quantizer_entry(name).make(params);
}

}  // namespace tierlab
