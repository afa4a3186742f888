#pragma once
// Running a scenario (scenarios/scenario/scenario.hpp): `tierlab run`.
//
// Every cell is computed once and its result written atomically as JSON to
// DIR/cells/<cell id>.json (scenarios/run/atomic_file.hpp). A rerun skips the cells whose file
// exists (force: recompute them all). SIGINT (Ctrl-C) during a run sets a flag: no new
// cell starts, a cell in progress is abandoned at its next budget (nothing is written for
// it), finished cells stay; the run then reports interrupted = true and writes no tables.
// When every cell is present, the analyses (scenarios/run/tables.hpp) write DIR/tables/*.csv
// and *.json and DIR/summary.md. A copy of the scenario goes to DIR/scenario.yaml.
//
// A cell (one trace, all budgets B of the scenario) is what the scenario's analyses
// (scenarios/analyses/analysis.hpp) compute from it, each under its own keys of the cell JSON
// (the interior analysis: R2, budgets, dominated_share; the others: their name).
#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/cancel.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

struct RunOptions {
  std::string out;                 // DIR
  std::optional<Backend> backend;  // overrides the scenario's
  int jobs = 1;                    // cells computed in parallel (each with its own backend)
  bool force = false;              // recompute finished cells
  bool progress = true;            // progress line on a terminal
  // Makes each worker's backend (default: make_recomputer of the backend asked for). For
  // embedders and tests (a backend that fails on purpose).
  std::function<std::unique_ptr<Recomputer>()> backend_factory;
  // Called after each cell (tests): cell id, computed (false = skipped).
  std::function<void(const std::string&, bool)> on_cell;
};

struct RunResult {
  int cells_total = 0, cells_computed = 0, cells_skipped = 0;
  bool interrupted = false;
  bool tables_written = false;
  std::string backend;  // description of the backend used (empty when nothing was computed)
};

// Computes one cell: each of the scenario's analyses adds its part (no files written but the
// temporary synthetic trace under work_dir, removed afterwards). Throws Cancelled
// (model/cancel.hpp) when stop becomes true between analyses or their steps.
nlohmann::json compute_cell(const Scenario&, const ScenarioCell&, Recomputer& backend, const std::string& work_dir,
                            const std::atomic<bool>* stop = nullptr);

RunResult run_scenario(const Scenario&, const RunOptions&);

// The cell file of a cell: DIR/cells/<id>.json.
std::string cell_path(const std::string& out, const ScenarioCell&);

// Set by the SIGINT handler that run_scenario installs for its duration.
std::atomic<bool>& run_stop_flag();

}  // namespace tierlab
