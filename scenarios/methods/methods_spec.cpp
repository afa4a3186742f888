// Methods named in scenario files (methods_spec.hpp).
#include "scenarios/methods/methods_spec.hpp"

#include <cmath>
#include <memory>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "model/base/text.hpp"
#include "scenarios/io/yaml_reader.hpp"

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/pipeline/head.hpp"
#include "solvers/families.hpp"
#include "solvers/kvcobra_allocator.hpp"
#include "solvers/policy.hpp"
#include "solvers/seed_allocators.hpp"

namespace tierlab {

// The kind keys of a method entry, in the order the messages list them.
constexpr auto kMethodKinds = enum_table<MethodSpec::Kind>("method kind", {{MethodSpec::Kind::Quantizer, "quantizer"},
                                                                          {MethodSpec::Kind::Scorer, "scorer"},
                                                                          {MethodSpec::Kind::Seed, "seed"},
                                                                          {MethodSpec::Kind::Policy, "policy"},
                                                                          {MethodSpec::Kind::Family, "family"}});

std::string to_string(MethodSpec::Kind k) { return std::string(enum_name(kMethodKinds, k)); }

namespace {

const std::string kKindKeys = enum_choices(kMethodKinds);  // "quantizer, scorer, seed, policy, family"

// One axis of the expansion of an entry: a key and its values.
struct Axis {
  std::string key;  // "param:NAME", "keep", "budget"
  std::vector<YAML::Node> values;
};

// Default label: the kind's name and the values the file gave.
std::string default_label(const MethodSpec& m, const std::vector<std::pair<std::string, std::string>>& given) {
  std::string s;
  switch (m.kind) {
    case MethodSpec::Kind::Family: s = m.name + "*"; break;
    case MethodSpec::Kind::Seed: s = m.name; break;
    default: s = m.name;
  }
  for (const auto& [k, v] : given) s += " " + k + "=" + v;
  return s;
}

// Checks one expanded method against its registry (everything that can be checked without a trace).
void check_method(const MethodSpec& m) {
  switch (m.kind) {
    case MethodSpec::Kind::Quantizer: make_key_quantizer(m.name, m.params); break;
    case MethodSpec::Kind::Scorer: {
      make_scorer(m.name, m.params);
      if (m.keep.empty()) throw InputError("scorer '" + m.name + "' needs the key 'keep' (ratio:R or count:N)");
      const Budget b = Budget::parse(m.keep);
      if (b.kind == Budget::Kind::Ratio && !(b.value >= 0 && b.value <= 1))
        throw InputError("keep '" + m.keep + "': the ratio must be in [0, 1]");
      break;
    }
    case MethodSpec::Kind::Seed: {
      if (m.name == "kvcobra") {  // per-head (rank, bits), not a ladder allocation (solvers/kvcobra_allocator.hpp)
        if (std::isfinite(m.budget)) KvcobraAllocOptions::from_params(m.budget, m.params).validate();
        break;
      }
      std::vector<std::string> names;
      const MethodInfo* info = nullptr;
      for (const auto& i : seed_allocator_methods()) {
        names.push_back(i.name);
        if (i.name == m.name) info = &i;
      }
      names.push_back(kvcobra_allocator_method().name);
      if (!info) throw InputError("seed allocator '" + m.name + "' is unknown; the choices are " + join(names) + ".");
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
      break;
    }
    case MethodSpec::Kind::Policy: {
      if (!m.params.empty()) throw InputError("a policy takes no parameters (write them in the policy text, e.g. kivi:2:g64)");
      UniformPolicy::parse(m.name);
      break;
    }
    case MethodSpec::Kind::Family: {
      if (!m.params.empty()) throw InputError("a family takes no parameters");
      m.ladder.validate();
      break;
    }
  }
  if ((m.kind == MethodSpec::Kind::Seed || m.kind == MethodSpec::Kind::Family) && !std::isfinite(m.budget))
    throw InputError(to_string(m.kind) + " '" + m.name + "' needs the key 'budget' (B, bits per key element)");
}

FamilyChoice family_of(const std::string& name) {
  if (name == "M" || name == "mixed") return FamilyChoice::Mixed;
  if (name == "Q" || name == "quantize") return FamilyChoice::Quantize;
  if (name == "E" || name == "evict") return FamilyChoice::Evict;
  if (name == "routed") return FamilyChoice::Routed;
  throw InputError("family '" + name + "' is unknown; the choices are M (mixed), Q (quantize), E (evict), routed");
}

std::vector<MethodSpec> parse_entry(const YamlReader& w, const YAML::Node& e, const std::string& key,
                                    const RateLadder& default_ladder, bool quantizers_only) {
  MethodSpec base;
  base.where = w.at(e);
  base.ladder = default_ladder;
  if (e.IsScalar()) {
    if (!quantizers_only)
      w.fail(e, "key '" + key + "': an entry must be a mapping with one of the keys " + kKindKeys +
                    " (e.g. {quantizer: kivi, bits: 2}).");
    base.kind = MethodSpec::Kind::Quantizer;
    base.name = e.as<std::string>();
    try {
      make_key_quantizer(base.name, {});
    } catch (const InputError& err) {
      w.fail(e, "key '" + key + "': " + err.what());
    }
    base.label = base.name;
    return {base};
  }
  if (!e.IsMap()) w.fail(e, "key '" + key + "': an entry must be a mapping with one of the keys " + std::string(kKindKeys) + ".");
  int found = 0;
  YAML::Node kind_node;
  for (const auto& [kind, k] : kMethodKinds.names)
    if (e[std::string(k)]) {
      ++found;
      base.kind = kind;
      kind_node = e[std::string(k)];
    }
  if (found != 1)
    w.fail(e, "key '" + key + "': an entry needs exactly one of the keys " + kKindKeys + " (it has " +
                  std::to_string(found) + ").");
  if (quantizers_only && base.kind != MethodSpec::Kind::Quantizer)
    w.fail(e, "key '" + key + "': only quantizers are allowed here ({quantizer: NAME, ...} or a name).");
  base.name = w.str(kind_node, key + "." + to_string(base.kind));

  const std::set<std::string> reserved = {"quantizer", "scorer", "seed", "policy", "family",
                                          "params",    "keep",   "budget", "label", "ladder"};
  std::vector<Axis> axes;
  auto add_param = [&](const std::string& p, const YAML::Node& v) {
    for (const auto& a : axes)
      if (a.key == "param:" + p) w.fail(v, "key '" + key + "': parameter '" + p + "' is given twice.");
    axes.push_back({"param:" + p, w.list(v, key + "." + p)});
  };
  for (const auto& kv : e) {
    const std::string k = kv.first.as<std::string>();
    if (k == "params") {
      if (!kv.second.IsMap()) w.fail(kv.second, "key '" + key + ".params' must be a mapping of parameter: value.");
      for (const auto& pv : kv.second) add_param(pv.first.as<std::string>(), pv.second);
    } else if (k == "keep") {
      if (base.kind != MethodSpec::Kind::Scorer) w.fail(kv.first, "key '" + key + "': 'keep' is for scorers only.");
      axes.push_back({"keep", w.list(kv.second, key + ".keep")});
    } else if (k == "budget") {
      if (base.kind != MethodSpec::Kind::Seed && base.kind != MethodSpec::Kind::Family)
        w.fail(kv.first, "key '" + key + "': 'budget' is for seed allocators and families only.");
      axes.push_back({"budget", w.list(kv.second, key + ".budget")});
    } else if (k == "label") {
      base.label = w.str(kv.second, key + ".label");
    } else if (k == "ladder") {
      if (base.kind != MethodSpec::Kind::Seed && base.kind != MethodSpec::Kind::Family)
        w.fail(kv.first, "key '" + key + "': 'ladder' is for seed allocators and families only.");
      try {
        base.ladder = RateLadder::parse(w.str(kv.second, key + ".ladder"));
      } catch (const InputError& err) {
        w.fail(kv.second, "key '" + key + ".ladder': " + err.what());
      }
    } else if (!reserved.count(k)) {
      add_param(k, kv.second);
    }
  }
  if (base.kind == MethodSpec::Kind::Family) {
    try {
      family_of(base.name);
    } catch (const InputError& err) {
      w.fail(kind_node, "key '" + key + "': " + err.what());
    }
  }
  if (quantizers_only)
    for (const auto& a : axes)
      if (a.key == "param:bits")
        w.fail(e, "key '" + key + "': do not give 'bits' here; the analysis sets it from mismatch.bits.");

  // Cartesian product of the axes, in key order.
  std::vector<MethodSpec> out;
  std::vector<std::size_t> idx(axes.size(), 0);
  const bool expanded = [&] {
    for (const auto& a : axes)
      if (a.values.size() > 1) return true;
    return false;
  }();
  if (expanded && !base.label.empty())
    w.fail(e, "key '" + key + "': an entry that expands into several methods (a list value) cannot have one 'label'.");
  while (true) {
    MethodSpec m = base;
    std::vector<std::pair<std::string, std::string>> given;
    const YAML::Node* last = &e;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const YAML::Node& v = axes[i].values[idx[i]];
      const std::string s = v.as<std::string>();
      last = &axes[i].values[idx[i]];
      if (axes[i].key == "keep") {
        m.keep = s;
        given.push_back({"keep", s});
      } else if (axes[i].key == "budget") {
        m.budget = w.num(v, key + ".budget", 0.01, 16.0);
        given.push_back({"B", s});
      } else {
        const std::string p = axes[i].key.substr(6);
        m.params[p] = s;
        given.push_back({p, s});
      }
    }
    if (m.label.empty()) m.label = default_label(m, given);
    try {
      check_method(m);
    } catch (const InputError& err) {
      w.fail(axes.empty() ? kind_node : *last, "key '" + key + "', method '" + m.label + "': " + err.what());
    }
    out.push_back(std::move(m));
    std::size_t i = 0;
    for (; i < axes.size(); ++i) {
      if (++idx[i] < axes[i].values.size()) break;
      idx[i] = 0;
    }
    if (i == axes.size()) break;
  }
  return out;
}

// The compressed keys of a ladder allocation.
CompressedHead from_tiers(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                          const std::vector<std::uint8_t>& tiers) {
  MaterializedKeys mk = materialize(head, rope, ladder, tiers);
  return CompressedHead{std::move(mk.keys), std::move(mk.kept), mk.rate};
}

template <class F>
std::vector<std::vector<CompressedHead>> per_head(const std::vector<std::vector<HeadData>>& heads, F&& f) {
  std::vector<std::vector<CompressedHead>> out(heads.size());
  for (std::size_t l = 0; l < heads.size(); ++l)
    for (const HeadData& h : heads[l]) out[l].push_back(f(h));
  return out;
}

}  // namespace

