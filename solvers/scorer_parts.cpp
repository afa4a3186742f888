// The eviction scorers' shared building blocks (solvers/scorer_parts.hpp).
#include "solvers/scorer_parts.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "model/base/error.hpp"

namespace tierlab {

double softmax_row(const double* z, double* p, int n) {
  double m = -kScoreInf;
  for (int t = 0; t < n; ++t) m = std::max(m, z[t]);
  double s = 0;
  for (int t = 0; t < n; ++t) s += (p[t] = std::exp(z[t] - m));
  for (int t = 0; t < n; ++t) p[t] /= s;
  return m + std::log(s);
}

MatrixRMd softmax_rows(const MatrixRMd& z) {
  MatrixRMd p(z.rows(), z.cols());
  for (Eigen::Index i = 0; i < z.rows(); ++i) softmax_row(z.row(i).data(), p.row(i).data(), static_cast<int>(z.cols()));
  return p;
}

int query_rows(const HeadData& h, int g) {
  const auto rows = static_cast<int>(h.obs_queries.rows());
  if (g < 1 || rows % g != 0)
    throw InputError("head (" + std::to_string(h.layer) + ", " + std::to_string(h.kv_head) + "): obs_queries has " +
                     std::to_string(rows) + " rows, not a multiple of group_size " + std::to_string(g));
  return rows / g;
}

int effective_window(const std::string& method, const ScorerSettings& c, const HeadData& h) {
  const int wtr = query_rows(h, c.group_size);
  const int w = c.window == 0 ? wtr : c.window;
  if (w > wtr)
    throw InputError("scorer '" + method + "': parameter window = " + std::to_string(w) +
                     " exceeds the trace's W = " + std::to_string(wtr) + " observation queries (head (" +
                     std::to_string(h.layer) + ", " + std::to_string(h.kv_head) + ")); give window <= " +
                     std::to_string(wtr) + ", or 0 for all of them.");
  return w;
}

MatrixRMd window_logits(const HeadData& head, int g, int j, int window, bool causal) {
  const int wtr = query_rows(head, g);
  const int T = static_cast<int>(head.keys.rows());
  const double scale = 1.0 / std::sqrt(static_cast<double>(head.keys.cols()));
  MatrixRMd z(window, T);
  const std::vector<int> visible = observation_queries(head, g).visible;  // trace.hpp
  for (int i = 0; i < window; ++i) {
    const int row = j * wtr + (wtr - window) + i;
    const auto q = head.obs_queries.row(row).cast<double>();
    const int last_visible = causal ? visible[static_cast<std::size_t>(row)] - 1 : T - 1;
    for (int t = 0; t < T; ++t)
      z(i, t) = t <= last_visible ? scale * q.dot(head.keys.row(t).cast<double>()) : -kScoreInf;
  }
  return z;
}

VectorD aggregate(const std::vector<VectorD>& xs, GqaAggregate a) {
  VectorD out = xs[0];
  for (std::size_t j = 1; j < xs.size(); ++j) {
    if (a == GqaAggregate::Max) out = out.cwiseMax(xs[j]);
    else out += xs[j];
  }
  if (a == GqaAggregate::Mean) out /= static_cast<double>(xs.size());
  return out;
}

// ---------------------------------------------------------------- pooling

void WindowPooling::read(ScorerParamReader& r) {
  if (r.declares("pool")) pool = r.get_pool("pool");
  if (r.declares("kernel")) kernel = r.get_int("kernel");
  if (r.declares("count_include_pad")) count_include_pad = r.get_bool("count_include_pad");
  if (r.declares("group_order")) group_order = r.get_group_order("group_order");
  if (kernel < 1 || kernel % 2 == 0) r.bad("kernel", "must be odd and >= 1");
}

VectorD WindowPooling::apply(const VectorD& x, Eigen::Index n) const {
  VectorD y = x;
  if (kernel <= 1 || n <= 0) return y;
  SmoothingOptions o;
  o.pool = pool;
  o.kernel = kernel;
  o.padding = (pool == PoolKind::Avg && count_include_pad) ? Padding::Zero : Padding::None;
  smooth_row(x.data(), y.data(), n, o);
  return y;
}

VectorD WindowPooling::pool_and_aggregate(std::vector<VectorD> xs, GqaAggregate a, Eigen::Index n) const {
  if (group_order == GroupOrder::AfterPool) {
    for (auto& x : xs) x = apply(x, n);
    return aggregate(xs, a);
  }
  return apply(aggregate(xs, a), n);
}

// ---------------------------------------------------------------- free slots

bool better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  return std::tie(a.layer, a.head, a.t) < std::tie(b.layer, b.head, b.t);
}

FreeSlots::FreeSlots(std::vector<std::vector<HeadKeep>>& keep, std::vector<std::vector<int>> free,
                     std::vector<std::vector<std::vector<Candidate>>> candidates)
    : keep_(keep), free_(std::move(free)), cands_(std::move(candidates)) {}

void FreeSlots::take(int l, int h, int n) {
  auto& cs = cands_[l][h];
  n = std::min<int>(n, static_cast<int>(cs.size()));
  for (int i = 0; i < n; ++i) keep_[l][h][cs[i].t] = 1;
  cs.erase(cs.begin(), cs.begin() + n);
}

void FreeSlots::pooled(const std::vector<std::pair<int, int>>& heads, std::int64_t slots) {
  std::vector<Candidate> all;
  for (auto [l, h] : heads) all.insert(all.end(), cands_[l][h].begin(), cands_[l][h].end());
  std::sort(all.begin(), all.end(), better);
  slots = std::min<std::int64_t>(slots, static_cast<std::int64_t>(all.size()));
  for (std::int64_t i = 0; i < slots; ++i) keep_[all[i].layer][all[i].head][all[i].t] = 1;
}

void FreeSlots::top_k(Scope scope) {
  const int L = layers();
  if (scope == Scope::Head) {
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < heads(l); ++h) take(l, h, free(l, h));
  } else if (scope == Scope::Layer) {
    for (int l = 0; l < L; ++l) {
      std::vector<std::pair<int, int>> hs;
      std::int64_t slots = 0;
      for (int h = 0; h < heads(l); ++h) hs.push_back({l, h}), slots += free(l, h);
      pooled(hs, slots);
    }
  } else {
    std::vector<std::pair<int, int>> hs;
    std::int64_t slots = 0;
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < heads(l); ++h) hs.push_back({l, h}), slots += free(l, h);
    pooled(hs, slots);
  }
}

void EvictionScorer::select(const ScorerSettings& s, FreeSlots& slots) const { slots.top_k(s.selection); }

}  // namespace tierlab
