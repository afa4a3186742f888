#include "scenarios/methods/catalogue.hpp"

#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
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
  MethodInfo m{q.name, "key quantizer", q.summary, q.source, {}};
  for (const KeyQuantizerParam& p : q.params) {
    std::string help = p.meaning;
    for (std::size_t i = 0; i < p.choices.size(); ++i) help += (i == 0 ? "; one of " : " | ") + p.choices[i];
    m.params.push_back({p.name, p.default_value, help, p.choices});
  }
  return m;
}

std::vector<CatalogueEntry> build() {
  std::vector<CatalogueEntry> out;
  for (const KeyQuantizerEntry& q : key_quantizer_registry())
    out.push_back({MethodKind::Quantizer, quantizer_info(q), {"{quantizer: " + q.name + "}"}});
  for (const ScorerEntry& e : scorer_registry())
    out.push_back({MethodKind::Scorer, e.info, {"{scorer: " + e.info.name + "}"}});
  std::vector<MethodInfo> seeds = seed_allocator_methods();
  seeds.push_back(kvcobra_allocator_method());
  for (const MethodInfo& m : seeds) out.push_back({MethodKind::Allocator, m, {"{seed: " + m.name + ", budget: 2}"}});
  for (const MethodInfo& m : uniform_policy_methods()) out.push_back({MethodKind::Policy, m, m.examples});
  for (const MethodInfo& m : solver_methods()) out.push_back({MethodKind::Solver, m, {}});
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

nlohmann::json to_json(const CatalogueEntry& e) {
  nlohmann::json params = nlohmann::json::array();
  for (const MethodParam& p : e.info.params)
    params.push_back({{"name", p.name}, {"default", p.default_value}, {"help", p.help}, {"choices", p.choices}});
  return {{"name", e.info.name},       {"kind", e.info.kind},     {"summary", e.info.summary},
          {"source", e.info.source},   {"params", params}};
}

}  // namespace tierlab
