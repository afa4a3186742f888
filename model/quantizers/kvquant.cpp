// KVQuant's key quantizer (arXiv 2401.18079, github.com/SqueezeAILab/KVQuant).
//
// Input: PRE-RoPE keys K (T x d). Calibration on the head's own prompt (offline
// calibration on the trace), over the tokens t >= s (s = number of sink tokens):
//   per channel j: lo_j, hi_j = the p/2 and 100 - p/2 percentiles (linear interpolation,
//     numpy/torch default), p = outlier_percent (1 -> 0.5 / 99.5);
//     offset_j = (hi_j + lo_j) / 2, scale_j = (hi_j - lo_j) / 2 (1 when 0);
//   codebook C (2^b entries in [-1, 1]): weighted 1-D k-means (Lloyd, initialised at the
//     weighted quantiles (i + 1/2) / 2^b, iterated until assignments are stable) over the
//     normalised inliers u = (x - offset_j) / scale_j of all channels, one codebook per head
//     (the paper's is per layer; a trace is read one head at a time). Weights: the paper's
//     Fisher information (squared gradients) is not in a trace; the proxy is
//       weighting=uniform (default) : w = 1
//       weighting=query             : w_j = mean over observation queries of the RoPE-pair
//                                     energy (q_a^2 + q_b^2)/2 of the pair holding j
//                                     (rotation invariant, so valid for pre-RoPE keys).
// Quantization of token t (t >= s): x outside [lo_j, hi_j] -> kept exact (sparse store);
//   else x^ = scale_j * C[argmin_c |u - C_c|] + offset_j. Sink tokens t < s: fp16, exact.
// Post-RoPE keys: k^_t = RoPE(x^_t, t) (RopeParams, interleaved or half); sinks return the
// trace's post-RoPE key.
// Rate (bits, over the n quantized rows): codes n d b; outliers 32 each (fp16 value +
// 16-bit index); a 32-bit CSR row pointer per token shared by pointer_elems elements
// (default 4096: LLaMA-7B's layer of 32 heads x 128, as the paper stores the sparse
// matrix per layer); fp16 scale + offset per channel (32 d); fp16 codebook (16 2^b); sink
// rows 16 - b more than their code bits. Per element: kvquant_average_bits().
#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"

