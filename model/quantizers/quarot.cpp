// QuaRot's key quantizer (arXiv 2404.00456, github.com/spcl/QuaRot), bit-exact in float32.
//
// For each token t (post-RoPE key k_t, d a power of 2):
//   y = H_d k_t / sqrt(d)                           (Walsh-Hadamard; q is rotated the same way,
//                                                    so q.k = (Hq).(Hk)/d is preserved)
//   per group of n = min(group, d) channels of y:
//     xmax = clip * max(max y, 0),  xmin = clip * min(min y, 0)   (range always includes 0)
//     if xmax == xmin == 0: xmin = -1, xmax = 1
//     scale = (xmax - xmin) / (2^b - 1),  zero = round(-xmin / scale)
//     c = clamp(round(y / scale) + zero, 0, 2^b - 1),  y^ = scale * (c - zero)
//   k^_t = H_d y^ / sqrt(d)                         (back to the original basis)
// Rate: b code bits + fp16 scale + fp16 zero per token per group = b + 32/n (0.25 at n = 128).
// round() is round-half-to-even (torch.round).
#include <algorithm>
#include <cmath>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"

namespace tierlab {

const KeyQuantizerEntry& quarot_key_quantizer_entry();  // defined below, listed in key_quantizer_registry()

namespace {

class QuarotKeyQuantizer final : public KeyQuantizer {
 public:
  QuarotKeyQuantizer(int bits, int group, double clip, KeyQuantizerParams eff)
      : bits_(bits), group_(group), clip_(static_cast<float>(clip)), eff_(std::move(eff)) {}
  std::string name() const override { return quarot_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override { return quarot_key_quantizer_entry().info.source; }

  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams&, const std::vector<int>& tokens) const override {
    const int d = static_cast<int>(head.keys.cols());
    if (!is_power_of_two(d))
      throw InputError("Key quantizer 'quarot': head dim d = " + std::to_string(d) +
                       " is not a power of 2, which the Walsh-Hadamard rotation needs.");
    const int n = std::min(group_, d);
    if (d % n != 0)
      throw InputError("Key quantizer 'quarot': group = " + std::to_string(n) + " does not divide head dim " +
                       std::to_string(d) + ".");
    const auto rows = resolve_tokens("quarot", static_cast<int>(head.keys.rows()), tokens);
    QuantizedHeadKeys out;
    out.keys.resize(static_cast<Eigen::Index>(rows.size()), d);
    const float maxq = float((1 << bits_) - 1);
    std::vector<float> y(d);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const float* k = head.keys.row(rows[i]).data();
      std::copy(k, k + d, y.begin());
      walsh_hadamard(y.data(), d);
      for (int j0 = 0; j0 < d; j0 += n) {
        float mx = 0.0f, mn = 0.0f;
        for (int j = j0; j < j0 + n; ++j) {
          mx = std::max(mx, y[j]);
          mn = std::min(mn, y[j]);
        }
        mx *= clip_;
        mn *= clip_;
        if (mx == 0.0f && mn == 0.0f) {
          mn = -1.0f;
          mx = 1.0f;
        }
        const float scale = (mx - mn) / maxq;
        const float zero = std::nearbyint(-mn / scale);
        for (int j = j0; j < j0 + n; ++j) {
          const float c = std::clamp(std::nearbyint(y[j] / scale) + zero, 0.0f, maxq);
          y[j] = scale * (c - zero);
        }
      }
      walsh_hadamard(y.data(), d);
      std::copy(y.begin(), y.end(), out.keys.row(static_cast<Eigen::Index>(i)).data());
    }
    const double groups = double(rows.size()) * (d / n);
    out.code_bits = double(rows.size()) * d * bits_;
    out.meta = {{"fp16 scale per token per group", 16.0 * groups}, {"fp16 zero per token per group", 16.0 * groups}};
    return out;
  }

 private:
  int bits_, group_;
  float clip_;
  KeyQuantizerParams eff_;
};

}  // namespace

const KeyQuantizerEntry& quarot_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"quarot", "key quantizer",
       "Walsh-Hadamard-rotated post-RoPE keys per token, clip 0.95, integer zero; b + 32/group",
       "arXiv 2404.00456, github.com/spcl/QuaRot",
       {{"bits", "4", "code bits"},
       {"group", "128", "rotated channels per group"},
       {"clip", "0.95", "range clip ratio (1 = spcl/QuaRot's parser default, no clipping)"}}},
      &make_quarot_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_quarot_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(quarot_key_quantizer_entry(), params);
  const int bits = r.get_int("bits", 1, 15);
  const int group = r.get_int("group", 1, 1 << 20);
  const double clip = r.get_double("clip", 1e-6, 1.0);
  r.finish();
  return std::make_unique<QuarotKeyQuantizer>(bits, group, clip, r.effective());
}

}  // namespace tierlab
