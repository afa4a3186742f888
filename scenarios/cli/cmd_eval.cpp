// tierlab eval TRACE (--policy P | --allocation FILE) [--backend B] [--json] [--per-head]
#include <cstdio>
#include <memory>

#include "model/allocation.hpp"
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

void add_eval(CLI::App& app) {
  struct Args {
    std::string trace, policy, allocation, backend = "auto";
    bool json = false, per_head = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Recompute the exact errors of a policy or allocation, next to the surrogate's prediction");
  cmd->add_option("trace", args->trace, "Trace file (safetensors)")->required();
  auto* pol = cmd->add_option("--policy", args->policy,
                              "Uniform policy: exact, kivi:B[:gG][:rR], token:B[:gN], evict:KEEP");
  auto* alloc = cmd->add_option("--allocation", args->allocation, "Allocation file (from tierlab solve)");
  pol->excludes(alloc);
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--per-head", args->per_head, "Show every head in the table");
  cmd->callback([args]() {
    if (args->policy.empty() && args->allocation.empty())
      throw InputError("eval needs --policy or --allocation (e.g. --policy kivi:2)");
    TraceReader trace(args->trace);
    auto backend = backend_or_throw(args->backend);
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
