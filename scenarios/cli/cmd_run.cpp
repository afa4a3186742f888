// tierlab run [SCENARIO...]: computes each scenario's cells (resumable), then its tables,
// figures and summary.md (scenarios/run/runner.hpp, scenarios/run/render_figures.hpp). Without a
// scenario it runs the default set: every scenarios/files/*.yaml of the source tree, then the
// claims ledger scenarios/files/claims/*.yaml.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "model/base/error.hpp"
#include "scenarios/analyses/claims.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/run/launch.hpp"
#include "scenarios/run/estimate.hpp"
#include "scenarios/run/runner.hpp"
#ifdef TIERLAB_HAVE_MPI
#include "scenarios/run/mpi/mpi_runner.hpp"
#endif
#include "scenarios/scenario/scenario.hpp"

namespace tierlab::cli {

namespace {

#ifdef TIERLAB_HAVE_MPI
using MpiSessionPtr = std::unique_ptr<MpiSession>;
int mpi_rank(const MpiSessionPtr& m) { return m->rank(); }
int mpi_size(const MpiSessionPtr& m) { return m->size(); }
#else
struct NoMpi {};
using MpiSessionPtr = std::unique_ptr<NoMpi>;  // always empty
int mpi_rank(const MpiSessionPtr&) { return 0; }
int mpi_size(const MpiSessionPtr&) { return 1; }
#endif

// The default scenario set: scenarios/files under the working directory when it is a
// tierlab checkout, otherwise under the source tree this binary was built from.
std::vector<std::string> default_scenarios() {
  namespace fs = std::filesystem;
  fs::path dir = "scenarios/files";
  if (!fs::is_directory(dir)) dir = fs::path(TIERLAB_SOURCE_DIR) / "scenarios/files";
  if (!fs::is_directory(dir))
    throw InputError("run: no scenario given and the default set '" + dir.string() + "' does not exist; name a scenario file.");
  auto yaml_in = [](const fs::path& d) {
    std::vector<std::string> in;
    if (fs::is_directory(d))
      for (const auto& e : fs::directory_iterator(d))
        if (e.is_regular_file() && e.path().extension() == ".yaml") in.push_back(e.path().string());
    std::sort(in.begin(), in.end());
    return in;
  };
  std::vector<std::string> files = yaml_in(dir);
  if (files.empty()) throw InputError("run: the default scenario folder '" + dir.string() + "' holds no .yaml file.");
  // Then the ledger of the reference papers' claims (docs/claims.md; its small versions, about two
  // minutes): the combined summary opens with their table. paper/ and zoo/ run only by name.
  for (std::string& f : yaml_in(dir / "claims")) files.push_back(std::move(f));
  return files;
}

// A folder named on the command line stands for its *.yaml files, sorted
// (`tierlab run scenarios/files/claims/`: the ledger of docs/claims.md).
std::vector<std::string> expand_folders(const std::vector<std::string>& given) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const std::string& g : given) {
    if (!fs::is_directory(g)) {
      files.push_back(g);
      continue;
    }
    std::vector<std::string> in;
    for (const auto& e : fs::directory_iterator(g))
      if (e.is_regular_file() && e.path().extension() == ".yaml") in.push_back(e.path().string());
    if (in.empty()) throw InputError("run: the folder '" + g + "' holds no .yaml scenario file.");
    std::sort(in.begin(), in.end());
    files.insert(files.end(), in.begin(), in.end());
  }
  return files;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunArgs {
  std::vector<std::string> scenarios;
  std::string out, backend;
  std::string shard;
  int jobs = 1;
  bool force = false, complete = false, scheduler_only = false;
  bool force_size = false;
  std::string max_memory, max_disk;
};

// The scenarios, loaded and validated before any work (a typo in the last one fails first).
// Under MPI every rank loads them; when one cannot, every rank stops (none waits for it).
std::vector<Scenario> load_all(const std::vector<std::string>& files, const MpiSessionPtr& mpi) {
  std::vector<Scenario> scenarios;
  std::exception_ptr error;
  try {
    for (const auto& f : files) {
      scenarios.push_back(load_scenario(f));
      // A claim scenario's robustness variations run right after it (analyses/claims.hpp).
      for (Scenario& v : claim_variations(scenarios.back())) scenarios.push_back(std::move(v));
    }
  } catch (...) {
    if (!mpi) throw;
    error = std::current_exception();
  }
#ifdef TIERLAB_HAVE_MPI
  if (mpi && !mpi->all(!error)) {
    if (error) rethrow_with_context(error, "rank " + std::to_string(mpi->rank()) + " on " + mpi->host());
    throw InputError("run: another MPI rank could not load the scenario files (its error is printed above); "
                     "every rank must be able to read them.");
  }
#endif
  return scenarios;
}

// "a, b, c and 4 more".
std::string some_ids(const std::vector<std::string>& ids, std::size_t shown = 8) {
  std::string s;
  for (std::size_t i = 0; i < ids.size() && i < shown; ++i) s += (i ? ", " : "") + ids[i];
  if (ids.size() > shown) s += " and " + std::to_string(ids.size() - shown) + " more";
  return s;
}

void run_command(const RunArgs& args) {
  const int launched = launched_ranks();
  if (launched > 1 && !built_with_mpi())
    throw InputError("run: started by an MPI launcher as " + std::to_string(launched) +
                     " processes, but this tierlab was built without MPI (Open MPI not found at configure time, or "
                     "-DTIERLAB_MPI=OFF), so every copy would compute the same cells. Install libopenmpi-dev and "
                     "rebuild, run one process, or split the run with --shard I/N (docs/cluster.md).");
  MpiSessionPtr mpi;
#ifdef TIERLAB_HAVE_MPI
  if (launched > 0) mpi = std::make_unique<MpiSession>();
#endif
  const bool root = !mpi || mpi_rank(mpi) == 0;
  Shard shard;
  if (!args.shard.empty()) shard = parse_shard(args.shard);
  if (args.complete && args.shard.empty()) throw InputError("run: --complete goes with --shard I/N; without --shard every cell is computed anyway.");
  if (args.scheduler_only && !mpi) throw InputError("run: --scheduler-only applies under mpirun only (this process was not started by an MPI launcher).");
  const std::vector<std::string> files = args.scenarios.empty() ? default_scenarios() : expand_folders(args.scenarios);
  const std::vector<Scenario> scenarios = load_all(files, mpi);
  // More than one scenario (a claim file's robustness variations count): one folder each under --out.
  const bool set = args.scenarios.size() != 1 || scenarios.size() != 1;
  const std::string parent = args.out.empty() ? "out" : args.out;
  std::string index = "# tierlab: summary of " + std::to_string(scenarios.size()) + " scenarios\n\n";
  bool all_tables = true;
  std::vector<ClaimVerdict> claims;  // every scenario's claim rows (analyses/claims.hpp), one table on top
  const auto options_of = [&](const Scenario& sc) {
    RunOptions opt;
    opt.out = set ? parent + "/" + sc.name : (args.out.empty() ? "out/" + sc.name : args.out);
    if (!args.backend.empty()) opt.backend = parse_backend(args.backend);
    opt.jobs = args.jobs;
    opt.force = args.force;
    opt.shard = shard;
    opt.complete_missing = args.complete;
    opt.force_size = args.force_size;
    if (!args.max_memory.empty()) opt.max_memory = parse_size(args.max_memory, "--max-memory");
    if (!args.max_disk.empty()) opt.max_disk = parse_size(args.max_disk, "--max-disk");
    return opt;
  };
  // Every scenario's size before any work (scenarios/run/estimate.hpp): a run too large for the
  // machine is refused before its first cell, not after the scenarios before it.
  // (Under MPI the ranks share the work differently; a sharded run checks its own share.)
  const bool checked_here = !mpi && shard.count == 1;
  if (checked_here)
    for (const Scenario& sc : scenarios) check_run_size(sc, options_of(sc));
  for (const Scenario& sc : scenarios) {
    RunOptions opt = options_of(sc);
    opt.size_checked = checked_here;
    if (root) {
      std::printf("scenario %s: %zu cells x %zu budgets -> %s%s\n", sc.name.c_str(), sc.cells.size(), sc.budgets.size(),
                  opt.out.c_str(),
                  shard.count > 1 ? (" (shard " + args.shard + ")").c_str()
                  : mpi           ? (" (" + std::to_string(mpi_size(mpi)) + " MPI ranks)").c_str()
                                  : "");
      std::fflush(stdout);
    }
    RunResult r;
#ifdef TIERLAB_HAVE_MPI
    if (mpi) {
      MpiRunOptions mo;
      mo.scheduler_only = args.scheduler_only;
      r = run_scenario_mpi(sc, opt, *mpi, mo);
      if (!root) {
        if (r.interrupted) return;  // rank 0 stopped the run and reports why
        continue;
      }
    } else {
      r = run_scenario(sc, opt);
    }
#else
    r = run_scenario(sc, opt);
#endif
    if (shard.count > 1) {
      std::printf("cells: %d computed, %d already finished (of this shard's %d; %d in the scenario)%s%s\n",
                  r.cells_computed, r.cells_skipped, r.shard_cells, r.cells_total, r.backend.empty() ? "" : ", backend ",
                  r.backend.c_str());
    } else {
      std::printf("cells: %d computed, %d already finished (of %d)%s%s\n", r.cells_computed, r.cells_skipped,
                  r.cells_total, r.backend.empty() ? "" : ", backend ", r.backend.c_str());
    }
    if (mpi && r.scheduler_cells > 0)
      std::printf("scheduler: %d results handled in %.3f s (%.3f ms each: %.0f cells per second)\n", r.scheduler_cells,
                  r.scheduler_seconds, 1e3 * r.scheduler_seconds / r.scheduler_cells,
                  r.scheduler_seconds > 0 ? r.scheduler_cells / r.scheduler_seconds : 0.0);
    if (r.interrupted) {
      std::printf("interrupted: the finished cells are kept in %s/cells; run the same command again to resume.\n",
                  opt.out.c_str());
      throw InputError("run interrupted by " + run_stop_signal_name() + " before every cell was finished.");
    }
    if (!r.missing.empty()) {
      std::printf("shard %s done; %zu cell%s of other shards %s not finished yet: %s. The shard that finishes last "
                  "writes the tables; or rerun with --shard %s --complete (or without --shard) to compute %s here.\n",
                  args.shard.c_str(), r.missing.size(), r.missing.size() == 1 ? "" : "s", r.missing.size() == 1 ? "is" : "are",
                  some_ids(r.missing).c_str(), args.shard.c_str(), r.missing.size() == 1 ? "it" : "them");
      std::fflush(stdout);
      all_tables = false;
      index += "## " + sc.name + " (" + sc.file + ")\n\nNot finished yet: " + std::to_string(r.missing.size()) +
               " cells of other shards are missing.\n\n";
      continue;
    }
    const FiguresWritten figures = render_figures_of_run(opt.out, sc.figure_style);
    std::string formats;
    for (const auto& f : sc.figure_style.formats) formats += std::string(formats.empty() ? "" : ", ") + f;
    std::printf("tables: %s/tables (CSV, JSON); figures: %s/figures (%zu files: %s, %s wide)\n", opt.out.c_str(),
                opt.out.c_str(), figures.files.size(), formats.c_str(), format_length(sc.figure_style.width_pt).c_str());
    for (const auto& why : figures.skipped) std::printf("figure skipped, %s\n", why.c_str());
    for (const auto& fault : figures.layout) std::printf("figure layout, %s\n", fault.c_str());
    std::printf("summary: %s/summary.md\n", opt.out.c_str());
    std::fflush(stdout);
    for (ClaimVerdict& v : read_claim_rows(opt.out)) claims.push_back(std::move(v));
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
  if (set && root && all_tables) {
    if (!claims.empty()) {  // the ledger first: every claim row of these scenarios in one table
      const std::size_t after_title = index.find("\n\n") + 2;
      index.insert(after_title, "## Claims of the reference papers (docs/claims.md)\n\nEach row is computed from its "
                                "scenario's tables (DIR/tables/claims.json).\n\n" + claims_table(claims) + "\n");
    }
    write_file_atomically(parent + "/summary.md", index);
    std::printf("\nall %zu scenarios done; the combined summary: %s/summary.md\n", scenarios.size(), parent.c_str());
  }
}

}  // namespace

void add_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run scenario files: cells (resumable), tables, figures and summary.md; no file: the default set (scenarios/files)");
  cmd->add_option("scenario", args->scenarios, "Scenario files (YAML, see docs/scenarios.md); default: every scenarios/files/*.yaml, then scenarios/files/claims/*.yaml");
  cmd->add_option("--out", args->out,
                  "Output folder (default: out/<scenario name>; with several scenarios, the parent folder, default out/)");
  cmd->add_option("--backend", args->backend, "Recomputation backend: auto, cpu, cuda (default: the scenario's)");
  cmd->add_option("--jobs", args->jobs, "Cells computed in parallel")->capture_default_str();
  cmd->add_flag("--force", args->force, "Recompute finished cells");
  cmd->add_option("--shard", args->shard,
                  "I/N: compute only shard I of N (a deterministic share of the cells) into the shared --out folder; "
                  "the shard that finds every cell finished writes the tables (docs/cluster.md)");
  cmd->add_flag("--complete", args->complete,
                "With --shard: then also compute the cells no shard has finished, and write the tables");
  cmd->add_flag("--force-size", args->force_size,
                "Run even when the size estimate printed before the work exceeds the machine's memory or free disk, or "
                "--max-memory / --max-disk (--force recomputes finished cells instead)");
  cmd->add_option("--max-memory", args->max_memory,
                  "Refuse a run whose estimated resident memory exceeds this size (e.g. 8G; default: physical memory)");
  cmd->add_option("--max-disk", args->max_disk,
                  "Refuse a run whose temporary traces exceed this size on disk at once (e.g. 50G; default: free space)");
  cmd->add_flag("--scheduler-only", args->scheduler_only,
                "Under mpirun: the scheduling rank only schedules (default: it computes cells too)");
  cmd->callback([args]() { run_command(*args); });
}

}  // namespace tierlab::cli
