// docs/methods.md lists every registered method: the key quantizers, the tier forms, the eviction
// scorers, the seed allocators and the knapsack solvers, each by its name in backticks, so the
// docs table cannot silently fall behind a registry.
#include <catch2/catch.hpp>

#include <string>

#include "model/key_quantizer.hpp"
#include "model/tier_quantizer.hpp"
#include "solvers/families.hpp"
#include "solvers/kvcobra_allocator.hpp"
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
    INFO("key quantizer " << q.name);
    CHECK(listed(q.name));
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
