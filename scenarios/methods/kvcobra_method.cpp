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

}  // namespace tierlab::method_factories
