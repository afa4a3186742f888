// The local surrogate (surrogate.hpp, docs/model.md section 3): token weights, per-tier
// costs and logit noise, and the per-head noise fit n_h(b) = alpha beta^(-b).
//
// All accumulation is in double. Queries are processed in chunks: the chunk's exact
// logits S = Q K^T / sqrt(d), its softmax (max-subtracted, per row), its outputs
// O = P V and, per finite tier, the logit perturbations D = Q (K^ - K)^T are formed
// as dense products; then every token accumulates its terms over the chunk's queries
// in query order (one thread per token range). The products are explicit loops
// whose summation order does not depend on the thread partition (Eigen's threaded
// GEMM changes its blocking, hence its summation order, with the thread count), so
// results are bit-identical for any number of threads.
// Cancellation (model/base/cancel.hpp): the calling thread's cancel flag is checked at every block of
// the products and every token of a chunk; once set, the rest is skipped and Cancelled thrown,
// so Ctrl-C in a Python call stops a long head (T = 32k: seconds) within a fraction of a second.
#include "model/surrogate.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "model/base/cancel.hpp"
#include "model/base/error.hpp"
#include "model/base/phases.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/base/text.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/quantizers/tier_quantizer.hpp"

namespace tierlab {

namespace {

constexpr Eigen::Index kQueryChunk = 64;
// Below this many (row, token) pairs a loop runs on the calling thread: waking the team
// costs more than the work (issue 15, item 13: tiny traces).
constexpr Eigen::Index kParallelMinWork = 1 << 16;
constexpr Eigen::Index kTokenBlock = 256;  // column blocks of A B^T
constexpr Eigen::Index kRowBlock = 4;      // row blocks of P V
constexpr Eigen::Index kPvTokens = 64;     // tokens of V per pass over a thread's row blocks (64 KB in double at d = 128)

// out = scale * A B^T (A: C x d, B: T x d): one dot product per entry, by blocks of
// B's rows; each entry's summation order is fixed by its length alone.
void product_abt(const Eigen::Ref<const MatrixRMd>& A, const MatrixRMd& B, double scale, MatrixRMd& out,
                 const std::atomic<bool>* cancel) {
  const Eigen::Index T = B.rows(), C = A.rows();
  out.resize(C, T);
  const Eigen::Index n_blocks = (T + kTokenBlock - 1) / kTokenBlock;
#pragma omp parallel for schedule(static) if (n_blocks > 1 && T * C >= kParallelMinWork)
  for (Eigen::Index blk = 0; blk < n_blocks; ++blk) {
    if (cancel_requested(cancel)) continue;
    const Eigen::Index t1 = std::min(T, (blk + 1) * kTokenBlock);
    for (Eigen::Index t = blk * kTokenBlock; t < t1; ++t) {
      const auto b = B.row(t);
      for (Eigen::Index r = 0; r < C; ++r) out(r, t) = scale * A.row(r).dot(b);
    }
  }
  throw_if_cancelled(cancel);
}

// out = P V, accumulated over tokens in position order, by blocks of P's rows; each thread
// walks the tokens in blocks of kPvTokens and takes all its row blocks over one block of V
// before the next (V read from memory once per thread, not once per row block). Each entry's
// sum is over t in order whatever the split.
void product_pv(const MatrixRMd& P, const MatrixRMd& V, MatrixRMd& out, const std::atomic<bool>* cancel) {
  const Eigen::Index T = V.rows(), C = P.rows();
  out = MatrixRMd::Zero(C, V.cols());
  const Eigen::Index n_blocks = (C + kRowBlock - 1) / kRowBlock;
#pragma omp parallel if (n_blocks > 1 && T * C >= kParallelMinWork)
  {
    const Eigen::Index nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const Eigen::Index b0 = tid * n_blocks / nth, b1 = (tid + 1) * n_blocks / nth;
    for (Eigen::Index t0 = 0; t0 < T && b0 < b1; t0 += kPvTokens) {
      if (cancel_requested(cancel)) break;
      const Eigen::Index t1 = std::min(T, t0 + kPvTokens);
      for (Eigen::Index blk = b0; blk < b1; ++blk) {
        const Eigen::Index r1 = std::min(C, (blk + 1) * kRowBlock);
        for (Eigen::Index t = t0; t < t1; ++t) {
          const auto v = V.row(t);
          for (Eigen::Index r = blk * kRowBlock; r < r1; ++r) out.row(r).noalias() += P(r, t) * v;
        }
      }
    }
  }
  throw_if_cancelled(cancel);
}

struct Accumulated {
  TokenWeights weights;
  MatrixRMd cost;   // n_finite x T
  MatrixRMd noise;  // n_finite x T
  double output_norm2 = 0.0;
};

void check_shapes(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& qs, const char* where) {
  const MatrixRM& queries = qs.queries();
  if (keys.rows() < 1) throw InputError(std::string(where) + ": the keys have no tokens (T = 0).");
  if (queries.rows() < 1) throw InputError(std::string(where) + ": the query set is empty.");
  if (values.rows() != keys.rows())
    throw InputError(std::string(where) + ": values have " + std::to_string(values.rows()) + " rows but keys have " +
                     std::to_string(keys.rows()) + ".");
  if (queries.cols() != keys.cols())
    throw InputError(std::string(where) + ": queries have dimension " + std::to_string(queries.cols()) +
                     " but keys have " + std::to_string(keys.cols()) + ".");
  if (qs.visible.size() != static_cast<std::size_t>(queries.rows()))
    throw InputError(std::string(where) + ": " + std::to_string(qs.visible.size()) + " causal limits for " +
                     std::to_string(queries.rows()) + " queries.");
  for (std::size_t r = 0; r < qs.visible.size(); ++r)
    if (qs.visible[r] < 1 || qs.visible[r] > keys.rows())
      throw InputError(std::string(where) + ": query " + std::to_string(r) + " sees " + std::to_string(qs.visible[r]) +
                       " tokens; the limit must be in 1.." + std::to_string(keys.rows()) + ".");
}

// Exact cost of removing token t* alone for one query, computed without the
// cancellation of 1 - p near 1: o = p v* + (1 - p) o_rest, so
// ||o^ - o||^2 = p^2 ||v* - o||^2 / (1 - p)^2 = p^2 ||v* - o_rest||^2, with o_rest the
// softmax output over the other visible tokens 0..T-1 (its own max subtraction). With T = 1
// the output after removal is zero and the cost is ||v*||^2.
// Several queries' costs are formed in one pass over V (a 32k-token head's values are 32 MB
// in double, read once per batch instead of once per query); each query's sums are still
// taken over u in order, so its cost is the same bits alone or batched.
struct Removal {
  const double* s = nullptr;  // the query's logits (T entries)
  Eigen::Index T = 0, t_star = 0;
  double p_star = 0.0;
  double cost = 0.0;  // out
};
constexpr int kRemovalBatch = 8;  // queries per pass over V

void removal_costs_stable(Removal* q, int n, const MatrixRMd& V) {
  const Eigen::Index d = V.cols();
  double m[kRemovalBatch], z[kRemovalBatch];
  Eigen::RowVectorXd o_rest[kRemovalBatch];
  Eigen::Index t_end = 0;
  for (int j = 0; j < n; ++j) {
    if (q[j].T == 1) continue;
    m[j] = -std::numeric_limits<double>::infinity();
    for (Eigen::Index u = 0; u < q[j].T; ++u)
      if (u != q[j].t_star) m[j] = std::max(m[j], q[j].s[u]);
    z[j] = 0.0;
    o_rest[j] = Eigen::RowVectorXd::Zero(d);
    t_end = std::max(t_end, q[j].T);
  }
  for (Eigen::Index u = 0; u < t_end; ++u) {
    const double* v = V.row(u).data();
    for (int j = 0; j < n; ++j) {
      if (q[j].T == 1 || u == q[j].t_star || u >= q[j].T) continue;
      const double w = std::exp(q[j].s[u] - m[j]);
      z[j] += w;
      double* o = o_rest[j].data();
#pragma omp simd
      for (Eigen::Index c = 0; c < d; ++c) o[c] = std::fma(w, v[c], o[c]);
    }
  }
  for (int j = 0; j < n; ++j) {
    if (q[j].T == 1) {
      q[j].cost = V.row(0).squaredNorm();
      continue;
    }
    o_rest[j] /= z[j];
    q[j].cost = q[j].p_star * q[j].p_star * (V.row(q[j].t_star) - o_rest[j]).squaredNorm();
  }
}

// The softmax of one row of logits over its first Tr of T tokens into p (0 past Tr), max
// subtracted, in double; returns the index of the largest weight. One function, so that a
// row's softmax is the same bits wherever it is formed.
Eigen::Index softmax_row(const double* s, Eigen::Index Tr, Eigen::Index T, double* p) {
  const double mx = *std::max_element(s, s + Tr);
  double z = 0.0;
  for (Eigen::Index t = 0; t < Tr; ++t) {
    p[t] = std::exp(s[t] - mx);
    z += p[t];
  }
  for (Eigen::Index t = Tr; t < T; ++t) p[t] = 0.0;
  Eigen::Index arg = 0;
  for (Eigen::Index t = 0; t < Tr; ++t) {
    p[t] /= z;
    if (p[t] > p[arg]) arg = t;
  }
  return arg;
}

// The causal mask (CausalQueries::visible): query r has p_{r,t} = 0 for t >= visible[r], so it adds
// nothing to a_t, c_t(0) or c_t(tau) of those tokens; n_t(tau) is the mean over the queries
// that see t (the logit noise a quantized key adds to the logits that exist).
Accumulated accumulate(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& qs,
                       const std::vector<MatrixRM>& tier_keys) {
  const MatrixRM& queries = qs.queries();
  const Eigen::Index T = keys.rows();
  const Eigen::Index d = keys.cols();
  const Eigen::Index m = queries.rows();
  const int n_fin = static_cast<int>(tier_keys.size());
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  const double inv_d = 1.0 / double(d);

  const MatrixRMd K = keys.cast<double>();
  const MatrixRMd V = values.cast<double>();
  const MatrixRMd Q = queries.cast<double>();

  Accumulated acc;
  acc.weights.a = VectorD::Zero(T);
  acc.weights.evict_cost = VectorD::Zero(T);
  acc.weights.attention = VectorD::Zero(T);
  acc.cost = MatrixRMd::Zero(n_fin, T);
  acc.noise = MatrixRMd::Zero(n_fin, T);

  MatrixRMd S, O;
  std::vector<Eigen::Index> star_t;
  std::vector<double> star_cost;
  std::vector<double> seen_by(static_cast<std::size_t>(T), 0.0);  // queries that see token t
  const std::atomic<bool>* cancel = current_cancel_flag();

  for (Eigen::Index q0 = 0; q0 < m; q0 += kQueryChunk) {
    const Eigen::Index C = std::min(kQueryChunk, m - q0);
    const auto Qc = Q.middleRows(q0, C);
    product_abt(Qc, K, inv_sqrt_d, S, cancel);  // exact logits, C x T

    // Softmax per row (S becomes P), and the stable removal cost of a
    // dominant token (p > 1/2; at most one per query).
    // (Each row's softmax is formed in a buffer, then replaces the row's logits in S; a row
    // with a dominant token keeps its logits until the removal costs have read them, then
    // its softmax is formed again by the same function: the chunk holds one C x T matrix.)
    star_t.assign(C, -1);
    star_cost.assign(C, 0.0);
    std::vector<double> star_p(static_cast<std::size_t>(C), 0.0);
#pragma omp parallel if (C * T >= kParallelMinWork)
    {
    std::vector<double> prow(static_cast<std::size_t>(T));
#pragma omp for schedule(static)
    for (Eigen::Index r = 0; r < C; ++r) {
      if (cancel_requested(cancel)) continue;
      double* s = S.row(r).data();
      double* p = prow.data();
      const Eigen::Index Tr = qs.visible[static_cast<std::size_t>(q0 + r)];
      const Eigen::Index arg = softmax_row(s, Tr, T, p);
      if (p[arg] > 0.5) {
        star_t[r] = arg;
        star_p[r] = p[arg];
        continue;  // its logits stay for the removal cost
      }
      std::copy(p, p + T, s);
    }
    }  // omp parallel
    throw_if_cancelled(cancel);
    std::vector<Eigen::Index> stars;
    for (Eigen::Index r = 0; r < C; ++r)
      if (star_t[r] >= 0) stars.push_back(r);
    const int n_batches = (static_cast<int>(stars.size()) + kRemovalBatch - 1) / kRemovalBatch;
#pragma omp parallel if (n_batches > 1 && C * T >= kParallelMinWork)
    {
    std::vector<double> prow(static_cast<std::size_t>(T));
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < n_batches; ++b) {
      if (cancel_requested(cancel)) continue;
      Removal batch[kRemovalBatch];
      const int first = b * kRemovalBatch, n = std::min<int>(kRemovalBatch, static_cast<int>(stars.size()) - first);
      for (int j = 0; j < n; ++j) {
        const Eigen::Index r = stars[static_cast<std::size_t>(first + j)];
        batch[j] = Removal{S.row(r).data(), qs.visible[static_cast<std::size_t>(q0 + r)], star_t[r], star_p[r]};
      }
      removal_costs_stable(batch, n, V);
      for (int j = 0; j < n; ++j) {
        const Eigen::Index r = stars[static_cast<std::size_t>(first + j)];
        star_cost[r] = batch[j].cost;
        double* s = S.row(r).data();
        softmax_row(s, batch[j].T, T, prow.data());
        std::copy(prow.begin(), prow.end(), s);
      }
    }
    }  // omp parallel
    throw_if_cancelled(cancel);
    const MatrixRMd& P = S;  // the softmax, C x T
    product_pv(P, V, O, cancel);  // outputs, C x dv
    for (Eigen::Index r = 0; r < C; ++r) acc.output_norm2 += O.row(r).squaredNorm();

    // Each tier's logit noise q.(k^_t - k_t) is formed here, where it is used: the key error row
    // k^_t - k_t in double (tier keys in float, half the bytes of stored errors), then its dot
    // with each query row, the products and order of a stored C x T noise matrix per tier
    // without holding one (the same numbers to the bit).
    const Eigen::Ref<const MatrixRMd> A = Qc;
#pragma omp parallel if (C * T >= kParallelMinWork)
    {
    std::vector<Eigen::RowVectorXd> err(static_cast<std::size_t>(n_fin), Eigen::RowVectorXd(d));
#pragma omp for schedule(static)
    for (Eigen::Index t = 0; t < T; ++t) {
      if (cancel_requested(cancel)) continue;
      double a = 0.0, ev = 0.0, att = 0.0;
      const auto vt = V.row(t);
      for (int i = 0; i < n_fin; ++i) err[static_cast<std::size_t>(i)] = tier_keys[i].row(t).cast<double>() - K.row(t);
      for (Eigen::Index r = 0; r < C; ++r) {
        if (t >= qs.visible[static_cast<std::size_t>(q0 + r)]) continue;  // masked: p = 0, no logit
        seen_by[static_cast<std::size_t>(t)] += 1.0;
        const double p = P(r, t);
        const double diff2 = (vt - O.row(r)).squaredNorm();
        const double w = p * p * diff2;  // p_{q,t}^2 ||v_t - o_q||^2
        a += w;
        att += p;
        if (star_t[r] == t) {
          ev += star_cost[r];
        } else {
          const double one_minus_p = 1.0 - p;
          ev += w / (one_minus_p * one_minus_p);
        }
        for (int i = 0; i < n_fin; ++i) {
          const double dl = A.row(r).dot(err[static_cast<std::size_t>(i)]);
          const double n = dl * dl * inv_d;  // (q.(k^_t - k_t))^2 / d
          acc.noise(i, t) += n;
          acc.cost(i, t) += w * n;
        }
      }
      acc.weights.a[t] += a;
      acc.weights.evict_cost[t] += ev;
      acc.weights.attention[t] += att;
    }
    }  // omp parallel
    throw_if_cancelled(cancel);
  }