namespace tierlab {

const KeyQuantizerEntry& kvquant_key_quantizer_entry();  // defined below, listed in key_quantizer_registry()

namespace {

// Percentile q in [0, 100] of sorted v, linear interpolation between closest ranks.
double percentile(const std::vector<double>& v, double q) {
  const double pos = q / 100.0 * double(v.size() - 1);
  const std::size_t i = static_cast<std::size_t>(std::floor(pos));
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (pos - double(i)) * (v[i + 1] - v[i]);
}

// Weighted 1-D k-means on (value, weight) pairs; returns L ascending centroids.
std::vector<double> weighted_kmeans(std::vector<std::pair<double, double>> data, int L) {
  std::sort(data.begin(), data.end());
  const std::size_t N = data.size();
  std::vector<double> cw(N + 1, 0.0), cwx(N + 1, 0.0);  // prefix sums of w and w x
  for (std::size_t i = 0; i < N; ++i) {
    cw[i + 1] = cw[i] + data[i].second;
    cwx[i + 1] = cwx[i] + data[i].second * data[i].first;
  }
  std::vector<double> c(L);
  if (N == 0 || cw[N] <= 0) {
    for (int i = 0; i < L; ++i) c[i] = L == 1 ? 0.0 : -1.0 + 2.0 * i / (L - 1);
    return c;
  }
  for (int i = 0; i < L; ++i) {  // weighted quantile initialisation
    const double target = (i + 0.5) / L * cw[N];
    const std::size_t k = std::lower_bound(cw.begin() + 1, cw.end(), target) - (cw.begin() + 1);
    c[i] = data[std::min(k, N - 1)].first;
  }
  std::vector<std::size_t> bounds(L + 1), prev;
  for (int it = 0; it < 1000; ++it) {
    std::sort(c.begin(), c.end());
    bounds[0] = 0;
    bounds[L] = N;
    for (int i = 1; i < L; ++i) {
      const double mid = 0.5 * (c[i - 1] + c[i]);
      bounds[i] = std::lower_bound(data.begin(), data.end(), std::make_pair(mid, -1.0)) - data.begin();
    }
    if (bounds == prev) break;
    prev = bounds;
    for (int i = 0; i < L; ++i) {
      const double w = cw[bounds[i + 1]] - cw[bounds[i]];
      if (w > 0) c[i] = (cwx[bounds[i + 1]] - cwx[bounds[i]]) / w;
    }
  }
  for (double& x : c) x = std::clamp(x, -1.0, 1.0);
  return c;
}

class KvquantKeyQuantizer final : public KeyQuantizer {
 public:
  KvquantKeyQuantizer(int bits, double pct, std::string weighting, int sink, int pointer_elems, KeyQuantizerParams eff)
      : bits_(bits), pct_(pct), weighting_(std::move(weighting)), sink_(sink), pointer_elems_(pointer_elems),
        eff_(std::move(eff)) {}
  std::string name() const override { return kvquant_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override { return kvquant_key_quantizer_entry().info.source; }

  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams& rope,
                             const std::vector<int>& tokens) const override {
    const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
    if (head.keys_pre_rope.rows() != T || head.keys_pre_rope.cols() != d)
      throw InputError("Key quantizer 'kvquant': head (layer " + std::to_string(head.layer) + ", kv head " +
                       std::to_string(head.kv_head) +
                       ") has no keys_pre_rope tensor; KVQuant quantizes pre-RoPE keys (capture with pre-RoPE keys).");
    const auto rows = resolve_tokens("kvquant", T, tokens);
    const int s = std::min(sink_, T);
    const MatrixRM& K = head.keys_pre_rope;

    // Per-channel calibration.
    std::vector<double> lo(d, 0.0), hi(d, 0.0), offset(d, 0.0), scale(d, 1.0);
    std::vector<double> col;
    for (int j = 0; j < d; ++j) {
      col.clear();
      for (int t = s; t < T; ++t) col.push_back(K(t, j));
      if (col.empty()) continue;
      std::sort(col.begin(), col.end());
      lo[j] = percentile(col, pct_ / 2.0);
      hi[j] = percentile(col, 100.0 - pct_ / 2.0);
      offset[j] = 0.5 * (hi[j] + lo[j]);
      scale[j] = hi[j] > lo[j] ? 0.5 * (hi[j] - lo[j]) : 1.0;
    }
    const std::vector<double> w = channel_weights(head, rope, d);
    std::vector<std::pair<double, double>> data;
    data.reserve(static_cast<std::size_t>(std::max(0, T - s)) * d);
    for (int t = s; t < T; ++t)
      for (int j = 0; j < d; ++j) {
        const double x = K(t, j);
        if (x >= lo[j] && x <= hi[j]) data.emplace_back((x - offset[j]) / scale[j], w[j]);
      }
    const std::vector<double> C = weighted_kmeans(std::move(data), 1 << bits_);

    QuantizedHeadKeys out;
    out.keys.resize(static_cast<Eigen::Index>(rows.size()), d);
    long long n_out = 0, n_sink = 0;
    std::vector<float> x(d);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const int t = rows[i];
      if (t < s) {
        out.keys.row(static_cast<Eigen::Index>(i)) = head.keys.row(t);
        ++n_sink;
        continue;
      }
      for (int j = 0; j < d; ++j) {
        const double v = K(t, j);
        if (v < lo[j] || v > hi[j]) {
          x[j] = static_cast<float>(v);
          ++n_out;
          continue;
        }
        const double u = (v - offset[j]) / scale[j];
        const auto it = std::lower_bound(C.begin(), C.end(), u);
        double best = it == C.end() ? C.back() : *it;
        if (it != C.begin() && (it == C.end() || std::abs(*(it - 1) - u) <= std::abs(*it - u))) best = *(it - 1);
        x[j] = static_cast<float>(scale[j] * best + offset[j]);
      }
      apply_rope(x.data(), d, double(t), rope, +1);
      std::copy(x.begin(), x.end(), out.keys.row(static_cast<Eigen::Index>(i)).data());
    }
    const double n = double(rows.size());
    out.code_bits = n * d * bits_;
    out.meta = {
        {"sparse outliers (fp16 value + 16-bit index)", 32.0 * double(n_out)},
        {"CSR row pointers (32 bits per token per " + std::to_string(pointer_elems_) + " elements)",
         32.0 * n * d / pointer_elems_},
        {"fp16 scale + offset per channel", 32.0 * d},
        {"fp16 codebook", 16.0 * double(1 << bits_)},
        {"fp16 sink tokens beyond code bits", double(n_sink) * d * (16 - bits_)},
    };
    return out;
  }