std::vector<MethodSpec> parse_method_specs(const YAML::Node& list, const std::string& file, const std::string& key,
                                           const RateLadder& default_ladder, bool quantizers_only) {
  const YamlReader w{file};
  if (!list.IsSequence() || list.size() == 0) w.fail(list, "key '" + key + "' must be a non-empty list of method entries.");
  std::vector<MethodSpec> out;
  std::set<std::string> labels;
  for (const auto& e : list)
    for (MethodSpec& m : parse_entry(w, e, key, default_ladder, quantizers_only)) {
      if (!labels.insert(m.label).second)
        w.fail(e, "key '" + key + "': the method '" + m.label + "' is listed twice (give a distinct 'label').");
      out.push_back(std::move(m));
    }
  return out;
}

std::vector<MethodSpec> parse_method_spec_text(const std::string& text, const std::string& option,
                                               const RateLadder& default_ladder,
                                               const std::vector<std::string>& default_keep) {
  const std::string named = option + " '" + text + "'";
  YAML::Node entry;
  try {
    entry = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(named + ": not a method (" + e.msg + "); give a uniform policy (kivi:2) or an entry of a " +
                     "scenario's methods list ({quantizer: kivi, bits: 2}).");
  }
  if (entry.IsScalar()) {
    YAML::Node policy(YAML::NodeType::Map);
    policy["policy"] = text;
    entry = policy;
  }
  if (entry.IsMap() && entry["scorer"] && !entry["keep"] && !default_keep.empty()) {
    YAML::Node keep(YAML::NodeType::Sequence);
    for (const std::string& k : default_keep) keep.push_back(k);
    entry["keep"] = keep;
  }
  YAML::Node list(YAML::NodeType::Sequence);
  list.push_back(entry);
  std::vector<MethodSpec> out;
  try {
    out = parse_method_specs(list, option, option, default_ladder);
  } catch (const InputError& e) {
    // "OPTION:LINE: key 'OPTION'...": the text has no lines worth naming.
    std::string what = e.what();
    const std::string prefix = option + ":";
    if (what.rfind(prefix, 0) == 0) {
      const std::size_t colon = what.find(": ", prefix.size());
      if (colon != std::string::npos) what = what.substr(colon + 2);
    }
    for (const std::string& key : {"key '" + option + "', ", "key '" + option + "': "})
      if (what.rfind(key, 0) == 0) what = what.substr(key.size());
    throw InputError(named + ": " + what);
  }
  for (MethodSpec& m : out) m.where = named;
  return out;
}

