// tierlab eval TRACE (--policy P | --allocation FILE | --quantizer Q | --scorer S --keep K |
//                    --seed NAME --budget B [--ladder L] [--scope S] [--rate K]) [--param k=v]...
//                   [--backend B] [--json] [--per-head]
#include <cstdio>
#include <memory>

#include <cmath>
#include <limits>
#include <sstream>

#include "model/allocation.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "solvers/families.hpp"
#include "solvers/seed_allocators.hpp"
#include "solvers/scorers.hpp"
#include "model/base/error.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/methods/catalogue.hpp"
#include "scenarios/methods/compressors.hpp"
#include "scenarios/cli/usage.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/run/progress.hpp"
#include "scenarios/pipeline/report.hpp"
#include "solvers/policy.hpp"

namespace tierlab::cli {

std::unique_ptr<Recomputer> backend_or_throw(const std::string& name) {
  std::string note;
  auto backend = make_recomputer(parse_backend(name), &note);
  if (!backend) throw InputError("backend '" + name + "' is not available: " + note);
  // With --backend auto the CPU fallback is normal: the reports name the backend used, and
  // `tierlab info TRACE` says why cuda was not taken; an explicit choice that fell back is said.
  if (!note.empty() && parse_backend(name) != Backend::Auto) std::fprintf(stderr, "tierlab: %s\n", note.c_str());
  return backend;
}

namespace {

// A published key quantizer on every token, or a published eviction scorer at a budget.
TraceEvaluation evaluate_method(const TraceReader& trace, const std::string& quantizer_name,
                                const std::string& scorer_name, const std::map<std::string, std::string>& params,
                                const std::string& keep, Recomputer& backend) {
  const TraceMeta& meta = trace.meta();
  TerminalProgress bar("eval");
  auto progress = [&](int d, int t) { bar.update(d, t); };
  if (!quantizer_name.empty()) {
    const auto quantizer = make_key_quantizer(quantizer_name, params);
    TraceEvaluation ev = evaluate_trace(trace, [&](const HeadData& head) {
      QuantizedHeadKeys q = quantizer->quantize(head, meta.rope);
      const Rate rate = q.rate();  // before the keys are moved out
      return CompressedHead{std::move(q.keys), std::vector<std::uint8_t>(static_cast<std::size_t>(meta.prompt_len), 1),
                            rate};
    }, backend, progress);
    std::string label = quantizer->name();
    for (const auto& [k, v] : quantizer->parameters()) label += " " + k + "=" + v;
    ev.policy = "quantizer " + label;
    return ev;
  }
  Budget budget = Budget::ratio(1.0);
  try {  // checked before any head is read, in the option's words
    budget = Budget::parse(keep);
  } catch (const InputError& e) {
    throw InputError(std::string("--keep: ") + e.what());
  }
  const ScorerConfig cfg = make_scorer_for_trace(scorer_name, params, meta.group_size);
  // Layer- and model-wide rules need every head's scores: plan over the whole trace.
  std::vector<std::vector<HeadData>> heads(static_cast<std::size_t>(meta.n_layers));
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) heads[static_cast<std::size_t>(l)].push_back(trace.head(l, h));
  const EvictionPlan plan = plan_eviction(cfg, heads, budget);
  heads.clear();
  TraceEvaluation ev = evaluate_trace(trace, [&](const HeadData& head) {
    const HeadKeep& k = plan.keep[static_cast<std::size_t>(head.layer)][static_cast<std::size_t>(head.kv_head)];
    double kept = 0;
    for (const std::uint8_t x : k) kept += x;
    const double bits = 16.0 * kept / static_cast<double>(k.size());
    return CompressedHead{head.keys, std::vector<std::uint8_t>(k.begin(), k.end()), Rate{bits, bits}};
  }, backend, progress);
  ev.policy = "scorer " + cfg.name() + " keep " + budget.name();
  ev.ladder = eviction_ladder();
  return ev;
}

// Why a feasible allocation is not proven optimal (solvers/mckp.hpp FeasibleReason); null
// when it is not Feasible, as in `tierlab solve --json`.
// A seed allocator at budget B, evaluated with exact recomputation: the catalogue entry's
// evaluate_seed (scenarios/methods/compressors.hpp: the ladder seed allocators in
// compressors.cpp, KV-COBRA in kvcobra_method.cpp). *seed_json receives the allocation's own
// report.
TraceEvaluation evaluate_seed(const TraceReader& trace, const std::string& name, const MethodParams& params,
                              double budget, const std::string& ladder_text, const std::string& scope_text,
                              const std::string& rate_kind_text, Recomputer& backend, nlohmann::json* seed_json,
                              std::string* seed_line) {
  MethodSpec m;
  m.kind = MethodSpec::Kind::Seed;
  m.name = name;
  const CatalogueEntry& e = catalogue_entry(m);
  method_factories::SeedRequest request;
  request.name = name;
  request.params = params;
  request.budget = budget;
  request.ladder = RateLadder::parse(ladder_text);
  request.scope = parse_scope(scope_text);
  request.rate_kind = parse_rate_kind(rate_kind_text);
  TerminalProgress bar("eval");
  method_factories::SeedEvaluation out = e.evaluate_seed(trace, request, backend, [&](int d, int t) { bar.update(d, t); });
  bar.finish();
  *seed_json = std::move(out.report);
  *seed_line = std::move(out.line);
  return std::move(out.evaluation);
}

}  // namespace

