// TurboQuant's key quantizer (arXiv 2504.19874).
//
// Per token (post-RoPE key k, dimension d), with R = random_orthogonal(d, seed):
//   n = ||k|| (stored fp16), u = R k / n, whose coordinates are ~ N(0, 1/d);
//   variant mse : each coordinate u_j -> the nearest level of the Lloyd-Max codebook of
//                 N(0,1) at b_j bits, scaled by 1/sqrt(d) (lloyd_max_gaussian);
//   variant prod: the same at b_j - 1 bits (0 bits -> 0), then the residual r = u - u_mse is
//                 sketched with one bit per coordinate, z = sign(S r) (S a seeded d x d
//                 N(0,1) matrix, sign(0) = +1), gamma = ||r|| stored fp16, and
//                 r^ = sqrt(pi/2) / d * gamma * S^T z (QJL: E[<q, r^>] = <q, r>, unbiased);
//   k^ = n R^T u^.
// Fractional rates split the rotated coordinates (turboquant_split): the first n_high at
// ceil(b) bits, the rest at floor(b); or, with high_channels = m >= 0, the first m at
// floor(b) + 1. The paper's "2.5-bit" setting (32 channels x 3 + 96 x 2 at d = 128) is
// bits=2 high_channels=32: its code rate is (32*3 + 96*2)/128 = 2.25 bits, which is what is
// counted here (the paper's label includes more than code bits; docs/methods.md).
// Rate: code b (the average of b_j) + 16/d for the norm (mse), + 32/d (prod: norm + gamma).
#include <cmath>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"

namespace tierlab {

const KeyQuantizerEntry& turboquant_key_quantizer_entry();  // defined below, listed in key_quantizer_registry()

namespace {

class TurboquantKeyQuantizer final : public KeyQuantizer {
 public:
  TurboquantKeyQuantizer(double bits, int high, bool prod, std::uint64_t seed, KeyQuantizerParams eff)
      : bits_(bits), high_(high), prod_(prod), seed_(seed), eff_(std::move(eff)) {}
  std::string name() const override { return turboquant_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override { return turboquant_key_quantizer_entry().info.source; }

  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams&, const std::vector<int>& tokens) const override {
    const int d = static_cast<int>(head.keys.cols());
    const auto rows = resolve_tokens("turboquant", static_cast<int>(head.keys.rows()), tokens);
    ChannelSplit split = turboquant_split(bits_, d);
    if (high_ >= 0) {
      if (high_ > d)
        throw InputError("Key quantizer 'turboquant': high_channels = " + std::to_string(high_) +
                         " exceeds the head dim " + std::to_string(d) + ".");
      split = {static_cast<int>(std::floor(bits_)), static_cast<int>(std::floor(bits_)) + 1, high_};
    }
    const int stage_low = split.low_bits - (prod_ ? 1 : 0), stage_high = split.high_bits - (prod_ ? 1 : 0);
    const LloydMaxCodebook cb_low = stage_low > 0 ? lloyd_max_gaussian(stage_low) : LloydMaxCodebook{};
    const LloydMaxCodebook cb_high = stage_high > 0 ? lloyd_max_gaussian(stage_high) : LloydMaxCodebook{};
    const MatrixRMd R = random_orthogonal(d, seed_);
    MatrixRMd S;
    if (prod_) {
      SeededNormal rng(seed_ ^ 0x5143A4C0FFEEull);  // the QJL projection's own stream
      S.resize(d, d);
      for (int i = 0; i < d; ++i)
        for (int j = 0; j < d; ++j) S(i, j) = rng.normal();
    }
    const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
    auto nearest = [&](const LloydMaxCodebook& cb, double x) {
      if (cb.levels.empty()) return 0.0;
      std::size_t i = 0;
      while (i < cb.thresholds.size() && x / inv_sqrt_d > cb.thresholds[i]) ++i;
      return cb.levels[i] * inv_sqrt_d;
    };
    QuantizedHeadKeys out;
    out.keys.resize(static_cast<Eigen::Index>(rows.size()), d);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const VectorD k = head.keys.row(rows[i]).transpose().cast<double>();
      const double n = k.norm();
      if (n == 0.0) {
        out.keys.row(static_cast<Eigen::Index>(i)).setZero();
        continue;
      }
      const VectorD u = R * k / n;
      VectorD uh(d);
      for (int j = 0; j < d; ++j) uh(j) = nearest(j < split.n_high ? cb_high : cb_low, u(j));
      if (prod_) {
        const VectorD r = u - uh;
        const VectorD proj = S * r;
        VectorD z(d);
        for (int j = 0; j < d; ++j) z(j) = proj(j) >= 0.0 ? 1.0 : -1.0;
        uh += std::sqrt(M_PI / 2.0) / d * r.norm() * (S.transpose() * z);
      }
      out.keys.row(static_cast<Eigen::Index>(i)) = (n * (R.transpose() * uh)).cast<float>().transpose();
    }
    const double m = double(rows.size());
    out.code_bits = m * (double(split.n_high) * split.high_bits + double(d - split.n_high) * split.low_bits);
    out.meta = {{"fp16 norm per token", 16.0 * m}};
    if (prod_) out.meta.push_back({"fp16 residual norm per token (prod)", 16.0 * m});
    return out;
  }

 private:
  double bits_;
  int high_;
  bool prod_;
  std::uint64_t seed_;
  KeyQuantizerParams eff_;
};

}  // namespace

const KeyQuantizerEntry& turboquant_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"turboquant", "key quantizer",
       "seeded rotation, Lloyd-Max per coordinate, fp16 norm (prod: + 1-bit QJL); b + 16/d (prod b + 32/d)",
       "arXiv 2504.19874",
       {{"bits", "2", "code bits per coordinate, fractional allowed"},
       {"high_channels", "-1", "channels at ceil(b) bits (-1 = from fractional bits)"},
       {"variant", "mse", "prod: (b-1)-bit stage + 1-bit QJL sketch of the residual", {"mse", "prod"}},
       {"seed", "0", "rotation and sketch seed"}}},
      &make_turboquant_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_turboquant_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(turboquant_key_quantizer_entry(), params);
  const double bits = r.get_double("bits", 1.0, 8.0);
  const int high = r.get_int("high_channels", -1, 1 << 16);
  const std::string variant = r.get_string("variant");
  const std::uint64_t seed = r.get_seed("seed");
  r.finish();
  return std::make_unique<TurboquantKeyQuantizer>(bits, high, variant == "prod", seed, r.effective());
}

}  // namespace tierlab
