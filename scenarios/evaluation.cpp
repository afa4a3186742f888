#include "scenarios/evaluation.hpp"

#include <algorithm>
#include <chrono>

#include "model/error.hpp"
#include "model/quantizer.hpp"
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
  EvalResult r = backend.evaluate(batches);
  if (!r.ok) throw InputError("recomputation failed on backend " + backend.name() + ": " + r.message);
  return r.errors.at(0).at(0);
}

}  // namespace

ErrorMetrics evaluate_decode_steps(const HeadData& head, const MatrixRM& allocated_keys,
                                   const std::vector<std::uint8_t>& kept, Recomputer& backend) {
  const int S = static_cast<int>(head.decode_keys.rows());
  const int T = static_cast<int>(head.keys.rows());
  const int d = static_cast<int>(head.keys.cols());
  if (S == 0 || head.decode_queries.rows() == 0) return {};
  const int g = static_cast<int>(head.decode_queries.rows() / S);
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
  b.problem.visible.resize(static_cast<std::size_t>(g) * S);
  for (int j = 0; j < g; ++j)
    for (int s = 1; s <= S; ++s) b.problem.visible[static_cast<std::size_t>(j) * S + (s - 1)] = T + s;
  Selection sel(static_cast<std::size_t>(T + S), 1);
  std::copy(kept.begin(), kept.end(), sel.begin());
  b.selections.push_back(std::move(sel));
  return single(backend, std::move(b));
}

TraceEvaluation evaluate_trace(const TraceReader& trace, const RateLadder& ladder,
                               const HeadAllocator& allocate, Recomputer& backend,
                               const EvalProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const TraceMeta& meta = trace.meta();
  TraceEvaluation out;
  out.trace_path = trace.path();
  out.backend = backend.description();
  out.ladder = ladder;
  out.layers.resize(static_cast<std::size_t>(meta.n_layers));
  const int total = meta.n_heads();
  int done = 0;
  for (int l = 0; l < meta.n_layers; ++l) {
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      const HeadData head = trace.head(l, h);
      const SurrogateCosts costs = surrogate_costs(head.keys, head.values, head.obs_queries, ladder);
      const std::vector<std::uint8_t> tiers = allocate(head, costs.weights);
      if (static_cast<int>(tiers.size()) != meta.prompt_len)
        throw InputError("allocation for layer " + std::to_string(l) + " head " + std::to_string(h) + " has " +
                         std::to_string(tiers.size()) + " tiers, the trace has " +
                         std::to_string(meta.prompt_len) + " prompt tokens");
      const MaterializedKeys mk = materialize(head.keys, ladder, tiers);

      HeadEvaluation he;
      he.layer = l;
      he.kv_head = h;
      he.rate = mk.rate;
      int evicted = 0;
      for (std::size_t t = 0; t < tiers.size(); ++t) {
        if (!mk.kept[t]) ++evicted;
        he.predicted_abs += costs.cost(tiers[t], static_cast<Eigen::Index>(t));
      }
      he.evicted_fraction = static_cast<double>(evicted) / static_cast<double>(tiers.size());
      he.predicted_rel = costs.output_norm2 > 0 ? he.predicted_abs / costs.output_norm2 : 0.0;

      HeadBatch obs;
      obs.problem.queries = &head.obs_queries;
      obs.problem.exact_keys = &head.keys;
      obs.problem.values = &head.values;
      obs.problem.variants = {&mk.keys};
      obs.selections.push_back(Selection(mk.kept.begin(), mk.kept.end()));
      he.obs = single(backend, std::move(obs));
      he.decode = evaluate_decode_steps(head, mk.keys, mk.kept, backend);

      accumulate(out.layers[static_cast<std::size_t>(l)], he, 1.0 / meta.n_kv_heads);
      accumulate(out.model, he, 1.0 / total);
      out.heads.push_back(he);
      if (progress) progress(++done, total);
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace tierlab
