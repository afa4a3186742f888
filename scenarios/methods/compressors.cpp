// The factories of the catalogue's entries (compressors.hpp); KV-COBRA's are in kvcobra_method.cpp.
#include "scenarios/methods/compressors.hpp"

#include <cmath>
#include <algorithm>
#include <memory>
#include <sstream>

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
  // The one parameter reader names an unknown parameter and the valid ones (model/base/method_info.hpp);
  // the values are read when the allocator runs.
  MethodParamReader("seed allocator '" + m.name + "'", info->params, m.params);
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
    p.n_kv_heads = heads.empty() ? 0 : static_cast<int>(heads.front().size());
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

nlohmann::json feasible_reason_json(const SolveSummary& s) {
  return s.status == SolveStatus::Feasible ? nlohmann::json(std::string(to_string(s.feasible_reason))) : nlohmann::json();
}

SeedEvaluation evaluate_seed(const TraceReader& trace, const SeedRequest& r, Recomputer& backend,
                             const Progress& progress) {
  const TraceMeta& meta = trace.meta();
  SeedEvaluation out;
  const RateLadder& ladder = r.ladder;
  const Scope scope = r.scope;
  const RateKind kind = r.rate_kind;
  // Every head's surrogate costs (layer-major), then one SeedProblem per scope group.
  std::vector<SurrogateCosts> costs;
  costs.reserve(static_cast<std::size_t>(meta.n_heads()));
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      const HeadData head = trace.head(l, h);
      costs.push_back(surrogate_costs(head, meta.rope, observation_queries(head), ladder));
      progress(l * meta.n_kv_heads + h + 1, 2 * meta.n_heads());
    }
  const std::size_t H = costs.size();
  const std::size_t per_group = scope == Scope::Head ? 1 : scope == Scope::Layer ? std::size_t(meta.n_kv_heads) : H;
  std::vector<std::vector<std::uint8_t>> tiers(H);
  nlohmann::json groups = nlohmann::json::array();
  std::string method;
  double used = 0, total = 0;
  for (std::size_t g0 = 0; g0 < H; g0 += per_group) {
    SeedProblem p;
    p.ladder = ladder;
    p.budget = r.budget;
    p.rate_kind = kind;
    p.head_dim = meta.head_dim;
    p.n_kv_heads = scope == Scope::Head ? 1 : meta.n_kv_heads;
    for (std::size_t i = g0; i < std::min(H, g0 + per_group); ++i) p.heads.push_back(&costs[i]);
    const SeedAllocation a = allocate_seed(r.name, r.params, p);
    method = a.method;
    if (a.status == SolveStatus::Infeasible || a.tiers.size() != p.heads.size())
      throw InputError("seed allocator " + a.method + " has no allocation at budget " + std::to_string(r.budget) +
                       " (heads " + std::to_string(g0) + ".." + std::to_string(g0 + p.heads.size() - 1) +
                       "): " + a.message);
    for (std::size_t i = 0; i < p.heads.size(); ++i) tiers[g0 + i] = a.tiers[i];
    used += a.rate_used;
    total += static_cast<double>(a.tokens);
    groups.push_back({{"first_head", g0}, {"heads", p.heads.size()}, {"status", std::string(to_string(a.status))},
                      {"feasible_reason", feasible_reason_json(a)}, {"message", a.message},
                      {"multiplier", a.multiplier}, {"objective", a.objective},
                      {"rate_used_bits", a.rate_used}, {"rate_budget_bits", a.rate_budget},
                      {"mean_rate", a.mean_rate()}});
  }
  costs.clear();
  TraceEvaluation ev = evaluate_trace(trace, ladder, [&](const HeadData& head, const TokenWeights&) {
    return tiers[static_cast<std::size_t>(head.layer) * meta.n_kv_heads + head.kv_head];
  }, backend, progress);
  std::ostringstream b;
  b << r.budget;
  const std::string label = method + " B=" + b.str() + " " + std::string(to_string(kind)) + " scope " +
                            std::string(to_string(scope)) + " ladder " + ladder.name();
  ev.policy = "seed " + label;
  out.line = "seed " + label + ": mean nominal rate " + std::to_string(total > 0 ? used / total : 0.0) +
               " bits per element (" + std::to_string(groups.size()) + " budget groups)";
  out.report = {{"method", method}, {"budget", r.budget}, {"rate_kind", std::string(to_string(kind))},
                {"scope", std::string(to_string(scope))}, {"ladder", ladder.name()},
                {"mean_nominal_rate", total > 0 ? used / total : 0.0}, {"groups", groups}};
  out.evaluation = std::move(ev);
  return out;
}

}  // namespace tierlab::method_factories