  const double inv_m = 1.0 / double(m);
  acc.weights.a *= inv_m;
  acc.weights.evict_cost *= inv_m;
  acc.weights.attention *= inv_m;
  acc.cost *= inv_m;
  // n_t(tau): column t divided by the queries that see t, as one broadcast product. No column
  // is taken: with no finite tier (ladder exact, evict,exact) `noise` is 0 x T and holds no
  // storage, and a column block of it would offset a null pointer (UBSan, issue 33).
  Eigen::RowVectorXd inv_seen(T);
  for (Eigen::Index t = 0; t < T; ++t) {
    const double n_t = seen_by[static_cast<std::size_t>(t)];
    inv_seen[t] = n_t > 0 ? 1.0 / n_t : 0.0;
  }
  if (n_fin > 0) acc.noise.array().rowwise() *= inv_seen.array();
  acc.output_norm2 *= inv_m;
  return acc;
}

}  // namespace

TokenWeights token_weights(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& queries) {
  check_shapes(keys, values, queries, "token_weights");
  return accumulate(keys, values, queries, {}).weights;
}

namespace {

// Costs of every tier against `queries`, the tiers quantized densely through the interface.
SurrogateCosts costs_of(const TierInput& in, const MatrixRM& values, const CausalQueries& queries,
                        const RateLadder& ladder) {
  const MatrixRM& keys = *in.keys;
  check_shapes(keys, values, queries, "surrogate_costs");
  ladder.validate();
  const int n_tiers = ladder.size();
  const Eigen::Index T = keys.rows();
  const int d = static_cast<int>(keys.cols());

  SurrogateCosts out;
  out.ladder = ladder;
  out.rates.resize(n_tiers);
  out.rates.front() = ladder.tiers.front().nominal_rate(d);
  out.rates.back() = ladder.tiers.back().nominal_rate(d);
  std::vector<MatrixRM> tier_keys;  // each finite tier's keys k^, T x d (their errors are formed when used)
  tier_keys.reserve(n_tiers - 2);
  for (int i = 1; i + 1 < n_tiers; ++i) {
    DenseTier dense = dense_tier(in, ladder.tiers[i]);
    tier_keys.push_back(std::move(dense.keys));
    out.rates[i] = dense.nominal;
  }

  Accumulated acc = accumulate(keys, values, queries, tier_keys);

  out.cost = MatrixRMd::Zero(n_tiers, T);
  out.noise = MatrixRMd::Zero(n_tiers, T);
  out.cost.row(0) = acc.weights.evict_cost.transpose();
  if (n_tiers > 2) {
    out.cost.middleRows(1, n_tiers - 2) = acc.cost;
    out.noise.middleRows(1, n_tiers - 2) = acc.noise;
  }
  out.weights = std::move(acc.weights);
  out.output_norm2 = acc.output_norm2;
  return out;
}

}  // namespace

