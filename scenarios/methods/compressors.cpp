// The factories of the catalogue's entries (compressors.hpp); KV-COBRA's are in kvcobra_method.cpp.
#include "scenarios/methods/compressors.hpp"

#include <cmath>
#include <memory>

#include "model/base/error.hpp"
#include "model/base/text.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/pipeline/head.hpp"
#include "solvers/policy.hpp"
#include "solvers/scorers.hpp"
#include "solvers/seed_allocators.hpp"

namespace tierlab::method_factories {

CompressedHead from_tiers(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                          const std::vector<std::uint8_t>& tiers) {
  MaterializedKeys mk = materialize(head, rope, ladder, tiers);
  return CompressedHead{std::move(mk.keys), std::move(mk.kept), mk.rate};
}

FamilyChoice family_of(const std::string& name) {
  if (name == "M" || name == "mixed") return FamilyChoice::Mixed;
  if (name == "Q" || name == "quantize") return FamilyChoice::Quantize;
  if (name == "E" || name == "evict") return FamilyChoice::Evict;
  if (name == "routed") return FamilyChoice::Routed;
  throw InputError("family '" + name + "' is unknown; the choices are M (mixed), Q (quantize), E (evict), routed");
}

void check_quantizer(const MethodSpec& m) { make_key_quantizer(m.name, m.params); }

ModelCompressor make_quantizer(const MethodSpec& m, const MethodContext& ctx) {
  std::shared_ptr<const KeyQuantizer> q(make_key_quantizer(m.name, m.params));
  const RopeParams rope = ctx.rope;
  return [q, rope](const std::vector<std::vector<HeadData>>& heads) {
    return per_head(heads, [&](const HeadData& h) {
      QuantizedHeadKeys k = q->quantize(h, rope);
      const Rate r = k.rate();
      return CompressedHead{std::move(k.keys), std::vector<std::uint8_t>(static_cast<std::size_t>(h.keys.rows()), 1), r};
    });
  };
}

void check_scorer(const MethodSpec& m) {
  tierlab::make_scorer(m.name, m.params);
  if (m.keep.empty()) throw InputError("scorer '" + m.name + "' needs the key 'keep' (ratio:R or count:N)");
  const Budget b = Budget::parse(m.keep);
  if (b.kind == Budget::Kind::Ratio && !(b.value >= 0 && b.value <= 1))
    throw InputError("keep '" + m.keep + "': the ratio must be in [0, 1]");
}

ModelCompressor make_scorer(const MethodSpec& m, const MethodContext& ctx) {
  const ScorerConfig cfg = make_scorer_for_trace(m.name, m.params, ctx.group_size);
  const Budget budget = Budget::parse(m.keep);
  return [cfg, budget](const std::vector<std::vector<HeadData>>& heads) {
    const EvictionPlan plan = plan_eviction(cfg, heads, budget);
    return per_head(heads, [&](const HeadData& h) {
      const HeadKeep& k = plan.keep[static_cast<std::size_t>(h.layer)][static_cast<std::size_t>(h.kv_head)];
      double kept = 0;
      for (const std::uint8_t x : k) kept += x;
      const double bits = k.empty() ? 0.0 : 16.0 * kept / static_cast<double>(k.size());
      return CompressedHead{h.keys, std::vector<std::uint8_t>(k.begin(), k.end()), Rate{bits, bits}};
    });
  };
}

void check_seed(const MethodSpec& m) {
  const MethodInfo* info = nullptr;
  for (const MethodInfo& i : seed_allocator_methods())
    if (i.name == m.name) info = &i;
  if (!info) throw InputError("seed allocator '" + m.name + "' is not a ladder seed allocator (solvers/seed_allocators.hpp)");
  std::vector<std::string> valid;
  for (const auto& p : info->params) valid.push_back(p.name);
  for (const auto& [k, v] : m.params) {
    bool ok = false;
    for (const auto& p : valid) ok = ok || p == k;
    if (!ok)
      throw InputError("seed allocator '" + m.name + "': unknown parameter '" + k + "'; the valid parameters are " +
                       (valid.empty() ? std::string("(none)") : join(valid)) + ".");
  }
  m.ladder.validate();
}

ModelCompressor make_seed(const MethodSpec& m, const MethodContext& ctx) {
  const RateKind kind = ctx.rate_kind;
  const RopeParams rope = ctx.rope;
  return [m, kind, rope](const std::vector<std::vector<HeadData>>& heads) {
    std::vector<SurrogateCosts> costs;
    for (const auto& layer : heads)
      for (const HeadData& h : layer) costs.push_back(surrogate_costs(h, rope, observation_queries(h), m.ladder));
    SeedProblem p;
    p.ladder = m.ladder;
    for (const auto& c : costs) p.heads.push_back(&c);
    p.budget = m.budget;
    p.rate_kind = kind;
    p.head_dim = heads.empty() || heads.front().empty() ? 0 : static_cast<int>(heads.front().front().keys.cols());
    const SeedAllocation a = allocate_seed(m.name, m.params, p);
    if (a.status == SolveStatus::Infeasible)
      throw InputError("the seed allocator found no allocation at B = " + format_number(m.budget) + ": " + a.message);
    std::size_t i = 0;
    return per_head(heads, [&](const HeadData& h) { return from_tiers(h, rope, m.ladder, a.tiers.at(i++)); });
  };
}

void check_policy(const MethodSpec& m) {
  if (!m.params.empty()) throw InputError("a policy takes no parameters (write them in the policy text, e.g. kivi:2:g64)");
  UniformPolicy::parse(m.name);
}

ModelCompressor make_policy(const MethodSpec& m, const MethodContext& ctx) {
  const UniformPolicy policy = UniformPolicy::parse(m.name);
  const RopeParams rope = ctx.rope;
  return [policy, rope](const std::vector<std::vector<HeadData>>& heads) {
    const RateLadder ladder = policy.ladder();
    return per_head(heads, [&](const HeadData& h) {
      const TokenWeights w = token_weights(h.keys, h.values, observation_queries(h));
      return from_tiers(h, rope, ladder, policy.allocate(static_cast<int>(h.keys.rows()), &w));
    });
  };
}

void check_family(const MethodSpec& m) {
  if (!m.params.empty()) throw InputError("a family takes no parameters");
  family_of(m.name);
  m.ladder.validate();
}

ModelCompressor make_family(const MethodSpec& m, const MethodContext& ctx) {
  const FamilyChoice choice = family_of(m.name);
  const RateKind kind = ctx.rate_kind;
  const RopeParams rope = ctx.rope;
  return [m, choice, kind, rope](const std::vector<std::vector<HeadData>>& heads) {
    return per_head(heads, [&](const HeadData& h) {
      const SurrogateCosts sc = surrogate_costs(h, rope, observation_queries(h), m.ladder);
      // At equal memory, as every front door solves one head: the allocation's measured
      // rate meets B (a nominal optimum that measures over it is re-solved at a smaller B').
      const HeadSolution r = solve_head_at_equal_memory(h, rope, sc.cost, sc.weights.a,
                                                        ladder_rates(h, rope, m.ladder, kind), m.ladder, m.budget,
                                                        kind, choice)
                                 .solution;
      if (!r.feasible)
        throw InputError("family " + m.name + " has no allocation at B = " + format_number(m.budget) + " on the ladder " +
                         m.ladder.name() + " (" + r.message + ")");
      return from_tiers(h, rope, m.ladder, r.tiers);
    });
  };
}

}  // namespace tierlab::method_factories