 private:
  std::vector<double> channel_weights(const HeadData& head, const RopeParams& rope, int d) const {
    std::vector<double> w(d, 1.0);
    if (weighting_ == "uniform") return w;
    if (head.obs_queries.rows() == 0 || head.obs_queries.cols() != d)
      throw InputError("Key quantizer 'kvquant': weighting = query needs observation queries, but head (layer " +
                       std::to_string(head.layer) + ", kv head " + std::to_string(head.kv_head) + ") has none.");
    std::vector<double> e(d, 0.0);
    for (Eigen::Index r = 0; r < head.obs_queries.rows(); ++r)
      for (int j = 0; j < d; ++j) e[j] += double(head.obs_queries(r, j)) * head.obs_queries(r, j);
    for (int j = 0; j < d; ++j) e[j] /= double(head.obs_queries.rows());
    const int rd = rope.rotary_dim > 0 ? std::min(rope.rotary_dim, d) : d;
    const int pairs = rd / 2;
    for (int j = 0; j < d; ++j) w[j] = e[j];
    for (int i = 0; i < pairs; ++i) {
      const int a = rope.style == "half" ? i : 2 * i, b = rope.style == "half" ? i + pairs : 2 * i + 1;
      w[a] = w[b] = 0.5 * (e[a] + e[b]);
    }
    return w;
  }

  int bits_;
  double pct_;
  std::string weighting_;
  int sink_, pointer_elems_;
  KeyQuantizerParams eff_;
};

}  // namespace

const KeyQuantizerEntry& kvquant_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"kvquant", "key quantizer",
       "pre-RoPE keys per channel, k-means codebook, 1% sparse outliers, fp16 sink; ~b + 0.32 + small",
       "arXiv 2401.18079, github.com/SqueezeAILab/KVQuant",
       {{"bits", "2", "code bits (a 2^b-entry codebook)"},
       {"outlier_percent", "1", "percent of values kept exact (sparse)"},
       {"weighting", "uniform", "k-means weights (query: observation-query channel energy)", {"uniform", "query"}},
       {"sink", "1", "first tokens kept in fp16"},
       {"pointer_elems", "4096", "elements sharing one 32-bit row pointer (d = per head)"}}},
      &make_kvquant_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_kvquant_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(kvquant_key_quantizer_entry(), params);
  const int bits = r.get_int("bits", 1, 8);
  const double pct = r.get_double("outlier_percent", 0.0, 50.0);
  const std::string weighting = r.get_string("weighting");
  const int sink = r.get_int("sink", 0, 1 << 20);
  const int pointer_elems = r.get_int("pointer_elems", 1, 1 << 24);
  r.finish();
  return std::make_unique<KvquantKeyQuantizer>(bits, pct, weighting, sink, pointer_elems, r.effective());
}

}  // namespace tierlab
