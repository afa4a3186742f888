// The decode-time scorers (solvers/scorers.hpp): h2o accumulates attention over every query
// so far, tova re-scores by the last query's attention over the layer; their registry entries
// and their decode caches (H2OCache, TovaCache).
#include <algorithm>
#include <cmath>

#include "model/base/error.hpp"
#include "solvers/scorer_parts.hpp"

namespace tierlab {

// Defined below, listed in scorer_registry() (scorers.cpp).
const ScorerEntry& h2o_scorer_entry();
const ScorerEntry& tova_scorer_entry();
namespace {

// H2O: x_{j,t} = sum_i p_{j,i,t} over the W window queries (prefill); recent window of
// round(recent_fraction K) tokens forced, heavy hitters in the rest.
class H2OScorer final : public EvictionScorer {
 public:
  H2OScorer(ScorerParamReader& r, ScorerSettings& s) {
    r.read_settings(s);
    recent_fraction_ = r.get_double("recent_fraction");
    if (!(recent_fraction_ >= 0 && recent_fraction_ <= 1)) r.bad("recent_fraction", "must be in [0, 1]");
  }
  VectorD head_scores(const ScorerSettings& c, const HeadData& h) const override {
    const int W = effective_window("h2o", c, h);
    std::vector<VectorD> xs;
    for (int j = 0; j < c.group_size; ++j)
      xs.push_back(softmax_rows(window_logits(h, c.group_size, j, W, c.causal)).colwise().sum().transpose());
    return aggregate(xs, c.gqa);
  }
  int forced_recent(const ScorerSettings&, const HeadData&, int K) const override {
    return static_cast<int>(std::floor(recent_fraction_ * K + 0.5));
  }
  double recent_fraction() const { return recent_fraction_; }

 private:
  double recent_fraction_ = 0.5;
};

// TOVA: x_t = mean over the layer's query heads of the last window query's attention; one
// shared top-k per layer (every head gets the same scores, so per-head top-k is that rule).
class TovaScorer final : public EvictionScorer {
 public:
  TovaScorer(ScorerParamReader& r, ScorerSettings& s) {
    r.read_settings(s);
    s.window = 1;  // the last window query only
  }
  VectorD head_scores(const ScorerSettings& c, const HeadData& h) const override {
    const int g = c.group_size;
    query_rows(h, g);
    std::vector<VectorD> xs;
    for (int j = 0; j < g; ++j) xs.push_back(softmax_rows(window_logits(h, g, j, 1, c.causal)).row(0).transpose());
    return aggregate(xs, GqaAggregate::Mean);
  }
  void finish_layer(const ScorerSettings&, const std::vector<HeadData>& layer,
                    std::vector<VectorD>& out) const override {
    if (out.empty()) return;
    VectorD shared = out[0];
    for (std::size_t i = 1; i < out.size(); ++i) {
      if (out[i].size() != shared.size())
        throw InputError("tova: heads of layer " + std::to_string(layer[0].layer) + " have different token counts");
      shared += out[i];
    }
    shared /= static_cast<double>(out.size());
    for (auto& o : out) o = shared;
  }
  void select(const ScorerSettings&, FreeSlots& slots) const override { slots.top_k(Scope::Head); }
};

}  // namespace

const ScorerEntry& h2o_scorer_entry() {
  static const ScorerEntry e{
      {"h2o", "eviction scorer",
       "accumulated attention (all queries so far, decode-time accumulation); heavy hitters + recent window",
       "arXiv 2306.14048, FMInference/H2O",
       {shared_scorer_param("window", "0"), shared_scorer_param("gqa", "mean"), shared_scorer_param("causal", "true"),
        {"recent_fraction", "0.5", "share of the budget given to the recent window (rest: heavy hitters)"},
        shared_scorer_param("sinks", "0"), shared_scorer_param("group_size", "1")}},
      &build_scorer<H2OScorer>};
  return e;
}

const ScorerEntry& tova_scorer_entry() {
  static const ScorerEntry e{
      {"tova", "eviction scorer", "last query's attention averaged over the layer's heads; one shared top-k per layer",
       "arXiv 2401.06104, schwartz-lab-NLP/TOVA", {shared_scorer_param("sinks", "0"), shared_scorer_param("group_size", "1")}},
      &build_scorer<TovaScorer>};
  return e;
}

// ---------------------------------------------------------------- H2O in decode

H2OCache::H2OCache(const ScorerConfig& cfg, const HeadData& prompt, const Budget& budget) : cfg_(cfg) {
  const auto* h2o = dynamic_cast<const H2OScorer*>(cfg.scorer.get());
  if (!h2o) throw InputError("H2OCache: scorer '" + cfg.method() + "' is not h2o");
  recent_fraction_ = h2o->recent_fraction();
  keys_ = prompt.keys.cast<double>();
  values_ = prompt.values.cast<double>();
  const VectorD s = head_scores(cfg, prompt);
  acc_.assign(s.data(), s.data() + s.size());
  alive_.assign(acc_.size(), 1);
  capacity_ = budget.keep(static_cast<int>(acc_.size()));
  evict();
}

void H2OCache::step(const MatrixRM& queries, const VectorF& key, const VectorF& value) {
  const Eigen::Index n = keys_.rows(), d = keys_.cols();
  if (key.size() != d || value.size() != d || queries.cols() != d || queries.rows() != cfg_.group_size)
    throw InputError("H2OCache::step: queries must be group_size x d and key/value d entries (d = " +
                     std::to_string(d) + ")");
  keys_.conservativeResize(n + 1, d);
  values_.conservativeResize(n + 1, d);
  keys_.row(n) = key.cast<double>().transpose();
  values_.row(n) = value.cast<double>().transpose();
  acc_.push_back(0.0);
  alive_.push_back(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<VectorD> xs;
  for (Eigen::Index j = 0; j < queries.rows(); ++j) {
    const auto q = queries.row(j).cast<double>();
    VectorD z = VectorD::Constant(n + 1, -kScoreInf), p(n + 1);
    for (Eigen::Index t = 0; t <= n; ++t)
      if (alive_[t]) z(t) = scale * q.dot(keys_.row(t));
    softmax_row(z.data(), p.data(), static_cast<int>(n + 1));
    xs.push_back(p);
  }
  const VectorD a = aggregate(xs, cfg_.gqa);
  for (Eigen::Index t = 0; t <= n; ++t)
    if (alive_[t]) acc_[t] += a(t);
  evict();
}

void H2OCache::evict() {
  const int n = static_cast<int>(alive_.size());
  const int recent = static_cast<int>(std::floor(recent_fraction_ * capacity_ + 0.5));
  std::vector<int> live;
  for (int t = 0; t < n; ++t)
    if (alive_[t]) live.push_back(t);
  if (static_cast<int>(live.size()) <= capacity_) return;
  std::vector<std::uint8_t> keep(n, 0);
  int kept = 0;
  for (int t = 0; t < std::min(cfg_.sinks, n); ++t)
    if (alive_[t] && kept < capacity_) keep[t] = 1, ++kept;
  int r = 0;
  for (int i = static_cast<int>(live.size()) - 1; i >= 0 && r < recent && kept < capacity_; --i)
    if (!keep[live[i]]) keep[live[i]] = 1, ++kept, ++r;
  std::vector<int> rest;
  for (int t : live)
    if (!keep[t]) rest.push_back(t);
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return acc_[a] > acc_[b]; });
  for (int t : rest)
    if (kept < capacity_) keep[t] = 1, ++kept;
  alive_ = keep;
}

