// tierlab eval TRACE (--policy P | --allocation FILE) [--backend B] [--json] [--per-head]
#include <cstdio>
#include <memory>

#include "model/allocation.hpp"
#include "model/key_quantizer.hpp"
#include "solvers/scorers.hpp"
#include "model/error.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/evaluation.hpp"
#include "scenarios/progress.hpp"
#include "scenarios/report.hpp"
#include "solvers/policy.hpp"

namespace tierlab::cli {

std::unique_ptr<Recomputer> backend_or_throw(const std::string& name) {
  std::string note;
  auto backend = make_recomputer(parse_backend(name), &note);
  if (!backend) throw InputError("backend '" + name + "' is not available: " + note);
  if (!note.empty()) std::fprintf(stderr, "tierlab: %s\n", note.c_str());
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
  std::map<std::string, std::string> scorer_params = params;
  if (!scorer_params.count("group_size")) scorer_params["group_size"] = std::to_string(meta.group_size);
  const ScorerConfig cfg = make_scorer(scorer_name, scorer_params);
  // Layer- and model-wide rules need every head's scores: plan over the whole trace.
  std::vector<std::vector<HeadData>> heads(static_cast<std::size_t>(meta.n_layers));
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) heads[static_cast<std::size_t>(l)].push_back(trace.head(l, h));
  const EvictionPlan plan = plan_eviction(cfg, heads, Budget::parse(keep));
  heads.clear();
  TraceEvaluation ev = evaluate_trace(trace, [&](const HeadData& head) {
    const HeadKeep& k = plan.keep[static_cast<std::size_t>(head.layer)][static_cast<std::size_t>(head.kv_head)];
    double kept = 0;
    for (const std::uint8_t x : k) kept += x;
    const double bits = 16.0 * kept / static_cast<double>(k.size());
    return CompressedHead{head.keys, std::vector<std::uint8_t>(k.begin(), k.end()), Rate{bits, bits}};
  }, backend, progress);
  ev.policy = "scorer " + cfg.name() + " keep " + Budget::parse(keep).name();
  ev.ladder = eviction_ladder();
  return ev;
}

}  // namespace

void add_eval(CLI::App& app) {
  struct Args {
    std::string trace, policy, allocation, quantizer, scorer, keep = "ratio:0.25", backend = "auto";
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
  cmd->add_option("--param", args->params, "Method parameter NAME=VALUE for --quantizer/--scorer (repeatable)");
  pol->excludes(alloc, quant, scorer);
  alloc->excludes(quant, scorer);
  quant->excludes(scorer);
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--per-head", args->per_head, "Show every head in the table");
  cmd->callback([args]() {
    if (args->policy.empty() && args->allocation.empty() && args->quantizer.empty() && args->scorer.empty())
      throw InputError("eval needs --policy, --allocation, --quantizer or --scorer (e.g. --policy kivi:2)");
    TraceReader trace(args->trace);
    auto backend = backend_or_throw(args->backend);
    if (!args->quantizer.empty() || !args->scorer.empty()) {
      std::map<std::string, std::string> params;
      for (const std::string& kv : args->params) {
        const auto eq = kv.find('=');
        if (eq == std::string::npos || eq == 0)
          throw InputError("option --param: '" + kv + "' is not NAME=VALUE");
        params[kv.substr(0, eq)] = kv.substr(eq + 1);
      }
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
      allocate = [policy](const HeadData& head, const TokenWeights& w) {
        return policy.allocate(static_cast<int>(head.keys.rows()), &w);
      };
    } else {
      auto a = std::make_shared<Allocation>(read_allocation(args->allocation));
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
