// The saliency scorers (solvers/scorers.hpp): dropkv and obcache score a token by the output
// change its removal causes over the window queries; expected by the attention of the
// expected future query. Budget rule: top-k over the parameter selection (the default).
#include <algorithm>
#include <cmath>

#include "solvers/scorer_parts.hpp"

namespace tierlab {

// Defined below, listed in scorer_registry() (scorers.cpp).
const ScorerEntry& dropkv_scorer_entry();
const ScorerEntry& obcache_scorer_entry();
const ScorerEntry& expected_scorer_entry();
namespace {

// x_{j,t} = sum_i term(p_{j,i,t}, z_{j,i,t}, ||v_t||^2, ||v_t - o_{j,i}||^2) over the last W
// window queries of query head j (entries with p = 0 skipped).
template <class Term>
VectorD window_saliency(const ScorerSettings& c, const HeadData& h, int j, int W, Term term) {
  const int T = static_cast<int>(h.keys.rows());
  const MatrixRMd z = window_logits(h, c.group_size, j, W, c.causal);
  const MatrixRMd p = softmax_rows(z);
  const MatrixRMd V = h.values.cast<double>();
  const MatrixRMd O = p * V;
  VectorD s = VectorD::Zero(T);
  for (int t = 0; t < T; ++t) {
    const double vn2 = V.row(t).squaredNorm();
    for (int i = 0; i < W; ++i) {
      const double pt = p(i, t);
      if (pt == 0.0) continue;
      const double r2 = (V.row(t) - O.row(i)).squaredNorm();
      s(t) += term(pt, z(i, t), vn2, r2);
    }
  }
  return s;
}

// A saliency over every position, pooled and aggregated over the group.
template <class Raw>
VectorD pooled_saliency(const std::string& method, const ScorerSettings& c, const HeadData& h,
                        const WindowPooling& pooling, Raw raw) {
  const int T = static_cast<int>(h.keys.rows());
  const int W = effective_window(method, c, h);
  std::vector<VectorD> xs;
  for (int j = 0; j < c.group_size; ++j) xs.push_back(raw(j, W));
  return pooling.pool_and_aggregate(std::move(xs), c.gqa, T);
}

// DropKV: x_{j,t} = sum_i (p/(1-p))^2 ||v_t - o_{j,i}||^2, avg-pooled.
class DropKVScorer final : public EvictionScorer {
 public:
  DropKVScorer(ScorerParamReader& r, ScorerSettings& s) {
    r.read_settings(s);
    pooling_.read(r);
  }
  VectorD head_scores(const ScorerSettings& c, const HeadData& h) const override {
    return pooled_saliency("dropkv", c, h, pooling_, [&](int j, int W) {
      return window_saliency(c, h, j, W, [](double pt, double, double, double r2) {
        const double ratio = pt / std::max(1.0 - pt, 1e-12);
        return ratio * ratio * r2;
      });
    });
  }

 private:
  WindowPooling pooling_;
};

// OBCache: value sum_i p^2 ||v_t||^2, key sum_i (p z)^2 ||v_t - o_i||^2, joint = both.
class OBCacheScorer final : public EvictionScorer {
 public:
  enum class Score { Value, Key, Joint };
  OBCacheScorer(ScorerParamReader& r, ScorerSettings& s) {
    r.read_settings(s);
    const std::string score = r.get_string("score");
    pooling_.read(r);
    if (score == "value") score_ = Score::Value;
    else if (score == "key") score_ = Score::Key;
    else if (score == "joint") score_ = Score::Joint;
    else r.bad("score", "is not value, key or joint");
  }
  VectorD head_scores(const ScorerSettings& c, const HeadData& h) const override {
    const Score which = score_;
    return pooled_saliency("obcache", c, h, pooling_, [&](int j, int W) {
      return window_saliency(c, h, j, W, [which](double pt, double z, double vn2, double r2) {
        const double val = pt * pt * vn2, pz = pt * z, key = pz * pz * r2;
        return which == Score::Value ? val : which == Score::Key ? key : val + key;
      });
    });
  }