// ---------------------------------------------------------------- TOVA in decode

TovaCache::TovaCache(const ScorerConfig& cfg, const std::vector<HeadData>& layer, const Budget& budget) : cfg_(cfg) {
  if (!dynamic_cast<const TovaScorer*>(cfg.scorer.get()))
    throw InputError("TovaCache: scorer '" + cfg.method() + "' is not tova");
  if (layer.empty()) throw InputError("TovaCache: the layer has no heads");
  const auto scores = layer_scores(cfg, layer);
  for (const auto& h : layer) keys_.push_back(h.keys.cast<double>()), values_.push_back(h.values.cast<double>());
  last_.assign(scores[0].data(), scores[0].data() + scores[0].size());
  alive_.assign(last_.size(), 1);
  capacity_ = budget.keep(static_cast<int>(last_.size()));
  evict();
}

void TovaCache::step(const std::vector<MatrixRM>& queries, const std::vector<VectorF>& keys,
                     const std::vector<VectorF>& values) {
  const std::size_t H = keys_.size();
  if (queries.size() != H || keys.size() != H || values.size() != H)
    throw InputError("TovaCache::step: expected queries, keys and values for " + std::to_string(H) + " heads");
  const Eigen::Index n = keys_[0].rows();
  alive_.push_back(1);
  VectorD score = VectorD::Zero(n + 1);
  int count = 0;
  for (std::size_t h = 0; h < H; ++h) {
    const Eigen::Index d = keys_[h].cols();
    keys_[h].conservativeResize(n + 1, d);
    values_[h].conservativeResize(n + 1, d);
    keys_[h].row(n) = keys[h].cast<double>().transpose();
    values_[h].row(n) = values[h].cast<double>().transpose();
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    for (Eigen::Index j = 0; j < queries[h].rows(); ++j) {
      const auto q = queries[h].row(j).cast<double>();
      VectorD z = VectorD::Constant(n + 1, -kScoreInf), p(n + 1);
      for (Eigen::Index t = 0; t <= n; ++t)
        if (alive_[t]) z(t) = scale * q.dot(keys_[h].row(t));
      softmax_row(z.data(), p.data(), static_cast<int>(n + 1));
      score += p;
      ++count;
    }
  }
  score /= std::max(1, count);
  last_.assign(score.data(), score.data() + score.size());
  evict();
}

void TovaCache::evict() {
  const int n = static_cast<int>(alive_.size());
  int live = static_cast<int>(std::count(alive_.begin(), alive_.end(), 1));
  while (live > capacity_) {
    int worst = -1;
    for (int t = std::min(cfg_.sinks, n); t < n; ++t)
      if (alive_[t] && (worst < 0 || last_[t] < last_[worst])) worst = t;
    if (worst < 0) break;
    alive_[worst] = 0;
    --live;
  }
}

}  // namespace tierlab
