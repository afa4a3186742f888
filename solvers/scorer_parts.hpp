#pragma once
// The building blocks the eviction scorers share (solvers/scorers.hpp has the maths and the
// notation): window logits and attention, pooling over positions, the GQA aggregate, and
// FreeSlots, the budget rule's view of every head's free slots. Used by the scorers' source
// files (scorers*.cpp) only.
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "solvers/scorers.hpp"

namespace tierlab {

inline constexpr double kScoreInf = std::numeric_limits<double>::infinity();

// p = softmax(z) over n entries (masked entries -inf); returns log sum exp z.
double softmax_row(const double* z, double* p, int n);
MatrixRMd softmax_rows(const MatrixRMd& z);
// W_trace = obs_queries.rows() / g; InputError when the rows are not a multiple of g.
int query_rows(const HeadData& h, int g);
// W = s.window (0 = W_trace); InputError naming `method` when W > W_trace.
int effective_window(const std::string& method, const ScorerSettings& s, const HeadData& h);
// logits (W x T, masked entries -inf) of query head j's last W window queries.
MatrixRMd window_logits(const HeadData& head, int g, int j, int window, bool causal);
// x_t = agg_j x_{j,t}.
VectorD aggregate(const std::vector<VectorD>& xs, GqaAggregate a);

// Pooling over positions (snapkv family, dropkv, obcache): kernel 1 = none.
struct WindowPooling {
  PoolKind pool = PoolKind::Avg;
  int kernel = 1;
  bool count_include_pad = true;
  GroupOrder group_order = GroupOrder::AfterPool;
  // Reads the pooling parameters the entry declares (the others keep the values above);
  // InputError for an even or non-positive kernel.
  void read(ScorerParamReader& r);
  // x pooled over its first n entries.
  VectorD apply(const VectorD& x, Eigen::Index n) const;
  // The per-query-head raw scores xs pooled and aggregated (group_order), over n positions.
  VectorD pool_and_aggregate(std::vector<VectorD> xs, GqaAggregate a, Eigen::Index n) const;
};

// A token competing for a free slot; better(): higher score, then earlier (layer, head, t).
struct Candidate {
  double score;
  int layer, head, t;
};
bool better(const Candidate& a, const Candidate& b);

// The free slots of every head after the forced tokens, and their candidates sorted by
// better(); a budget rule keeps candidates through take (one head) and pooled (several heads
// sharing their slots).
class FreeSlots {
 public:
  FreeSlots(std::vector<std::vector<HeadKeep>>& keep, std::vector<std::vector<int>> free,
            std::vector<std::vector<std::vector<Candidate>>> candidates);
  int layers() const { return static_cast<int>(free_.size()); }
  int heads(int l) const { return static_cast<int>(free_[l].size()); }
  int free(int l, int h) const { return free_[l][h]; }
  // Keep the best n remaining candidates of head (l, h).
  void take(int l, int h, int n);
  // Keep the best `slots` candidates over the heads given.
  void pooled(const std::vector<std::pair<int, int>>& heads, std::int64_t slots);
  // The top-k rules: each head its own free slots (Head), a layer's heads pooling theirs
  // (Layer), every head pooling (Model).
  void top_k(Scope scope);

 private:
  std::vector<std::vector<HeadKeep>>& keep_;
  std::vector<std::vector<int>> free_;
  std::vector<std::vector<std::vector<Candidate>>> cands_;
};

// An entry's factory for a scorer class constructed from (reader, settings).
template <class Scorer>
std::shared_ptr<const EvictionScorer> build_scorer(ScorerParamReader& r, ScorerSettings& s) {
  return std::make_shared<Scorer>(r, s);
}

}  // namespace tierlab
