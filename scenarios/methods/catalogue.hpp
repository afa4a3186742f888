#pragma once
// The catalogue of methods: every named method tierlab can run, of every kind, in one list
// (docs/methods.md). `tierlab methods`, Python's tierlab.methods(), the explorer's menus and
// the docs test read it, so no front door lists a different set. Each kind's entries come
// from the registry that implements them; the catalogue adds the kind, how a scenario's
// `methods` list names the entry, and the entry's factories (compressors.hpp), through which
// methods_spec.hpp checks and builds every method: a method added to a registry is usable
// everywhere a method is.
//
//   kind       registry                                          a scenario names it
//   quantizer  key_quantizer_registry() (model/quantizers/)      {quantizer: NAME}
//   scorer     scorer_registry() (solvers/scorers.hpp)           {scorer: NAME}
//   allocator  seed_allocator_methods(), kvcobra_allocator_method() {seed: NAME, budget: B}
//   policy     uniform_policy_methods() (solvers/policy.hpp)     the policy text, "kivi:2"
//   solver     solver_methods() (solvers/problem.hpp)            (solve's --solver; not a method entry)
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/methods/compressors.hpp"
#include "scenarios/methods/methods_spec.hpp"
#include "model/base/method_info.hpp"

namespace tierlab {

enum class MethodKind { Quantizer, Scorer, Allocator, Policy, Solver };

std::string_view to_string(MethodKind);  // "quantizer" | "scorer" | "allocator" | "policy" | "solver"
// The kinds a listing may be narrowed to: "all" or one of to_string's words. Throws InputError
// "FIELD: 'TEXT' is not all, quantizer, scorer, allocator, policy or solver".
bool parse_method_kind_filter(std::string_view text, std::string_view field, MethodKind& kind);

struct CatalogueEntry {
  MethodKind kind = MethodKind::Quantizer;
  MethodInfo info;
  // The entries a scenario's `methods` list (and the explorer's RD menu) takes for this method:
  // "{quantizer: turboquant}", "{seed: kvcobra, budget: 2}", "kivi:2"; empty for the solvers.
  std::vector<std::string> scenario_texts;
  // The entry's factory pair (scenarios/methods/compressors.hpp) for a method of a scenario's
  // `methods` list naming it: check (when the file is read; InputError) and the compressor of
  // every head. Null for the solvers (a `family:` entry is solved by the problem's solver).
  void (*check)(const MethodSpec&) = nullptr;
  ModelCompressor (*compress)(const MethodSpec&, const MethodContext&) = nullptr;
  // Seed allocators: `tierlab eval --seed` over a whole trace (compressors.hpp); null otherwise.
  method_factories::SeedEvaluation (*evaluate_seed)(const TraceReader&, const method_factories::SeedRequest&, Recomputer&,
                                                    const Progress&) = nullptr;
};

// Every method, by kind in the order of the table above, each kind in its registry's order.
const std::vector<CatalogueEntry>& method_catalogue();
// The entries of one kind, or all of them ("all"); InputError as parse_method_kind_filter.
std::vector<CatalogueEntry> method_catalogue(std::string_view kind, std::string_view field);

// The entry a method of a scenario's `methods` list names (a uniform policy by its form: "kivi:2"
// is the entry "kivi:B[:gG][:rR]"). InputError naming the choices (the registry's own message
// where it has one) when there is none; a `family:` entry is not a catalogue method (InputError).
const CatalogueEntry& catalogue_entry(const MethodSpec& m);

// {"name", "kind", "summary", "source", "params": [{"name", "default", "help", "choices"}]}:
// what `tierlab methods --json` prints for each entry.
nlohmann::json to_json(const CatalogueEntry&);

}  // namespace tierlab
