// tierlab solve TRACE --budget B [--rate code|total] [--solver S] [--family F] [--scope S]
//   [--ladder L] [--smooth avg|max --kernel K --padding P] [--json] [--summary]
//   [--write-allocation FILE] [--recompute [--backend B]] [--advantage]
// tierlab solve TRACE --budgets A:B:STEP [--recompute] [--families LIST] [--queries decode|obs|step [--decode-step S]]
//   [--rate code|total] [--scope head|layer|model] [--ladder L] [--method SPEC]... [--json]: the
//   rate-distortion curve (scenarios/pipeline/rd_curve.hpp), with named methods as points beside
//   it (scenarios/methods/rd_methods.hpp)
#include <algorithm>
#include <cstdio>
#include <memory>

#include "model/allocation.hpp"
#include "model/base/error.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/usage.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/run/progress.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "scenarios/pipeline/report.hpp"
#include "scenarios/methods/methods_spec.hpp"
#include "scenarios/methods/rd_methods.hpp"

namespace tierlab::cli {

namespace {

struct SolveArgs {
  std::string trace, rate{to_string(kDefaultRateKind)}, solver = "exact", family = "mixed";
  std::string scope{to_string(ProblemOptions{}.scope)};
  std::string ladder{kDefaultLadder};
  std::string smooth = "avg", padding = "reflect", write_allocation, backend = "auto";
  std::string budgets, families = "quantize,evict,mixed,routed", queries = "decode";
  double budget = 0.0, route_tolerance = 0.0;
  int kernel = 5, decode_step = 1;
  bool json = false, summary = false, recompute = false, advantage = false;
  std::vector<std::string> methods;
};

// `tierlab solve --budgets A:B:STEP`: the rate-distortion curves, their hulls and the named methods beside them.
void run_solve_curve(const SolveArgs& args, AllocateOptions opt) {
  if (!args.write_allocation.empty() || args.advantage)
    throw InputError("--budgets computes a curve; --write-allocation and --advantage take one --budget.");
  RdCurveOptions ro;
  ro.budgets = parse_budget_grid(args.budgets, "--budgets");
  opt.budget = ro.budgets.front();
  ro.solve = opt;
  ro.families.clear();
  for (std::size_t pos = 0; pos <= args.families.size();) {
    const std::size_t end = std::min(args.families.find(',', pos), args.families.size());
    ro.families.push_back(parse_family_choice(args.families.substr(pos, end - pos)));
    pos = end + 1;
  }
  ro.recompute = args.recompute;
  ro.queries = parse_rd_queries(args.queries);
  ro.decode_step = args.decode_step;
  ro.validate();
  const std::vector<MethodSpec> methods = parse_rd_methods(args.methods, "--method", ro);
  if (args.recompute && parse_backend(args.backend) == Backend::Cuda)
    throw InputError("--budgets recomputes on the CPU reference (each head's exact part shared by its points); "
                     "--backend cuda is not used here, leave --backend at auto or cpu.");
  TraceReader trace(args.trace);
  TerminalProgress bar("curve");
  const RdCurve curve = rd_curve(trace, ro, [&](int d, int t) { bar.update(d, t); });
  bar.finish();
  nlohmann::json j = to_json(curve);
  std::string text = text_report(curve);
  if (!methods.empty()) {
    // Recomputed on the CPU reference, as the curve's points are.
    std::unique_ptr<Recomputer> cpu = args.recompute ? backend_or_throw("cpu") : nullptr;
    TerminalProgress mb("methods");
    const std::vector<RdMethodPoint> points =
        rd_method_points(trace, curve, methods, cpu.get(), [&](int d, int t) { mb.update(d, t); });
    mb.finish();
    j["methods"] = to_json(points);
    text += text_report(points, ro.solve.rate_kind);
  }
  if (args.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    std::printf("%s", text.c_str());
}

}  // namespace

void add_solve(CLI::App& app) {
  auto args = std::make_shared<SolveArgs>();
  CLI::App* cmd = app.add_subcommand(
      "solve", "Allocate tiers to every token of a trace for a key budget (families, routing, scopes, solvers)");
  cmd->add_option("trace", args->trace, "Trace file (safetensors)")->required();
  CLI::Option* budget = cmd->add_option("--budget", args->budget, "Budget B in bits per key element");
  CLI::Option* budgets = cmd->add_option(
      "--budgets", args->budgets,
      "Rate-distortion curve over the budgets A:B:STEP (e.g. 0:16:0.25): every family's optimum at each, "
      "with --recompute its exact error, and the lower convex hull");
  budget->excludes(budgets);
  cmd->add_option("--families", args->families, "--budgets: the families' curves, comma-separated (quantize, evict, mixed, routed)")
      ->capture_default_str();
  cmd->add_option("--queries", args->queries, "--budgets: recompute on the decode, obs or step (one decode step's) queries")
      ->capture_default_str();
  cmd->add_option("--decode-step", args->decode_step, "--budgets --queries step: the decode step s")->capture_default_str();
  CLI::Option* method = cmd->add_option(
      "--method", args->methods,
      "--budgets: a named method as a point beside the curves, repeatable: a uniform policy (kivi:2) or an entry of "
      "a scenario's methods list ({quantizer: kivi, bits: 2}; a scorer without keep: keep ratios B/16 of the grid)");
  method->allow_extra_args(false);
  cmd->add_option("--rate", args->rate, "How the budget counts bits: code or total")->capture_default_str();
  cmd->add_option("--solver", args->solver, "exact, greedy, greedy-raw, waterfill or smoothed")->capture_default_str();
  cmd->add_option("--family", args->family, "mixed, quantize, evict or routed")->capture_default_str();
  cmd->add_option("--scope", args->scope, "Where the budget holds: head, layer or model")->capture_default_str();
  cmd->add_option("--ladder", args->ladder, "Tiers, comma-separated (evict and exact are added)")->capture_default_str();
  cmd->add_option("--smooth", args->smooth, "smoothed solver: pooling avg or max")->capture_default_str();
  cmd->add_option("--kernel", args->kernel, "smoothed solver: odd window size")->capture_default_str();
  cmd->add_option("--padding", args->padding, "smoothed solver: zero, reflect, replicate or none")->capture_default_str();
  cmd->add_option("--route-tolerance", args->route_tolerance,
                  "Routed, head scope: keep an endpoint when within this relative margin of M")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--summary", args->summary, "Only the layer and model rows (no per-head rows)");
  cmd->add_option("--write-allocation", args->write_allocation, "Write the allocation (read by tierlab eval --allocation)");
  cmd->add_flag("--recompute", args->recompute, "Also recompute the exact errors of the allocation");
  cmd->add_flag("--advantage", args->advantage,
                "Also recompute the interior advantage A = 1 - err(M*)/min(err(Q*), err(E*)) (implied by routed with --recompute)");
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda")->capture_default_str();
  cmd->callback([args, budget, budgets, method, cmd]() {
    if (budget->count() == 0 && budgets->count() == 0)
      throw InputError("solve needs --budget B (one allocation) or --budgets A:B:STEP (the rate-distortion curve).");
    for (const char* o : {"--families", "--queries", "--decode-step"}) only_with(*cmd, o, {"--budgets"}, {"--budget"});
    if (cmd->count("--decode-step") > 0 && args->queries != "step")
      throw InputError("option --decode-step acts only with --queries step; it was given with --queries " +
                       args->queries + ", which it does not change.");
    if (args->solver != "smoothed")
      for (const char* o : {"--smooth", "--kernel", "--padding"})
        if (cmd->count(o) > 0)
          throw InputError(std::string("option ") + o + " acts only with --solver smoothed; it was given with --solver " +
                           args->solver + ", which it does not change.");
    if (cmd->count("--route-tolerance") > 0 && args->family != "routed")
      throw InputError("option --route-tolerance acts only with --family routed; it was given with --family " +
                       args->family + ", which it does not change.");
    AllocateOptions opt;
    opt.budget = args->budget;
    opt.rate_kind = parse_rate_kind(args->rate);
    opt.solver = parse_alloc_solver(args->solver);
    opt.family = parse_family_choice(args->family);
    opt.scope = parse_scope(args->scope);
    opt.ladder = RateLadder::parse(args->ladder);
    opt.smoothing.pool = parse_pool_kind(args->smooth);
    opt.smoothing.kernel = args->kernel;
    opt.smoothing.padding = parse_padding(args->padding);
    opt.route_tolerance = args->route_tolerance;
    if (method->count() > 0 && budgets->count() == 0)
      throw InputError("--method places named methods beside a rate-distortion curve; it takes --budgets A:B:STEP, "
                       "not --budget (evaluate one method with tierlab eval).");
    if (budgets->count() > 0) return run_solve_curve(*args, opt);
    opt.validate();
    const bool advantage = args->advantage || (args->recompute && opt.family == FamilyChoice::Routed);
    std::unique_ptr<Recomputer> backend;
    if (args->recompute || advantage) backend = backend_or_throw(args->backend);

    TraceReader trace(args->trace);
    TerminalProgress bar("costs");
    const AllocationReport rep = allocate_trace(trace, opt, [&](int d, int t) { bar.update(d, t); });
    bar.finish();
    if (!args->write_allocation.empty()) {
      if (!rep.has_solution())
        throw InputError("no allocation to write to " + args->write_allocation + ": " + rep.message);
      Allocation a = rep.allocation;
      const auto& ids = trace.meta().token_ids;  // T + S ids (or none): the prompt is the first T
      set_trace_identity(a, args->trace,
                         std::vector<std::int32_t>(ids.begin(), ids.begin() + std::min<std::size_t>(ids.size(), a.prompt_len)));
      write_allocation(args->write_allocation, a);
    }
    nlohmann::json j = to_json(rep);
    std::string text = text_report(rep, !args->summary);
    if (args->recompute && rep.has_solution()) {
      auto alloc = std::make_shared<Allocation>(rep.allocation);
      TerminalProgress rb("recompute");
      TraceEvaluation ev = evaluate_trace(
          trace, alloc->ladder, [alloc](const HeadData& h, const TokenWeights&) { return alloc->head(h.layer, h.kv_head); },
          *backend, [&](int d, int t) { rb.update(d, t); });
      rb.finish();
      ev.policy = "solve " + opt.name();
      j["recompute"] = to_json(ev);
      text += "\n" + text_report(ev, !args->summary);
    }
    if (advantage) {
      InteriorOptions io;
      io.budget = opt.budget;
      io.rate_kind = opt.rate_kind;
      io.ladder = opt.ladder;
      io.exact = opt.exact;
      TerminalProgress ib("interior");
      const InteriorReport ir = interior_advantage(trace, io, *backend, [&](int d, int t) { ib.update(d, t); });
      ib.finish();
      j["interior"] = to_json(ir);
      text += "\n" + text_report(ir, !args->summary);
    }
    if (!args->write_allocation.empty()) text += "allocation written to " + args->write_allocation + "\n";
    if (args->json)
      std::printf("%s\n", j.dump(2).c_str());
    else
      std::printf("%s", text.c_str());
  });
}

}  // namespace tierlab::cli
