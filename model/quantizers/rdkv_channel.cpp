// RDKV's key allocation PER CHANNEL (arXiv 2605.08317, github.com/Junkai1860/RDKV):
// a quantizer of the whole head (every token of channel c at the same bits b_c).
//
// Channel score (the released code's ThinK score, obkv_fast.py _score_one_layer):
//   s_c = mean_q q_c^2 * mean_t k_c^2
// over the head's observation queries (all g W rows, post-RoPE) and all T post-RoPE keys
// (calibration uses the whole head); without observation queries mean_q q_c^2 = 1.
// Smoothing (docs/methods.md section 1, "RDKV per channel": scores smoothed by a
// reflect-padded average pool of kernel 5):
//   s~ = reflect_average_pool(s, kernel) over the channel index; kernel = 1 leaves s as is
//   (the released code pools the value-side TOKEN scores only; docs/methods.md).
// Allocation: b_c = argmin_{b in options} s~_c eps(b) + lambda b (ties to the lower b),
//   lambda >= 0 the least value with mean_c b_c <= budget (found among the
//   breakpoints lambda = s~_c (eps(b) - eps(b')) / (b' - b) (times 1 + 1e-12, so the tie
//   resolves to the lower bits), where a geometric bisection
//   converges; lambda = 0 when every channel at its best bits fits).
//   options default {0, 2, 4, 8, 16}; eps default the paper's Llama-3.1-8B key NMSE
//   eps(0) = 1, eps(2) = 0.0955, eps(4) = 4.02e-3, eps(8) = 1.40e-5, eps(16) = 0.
// Quantization of channel c over the quantized rows, groups of G tokens (G = 0: all rows),
// the released pack_k_mixed / quantize_and_pack formula (asymmetric, integer zero point):
//   scale = max((max - min) / (2^b - 1), 1e-8), zp = round(clamp(-min / scale, 0, 2^b - 1)),
//   code = round(clamp(x / scale + zp, 0, 2^b - 1)), x^ = (code - zp) scale   (float32);
//   b = 0: the channel is evicted (x^ = 0); b = 16: kept exact (tierlab's exact tier).
// Rate (bits): codes n sum_c b_c; fp16 scale + fp16 zero point per quantized channel
// (0 < b < 16) per group; the channel bit map, ceil(log2 |options|) bits per channel once
// per head. Per element: divide by n d.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/quantizers/key_quantizer.hpp"

