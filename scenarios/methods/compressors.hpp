#pragma once
// The factories of the catalogue's entries (scenarios/methods/catalogue.hpp wires each entry to
// its pair): what a method of a scenario's `methods` list checks when the file is read (check_*:
// everything that can be checked without a trace; InputError), and the compressor of every
// head it builds (make_*: a ModelCompressor, scenarios/pipeline/evaluation.hpp). One pair per
// shape of method, so no method is special-cased by name outside its own pair:
//   quantizer  every prompt token's key quantized by make_key_quantizer(NAME, params)
//   scorer     make_scorer_for_trace + plan_eviction at `keep`; kept tokens exact
//   seed       allocate_seed(NAME, params, problem) over every head, on `ladder`, at `budget`
//   kvcobra    allocate_kvcobra on the heads' direction weights, each head quantized by
//              kvcobra at its (rank, bits) (kvcobra_method.cpp)
// and, for the seed allocators, the evaluation of `tierlab eval --seed` (evaluate_*).
//   policy     UniformPolicy::parse(TEXT).allocate per head
//   family     the family's surrogate optimum per head at equal memory (the `family:` key)
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "scenarios/methods/methods_spec.hpp"
#include "solvers/families.hpp"

namespace tierlab::method_factories {

void check_quantizer(const MethodSpec&);
ModelCompressor make_quantizer(const MethodSpec&, const MethodContext&);
void check_scorer(const MethodSpec&);
ModelCompressor make_scorer(const MethodSpec&, const MethodContext&);
void check_seed(const MethodSpec&);
ModelCompressor make_seed(const MethodSpec&, const MethodContext&);
void check_kvcobra(const MethodSpec&);
ModelCompressor make_kvcobra(const MethodSpec&, const MethodContext&);
void check_policy(const MethodSpec&);
ModelCompressor make_policy(const MethodSpec&, const MethodContext&);
void check_family(const MethodSpec&);
ModelCompressor make_family(const MethodSpec&, const MethodContext&);

// `tierlab eval --seed NAME --budget B`: a seed allocator over a whole trace, recomputed
// exactly, with the allocation's own report (JSON) and one line for the terminal.
struct SeedRequest {
  std::string name;
  MethodParams params;
  double budget = 0.0;
  RateLadder ladder;  // ladder seed allocators: the tiers, the budget's scope and rate kind
  Scope scope = Scope::Head;
  RateKind rate_kind = kDefaultRateKind;
};
struct SeedEvaluation {
  TraceEvaluation evaluation;
  nlohmann::json report;
  std::string line;
};
// Ladder seed allocators (ratequant, rdkv, routed): every head's surrogate costs on the
// ladder, one SeedProblem per scope group (head: each head alone; layer; model), the tiers
// materialised by evaluate_trace.
SeedEvaluation evaluate_seed(const TraceReader&, const SeedRequest&, Recomputer&, const Progress&);
// KV-COBRA: the per-head (rank, bits) of allocate_kvcobra, applied by the kvcobra key
// quantizer, rates as the quantizer stores them (kvcobra_method.cpp).
SeedEvaluation evaluate_kvcobra(const TraceReader&, const SeedRequest&, Recomputer&, const Progress&);
// null unless the summary is Feasible: then why it is not proven optimal.
nlohmann::json feasible_reason_json(const SolveSummary&);

// "M" | "mixed", "Q" | "quantize", "E" | "evict", "routed"; InputError naming the choices.
FamilyChoice family_of(const std::string& name);

// The compressed keys of a ladder allocation (materialize: tier-local groups).
CompressedHead from_tiers(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                          const std::vector<std::uint8_t>& tiers);

template <class F>
std::vector<std::vector<CompressedHead>> per_head(const std::vector<std::vector<HeadData>>& heads, F&& f) {
  std::vector<std::vector<CompressedHead>> out(heads.size());
  for (std::size_t l = 0; l < heads.size(); ++l)
    for (const HeadData& h : heads[l]) out[l].push_back(f(h));
  return out;
}

}  // namespace tierlab::method_factories
