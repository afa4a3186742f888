// HeadQ's score-space side code (arXiv 2605.03562) on top of any registered base quantizer.
//
// Key error is measured in score space (score_space_error). Calibration: U = the top-r
// eigenvectors of the observation queries' second moment M = Q^T Q / n_q (post-RoPE, d x r).
// For the quantized rows: K^_0 = base quantizer's keys, residual E = K - K^_0 (n x d),
// side latent Z = E U (n x r), quantized per latent channel over the n rows with KIVI's
// asymmetric min/max at b_s bits (round half even), giving Z^. HeadQ applies the side code
// as an additive logit correction  s^(q, t) = q . k^0_t + (U^T q) . z^_t.  The recomputation
// interface takes keys, so it is realised as the key correction
//   k^_t = k^0_t + U z^_t,
// which gives exactly the same logits for EVERY query, since q . (U z) = (U^T q) . z
// (for q outside span(U) both forms correct only q's component in span(U)).
// Rate (bits): base code + n r b_s (side codes); base metadata + fp16 scale + min per side
// channel (32 r) + fp16 basis U (16 d r per head; basis_cost=offline counts 0, for a basis
// learned offline on calibration data as the paper does). Per element: base + r b_s / d + metadata.
#include <algorithm>
#include <cmath>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"

namespace tierlab {

const KeyQuantizerEntry& headq_key_quantizer_entry();  // defined below, listed in key_quantizer_registry()

namespace {

class HeadqKeyQuantizer final : public KeyQuantizer {
 public:
  HeadqKeyQuantizer(std::unique_ptr<KeyQuantizer> base, int rank, int side_bits, bool basis_free,
                    KeyQuantizerParams eff)
      : base_(std::move(base)), rank_(rank), side_bits_(side_bits), basis_free_(basis_free), eff_(std::move(eff)) {}
  std::string name() const override { return headq_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override {
    return headq_key_quantizer_entry().info.source + " (side code over base: " + base_->source() + ")";
  }

  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams& rope,
                             const std::vector<int>& tokens) const override {
    const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
    const auto rows = resolve_tokens("headq", T, tokens);
    if (head.obs_queries.rows() == 0 || head.obs_queries.cols() != d)
      throw InputError("Key quantizer 'headq': head (layer " + std::to_string(head.layer) + ", kv head " +
                       std::to_string(head.kv_head) + ") has no observation queries to learn the query basis from.");
    if (rank_ > d)
      throw InputError("Key quantizer 'headq': rank = " + std::to_string(rank_) + " exceeds the head dim " +
                       std::to_string(d) + ".");
    QuantizedHeadKeys out = base_->quantize(head, rope, rows);
    const MatrixRMd Q = head.obs_queries.cast<double>();
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(Q.transpose() * Q / double(Q.rows()));
    const Eigen::MatrixXd U = es.eigenvectors().rightCols(rank_).rowwise().reverse();  // top-r, descending
    const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
    MatrixRMd E(n, d);
    for (Eigen::Index i = 0; i < n; ++i)
      E.row(i) = head.keys.row(rows[i]).cast<double>() - out.keys.row(i).cast<double>();
    MatrixRM Z = (E * U).cast<float>();
    const float maxq = float((1 << side_bits_) - 1);
    for (int c = 0; c < rank_ && n > 0; ++c) {
      const float mn = Z.col(c).minCoeff(), mx = Z.col(c).maxCoeff();
      const float scale = (mx - mn) / maxq;
      if (scale == 0.0f) continue;
      for (Eigen::Index i = 0; i < n; ++i) {
        const float code = std::nearbyint(std::clamp((Z(i, c) - mn) / scale, 0.0f, maxq));
        const float prod = code * scale;
        Z(i, c) = prod + mn;
      }
    }
    out.keys = (out.keys.cast<double>() + Z.cast<double>() * U.transpose()).cast<float>();
    out.code_bits += double(n) * rank_ * side_bits_;
    out.meta.push_back({"side code: fp16 scale + min per query-basis channel", 32.0 * rank_});
    if (basis_free_)
      out.meta.push_back({"side code: query basis U (offline, not stored with the cache)", 0.0});
    else
      out.meta.push_back({"side code: fp16 query basis U", 16.0 * d * rank_});
    return out;
  }

 private:
  std::unique_ptr<KeyQuantizer> base_;
  int rank_, side_bits_;
  bool basis_free_;
  KeyQuantizerParams eff_;
};

}  // namespace

const KeyQuantizerEntry& headq_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"headq", "key quantizer",
       "base quantizer + low-rank residual in the calibration query basis (logit correction); base + r b_s / d",
       "arXiv 2605.03562",
       {{"base", "kivi", "base quantizer (any registered one but headq)"},
       {"base.*", "", "the base's parameters (default: the base's defaults)"},
       {"rank", "8", "side-code rank r"},
       {"side_bits", "4", "side-code bits b_s per channel"},
       {"basis_cost", "fp16", "fp16 = the basis is charged; offline = part of the model", {"fp16", "offline"}}}},
      &make_headq_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_headq_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(headq_key_quantizer_entry(), params);
  const std::string base_name = r.get_string("base");
  if (base_name == "headq") throw InputError("Key quantizer 'headq': base = headq is not allowed (no nesting).");
  const KeyQuantizerParams base_params = r.take_prefixed("base.");
  const int rank = r.get_int("rank", 1, 1 << 16);
  const int side_bits = r.get_int("side_bits", 1, 15);
  const std::string cost = r.get_string("basis_cost");
  r.finish();
  auto base = make_key_quantizer(base_name, base_params);
  KeyQuantizerParams eff = r.effective();
  for (const auto& [k, v] : base->parameters()) eff["base." + k] = v;
  return std::make_unique<HeadqKeyQuantizer>(std::move(base), rank, side_bits, cost == "offline", std::move(eff));
}

}  // namespace tierlab
