// tierlab run [SCENARIO...]: computes each scenario's cells (resumable), then its tables,
// figures and summary.md (scenarios/run/runner.hpp, scenarios/figures/figures.hpp). Without a
// scenario it runs the default set: every scenarios/files/*.yaml of the source tree.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "model/error.hpp"
#include "scenarios/run/atomic_file.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/figures/figures.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab::cli {

namespace {

// The default scenario set: scenarios/files under the working directory when it is a
// tierlab checkout, otherwise under the source tree this binary was built from.
std::vector<std::string> default_scenarios() {
  namespace fs = std::filesystem;
  fs::path dir = "scenarios/files";
  if (!fs::is_directory(dir)) dir = fs::path(TIERLAB_SOURCE_DIR) / "scenarios/files";
  if (!fs::is_directory(dir))
    throw InputError("run: no scenario given and the default set '" + dir.string() + "' does not exist; name a scenario file.");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".yaml") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw InputError("run: the default scenario folder '" + dir.string() + "' holds no .yaml file.");
  return files;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

void add_run(CLI::App& app) {
  struct Args {
    std::vector<std::string> scenarios;
    std::string out, backend;
    int jobs = 1;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run scenario files: cells (resumable), tables, figures and summary.md; no file: the default set (scenarios/files)");
  cmd->add_option("scenario", args->scenarios, "Scenario files (YAML, see docs/scenarios.md); default: every scenarios/files/*.yaml");
  cmd->add_option("--out", args->out,
                  "Output folder (default: out/<scenario name>; with several scenarios, the parent folder, default out/)");
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda (default: the scenario's)");
  cmd->add_option("--jobs", args->jobs, "Cells computed in parallel")->capture_default_str();
  cmd->add_flag("--force", args->force, "Recompute finished cells");
  cmd->callback([args]() {
    const bool set = args->scenarios.size() != 1;
    const std::vector<std::string> files = args->scenarios.empty() ? default_scenarios() : args->scenarios;
    // Validate every file first: a typo in the last scenario fails before any work.
    std::vector<Scenario> scenarios;
    for (const auto& f : files) scenarios.push_back(load_scenario(f));
    const std::string parent = args->out.empty() ? "out" : args->out;
    std::string index = "# tierlab: summary of " + std::to_string(scenarios.size()) + " scenarios\n\n";
    for (const Scenario& sc : scenarios) {
      RunOptions opt;
      opt.out = set ? parent + "/" + sc.name : (args->out.empty() ? "out/" + sc.name : args->out);
      if (!args->backend.empty()) opt.backend = parse_backend(args->backend);
      opt.jobs = args->jobs;
      opt.force = args->force;
      std::printf("scenario %s: %zu cells x %zu budgets -> %s\n", sc.name.c_str(), sc.cells.size(), sc.budgets.size(),
                  opt.out.c_str());
      std::fflush(stdout);
      const RunResult r = run_scenario(sc, opt);
      std::printf("cells: %d computed, %d already finished (of %d)%s%s\n", r.cells_computed, r.cells_skipped,
                  r.cells_total, r.backend.empty() ? "" : ", backend ", r.backend.c_str());
      if (r.interrupted) {
        std::printf("interrupted: the finished cells are kept in %s/cells; run the same command again to resume.\n",
                    opt.out.c_str());
        throw InputError("run interrupted by the user (SIGINT) before every cell was finished.");
      }
      const FiguresWritten figures = render_figures_of_run(opt.out);
      std::printf("tables: %s/tables (CSV, JSON); figures: %s/figures (%zu files: PNG, SVG, PDF)\n", opt.out.c_str(),
                  opt.out.c_str(), figures.files.size());
      for (const auto& why : figures.skipped) std::printf("figure skipped, %s\n", why.c_str());
      std::printf("summary: %s/summary.md\n", opt.out.c_str());
      std::fflush(stdout);
      // The index: each scenario's summary with its headings pushed one level down.
      std::istringstream summary(slurp(opt.out + "/summary.md"));
      std::string line;
      index += "## " + sc.name + " (" + sc.file + ")\n\nFolder: `" + opt.out + "` (figures in `" + opt.out + "/figures`).\n\n";
      while (std::getline(summary, line)) {
        if (line.rfind("# ", 0) == 0) continue;  // the scenario's own title
        index += (line.rfind("#", 0) == 0 ? "#" + line : line) + "\n";
      }
      index += "\n";
    }
    if (set) {
      write_file_atomically(parent + "/summary.md", index);
      std::printf("\nall %zu scenarios done; the combined summary: %s/summary.md\n", scenarios.size(), parent.c_str());
    }
  });
}

}  // namespace tierlab::cli