namespace {

// The surrogate's dense work for phases.hpp: the exact logits and, per finite tier, the logit
// noise q.(k^ - k): 2 nq T d flops each; reading the keys, values and each tier's keys, and the
// nq x T logits and noise products of each.
void count_surrogate_work(const MatrixRM& keys, const CausalQueries& queries, const RateLadder& ladder) {
  const double nq = static_cast<double>(queries.queries().rows()), T = static_cast<double>(keys.rows()),
               d = static_cast<double>(keys.cols());
  const double tiers = static_cast<double>(std::max(0, ladder.size() - 2));
  add_phase_work(Phase::Surrogate, 2 * nq * T * d * (1 + tiers), 4 * T * d * (2 + tiers) + 4 * nq * d + 8 * nq * T * (1 + tiers));
}

}  // namespace

SurrogateCosts surrogate_costs(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& queries,
                               const RateLadder& ladder) {
  const PhaseScope phase(Phase::Surrogate);
  count_surrogate_work(keys, queries, ladder);
  return costs_of(TierInput::keys_only(keys), values, queries, ladder);
}

SurrogateCosts surrogate_costs(const HeadData& head, const RopeParams& rope, const CausalQueries& queries,
                               const RateLadder& ladder) {
  const PhaseScope phase(Phase::Surrogate);
  count_surrogate_work(head.keys, queries, ladder);
  return costs_of(TierInput::of_head(head, rope), head.values, queries, ladder);
}

