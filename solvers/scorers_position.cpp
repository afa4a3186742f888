// The scorers that read no window attention (solvers/scorers.hpp): streaming ranks by
// position, keydiff by key direction, laprox by the single-removal output cost of the
// surrogate. Budget rule: top-k over the parameter selection (the default).
#include <algorithm>
#include <cmath>

#include "model/base/error.hpp"
#include "model/surrogate.hpp"
#include "solvers/scorer_parts.hpp"

namespace tierlab {

// Defined below, listed in scorer_registry() (scorers.cpp).
const ScorerEntry& streaming_scorer_entry();
const ScorerEntry& keydiff_scorer_entry();
const ScorerEntry& laprox_scorer_entry();
namespace {

// StreamingLLM: x_t = t (the most recent win), sinks forced.
class StreamingScorer final : public EvictionScorer {
 public:
  StreamingScorer(ScorerParamReader& r, ScorerSettings& s) { r.read_settings(s); }
  VectorD head_scores(const ScorerSettings&, const HeadData& h) const override {
    const int T = static_cast<int>(h.keys.rows());
    VectorD s(T);
    for (int t = 0; t < T; ++t) s(t) = t;
    return s;
  }
};

// KeyDiff: x_t = -cos(k_t, kbar), kbar = mean_u k_u / ||k_u||.
class KeyDiffScorer final : public EvictionScorer {
 public:
  KeyDiffScorer(ScorerParamReader& r, ScorerSettings& s) { r.read_settings(s); }
  VectorD head_scores(const ScorerSettings&, const HeadData& h) const override {
    const int T = static_cast<int>(h.keys.rows());
    VectorD kbar = VectorD::Zero(h.keys.cols());
    for (int t = 0; t < T; ++t) {
      const VectorD k = h.keys.row(t).cast<double>().transpose();
      const double n = k.norm();
      if (n > 0) kbar += k / n;
    }
    kbar /= std::max(1, T);
    VectorD s(T);
    for (int t = 0; t < T; ++t) {
      const VectorD k = h.keys.row(t).cast<double>().transpose();
      const double den = k.norm() * kbar.norm();
      s(t) = den > 0 ? -k.dot(kbar) / den : 0.0;
    }
    return s;
  }
};

// LaProx (approximation): x_t = c_t(0) / N_l, N_l = mean_h mean_q ||o_q||^2 of the layer.
class LaProxScorer final : public EvictionScorer {
 public:
  LaProxScorer(ScorerParamReader& r, ScorerSettings& s) { r.read_settings(s); }
  VectorD head_scores(const ScorerSettings& c, const HeadData& h) const override {
    const TokenWeights w = token_weights(h.keys, h.values, observation_queries(h, c.group_size));
    return w.evict_cost;
  }
  void finish_layer(const ScorerSettings& c, const std::vector<HeadData>& layer,
                    std::vector<VectorD>& out) const override {
    if (layer.empty()) return;
    double norm = 0;
    for (const auto& h : layer) {  // mean_q ||o_q||^2 over the causal window queries
      const CausalQueries qs = observation_queries(h, c.group_size);
      const double scale = 1.0 / std::sqrt(static_cast<double>(h.keys.cols()));
      double sum = 0;
      for (Eigen::Index r = 0; r < h.obs_queries.rows(); ++r) {
        const int T = qs.visible[static_cast<std::size_t>(r)];
        const VectorD zr = h.keys.topRows(T).cast<double>() * h.obs_queries.row(r).transpose().cast<double>() * scale;
        VectorD p(T);
        softmax_row(zr.data(), p.data(), T);
        sum += (h.values.topRows(T).cast<double>().transpose() * p).squaredNorm();
      }
      norm += sum / static_cast<double>(h.obs_queries.rows());
    }
    norm /= static_cast<double>(layer.size());
    for (auto& o : out) o /= (norm > 0 ? norm : 1.0);
  }
};

}  // namespace

const ScorerEntry& streaming_scorer_entry() {
  static const ScorerEntry e{{"streaming", "eviction scorer", "keep sink tokens + the most recent",
                              "arXiv 2309.17453, mit-han-lab/streaming-llm", {shared_scorer_param("sinks", "4")}},
                             &build_scorer<StreamingScorer>};
  return e;
}

const ScorerEntry& keydiff_scorer_entry() {
  static const ScorerEntry e{{"keydiff", "eviction scorer", "-cos(k_t, mean normalised key); no attention",
                              "arXiv 2504.15364 (KeyDiff)",
                              {shared_scorer_param("sinks", "0"), shared_scorer_param("recent", "0"),
                               shared_scorer_param("selection", "head")}},
                             &build_scorer<KeyDiffScorer>};
  return e;
}

const ScorerEntry& laprox_scorer_entry() {
  static const ScorerEntry e{
      {"laprox", "eviction scorer", "approximation: single-removal output cost c_t(0) / layer output norm; model-wide top-k",
       "arXiv 2605.07234 (formula not public; tierlab approximation)",
       {shared_scorer_param("sinks", "0"), shared_scorer_param("recent", "0"), shared_scorer_param("selection", "model")}},
      &build_scorer<LaProxScorer>};
  return e;
}

}  // namespace tierlab
