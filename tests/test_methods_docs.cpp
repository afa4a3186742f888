// docs/methods.md lists every method of the catalogue (scenarios/methods/catalogue.hpp) and
// every tier form, each by its whole name in backticks, so the docs cannot silently fall behind
// a registry; and the catalogue holds each registry's entries, once.
#include <catch2/catch.hpp>

#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "scenarios/methods/catalogue.hpp"
#include "solvers/policy.hpp"
#include "solvers/families.hpp"
#include "solvers/kvcobra_allocator.hpp"
#include "solvers/problem.hpp"
#include "solvers/scorers.hpp"
#include "solvers/seed_allocators.hpp"
#include "support.hpp"

using namespace tierlab;

namespace {
const std::string& methods_doc() {
  static const std::string text = tierlab::testing::slurp(std::string(TIERLAB_SOURCE_DIR) + "/docs/methods.md");
  return text;
}
bool listed(const std::string& name) { return methods_doc().find("`" + name) != std::string::npos; }
}  // namespace

TEST_CASE("docs/methods.md names every registered key quantizer, tier form, scorer and seed allocator") {
  REQUIRE_FALSE(methods_doc().empty());
  for (const KeyQuantizerEntry& q : key_quantizer_registry()) {
    INFO("key quantizer " << q.info.name);
    CHECK(listed(q.info.name));
  }
  for (const TierForm& f : tier_forms()) {
    INFO("tier form " << f.form);
    CHECK(listed(f.prefix));
  }
  for (const MethodInfo& m : eviction_scorer_methods()) {
    INFO("scorer " << m.name);
    CHECK(listed(m.name));
  }
  for (const MethodInfo& m : seed_allocator_methods()) {
    INFO("seed allocator " << m.name);
    CHECK(listed(m.name));
  }
  CHECK(listed(kvcobra_allocator_method().name));
}

TEST_CASE("docs/methods.md names every knapsack solver of the FamilySolver table") {
  std::vector<FamilySolver> solvers = family_solvers();
  solvers.push_back(FamilySolver::Smoothed);  // carried out by allocate, not a family solver
  for (FamilySolver s : solvers) {
    const std::string name(to_string(s));
    INFO("solver " << name);
    CHECK(methods_doc().find("`" + name + "`") != std::string::npos);
  }
}

TEST_CASE("docs/methods.md names every entry of the catalogue by its whole name") {
  for (const CatalogueEntry& e : method_catalogue()) {
    INFO(to_string(e.kind) << " " << e.info.name);
    CHECK(methods_doc().find("`" + e.info.name + "`") != std::string::npos);
  }
}

TEST_CASE("the catalogue holds every registry's entries once, each kind's under its kind") {
  auto count = [](MethodKind k) {
    std::size_t n = 0;
    for (const CatalogueEntry& e : method_catalogue()) n += e.kind == k;
    return n;
  };
  CHECK(count(MethodKind::Quantizer) == key_quantizer_registry().size());
  CHECK(count(MethodKind::Scorer) == scorer_registry().size());
  CHECK(count(MethodKind::Allocator) == seed_allocator_methods().size() + 1);  // + kvcobra
  CHECK(count(MethodKind::Policy) == uniform_policy_methods().size());
  CHECK(count(MethodKind::Solver) == family_solvers().size() + 1);  // + smoothed
  for (const CatalogueEntry& a : method_catalogue()) {
    std::size_t same = 0;
    for (const CatalogueEntry& b : method_catalogue()) same += a.kind == b.kind && a.info.name == b.info.name;
    INFO(a.info.name);
    CHECK(same == 1);
    // Every method but a solver can be named in a scenario's `methods` list.
    CHECK(a.scenario_texts.empty() == (a.kind == MethodKind::Solver));
  }
  // One kind, or all; anything else is refused naming the choices.
  CHECK(method_catalogue("policy", "--kind").size() == uniform_policy_methods().size());
  CHECK(method_catalogue("all", "--kind").size() == method_catalogue().size());
  const std::string msg =
      tierlab::testing::error_of<InputError>([] { method_catalogue("policies", "methods: --kind"); });
  CHECK(msg == "methods: --kind: 'policies' is not all, quantizer, scorer, allocator, policy or solver");
}

TEST_CASE("the solvers' listed defaults are the problem's defaults") {
  const ProblemOptions defaults;
  for (const CatalogueEntry& e : method_catalogue("solver", "kind"))
    for (const MethodParam& p : e.info.params) {
      INFO(e.info.name << " " << p.name);
      if (p.name == "rate") CHECK(p.default_value == to_string(defaults.rate_kind));
      if (p.name == "scope") CHECK(p.default_value == to_string(defaults.scope));
      if (p.name == "ladder") CHECK(p.default_value == defaults.ladder.name());
    }
}