double NoiseFit::operator()(double bits) const { return alpha * std::pow(beta, -bits); }

NoiseFit fit_noise(const std::vector<double>& bits, const std::vector<double>& mean_noise) {
  if (bits.size() != mean_noise.size())
    throw InputError("fit_noise: " + std::to_string(bits.size()) + " bit widths but " +
                     std::to_string(mean_noise.size()) + " noise values; they must pair up.");
  std::vector<double> x, y;
  for (std::size_t i = 0; i < bits.size(); ++i) {
    if (std::isfinite(bits[i]) && std::isfinite(mean_noise[i]) && mean_noise[i] > 0) {
      x.push_back(bits[i]);
      y.push_back(std::log(mean_noise[i]));
    }
  }
  const std::size_t n = x.size();
  const double mx = n ? [&] { double s = 0; for (double v : x) s += v; return s / n; }() : 0.0;
  double sxx = 0.0;
  for (double v : x) sxx += (v - mx) * (v - mx);
  if (n < 2 || !(sxx > 0))
    throw InputError("fit_noise: " + std::to_string(n) +
                     " usable points (finite bits, noise > 0); the fit needs at least two distinct bit widths.");
  double my = 0.0;
  for (double v : y) my += v;
  my /= double(n);
  double sxy = 0.0;
  for (std::size_t i = 0; i < n; ++i) sxy += (x[i] - mx) * (y[i] - my);
  const double slope = sxy / sxx;  // log n = log alpha - b log beta
  const double intercept = my - slope * mx;
  NoiseFit fit;
  fit.alpha = std::exp(intercept);
  fit.beta = std::exp(-slope);
  double ss = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double r = y[i] - (intercept + slope * x[i]);
    ss += r * r;
  }
  fit.residual = std::sqrt(ss / double(n));
  return fit;
}