namespace tierlab {

const KeyQuantizerEntry& rdkv_channel_key_quantizer_entry();  // defined below, listed in key_quantizer_registry()

double rdkv_paper_key_nmse(int bits) {
  switch (bits) {
    case 0: return 1.0;
    case 2: return 0.0955;
    case 4: return 4.02e-3;
    case 8: return 1.40e-5;
    case 16: return 0.0;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

namespace {

double paper_key_nmse(int bits) {
  const double eps = rdkv_paper_key_nmse(bits);
  if (std::isnan(eps))
    throw InputError("Key quantizer 'rdkv-channel': the paper's eps(b) has no value for " + std::to_string(bits) +
                     " bits (it covers 0, 2, 4, 8, 16); pass eps=... for these options.");
  return eps;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

class RdkvChannelKeyQuantizer final : public KeyQuantizer {
 public:
  RdkvChannelKeyQuantizer(double budget, std::vector<int> options, std::vector<double> eps, int kernel, int group,
                          KeyQuantizerParams eff)
      : budget_(budget), options_(std::move(options)), eps_(std::move(eps)), kernel_(kernel), group_(group),
        eff_(std::move(eff)) {}
  std::string name() const override { return rdkv_channel_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override { return rdkv_channel_key_quantizer_entry().info.source; }

  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams&, const std::vector<int>& tokens) const override {
    const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
    const auto rows = resolve_tokens("rdkv-channel", T, tokens);
    std::vector<double> s = rdkv_channel_scores(head);
    if (kernel_ > 1) s = reflect_average_pool(s, kernel_);
    const RdkvChannelAllocation alloc = rdkv_allocate_channels(s, options_, eps_, budget_);
    const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
    QuantizedHeadKeys out;
    out.keys.resize(n, d);
    for (Eigen::Index i = 0; i < n; ++i) out.keys.row(i) = head.keys.row(rows[static_cast<std::size_t>(i)]);
    const int G = group_ > 0 ? group_ : std::max<int>(1, static_cast<int>(n));
    const long long groups = n > 0 ? (n + G - 1) / G : 0;
    int quantized_channels = 0;
    double bits_sum = 0;
    for (int c = 0; c < d; ++c) {
      const int b = alloc.bits[static_cast<std::size_t>(c)];
      bits_sum += b;
      if (b == 0) {
        out.keys.col(c).setZero();
        continue;
      }
      if (b >= 16) continue;
      ++quantized_channels;
      const float qmax = float((1 << b) - 1);
      for (Eigen::Index i0 = 0; i0 < n; i0 += G) {
        const Eigen::Index m = std::min<Eigen::Index>(G, n - i0);
        float mn = out.keys(i0, c), mx = out.keys(i0, c);
        for (Eigen::Index i = i0; i < i0 + m; ++i) {
          mn = std::min(mn, out.keys(i, c));
          mx = std::max(mx, out.keys(i, c));
        }
        const float scale = std::max((mx - mn) / qmax, 1e-8f);
        const float zp = std::nearbyint(std::clamp(-mn / scale, 0.0f, qmax));
        for (Eigen::Index i = i0; i < i0 + m; ++i) {
          const float code = std::nearbyint(std::clamp(out.keys(i, c) / scale + zp, 0.0f, qmax));
          out.keys(i, c) = (code - zp) * scale;
        }
      }
    }
    out.code_bits = double(n) * bits_sum;
    const int map_bits = static_cast<int>(std::ceil(std::log2(double(options_.size()))));
    out.meta = {{"fp16 scale + zero point per quantized channel per group (" + std::to_string(quantized_channels) +
                     " channels, lambda = " + std::to_string(alloc.lambda) + ")",
                 32.0 * quantized_channels * double(groups)},
                {"channel bit map (" + std::to_string(map_bits) + " bits per channel)", double(map_bits) * d}};
    return out;
  }

 private:
  double budget_;
  std::vector<int> options_;
  std::vector<double> eps_;
  int kernel_, group_;
  KeyQuantizerParams eff_;
};

}  // namespace

std::vector<double> reflect_average_pool(const std::vector<double>& x, int kernel) {
  if (kernel < 1 || kernel % 2 == 0)
    throw InputError("reflect_average_pool: kernel = " + std::to_string(kernel) + " must be odd and >= 1.");
  const int n = static_cast<int>(x.size());
  if (n == 0 || kernel == 1) return x;
  const int k = std::min(kernel, 2 * n - 1), pad = k / 2;
  auto at = [&](int i) {  // reflection without repeating the edge: x[-i] = x[i], x[n-1+i] = x[n-1-i]
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return x[static_cast<std::size_t>(i)];
  };
  std::vector<double> y(x.size());
  for (int i = 0; i < n; ++i) {
    double sum = 0;
    for (int j = i - pad; j <= i + pad; ++j) sum += at(j);
    y[static_cast<std::size_t>(i)] = sum / k;
  }
  return y;
}

std::vector<double> rdkv_channel_scores(const HeadData& head) {
  const int d = static_cast<int>(head.keys.cols());
  std::vector<double> s(static_cast<std::size_t>(d), 0.0);
  const bool have_q = head.obs_queries.rows() > 0 && head.obs_queries.cols() == d;
  for (int c = 0; c < d; ++c) {
    const double k2 = head.keys.rows() > 0 ? head.keys.col(c).cast<double>().squaredNorm() / double(head.keys.rows()) : 0.0;
    const double q2 =
        have_q ? head.obs_queries.col(c).cast<double>().squaredNorm() / double(head.obs_queries.rows()) : 1.0;
    s[static_cast<std::size_t>(c)] = q2 * k2;
  }
  return s;
}

RdkvChannelAllocation rdkv_allocate_channels(const std::vector<double>& scores, const std::vector<int>& options,
                                             const std::vector<double>& eps, double budget) {
  if (options.empty() || eps.size() != options.size())
    throw InputError("rdkv_allocate_channels: " + std::to_string(options.size()) + " bit options but " +
                     std::to_string(eps.size()) + " eps values; give one eps per option.");
  for (std::size_t j = 1; j < options.size(); ++j)
    if (options[j] <= options[j - 1])
      throw InputError("rdkv_allocate_channels: bit options must be strictly ascending, but " +
                       std::to_string(options[j]) + " follows " + std::to_string(options[j - 1]) + ".");
  if (!(budget >= options.front()))
    throw InputError("rdkv_allocate_channels: budget = " + std::to_string(budget) +
                     " bits is below the smallest option " + std::to_string(options.front()) + ".");
  const std::size_t m = options.size(), d = scores.size();
  auto choose = [&](double lambda, std::vector<int>* bits) {
    double used = 0;
    for (std::size_t c = 0; c < d; ++c) {
      std::size_t best = 0;
      double bv = scores[c] * eps[0] + lambda * options[0];
      for (std::size_t j = 1; j < m; ++j) {
        const double v = scores[c] * eps[j] + lambda * options[j];
        if (v < bv) bv = v, best = j;
      }
      used += options[best];
      if (bits) (*bits)[c] = options[best];
    }
    return d > 0 ? used / double(d) : 0.0;
  };
  const double tol = 1e-12 * std::max(1.0, budget);
  RdkvChannelAllocation out;
  out.bits.assign(d, 0);
  double lambda = 0.0;
  if (choose(0.0, nullptr) > budget + tol) {
    // The mean rate is a non-increasing step function of lambda whose steps lie at the
    // pairwise breakpoints; the least feasible lambda is one of them.
    std::vector<double> cand;
    for (std::size_t c = 0; c < d; ++c)
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t k = j + 1; k < m; ++k) {
          const double l = scores[c] * (eps[j] - eps[k]) / double(options[k] - options[j]);
          // Nudged up by 1e-12 so that the tie at the breakpoint resolves to the lower
          // bits despite rounding in s eps + lambda b.
          if (l > 0 && std::isfinite(l)) cand.push_back(l * (1 + 1e-12));
        }
    std::sort(cand.begin(), cand.end());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
    std::size_t lo = 0, hi = cand.size();  // first candidate with rate <= budget
    while (lo < hi) {
      const std::size_t mid = (lo + hi) / 2;
      if (choose(cand[mid], nullptr) <= budget + tol) hi = mid;
      else lo = mid + 1;
    }
    if (lo == cand.size())  // every channel at the lowest option; cannot happen when budget >= options[0]
      lambda = cand.empty() ? 0.0 : cand.back() * 2;
    else
      lambda = cand[lo];
  }
  out.lambda = lambda;
  out.mean_bits = choose(lambda, &out.bits);
  return out;
}

const KeyQuantizerEntry& rdkv_channel_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"rdkv-channel", "key quantizer",
       "RDKV per key channel: b_c in {0,2,4,8,16} by argmin s_c eps(b) + lambda b; sum_c b_c / d + metadata",
       "arXiv 2605.08317, github.com/Junkai1860/RDKV",
       {{"budget", "2", "mean bits per channel"},
       {"options", "0,2,4,8,16", "ascending bit widths (0 = channel evicted, 16 = exact)"},
       {"eps", "", "NMSE per option, comma list (empty = the paper's key NMSE)"},
       {"kernel", "5", "odd reflect avg-pool kernel over channels (1 = none)"},
       {"group", "0", "tokens per quantization group (0 = all tokens)"}}},
      &make_rdkv_channel_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_rdkv_channel_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(rdkv_channel_key_quantizer_entry(), params);
  const double budget = r.get_double("budget", 0.0, 16.0);
  const std::string opt_s = r.get_string("options");
  const std::string eps_s = r.get_string("eps");
  const int kernel = r.get_int("kernel", 1, 1 << 16);
  const int group = r.get_int("group", 0, 1 << 24);
  r.finish();
  if (kernel % 2 == 0)
    throw InputError("Key quantizer 'rdkv-channel': parameter kernel = " + std::to_string(kernel) + " must be odd.");
  std::vector<int> options;
  for (const std::string& item : split_list(opt_s)) {
    const std::optional<std::int64_t> parsed = read_integer(item);  // model/base/numbers.hpp: the whole item
    const long long b = parsed ? *parsed : -1;
    if (b < 0 || b > 16 || (b > 8 && b < 16))
      throw InputError("Key quantizer 'rdkv-channel': parameter options item '" + item +
                       "' is not a bit width in 0..8 or 16.");
    options.push_back(static_cast<int>(b));
  }
  std::vector<double> eps;
  if (eps_s.empty()) {
    for (int b : options) eps.push_back(paper_key_nmse(b));
  } else {
    for (const std::string& item : split_list(eps_s)) {
      const double e = read_real(item).value_or(-1.0);  // model/base/numbers.hpp: the whole item, finite
      if (!(e >= 0))
        throw InputError("Key quantizer 'rdkv-channel': parameter eps item '" + item +
                         "' is not a finite number >= 0.");
      eps.push_back(e);
    }
  }
  if (options.empty() || eps.size() != options.size())
    throw InputError("Key quantizer 'rdkv-channel': parameter eps has " + std::to_string(eps.size()) +
                     " values but options has " + std::to_string(options.size()) + ".");
  for (std::size_t j = 1; j < options.size(); ++j)
    if (options[j] <= options[j - 1])
      throw InputError("Key quantizer 'rdkv-channel': parameter options = '" + opt_s + "' must be strictly ascending.");
  if (budget < options.front())
    throw InputError("Key quantizer 'rdkv-channel': budget = " + std::to_string(budget) +
                     " is below the smallest option " + std::to_string(options.front()) + ".");
  return std::make_unique<RdkvChannelKeyQuantizer>(budget, std::move(options), std::move(eps), kernel, group,
                                                   r.effective());
}

}  // namespace tierlab
