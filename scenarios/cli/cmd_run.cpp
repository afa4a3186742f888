// tierlab run SCENARIO: computes a scenario's cells (resumable), then its tables, figures
// and summary.md (scenarios/runner.hpp, scenarios/figures/figures.hpp).
#include <cstdio>
#include <memory>
#include <optional>

#include "model/error.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/figures/figures.hpp"
#include "scenarios/runner.hpp"
#include "scenarios/scenario.hpp"

namespace tierlab::cli {

void add_run(CLI::App& app) {
  struct Args {
    std::string scenario, out, backend;
    int jobs = 1;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("run", "Run a scenario file: cells (resumable), tables, figures and summary.md");
  cmd->add_option("scenario", args->scenario, "Scenario file (YAML, see docs/scenarios.md)")->required();
  cmd->add_option("--out", args->out, "Output folder (default: out/<scenario name>)");
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda (default: the scenario's)");
  cmd->add_option("--jobs", args->jobs, "Cells computed in parallel")->capture_default_str();
  cmd->add_flag("--force", args->force, "Recompute finished cells");
  cmd->callback([args]() {
    const Scenario sc = load_scenario(args->scenario);
    RunOptions opt;
    opt.out = args->out.empty() ? "out/" + sc.name : args->out;
    if (!args->backend.empty()) opt.backend = parse_backend(args->backend);
    opt.jobs = args->jobs;
    opt.force = args->force;
    std::printf("scenario %s: %zu cells x %zu budgets -> %s\n", sc.name.c_str(), sc.cells.size(), sc.budgets.size(),
                opt.out.c_str());
    std::fflush(stdout);
    const RunResult r = run_scenario(sc, opt);
    std::printf("cells: %d computed, %d already finished (of %d)%s%s\n", r.cells_computed, r.cells_skipped, r.cells_total,
                r.backend.empty() ? "" : ", backend ", r.backend.c_str());
    if (r.interrupted) {
      std::printf("interrupted: the finished cells are kept in %s/cells; run the same command again to resume.\n",
                  opt.out.c_str());
      throw InputError("run interrupted by the user (SIGINT) before every cell was finished.");
    }
    const auto files = render_figures(opt.out);
    std::printf("tables: %s/tables (CSV, JSON); figures: %s/figures (%zu files: PNG, SVG, PDF)\nsummary: %s/summary.md\n",
                opt.out.c_str(), opt.out.c_str(), files.size(), opt.out.c_str());
  });
}

}  // namespace tierlab::cli