namespace {

// The fit over the finite tiers that `same` selects; `what` names them in the message.
template <class Same>
NoiseFit fit_tiers(const SurrogateCosts& costs, Same same, const std::string& what) {
  const RateLadder& ladder = costs.ladder;
  std::vector<double> bits, noise;
  for (int i = 1; i + 1 < ladder.size(); ++i) {
    if (!same(ladder.tiers[i])) continue;
    bits.push_back(ladder.tiers[i].bits);
    noise.push_back(costs.noise.cols() > 0 ? costs.noise.row(i).mean() : 0.0);
  }
  if (bits.size() < 2)
    throw InputError("fit_noise: ladder '" + ladder.name() + "' has " + std::to_string(bits.size()) +
                     " finite tiers of quantizer '" + what + "'; the noise fit needs at least two.");
  return fit_noise(bits, noise);
}

}  // namespace

NoiseFit fit_noise(const SurrogateCosts& costs, QuantizerKind kind) {
  return fit_tiers(costs, [kind](const Tier& t) { return t.kind == kind; }, std::string(to_string(kind)));
}

NoiseFit fit_noise(const SurrogateCosts& costs, const std::string& quantizer) {
  return fit_tiers(costs, [&quantizer](const Tier& t) { return t.quantizer() == quantizer; }, quantizer);
}