ModelCompressor make_model_compressor(const MethodSpec& m, const MethodContext& ctx) {
  auto wrap = [m](auto&& body) -> ModelCompressor {
    return [m, body](const std::vector<std::vector<HeadData>>& heads) {
      try {
        return body(heads);
      } catch (const InputError& e) {
        throw InputError(m.where + ": method '" + m.label + "': " + e.what());
      }
    };
  };
  switch (m.kind) {
    case MethodSpec::Kind::Quantizer: {
      std::shared_ptr<const KeyQuantizer> q(make_key_quantizer(m.name, m.params));
      const RopeParams rope = ctx.rope;
      return wrap([q, rope](const std::vector<std::vector<HeadData>>& heads) {
        return per_head(heads, [&](const HeadData& h) {
          QuantizedHeadKeys k = q->quantize(h, rope);
          const Rate r = k.rate();
          return CompressedHead{std::move(k.keys), std::vector<std::uint8_t>(static_cast<std::size_t>(h.keys.rows()), 1), r};
        });
      });
    }
    case MethodSpec::Kind::Scorer: {
      const ScorerConfig cfg = make_scorer_for_trace(m.name, m.params, ctx.group_size);
      const Budget budget = Budget::parse(m.keep);
      return wrap([cfg, budget](const std::vector<std::vector<HeadData>>& heads) {
        const EvictionPlan plan = plan_eviction(cfg, heads, budget);
        return per_head(heads, [&](const HeadData& h) {
          const HeadKeep& k = plan.keep[static_cast<std::size_t>(h.layer)][static_cast<std::size_t>(h.kv_head)];
          double kept = 0;
          for (const std::uint8_t x : k) kept += x;
          const double bits = k.empty() ? 0.0 : 16.0 * kept / static_cast<double>(k.size());
          return CompressedHead{h.keys, std::vector<std::uint8_t>(k.begin(), k.end()), Rate{bits, bits}};
        });
      });
    }
    case MethodSpec::Kind::Seed: {
      if (m.name == "kvcobra") {
        const KvcobraAllocOptions opt = KvcobraAllocOptions::from_params(m.budget, m.params);
        const RopeParams rope = ctx.rope;
        return wrap([opt, rope](const std::vector<std::vector<HeadData>>& heads) {
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
        });
      }
      const RateKind kind = ctx.rate_kind;
      const RopeParams rope = ctx.rope;
      return wrap([m, kind, rope](const std::vector<std::vector<HeadData>>& heads) {
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
      });
    }
    case MethodSpec::Kind::Policy: {
      const UniformPolicy policy = UniformPolicy::parse(m.name);
      const RopeParams rope = ctx.rope;
      return wrap([policy, rope](const std::vector<std::vector<HeadData>>& heads) {
        const RateLadder ladder = policy.ladder();
        return per_head(heads, [&](const HeadData& h) {
          const TokenWeights w = token_weights(h.keys, h.values, observation_queries(h));
          return from_tiers(h, rope, ladder, policy.allocate(static_cast<int>(h.keys.rows()), &w));
        });
      });
    }
    case MethodSpec::Kind::Family: {
      const FamilyChoice choice = family_of(m.name);
      const RateKind kind = ctx.rate_kind;
      const RopeParams rope = ctx.rope;
      return wrap([m, choice, kind, rope](const std::vector<std::vector<HeadData>>& heads) {
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
      });
    }
  }
  throw InputError("unknown method kind");
}

}  // namespace tierlab
