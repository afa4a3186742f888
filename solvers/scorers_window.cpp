// The SnapKV family (solvers/scorers.hpp): snapkv, adakv and pyramidkv share the window score
// x_{j,t} = R_i p_{j,i,t} on the prefix t < T - W, pooled over positions, with the window kept;
// they differ in the budget rule (top-k over a scope, Ada-KV's floor, PyramidKV's depth).
#include <algorithm>
#include <cmath>

#include "solvers/scorer_parts.hpp"

namespace tierlab {

// Defined below, listed in scorer_registry() (scorers.cpp).
const ScorerEntry& snapkv_scorer_entry();
const ScorerEntry& adakv_scorer_entry();
const ScorerEntry& pyramidkv_scorer_entry();
namespace {

// The SnapKV family's parameters, in the order of each entry (then its own).
std::vector<MethodParam> window_params() {
  return {shared_scorer_param("window", "32"),          shared_scorer_param("reduce", "sum"),
          shared_scorer_param("pool", "avg"),           shared_scorer_param("kernel", "5"),
          shared_scorer_param("count_include_pad", "true"), shared_scorer_param("group_order", "after"),
          shared_scorer_param("gqa", "mean"),           shared_scorer_param("causal", "true")};
}

class SnapKVScorer : public EvictionScorer {
 public:
  SnapKVScorer(ScorerParamReader& r, ScorerSettings& s, std::string method = "snapkv") : method_(std::move(method)) {
    r.read_settings(s);
    reduce_ = r.get_reduce("reduce");
    pooling_.read(r);
  }
  VectorD head_scores(const ScorerSettings& c, const HeadData& h) const override {
    const int T = static_cast<int>(h.keys.rows());
    const int W = effective_window(method_, c, h);
    const Eigen::Index n = std::max(0, T - W);
    std::vector<VectorD> xs;
    for (int j = 0; j < c.group_size; ++j) {
      const MatrixRMd p = softmax_rows(window_logits(h, c.group_size, j, W, c.causal));
      VectorD x = p.leftCols(std::max(0, T - W)).colwise().sum().transpose();
      if (reduce_ == WindowReduce::Mean) x /= static_cast<double>(W);
      xs.push_back(x);
    }
    const VectorD s = pooling_.pool_and_aggregate(std::move(xs), c.gqa, n);
    VectorD full = VectorD::Constant(T, kScoreInf);  // the window: always kept
    full.head(n) = s.head(n);
    return full;
  }
  // The window is forced.
  int forced_recent(const ScorerSettings& c, const HeadData& h, int) const override {
    return std::min(static_cast<int>(h.keys.rows()), effective_window(method_, c, h));
  }

 private:
  std::string method_;
  WindowReduce reduce_ = WindowReduce::Sum;
  WindowPooling pooling_;
};

// Ada-KV: per layer, head h first gets floor(a F_h) of its free slots F_h; the rest go to a
// layer-wide top over all heads' remaining scores.
class AdaKVScorer final : public SnapKVScorer {
 public:
  AdaKVScorer(ScorerParamReader& r, ScorerSettings& s) : SnapKVScorer(r, s, "adakv") {
    floor_ = r.get_double("floor");
    if (!(floor_ >= 0 && floor_ <= 1)) r.bad("floor", "must be in [0, 1]");
  }
  void select(const ScorerSettings&, FreeSlots& slots) const override {
    for (int l = 0; l < slots.layers(); ++l) {
      std::int64_t rest = 0;
      std::vector<std::pair<int, int>> heads;
      for (int h = 0; h < slots.heads(l); ++h) {
        const int base = static_cast<int>(std::floor(floor_ * slots.free(l, h)));
        slots.take(l, h, base);
        rest += slots.free(l, h) - base;
        heads.push_back({l, h});
      }
      slots.pooled(heads, rest);
    }
  }

 private:
  double floor_ = 0.2;
};

// PyramidKV: layer l of L keeps F_l = M - l s of its free slots F (m = F / beta, M = 2F - m,
// s = (M - m) / (L - 1); L = 1: F).
class PyramidKVScorer final : public SnapKVScorer {
 public:
  PyramidKVScorer(ScorerParamReader& r, ScorerSettings& s) : SnapKVScorer(r, s, "pyramidkv") {
    beta_ = r.get_int("beta");
    if (beta_ < 1) r.bad("beta", "must be >= 1");
  }
  void select(const ScorerSettings&, FreeSlots& slots) const override {
    const int L = slots.layers();
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < slots.heads(l); ++h) {
        const int F = slots.free(l, h);
        int Fl = F;
        if (L > 1) {
          const int m = F / beta_, M = 2 * F - m, s = (M - m) / (L - 1);
          Fl = M - l * s;
        }
        slots.take(l, h, Fl);
      }
  }

 private:
  int beta_ = 20;
};

std::vector<MethodParam> with(std::vector<MethodParam> ps, std::vector<MethodParam> more) {
  ps.insert(ps.end(), more.begin(), more.end());
  return ps;
}

}  // namespace

const ScorerEntry& snapkv_scorer_entry() {
  static const ScorerEntry e{
      {"snapkv", "eviction scorer", "window attention (sum|mean), pooled (avg|max); top-k per head + the window",
       "arXiv 2404.14469, FasterDecoding/SnapKV; NVIDIA/kvpress",
       with(window_params(), {shared_scorer_param("sinks", "0"), shared_scorer_param("selection", "head"),
                              shared_scorer_param("group_size", "1")})},
      &build_scorer<SnapKVScorer>};
  return e;
}

const ScorerEntry& adakv_scorer_entry() {
  static const ScorerEntry e{
      {"adakv", "eviction scorer", "SnapKV score; layer-wide top-k, head budget = share won with a floor",
       "arXiv 2407.11550, FFY0/AdaKV",
       with(window_params(), {{"floor", "0.2", "Ada-KV floor fraction of each head's budget (0.2-0.5)"},
                              shared_scorer_param("group_size", "1")})},
      &build_scorer<AdaKVScorer>};
  return e;
}

const ScorerEntry& pyramidkv_scorer_entry() {
  static const ScorerEntry e{
      {"pyramidkv", "eviction scorer", "SnapKV score; layer budgets decreasing linearly with depth",
       "arXiv 2406.02069, Zefan-Cai/KVCache-Factory",
       with(window_params(), {{"beta", "20", "PyramidKV: smallest layer budget = F / beta"},
                              shared_scorer_param("group_size", "1")})},
      &build_scorer<PyramidKVScorer>};
  return e;
}

}  // namespace tierlab
