// KV-COBRA as a method of a scenario's `methods` list (compressors.hpp): a per-head (rank, bits)
// allocation, not a ladder allocation (solvers/kvcobra_allocator.hpp), applied by each head's
// kvcobra key quantizer.
#include <cmath>
#include <memory>

#include "model/base/error.hpp"
#include "model/base/text.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "scenarios/methods/compressors.hpp"
#include "solvers/kvcobra_allocator.hpp"

namespace tierlab::method_factories {

void check_kvcobra(const MethodSpec& m) {
  if (std::isfinite(m.budget)) KvcobraAllocOptions::from_params(m.budget, m.params).validate();
}

ModelCompressor make_kvcobra(const MethodSpec& m, const MethodContext& ctx) {
  const KvcobraAllocOptions opt = KvcobraAllocOptions::from_params(m.budget, m.params);
  const RopeParams rope = ctx.rope;
  return [opt, rope](const std::vector<std::vector<HeadData>>& heads) {
    std::vector<std::vector<double>> w;
    int d = 0;
    for (const auto& layer : heads)
      for (const HeadData& h : layer) {
        w.push_back(kvcobra_direction_weights(h, rope, opt.basis));
        d = static_cast<int>(h.keys.cols());
      }
    const KvcobraAllocation a = allocate_kvcobra(w, d, opt);
    if (!a.has_solution()) throw InputError("kvcobra found no allocation at B = " + format_number(opt.budget) + ": " + a.message);
    std::size_t i = 0;
    return per_head(heads, [&](const HeadData& h) {
      QuantizedHeadKeys k = a.quantizer(i++)->quantize(h, rope);
      const Rate r = k.rate();
      return CompressedHead{std::move(k.keys), std::vector<std::uint8_t>(static_cast<std::size_t>(h.keys.rows()), 1), r};
    });
  };
}

SeedEvaluation evaluate_kvcobra(const TraceReader& trace, const SeedRequest& r, Recomputer& backend,
                                const Progress& progress) {
  const TraceMeta& meta = trace.meta();
  SeedEvaluation out;
  const KvcobraAllocation a = allocate_kvcobra(trace, KvcobraAllocOptions::from_params(r.budget, r.params));
  if (!a.has_solution())
    throw InputError("seed allocator kvcobra has no allocation at budget " + std::to_string(r.budget) + ": " + a.message);
  std::vector<std::unique_ptr<KeyQuantizer>> quantizers;
  for (std::size_t i = 0; i < a.heads.size(); ++i) quantizers.push_back(a.quantizer(i));
  TraceEvaluation ev = evaluate_trace(trace, [&](const HeadData& head) {
    const std::size_t i = static_cast<std::size_t>(head.layer) * meta.n_kv_heads + head.kv_head;
    QuantizedHeadKeys q = quantizers[i]->quantize(head, meta.rope);
    const Rate rate = q.rate();
    return CompressedHead{std::move(q.keys), std::vector<std::uint8_t>(static_cast<std::size_t>(meta.prompt_len), 1),
                          rate};
  }, backend, progress);
  ev.policy = "seed " + a.options.name();
  out.line = a.summary() + "\n" + a.message;
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : a.heads)
    heads.push_back({{"layer", h.layer}, {"kv_head", h.kv_head}, {"rank", h.rank}, {"bits", h.bits},
                     {"head_budget_bits", h.head_budget}, {"distortion", h.distortion},
                     {"nominal_rate", h.nominal_rate}, {"code_rate", h.code_rate}});
  out.report = {{"method", a.options.name()}, {"status", std::string(to_string(a.status))},
                {"feasible_reason", feasible_reason_json(a)}, {"message", a.message},
                {"budget", r.budget}, {"distortion", a.objective}, {"nominal_rate", a.nominal_rate},
                {"code_rate", a.code_rate}, {"heads", heads}};
  if (std::isfinite(a.lower_bound)) out.report["lower_bound"] = a.lower_bound;
  out.evaluation = std::move(ev);
  return out;
}

}  // namespace tierlab::method_factories