 private:
  Score score_ = Score::Joint;
  WindowPooling pooling_;
};

// Expected Attention: e_{j,t} = softmax_t(mu_j.k_t / sqrt(d) + k_t^T Sigma_j k_t / (2d)) ||v_t||.
class ExpectedScorer final : public EvictionScorer {
 public:
  ExpectedScorer(ScorerParamReader& r, ScorerSettings& s) {
    r.read_settings(s);
    use_covariance_ = r.get_bool("use_covariance");
    use_value_norm_ = r.get_bool("use_value_norm");
  }
  VectorD head_scores(const ScorerSettings& c, const HeadData& h) const override {
    const int W = effective_window("expected", c, h);
    std::vector<VectorD> xs;
    for (int j = 0; j < c.group_size; ++j) xs.push_back(query_head(c, h, j, W));
    return aggregate(xs, c.gqa);
  }

 private:
  VectorD query_head(const ScorerSettings& c, const HeadData& h, int j, int W) const {
    const int wtr = query_rows(h, c.group_size);
    const int T = static_cast<int>(h.keys.rows()), d = static_cast<int>(h.keys.cols());
    const MatrixRMd Q = h.obs_queries.middleRows(j * wtr + (wtr - W), W).cast<double>();
    const VectorD mu = Q.colwise().mean().transpose();
    const MatrixRMd C = Q.rowwise() - mu.transpose();
    const MatrixRMd sigma = (C.transpose() * C) / static_cast<double>(W);
    VectorD z(T);
    for (int t = 0; t < T; ++t) {
      const VectorD k = h.keys.row(t).cast<double>().transpose();
      z(t) = mu.dot(k) / std::sqrt(static_cast<double>(d));
      if (use_covariance_) z(t) += k.dot(sigma * k) / (2.0 * d);
    }
    VectorD e(T);
    softmax_row(z.data(), e.data(), T);
    if (use_value_norm_)
      for (int t = 0; t < T; ++t) e(t) *= h.values.row(t).cast<double>().norm();
    return e;
  }
  bool use_covariance_ = true, use_value_norm_ = true;
};

}  // namespace

const ScorerEntry& dropkv_scorer_entry() {
  static const ScorerEntry e{
      {"dropkv", "eviction scorer", "sum_i (p/(1-p))^2 ||v - o_i||^2 over the window, avg-pooled (k 11); top-k",
       "docs/methods.md (DropKV)",
       {shared_scorer_param("window", "32"), shared_scorer_param("kernel", "11"),
        shared_scorer_param("count_include_pad", "true"), shared_scorer_param("group_order", "after"),
        shared_scorer_param("gqa", "mean"), shared_scorer_param("causal", "true"), shared_scorer_param("sinks", "0"),
        shared_scorer_param("recent", "32"), shared_scorer_param("selection", "head"),
        shared_scorer_param("group_size", "1")}},
      &build_scorer<DropKVScorer>};
  return e;
}

const ScorerEntry& obcache_scorer_entry() {
  static const ScorerEntry e{
      {"obcache", "eviction scorer", "optimal-brain saliency: value sum p^2||v||^2, key sum (p z)^2 ||v - o||^2",
       "arXiv 2510.07651, DreamSoul-AI/OBCache",
       {shared_scorer_param("window", "32"), {"score", "joint", "value | key | joint (value + key)"},
        shared_scorer_param("pool", "avg"), shared_scorer_param("kernel", "1"),
        shared_scorer_param("count_include_pad", "true"), shared_scorer_param("gqa", "mean"),
        shared_scorer_param("causal", "true"), shared_scorer_param("sinks", "4"), shared_scorer_param("recent", "32"),
        shared_scorer_param("selection", "head"), shared_scorer_param("group_size", "1")}},
      &build_scorer<OBCacheScorer>};
  return e;
}

const ScorerEntry& expected_scorer_entry() {
  static const ScorerEntry e{
      {"expected", "eviction scorer",
       "attention to the expected future query (mean, covariance of window queries, post-RoPE) x ||v||",
       "NVIDIA/kvpress ExpectedAttentionPress (arXiv 2510.00636)",
       {shared_scorer_param("window", "32"), {"use_covariance", "true", "include k^T Sigma k / (2d)"},
        {"use_value_norm", "true", "multiply by ||v_t||"}, shared_scorer_param("gqa", "mean"),
        shared_scorer_param("sinks", "4"), shared_scorer_param("recent", "0"), shared_scorer_param("selection", "head"),
        shared_scorer_param("group_size", "1")}},
      &build_scorer<ExpectedScorer>};
  return e;
}

}  // namespace tierlab