std::vector<double> ladder_rates(const HeadData& head, const RopeParams& rope, const RateLadder& ladder, RateKind kind) {
  std::vector<double> rates;
  rates.reserve(ladder.tiers.size());
  for (const Tier& t : ladder.tiers) rates.push_back(rate_of(nominal_rate(head, rope, t), kind));
  return rates;
}

double HeadNoiseModel::operator()(double bits) const { return alpha * std::pow(beta, -bits); }

HeadNoiseModel fit_head_noise(const SurrogateCosts& costs, const std::vector<double>& rates) {
  const RateLadder& ladder = costs.ladder;
  HeadNoiseModel m;
  std::vector<double> bits, noise;
  for (int j = 1; j + 1 < ladder.size(); ++j) {
    if (m.quantizer.empty()) m.quantizer = ladder.tiers[static_cast<std::size_t>(j)].quantizer();
    if (ladder.tiers[static_cast<std::size_t>(j)].quantizer() != m.quantizer) continue;
    bits.push_back(rates.at(static_cast<std::size_t>(j)));
    noise.push_back(costs.noise.cols() > 0 ? costs.noise.row(j).mean() : 0.0);
  }
  try {
    const NoiseFit f = fit_noise(bits, noise);
    if (std::isfinite(f.alpha) && f.alpha > 0 && std::isfinite(f.beta) && f.beta > 1.0 + 1e-9) {
      m.alpha = f.alpha, m.beta = f.beta, m.residual = f.residual, m.fitted = true;
      return m;
    }
    m.note = "the fitted beta is " + format_number(f.beta, 4) + " (needs > 1)";
  } catch (const InputError& e) {
    m.note = e.what();
  }
  for (std::size_t i = 0; i < bits.size(); ++i)
    if (noise[i] > 0) {
      m.alpha = noise[i] * std::pow(4.0, bits[i]);
      break;
    }
  return m;
}

}  // namespace tierlab
