#include "scenarios/pipeline/evaluation.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"

namespace tierlab {
namespace {

void accumulate(ErrorMetrics& sum, const ErrorMetrics& e, double w) {
  sum.rel_error += w * e.rel_error;
  sum.abs_error += w * e.abs_error;
  sum.attn_tv += w * e.attn_tv;
  sum.logit_error += w * e.logit_error;
}

void accumulate(Aggregate& sum, const HeadEvaluation& h, double w) {
  sum.rate.code_bits += w * h.rate.code_bits;
  sum.rate.total_bits += w * h.rate.total_bits;
  accumulate(sum.obs, h.obs, w);
  accumulate(sum.decode, h.decode, w);
  sum.predicted_abs += w * h.predicted_abs;
  sum.predicted_rel += w * h.predicted_rel;
}

ErrorMetrics single(Recomputer& backend, HeadBatch batch) {
  std::vector<HeadBatch> batches{std::move(batch)};
  return recompute(backend, batches).at(0).at(0);
}

}  // namespace

ErrorMetrics evaluate_decode_steps(const HeadData& head, const MatrixRM& allocated_keys,
                                   const std::vector<std::uint8_t>& kept, Recomputer& backend) {
  const int S = static_cast<int>(head.decode_keys.rows());
  const int T = static_cast<int>(head.keys.rows());
  const int d = static_cast<int>(head.keys.cols());
  if (S == 0 || head.decode_queries.rows() == 0) return {};
  // One problem over the T + S tokens; the query of step s sees the first T + s of them.
  MatrixRM exact(T + S, d), approx(T + S, d), values(T + S, d);
  exact.topRows(T) = head.keys;
  exact.bottomRows(S) = head.decode_keys;
  approx.topRows(T) = allocated_keys;
  approx.bottomRows(S) = head.decode_keys;
  values.topRows(T) = head.values;
  values.bottomRows(S) = head.decode_values;
  HeadBatch b;
  b.problem.queries = &head.decode_queries;
  b.problem.exact_keys = &exact;
  b.problem.values = &values;
  b.problem.variants = {&approx};
  b.problem.visible = decode_query_set(head).visible();
  Selection sel(static_cast<std::size_t>(T + S), 1);
  std::copy(kept.begin(), kept.end(), sel.begin());
  b.selections.push_back(std::move(sel));
  return single(backend, std::move(b));
}

namespace {

// A Selection names a variant in a byte (0 = evicted): at most 255 variants in one batch.
constexpr std::size_t kMaxVariants = 255;

template <class Evaluate>
std::vector<ErrorMetrics> in_batches_of_variants(const std::vector<MaterializedKeys>& mats, Evaluate evaluate) {
  std::vector<ErrorMetrics> out;
  for (std::size_t i = 0; i < mats.size(); i += kMaxVariants) {
    const std::vector<MaterializedKeys> part(mats.begin() + static_cast<std::ptrdiff_t>(i),
                                             mats.begin() + static_cast<std::ptrdiff_t>(std::min(mats.size(), i + kMaxVariants)));
    const std::vector<ErrorMetrics> e = evaluate(part);
    out.insert(out.end(), e.begin(), e.end());
  }
  return out;
}

// Runs one batch: on the backend alone, or on a prepared query set (HeadEvaluations).
using RunBatch = std::function<std::vector<ErrorMetrics>(HeadBatch&&)>;

RunBatch run_on(Recomputer& backend) {
  return [&backend](HeadBatch&& b) {
    std::vector<HeadBatch> batches{std::move(b)};
    return recompute(backend, batches).at(0);
  };
}

// The decode steps' exact keys and values: the T prompt tokens followed by the S decode tokens.
void decode_exact(const HeadData& head, MatrixRM& exact, MatrixRM& values) {
  const Eigen::Index S = head.decode_keys.rows(), T = head.keys.rows(), d = head.keys.cols();
  exact.resize(T + S, d);
  values.resize(T + S, d);
  exact.topRows(T) = head.keys;
  exact.bottomRows(S) = head.decode_keys;
  values.topRows(T) = head.values;
  values.bottomRows(S) = head.decode_values;
}

// One problem over the T + S tokens (exact, values: decode_exact), the exact softmax prepared
// once for every variant: approx[k] is allocation k's keys followed by the S decode keys,
// kept[k] its kept mask.
std::vector<ErrorMetrics> decode_batch_of(const HeadData& head, std::vector<MatrixRM>& approx,
                                          const std::vector<const std::vector<std::uint8_t>*>& kept, const MatrixRM& exact,
                                          const MatrixRM& values, const RunBatch& run) {
  const int S = static_cast<int>(head.decode_keys.rows());
  const int T = static_cast<int>(head.keys.rows());
  HeadBatch b;
  b.problem.queries = &head.decode_queries;
  b.problem.exact_keys = &exact;
  b.problem.values = &values;
  b.problem.visible = decode_query_set(head).visible();
  for (std::size_t k = 0; k < approx.size(); ++k) {
    b.problem.variants.push_back(&approx[k]);
    Selection sel(static_cast<std::size_t>(T + S), static_cast<std::uint8_t>(k + 1));  // appended tokens kept, exact
    for (int t = 0; t < T; ++t) sel[static_cast<std::size_t>(t)] = (*kept[k])[static_cast<std::size_t>(t)] ? static_cast<std::uint8_t>(k + 1) : 0;
    b.selections.push_back(std::move(sel));
  }
  return run(std::move(b));
}

std::vector<ErrorMetrics> decode_batch_of(const HeadData& head, std::vector<MatrixRM>& approx,
                                          const std::vector<const std::vector<std::uint8_t>*>& kept, Recomputer& backend) {
  MatrixRM exact, values;
  decode_exact(head, exact, values);
  return decode_batch_of(head, approx, kept, exact, values, run_on(backend));
}

bool no_decode_steps(const HeadData& head) { return head.decode_keys.rows() == 0 || head.decode_queries.rows() == 0; }

// The observation queries' batch of several allocations (at most kMaxVariants), run by `run`.
std::vector<ErrorMetrics> obs_batch(const HeadData& head, const std::vector<MaterializedKeys>& mats, const RunBatch& run) {
  HeadBatch obs;
  obs.problem.queries = &head.obs_queries;
  obs.problem.visible = observation_queries(head).visible;
  obs.problem.exact_keys = &head.keys;
  obs.problem.values = &head.values;
  for (std::size_t k = 0; k < mats.size(); ++k) {
    obs.problem.variants.push_back(&mats[k].keys);
    Selection sel(mats[k].kept.size());
    for (std::size_t t = 0; t < sel.size(); ++t) sel[t] = mats[k].kept[t] ? static_cast<std::uint8_t>(k + 1) : 0;
    obs.selections.push_back(std::move(sel));
  }
  return run(std::move(obs));
}


// Runs the decode batch of some allocations' keys (T + S rows each), given their kept masks.
using RunDecode = std::function<std::vector<ErrorMetrics>(std::vector<MatrixRM>&, const std::vector<const std::vector<std::uint8_t>*>&)>;

std::vector<ErrorMetrics> decode_batch(const HeadData& head, const std::vector<MaterializedKeys>& mats, const RunDecode& run) {
  if (mats.empty()) return {};
  if (no_decode_steps(head)) return std::vector<ErrorMetrics>(mats.size());
  const Eigen::Index S = head.decode_keys.rows(), T = head.keys.rows(), d = head.keys.cols();
  std::vector<MatrixRM> approx(mats.size(), MatrixRM(T + S, d));
  std::vector<const std::vector<std::uint8_t>*> kept;
  for (std::size_t k = 0; k < mats.size(); ++k) {
    approx[k].topRows(T) = mats[k].keys;
    approx[k].bottomRows(S) = head.decode_keys;
    kept.push_back(&mats[k].kept);
  }
  return run(approx, kept);
}

std::vector<ErrorMetrics> decode_steps(const HeadData& head, const std::vector<MaterializedKeys>& mats, const RunDecode& run) {
  if (mats.size() <= kMaxVariants) return decode_batch(head, mats, run);
  return in_batches_of_variants(mats, [&](const std::vector<MaterializedKeys>& part) { return decode_batch(head, part, run); });
}

std::vector<ErrorMetrics> decode_steps(const HeadData& head, std::vector<MaterializedKeys>&& mats, const RunDecode& run) {
  if (mats.empty() || no_decode_steps(head) || mats.size() > kMaxVariants) {
    const std::vector<MaterializedKeys> given = std::move(mats);
    return decode_steps(head, given, run);
  }
  // Each allocation's buffer grows by the S decode rows in place of a second copy.
  const Eigen::Index S = head.decode_keys.rows(), T = head.keys.rows(), d = head.keys.cols();
  std::vector<MatrixRM> approx;
  std::vector<const std::vector<std::uint8_t>*> kept;
  approx.reserve(mats.size());
  for (MaterializedKeys& m : mats) {
    approx.push_back(std::move(m.keys));
    approx.back().conservativeResize(T + S, d);
    approx.back().bottomRows(S) = head.decode_keys;
    kept.push_back(&m.kept);
  }
  return run(approx, kept);
}

RunDecode decode_on(const HeadData& head, Recomputer& backend) {
  return [&head, &backend](std::vector<MatrixRM>& approx, const std::vector<const std::vector<std::uint8_t>*>& kept) {
    return decode_batch_of(head, approx, kept, backend);
  };
}

}  // namespace

std::vector<ErrorMetrics> evaluate_decode_steps(const HeadData& head, const std::vector<MaterializedKeys>& mats,
                                                Recomputer& backend) {
  return decode_steps(head, mats, decode_on(head, backend));
}

std::vector<ErrorMetrics> evaluate_decode_steps(const HeadData& head, std::vector<MaterializedKeys>&& mats,
                                                Recomputer& backend) {
  return decode_steps(head, std::move(mats), decode_on(head, backend));
}

// ---- one head's query sets prepared once ---------------------------------------------

HeadEvaluations::HeadEvaluations(const HeadData& head, Recomputer& backend) : head_(head), backend_(backend) {}
HeadEvaluations::~HeadEvaluations() = default;

std::vector<ErrorMetrics> HeadEvaluations::obs(const std::vector<MaterializedKeys>& mats) {
  if (mats.empty()) return {};
  RunBatch run = [this](HeadBatch&& b) {
    if (!obs_) obs_ = backend_.prepare(b.problem);
    return recompute(backend_, *obs_, b);
  };
  if (mats.size() > kMaxVariants)
    return in_batches_of_variants(mats, [&](const std::vector<MaterializedKeys>& part) { return obs_batch(head_, part, run); });
  return obs_batch(head_, mats, run);
}

std::vector<ErrorMetrics> HeadEvaluations::decode(std::vector<MaterializedKeys>&& mats) {
  RunDecode run = [this](std::vector<MatrixRM>& approx, const std::vector<const std::vector<std::uint8_t>*>& kept) {
    if (exact_.rows() == 0) decode_exact(head_, exact_, values_);
    return decode_batch_of(head_, approx, kept, exact_, values_, [this](HeadBatch&& b) {
      if (!decode_) decode_ = backend_.prepare(b.problem);
      return recompute(backend_, *decode_, b);
    });
  };
  return decode_steps(head_, std::move(mats), run);
}

MethodMeasure measure_compressed(const std::vector<std::vector<HeadData>>& heads,
                                 const std::vector<std::vector<CompressedHead>>& compressed,
                                 const std::function<ErrorMetrics(const HeadData&, const CompressedHead&)>& recompute) {
  double sur = 0, err = 0, cb = 0, tb = 0, ev = 0, H = 0;
  for (std::size_t l = 0; l < heads.size(); ++l)
    for (std::size_t h = 0; h < heads[l].size(); ++h) {
      const HeadData& hd = heads[l][h];
      const CompressedHead& c = compressed.at(l).at(h);
      double on2 = 0;
      const double abs = surrogate_abs_cost(hd.keys, hd.values, observation_queries(hd), c.keys, c.kept, &on2);
      sur += on2 > 0 ? abs / on2 : 0.0;
      if (recompute) err += recompute(hd, c).rel_error;
      cb += c.rate.code_bits, tb += c.rate.total_bits;
      double kept = 0;
      for (const std::uint8_t k : c.kept) kept += k;
      ev += c.kept.empty() ? 0.0 : 1.0 - kept / static_cast<double>(c.kept.size());
      H += 1;
    }
  MethodMeasure m;
  if (H == 0) return m;
  m.rate = Rate{cb / H, tb / H};
  m.evicted = ev / H;
  m.surrogate = sur / H;
  if (recompute) m.error = err / H;
  return m;
}

ErrorMetrics evaluate_decode_step(const HeadData& head, const MatrixRM& allocated_keys,
                                  const std::vector<std::uint8_t>& kept, int step, Recomputer& backend) {
  const int S = static_cast<int>(head.decode_keys.rows());
  const int T = static_cast<int>(head.keys.rows());
  const int d = static_cast<int>(head.keys.cols());
  if (step < 1 || step > S)
    throw InputError("decode step s = " + std::to_string(step) + " is out of range: the trace has " + std::to_string(S) +
                     " decode steps (1 <= s <= " + std::to_string(S) + ").");
  MatrixRM exact(T + step, d), approx(T + step, d), values(T + step, d);
  exact.topRows(T) = head.keys;
  exact.bottomRows(step) = head.decode_keys.topRows(step);
  approx.topRows(T) = allocated_keys;
  approx.bottomRows(step) = head.decode_keys.topRows(step);
  values.topRows(T) = head.values;
  values.bottomRows(step) = head.decode_values.topRows(step);
  const MatrixRM queries = decode_query_set(head).step(step);
  HeadBatch b;
  b.problem.queries = &queries;
  b.problem.exact_keys = &exact;
  b.problem.values = &values;
  b.problem.variants = {&approx};
  b.problem.visible.assign(static_cast<std::size_t>(queries.rows()), T + step);
  Selection sel(static_cast<std::size_t>(T + step), 1);
  std::copy(kept.begin(), kept.end(), sel.begin());
  b.selections.push_back(std::move(sel));
  return single(backend, std::move(b));
}

ErrorMetrics evaluate_obs_queries(const HeadData& head, const MatrixRM& keys, const std::vector<std::uint8_t>& kept,
                                  Recomputer& backend) {
  HeadBatch obs;
  obs.problem.queries = &head.obs_queries;
  obs.problem.visible = observation_queries(head).visible;
  obs.problem.exact_keys = &head.keys;
  obs.problem.values = &head.values;
  obs.problem.variants = {&keys};
  obs.selections.push_back(Selection(kept.begin(), kept.end()));
  return single(backend, std::move(obs));
}


std::vector<ErrorMetrics> evaluate_obs_queries(const HeadData& head, const std::vector<MaterializedKeys>& mats,
                                               Recomputer& backend) {
  if (mats.empty()) return {};
  if (mats.size() > kMaxVariants)
    return in_batches_of_variants(mats, [&](const std::vector<MaterializedKeys>& part) { return evaluate_obs_queries(head, part, backend); });
  return obs_batch(head, mats, run_on(backend));
}

namespace {

// Recomputes one compressed head on both query sets and fills the bookkeeping.
HeadEvaluation evaluate_head(const HeadData& head, const CompressedHead& c, double predicted_abs,
                             double output_norm2, Recomputer& backend) {
  HeadEvaluation he;
  he.layer = head.layer;
  he.kv_head = head.kv_head;
  he.rate = c.rate;
  int evicted = 0;
  for (const std::uint8_t k : c.kept) evicted += k ? 0 : 1;
  he.evicted_fraction = c.kept.empty() ? 0.0 : static_cast<double>(evicted) / static_cast<double>(c.kept.size());
  he.predicted_abs = predicted_abs;
  he.predicted_rel = output_norm2 > 0 ? predicted_abs / output_norm2 : 0.0;
  he.obs = evaluate_obs_queries(head, c.keys, c.kept, backend);
  he.decode = evaluate_decode_steps(head, c.keys, c.kept, backend);
  return he;
}

// Runs `one_head` over every head of the trace and aggregates.
template <class OneHead>
TraceEvaluation evaluate_heads(const TraceReader& trace, Recomputer& backend, const Progress& progress,
                               OneHead&& one_head) {
  const auto t0 = std::chrono::steady_clock::now();
  const TraceMeta& meta = trace.meta();
  TraceEvaluation out;
  out.trace_path = trace.path();
  out.backend = backend.description();
  out.has_decode = meta.decode_steps > 0;
  out.layers.resize(static_cast<std::size_t>(meta.n_layers));
  const int total = meta.n_heads();
  int done = 0;
  for (int l = 0; l < meta.n_layers; ++l) {
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      const HeadData head = trace.head(l, h);
      const HeadEvaluation he = one_head(head);
      accumulate(out.layers[static_cast<std::size_t>(l)], he, 1.0 / meta.n_kv_heads);
      accumulate(out.model, he, 1.0 / total);
      out.heads.push_back(he);
      if (progress) progress(++done, total);
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace

double surrogate_abs_cost(const MatrixRM& keys, const MatrixRM& values, const CausalQueries& qs,
                          const MatrixRM& approx, const std::vector<std::uint8_t>& kept, double* output_norm2) {
  const MatrixRM& queries = qs.queries();
  const int d = static_cast<int>(keys.cols());
  const int nq = static_cast<int>(queries.rows());
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const MatrixRMd K = keys.cast<double>(), V = values.cast<double>();
  const MatrixRMd dK = approx.cast<double>() - K;
  double total = 0, on2 = 0;
  for (int i = 0; i < nq; ++i) {
    const VectorD q = queries.row(i).transpose().cast<double>();
    const int T = qs.visible.at(static_cast<std::size_t>(i));  // the causal mask: tokens 0..T-1
    VectorD s = K.topRows(T) * q * scale;
    const double m = s.maxCoeff();
    VectorD p = (s.array() - m).exp().matrix();
    p /= p.sum();
    const VectorD o = V.topRows(T).transpose() * p;
    on2 += o.squaredNorm();
    const VectorD noise = dK.topRows(T) * q;  // q.(k^_t - k_t)
    for (int t = 0; t < T; ++t) {
      const double w = p[t] * p[t] * (V.row(t).transpose() - o).squaredNorm();
      if (kept[static_cast<std::size_t>(t)])
        total += w * noise[t] * noise[t] / d;
      else
        total += p[t] < 1.0 ? w / ((1.0 - p[t]) * (1.0 - p[t])) : w;
    }
  }
  if (output_norm2) *output_norm2 = nq > 0 ? on2 / nq : 0.0;
  return nq > 0 ? total / nq : 0.0;
}

TraceEvaluation evaluate_trace(const TraceReader& trace, const HeadCompressor& compress, Recomputer& backend,
                               const Progress& progress) {
  const int T = trace.meta().prompt_len;
  return evaluate_heads(trace, backend, progress, [&](const HeadData& head) {
    const CompressedHead c = compress(head);
    if (c.keys.rows() != T || c.keys.cols() != head.keys.cols() || static_cast<int>(c.kept.size()) != T)
      throw InputError("the compressed keys of layer " + std::to_string(head.layer) + " head " +
                       std::to_string(head.kv_head) + " have the wrong shape");
    double on2 = 0;
    const double predicted = surrogate_abs_cost(head.keys, head.values, observation_queries(head), c.keys, c.kept, &on2);
    return evaluate_head(head, c, predicted, on2, backend);
  });
}

TraceEvaluation evaluate_trace(const TraceReader& trace, const RateLadder& ladder,
                               const HeadAllocator& allocate, Recomputer& backend,
                               const Progress& progress) {
  const TraceMeta& meta = trace.meta();
  TraceEvaluation out = evaluate_heads(trace, backend, progress, [&](const HeadData& head) {
    const SurrogateCosts costs = surrogate_costs(head, meta.rope, observation_queries(head), ladder);
    const std::vector<std::uint8_t> tiers = allocate(head, costs.weights);
    if (static_cast<int>(tiers.size()) != meta.prompt_len)
      throw InputError("allocation for layer " + std::to_string(head.layer) + " head " +
                       std::to_string(head.kv_head) + " has " + std::to_string(tiers.size()) +
                       " tiers, the trace has " + std::to_string(meta.prompt_len) + " prompt tokens");
    MaterializedKeys mk = materialize(head, meta.rope, ladder, tiers);
    double predicted = 0;
    for (std::size_t t = 0; t < tiers.size(); ++t) predicted += costs.cost(tiers[t], static_cast<Eigen::Index>(t));
    const CompressedHead c{std::move(mk.keys), std::move(mk.kept), mk.rate};
    return evaluate_head(head, c, predicted, costs.output_norm2, backend);
  });
  out.ladder = ladder;
  return out;
}

}  // namespace tierlab