void add_eval(CLI::App& app) {
  struct Args {
    std::string trace, policy, allocation, quantizer, scorer, keep = "ratio:0.25", backend = "auto";
    std::string seed, ladder{kDefaultLadder}, scope{to_string(ProblemOptions{}.scope)}, rate_kind{to_string(kDefaultRateKind)};
    double budget = std::numeric_limits<double>::quiet_NaN();
    std::vector<std::string> params;
    bool json = false, per_head = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Recompute the exact errors of a policy or allocation, next to the surrogate's prediction");
  cmd->add_option("trace", args->trace, "Trace file (safetensors)")->required();
  auto* pol = cmd->add_option("--policy", args->policy,
                              "Uniform policy: exact, kivi:B[:gG][:rR], token:B[:gN], evict:KEEP");
  auto* alloc = cmd->add_option("--allocation", args->allocation, "Allocation file (from tierlab solve)");
  auto* quant = cmd->add_option("--quantizer", args->quantizer,
                                "Published key quantizer, every token (see `tierlab methods --kind quantizer`)");
  auto* scorer = cmd->add_option("--scorer", args->scorer,
                                 "Published eviction scorer (see `tierlab methods --kind scorer`), with --keep");
  cmd->add_option("--keep", args->keep, "Eviction budget for --scorer: ratio:R or count:N")->capture_default_str();
  auto* seed = cmd->add_option("--seed", args->seed,
                               "Seed allocator at --budget: ratequant, rdkv, routed, granularity (tiers on --ladder) or kvcobra "
                               "(per-head rank x bits); see `tierlab methods --kind allocator`");
  cmd->add_option("--budget", args->budget, "Budget B for --seed, bits per key element");
  cmd->add_option("--ladder", args->ladder, "Rate ladder for a ladder seed allocator")->capture_default_str();
  cmd->add_option("--scope", args->scope, "Budget scope for a ladder seed allocator: head, layer, model")
      ->capture_default_str();
  cmd->add_option("--rate", args->rate_kind, "What --budget counts for a ladder seed allocator: code, total (as solve --rate)")
      ->capture_default_str();
  cmd->add_option("--param", args->params,
                  "Method parameter NAME=VALUE for --quantizer/--scorer/--seed (repeatable)");
  pol->excludes(alloc, quant, scorer, seed);
  alloc->excludes(quant, scorer, seed);
  quant->excludes(scorer, seed);
  scorer->excludes(seed);
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--per-head", args->per_head, "Show every head in the table");
  cmd->callback([args, cmd]() {
    if (args->policy.empty() && args->allocation.empty() && args->quantizer.empty() && args->scorer.empty() &&
        args->seed.empty())
      throw InputError("eval needs --policy, --allocation, --quantizer, --scorer or --seed (e.g. --policy kivi:2)");
    const std::vector<std::string> kinds = {"--policy", "--allocation", "--quantizer", "--scorer", "--seed"};
    only_with(*cmd, "--keep", {"--scorer"}, kinds);
    only_with(*cmd, "--param", {"--quantizer", "--scorer", "--seed"}, kinds);
    for (const char* o : {"--budget", "--ladder", "--scope", "--rate"}) only_with(*cmd, o, {"--seed"}, kinds);
    if (!args->seed.empty() && !std::isfinite(args->budget))
      throw InputError("option --seed " + args->seed + " needs --budget B (bits per key element)");
    TraceReader trace(args->trace);
    auto backend = backend_or_throw(args->backend);
    const std::map<std::string, std::string> params = name_values(args->params, "--param");
    if (!args->seed.empty()) {
      nlohmann::json seed_json;
      std::string seed_line;
      TraceEvaluation ev = evaluate_seed(trace, args->seed, params, args->budget, args->ladder, args->scope,
                                         args->rate_kind, *backend, &seed_json, &seed_line);
      if (args->json) {
        nlohmann::json j = to_json(ev);
        j["seed_allocation"] = seed_json;
        std::printf("%s\n", j.dump(2).c_str());
      } else {
        std::printf("%s\n%s", seed_line.c_str(), text_report(ev, args->per_head).c_str());
      }
      return;
    }
    if (!args->quantizer.empty() || !args->scorer.empty()) {
      TraceEvaluation ev = evaluate_method(trace, args->quantizer, args->scorer, params, args->keep, *backend);
      if (args->json)
        std::printf("%s\n", to_json(ev).dump(2).c_str());
      else
        std::printf("%s", text_report(ev, args->per_head).c_str());
      return;
    }
    RateLadder ladder;
    HeadAllocator allocate;
    std::string label;
    if (!args->policy.empty()) {
      const UniformPolicy policy = UniformPolicy::parse(args->policy);
      ladder = policy.ladder();
      label = policy.name();
      if (const std::string note = policy.full_precision_note(trace.meta().prompt_len); !note.empty())
        std::fprintf(stderr, "tierlab: note: %s\n", note.c_str());
      allocate = [policy](const HeadData& head, const TokenWeights& w) {
        return policy.allocate(static_cast<int>(head.keys.rows()), &w);
      };
    } else {
      auto a = std::make_shared<Allocation>(read_allocation(args->allocation));
      check_trace_identity(*a, args->allocation, args->trace);
      const TraceMeta& m = trace.meta();
      if (a->n_layers != m.n_layers || a->n_kv_heads != m.n_kv_heads || a->prompt_len != m.prompt_len)
        throw InputError("allocation " + args->allocation + " is for " + std::to_string(a->n_layers) + " layers x " +
                         std::to_string(a->n_kv_heads) + " heads x " + std::to_string(a->prompt_len) +
                         " tokens, but trace " + args->trace + " has " + std::to_string(m.n_layers) + " x " +
                         std::to_string(m.n_kv_heads) + " x " + std::to_string(m.prompt_len));
      ladder = a->ladder;
      label = "allocation " + args->allocation;
      allocate = [a](const HeadData& head, const TokenWeights&) { return a->head(head.layer, head.kv_head); };
    }
    TerminalProgress bar("eval");
    TraceEvaluation ev = evaluate_trace(trace, ladder, allocate, *backend, [&](int d, int t) { bar.update(d, t); });
    bar.finish();
    ev.policy = label;
    if (args->json)
      std::printf("%s\n", to_json(ev).dump(2).c_str());
    else
      std::printf("%s", text_report(ev, args->per_head).c_str());
  });
}

}  // namespace tierlab::cli
