#pragma once
// Methods named in scenario files (docs/scenarios.md: the key `methods`, and the method lists
// of the analyses, e.g. mismatch.quantizers):
// the published key quantizers, eviction scorers and seed allocators, the uniform policies
// and the family optima, resolved by name through the catalogue (catalogue.hpp: each entry's
// factories, compressors.hpp), so that a method added to a registry is usable from a scenario
// file without a change here:
//   quantizer: NAME   model/quantizers/key_quantizer.hpp make_key_quantizer(NAME, params): every prompt
//                     token's key quantized (dequantized post-RoPE keys, itemised rate)
//   scorer: NAME      solvers/scorers.hpp make_scorer(NAME, params) + plan_eviction at `keep`
//                     (ratio:R | count:N, Budget::parse); kept tokens exact, evicted removed;
//                     rate = 16 x kept fraction (code = total)
//   seed: NAME        solvers/seed_allocators.hpp allocate_seed(NAME, params, problem): one
//                     problem over every head of the trace (its surrogate costs on `ladder`),
//                     at `budget` B bits per key element (the scenario's rate_kind);
//                     kvcobra (not a ladder allocation): solvers/kvcobra_allocator.hpp
//                     allocate_kvcobra on the heads' kvcobra_direction_weights, applied by
//                     each head's kvcobra quantizer at its (rank, bits)
//   policy: TEXT      solvers/policy.hpp UniformPolicy::parse(TEXT): exact, kivi:B[:gG][:rR],
//                     token:B[:gN], evict:KEEP
//   family: F         solvers/families.hpp: the family's surrogate optimum per head (exact
//                     solver, head scope) at `budget` B on `ladder`: M (mixed), Q (dense
//                     quantization), E (eviction), routed
// A ladder allocation (seed, policy, family) is materialised with model/quantizers/quantizer.hpp
// materialize (tier-local groups); its rate is the groups actually formed.
//
// Entry syntax (a YAML mapping; exactly one kind key):
//   {quantizer: kivi, bits: 2}                 parameters as extra keys ...
//   {quantizer: quarot, params: {bits: 4}}     ... or in a `params` mapping (not both for one key)
//   {scorer: snapkv, keep: "ratio:0.25", params: {kernel: 7}}
//   {seed: ratequant, budget: 2, ladder: "evict,kivi2,kivi4,exact"}
//   {policy: "kivi:2"}
//   {family: M, budget: [2, 4]}
// A list value (of a parameter, `keep` or `budget`) expands into one method per value (the
// Cartesian product, in the order the keys appear). `label` names the method in tables
// (default: the kind's name and the values given, e.g. "kivi bits=2", "snapkv keep=ratio:0.25",
// "M* B=2"); labels must be unique. Names, parameter names and values are checked when the
// file is read (seed allocator parameter values when the allocator runs, the error then
// starting with the entry's FILE:LINE).
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "solvers/scorers.hpp"
#include "solvers/problem.hpp"

namespace YAML {
class Node;
}

namespace tierlab {

struct MethodSpec {
  enum class Kind { Quantizer, Scorer, Seed, Policy, Family };
  Kind kind = Kind::Quantizer;
  std::string name;     // registry name ("kivi", "snapkv", "ratequant"), policy text, or family letter
  MethodParams params;  // parameter -> value, as given
  std::string keep;     // scorer: "ratio:0.25" | "count:64"
  double budget = std::numeric_limits<double>::quiet_NaN();  // seed, family: B
  RateLadder ladder;    // seed, family: the ladder (the scenario's unless the entry gives one)
  std::string label;    // unique within its list
  std::string where;    // "FILE:LINE" of the entry, for errors raised when the method runs
};
std::string to_string(MethodSpec::Kind);  // "quantizer" | "scorer" | "seed" | "policy" | "family"

// What a method needs to know about the model it compresses.
struct MethodContext {
  RopeParams rope;
  int group_size = 1;  // g, for the scorers' GQA aggregation (unless the entry sets group_size)
  RateKind rate_kind = kDefaultRateKind;
};

// The ModelCompressor of an entry (scenarios/pipeline/evaluation.hpp). InputErrors from a
// registry come back prefixed with the entry's FILE:LINE.
ModelCompressor make_model_compressor(const MethodSpec&, const MethodContext&);

// Parses a list of entries (the `methods` key, or mismatch.quantizers with only =
// Quantizer, where a plain string is a quantizer name). `key` names the list in messages.
// Throws InputError "FILE:LINE: ..." naming the key and the valid choices.
std::vector<MethodSpec> parse_method_specs(const YAML::Node& list, const std::string& file, const std::string& key,
                                           const RateLadder& default_ladder, bool quantizers_only = false);

// One entry given as text on a command line (`tierlab solve --budgets ... --method SPEC`): a
// uniform policy text ("kivi:2", "evict:0.25", "exact": the entry {policy: TEXT}) or an entry of
// the `methods` list in YAML flow form ("{quantizer: kivi, bits: 2}", "{scorer: snapkv, keep:
// ratio:0.25}", "{seed: ratequant, budget: 2}"), read by parse_method_specs (list values expand).
// A scorer entry without `keep` takes `default_keep` (e.g. keep ratios matching a budget grid),
// when it is not empty. InputError "OPTION 'TEXT': ..." naming the option and the text.
std::vector<MethodSpec> parse_method_spec_text(const std::string& text, const std::string& option,
                                               const RateLadder& default_ladder,
                                               const std::vector<std::string>& default_keep = {});

}  // namespace tierlab
