#include "scenarios/methods/catalogue.hpp"

#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/base/text.hpp"
#include "scenarios/methods/compressors.hpp"
#include "solvers/kvcobra_allocator.hpp"
#include "solvers/policy.hpp"
#include "solvers/problem.hpp"
#include "solvers/scorers.hpp"
#include "solvers/seed_allocators.hpp"

namespace tierlab {

namespace {

constexpr MethodKind kKinds[] = {MethodKind::Quantizer, MethodKind::Scorer, MethodKind::Allocator, MethodKind::Policy,
                                 MethodKind::Solver};

// A key quantizer's registry entry as a MethodInfo: its parameters' help names the choices
// (as `tierlab methods` has always printed them), and the choices are kept as a list too.
MethodInfo quantizer_info(const KeyQuantizerEntry& q) {
  MethodInfo m = q.info;
  for (MethodParam& p : m.params)
    for (std::size_t i = 0; i < p.choices.size(); ++i) p.help += (i == 0 ? "; one of " : " | ") + p.choices[i];
  return m;
}

std::vector<CatalogueEntry> build() {
  namespace f = method_factories;
  std::vector<CatalogueEntry> out;
  for (const KeyQuantizerEntry& q : key_quantizer_registry())
    out.push_back({MethodKind::Quantizer, quantizer_info(q), {"{quantizer: " + q.info.name + "}"}, f::check_quantizer,
                   f::make_quantizer});
  for (const ScorerEntry& e : scorer_registry())
    out.push_back({MethodKind::Scorer, e.info, {"{scorer: " + e.info.name + "}"}, f::check_scorer, f::make_scorer});
  for (const MethodInfo& m : seed_allocator_methods())
    out.push_back({MethodKind::Allocator, m, {"{seed: " + m.name + ", budget: 2}"}, f::check_seed, f::make_seed,
                   f::evaluate_seed});
  // KV-COBRA allocates (rank, bits) per head rather than tiers on a ladder: its own factories.
  const MethodInfo kvcobra = kvcobra_allocator_method();
  out.push_back({MethodKind::Allocator, kvcobra, {"{seed: " + kvcobra.name + ", budget: 2}"}, f::check_kvcobra,
                 f::make_kvcobra, f::evaluate_kvcobra});
  for (const MethodInfo& m : uniform_policy_methods())
    out.push_back({MethodKind::Policy, m, m.examples, f::check_policy, f::make_policy});
  for (const MethodInfo& m : solver_methods()) out.push_back({MethodKind::Solver, m, {}, nullptr, nullptr});
  return out;
}

}  // namespace

std::string_view to_string(MethodKind k) {
  switch (k) {
    case MethodKind::Quantizer: return "quantizer";
    case MethodKind::Scorer: return "scorer";
    case MethodKind::Allocator: return "allocator";
    case MethodKind::Policy: return "policy";
    case MethodKind::Solver: return "solver";
  }
  return "?";
}

bool parse_method_kind_filter(std::string_view text, std::string_view field, MethodKind& kind) {
  if (text == "all") return false;
  for (MethodKind k : kKinds)
    if (text == to_string(k)) {
      kind = k;
      return true;
    }
  throw InputError(std::string(field) + ": '" + std::string(text) +
                   "' is not all, quantizer, scorer, allocator, policy or solver");
}

const std::vector<CatalogueEntry>& method_catalogue() {
  static const std::vector<CatalogueEntry> all = build();
  return all;
}

std::vector<CatalogueEntry> method_catalogue(std::string_view kind, std::string_view field) {
  MethodKind k{};
  const bool one = parse_method_kind_filter(kind, field, k);
  std::vector<CatalogueEntry> out;
  for (const CatalogueEntry& e : method_catalogue())
    if (!one || e.kind == k) out.push_back(e);
  return out;
}

const CatalogueEntry& catalogue_entry(const MethodSpec& m) {
  MethodKind k = MethodKind::Quantizer;
  switch (m.kind) {
    case MethodSpec::Kind::Quantizer: k = MethodKind::Quantizer; break;
    case MethodSpec::Kind::Scorer: k = MethodKind::Scorer; break;
    case MethodSpec::Kind::Seed: k = MethodKind::Allocator; break;
    case MethodSpec::Kind::Policy: k = MethodKind::Policy; break;
    case MethodSpec::Kind::Family:
      throw InputError("family '" + m.name + "' is the problem's own family, not a method of the catalogue");
  }
  // A policy is named by its form, the text before its first ':' ("kivi:2" -> "kivi").
  auto key = [k](const std::string& name) { return k == MethodKind::Policy ? name.substr(0, name.find(':')) : name; };
  std::vector<std::string> names;
  for (const CatalogueEntry& e : method_catalogue())
    if (e.kind == k) {
      if (key(e.info.name) == key(m.name)) return e;
      names.push_back(e.info.name);
    }
  // None: the registry's own message names the choices where it has one.
  if (k == MethodKind::Quantizer) make_key_quantizer(m.name, {});
  if (k == MethodKind::Scorer) scorer_entry(m.name);
  if (k == MethodKind::Policy) UniformPolicy::parse(m.name);
  const std::string title = k == MethodKind::Allocator ? "seed allocator" : std::string(to_string(k));
  throw InputError(title + " '" + m.name + "' is unknown; the choices are " + join(names) + ".");
}

nlohmann::json to_json(const CatalogueEntry& e) {
  nlohmann::json params = nlohmann::json::array();
  for (const MethodParam& p : e.info.params)
    params.push_back({{"name", p.name}, {"default", p.default_value}, {"help", p.help}, {"choices", p.choices}});
  return {{"name", e.info.name},       {"kind", e.info.kind},     {"summary", e.info.summary},
          {"source", e.info.source},   {"params", params}};
}

}  // namespace tierlab
