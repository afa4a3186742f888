#pragma once
// Running a scenario (scenarios/scenario/scenario.hpp): `tierlab run`.
//
// Every cell is computed once and its result written atomically as JSON to
// DIR/cells/<cell id>.json (scenarios/io/atomic_file.hpp). A rerun skips the cells whose file
// exists (force: recompute them all). SIGINT (Ctrl-C) during a run sets a flag: no new
// cell starts, a cell in progress is abandoned at its next budget (nothing is written for
// it), finished cells stay; the run then reports interrupted = true and writes no tables.
// When every cell is present, the analyses (scenarios/run/tables.hpp) write DIR/tables/*.csv
// and *.json and DIR/summary.md. A copy of the scenario goes to DIR/scenario.yaml.
//
// Cells know what they were computed for: each cell file records "cell_hash", a 64-bit FNV-1a
// hash of the canonical JSON of everything that determines it (cell_inputs: the cell format
// version, the scenario's settings (every key but name, description and traces: ladder,
// budgets, methods and their parameters, queries, analyses), the cell's own trace spec: the
// synthetic parameters, or the trace file's / checkpoint's content hash (its bytes, hashed
// once per run)). A rerun recomputes a cell whose file records another hash, and says so; a
// damaged cell file (truncated, not JSON, not a cell) is named, moved aside to
// "<file>.damaged" and recomputed; a cell file that parses but is not the scenario's cell
// (validate_cell_file: wrong id, budgets or heads, a field of the wrong type, a content hash that
// does not match) is named, moved aside to "<file>.invalid-<n>" and recomputed. Temporary files "*.tmp-<tag>" of killed runs under DIR are
// removed at the start of a run.
//
// One run at a time computes into a folder: a run holds DIR/.lock (flock, with the holder's
// "<pid>@<host>" written in it) from before it plans its cells until its tables are written. A
// second run into the same folder (another process, or another thread: each run opens the file
// itself, and flock locks belong to the open file) says once that it waits and for whom, waits
// (Ctrl-C in a Python call stops the wait: interrupted, nothing computed; `tierlab run` simply
// ends, holding nothing yet), then plans and finds the cells the first one finished. Shards of
// one run (--shard) hold the lock shared, so they run side by side (they compute different
// cells) while a whole run waits for them and they for it.
//
// A cell (one trace, all budgets B of the scenario) is what the scenario's analyses
// (scenarios/scenario/analysis.hpp) compute from it, each under its own keys of the cell JSON
// (the interior analysis: R2, budgets, dominated_share; the others: their name).
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

// Shard I of N (1-based): a deterministic share of a scenario's cells (shard_assignment).
struct Shard {
  int index = 1, count = 1;
};
// "I/N" (1 <= I <= N); InputError naming --shard and the value otherwise.
Shard parse_shard(const std::string& text);

struct RunOptions {
  std::string out;                 // DIR
  std::optional<Backend> backend;  // overrides the scenario's
  int jobs = 1;                    // cells computed in parallel (each with its own backend)
  bool force = false;              // recompute finished cells
  // The size of the work (scenarios/run/estimate.hpp) is printed before it starts, and a run
  // beyond the machine's memory or free disk, or beyond max_memory / max_disk (bytes; 0: the
  // machine's), is refused with its estimate unless force_size.
  bool force_size = false;
  double max_memory = 0, max_disk = 0;
  bool size_checked = false;  // the caller made check_run_size already (`tierlab run`, before every scenario)
  // The size estimate's line (check_run_size); default: printed on stderr as "tierlab: estimate ...".
  // Apart from on_note, which says things about the output folder.
  std::function<void(const std::string&)> on_estimate;
  bool progress = true;            // progress line on a terminal
  Shard shard;                     // compute only this share of the cells (count 1: all)
  bool complete_missing = false;   // sharded: then also compute the cells other shards left
  // Makes each worker's backend (default: make_recomputer of the backend asked for). For
  // embedders and tests (a backend that fails on purpose).
  std::function<std::unique_ptr<Recomputer>()> backend_factory;
  // Called after each cell (tests): cell id, computed (false = skipped).
  std::function<void(const std::string&, bool)> on_cell;
  // A sentence about the output folder (a stale or damaged cell, removed temporary files);
  // default: printed on stderr as "tierlab: NOTE".
  std::function<void(const std::string&)> on_note;
};

struct RunResult {
  int cells_total = 0, cells_computed = 0, cells_skipped = 0;
  int cells_stale = 0, cells_damaged = 0;  // recomputed: other inputs / a damaged file (moved aside)
  int temporaries_removed = 0;             // "*.tmp-<tag>" files of killed runs
  bool interrupted = false;
  bool tables_written = false;
  int shard_cells = 0;               // the cells of this shard (all of them without sharding)
  std::vector<std::string> missing;  // sharded: cells not finished by any run yet (no tables then)
  int ranks = 1;                     // MPI: the ranks of the run
  int scheduler_cells = 0;           // MPI: results rank 0 received and wrote
  double scheduler_seconds = 0;      // MPI: rank 0's time handling them (receive, write, hand out)
  std::string backend;  // description of the backend used (empty when nothing was computed)
};

// Computes one cell: each of the scenario's analyses adds its part (no files written but the
// temporary synthetic trace under work_dir, removed afterwards). Throws Cancelled
// (model/base/cancel.hpp) when stop becomes true between analyses or their steps.
// on_step: where the cell is (CellContext::on_step), for a progress line.
nlohmann::json compute_cell(const Scenario&, const ScenarioCell&, Recomputer& backend, const std::string& work_dir,
                            const std::atomic<bool>* stop = nullptr,
                            const std::function<void(const std::string&, int, int)>& on_step = {});

// The whole run in this process: plan_run, the pending cells of this shard on opt.jobs threads
// (largest estimated cost first), then, when every cell of the scenario is finished, the
// tables (write_run_tables). Sharded (opt.shard.count > 1): only the shard's cells; the run
// that finds every cell present writes the tables; one that does not lists the unfinished
// cells in RunResult::missing (and computes them first when opt.complete_missing).
RunResult run_scenario(const Scenario&, const RunOptions&);

// The size check run_scenario makes first (estimate.hpp): the cells of `only` (default: all)
// that have no cell file yet (all of them with opt.force) are estimated, the estimate is given
// to opt.on_estimate, and InputError naming the scenario, the limit and the estimate is thrown when
// it exceeds the limits and not opt.force_size. Reads no trace, writes nothing.
void check_run_size(const Scenario&, const RunOptions&, const std::vector<std::size_t>* only = nullptr);

// The pieces run_scenario is made of, shared with the MPI runner (scenarios/run/mpi/).
struct RunPlan {
  std::map<std::string, std::string> hashes;  // cell id -> cell_hash, every cell of the scenario
  std::vector<std::size_t> pending;           // indices into Scenario::cells, largest cost first
  RunResult result;                           // counts so far: skipped, stale, damaged, temporaries
};
// Removes stale temporaries and work folders of killed runs, copies the scenario file, and
// checks the cell files of the cells `only` (default: all): finished for these inputs
// (skipped), stale or damaged (noted, the damaged moved aside) or missing (pending).
RunPlan plan_run(const Scenario&, const RunOptions&, const std::vector<std::size_t>* only = nullptr);
// Reads every cell file back (each must be finished for `hashes`) and writes the analyses'
// tables and summary.md.
void write_run_tables(const Scenario&, const std::string& out, const std::map<std::string, std::string>& hashes);
// The ids of the cells whose file is missing, damaged or for other inputs.
std::vector<std::string> unfinished_cells(const Scenario&, const std::string& out,
                                          const std::map<std::string, std::string>& hashes);
// Writes DIR/cells/<id>.json atomically, with its cell_hash.
void write_cell_file(const std::string& out, const ScenarioCell&, nlohmann::json cell, const std::string& hash);
// The work of a cell, for scheduling: heads x queries x keys x head dim (0 when its trace
// cannot be read here). Larger cells are started first; shards balance it.
double estimated_cell_cost(const Scenario&, const ScenarioCell&);
// The cells (indices) by decreasing estimated cost, ties in scenario order.
std::vector<std::size_t> largest_first(const Scenario&, std::vector<std::size_t> cells);
// The shard (0-based) of every cell: cells by decreasing cost, each to the shard with the least
// estimated work so far (then the fewest cells, then the lowest index). Depends only on the
// scenario and its traces, so every shard computes the same assignment.
std::vector<int> shard_assignment(const Scenario&, int shards);
// The folder a process writes its temporary traces in: DIR/traces/<pid>@<host> (atomic_file.hpp).
std::string run_work_dir(const std::string& out);
void remove_work_dir(const std::string& work_dir);  // and DIR/traces when empty
// The backend a run computes on: opt.backend_factory, else make_recomputer (InputError when
// the backend asked for is unavailable).
std::unique_ptr<Recomputer> make_run_backend(const Scenario&, const RunOptions&);
// A sentence about the output folder: opt.on_note, else "tierlab: ..." on stderr.
void run_note(const RunOptions&, const std::string& text);
// SIGINT and SIGTERM set run_stop_flag() (cleared on entry) while the scope lives.
class SigintScope {
 public:
  SigintScope();
  ~SigintScope();
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

// The cell file of a cell: DIR/cells/<id>.json.
std::string cell_path(const std::string& out, const ScenarioCell&);

// The version of the cell files' contents; part of every cell hash.
inline constexpr const char* kCellFormat = "tierlab-cell-v2";
// 64-bit FNV-1a of bytes (offset basis 14695981039346656037, prime 1099511628211).
std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t h = 14695981039346656037ull);
// FNV-1a of a file's bytes as 16 hex digits (InputError naming the file when unreadable).
std::string file_content_hash(const std::string& path, const std::string& what);
// Content hashes by path, computed once (a run hashes each trace and checkpoint once).
using ContentHashes = std::map<std::string, std::string>;
// The canonical JSON of everything that determines a cell (see above).
nlohmann::json cell_inputs(const Scenario&, const ScenarioCell&, ContentHashes&);
// Its hash as 16 hex digits: the "cell_hash" of the cell file.
std::string cell_hash(const Scenario&, const ScenarioCell&, ContentHashes&);

// A cell file read back: its JSON (bounded: kMaxTextBytes, kMaxJsonDepth), or the reason it
// is damaged (empty json).
struct CellFile {
  nlohmann::json json;
  std::string damage;  // "" when the file is a cell
};
// A cell file written since issue 33 also records "content_hash": cell_content_hash of the
// file's JSON without that key; read_cell_file reports a file whose content does not match it
// as damaged. Files without it (earlier versions) are read as before.
CellFile read_cell_file(const std::string& path);
// FNV-1a (16 hex digits) of the compact JSON of the cell without its "content_hash".
std::string cell_content_hash(const nlohmann::json& cell);
// A parsed cell file checked against the scenario: "id" is the cell's id (the file's name), and
// preset, seed, prompt length, logit scale and swept parameter are the cell's; with the interior
// analysis, "budgets" holds exactly the scenario's budgets in its order, each with the same
// n_heads heads in (layer, kv_head) order; every field a table writer reads is present (nested
// ones too: rates, model, wins) with its type and range (finite numbers, A <= 1, errors >= 0,
// rates in [0, 64] bits, shares in [0, 1], counts of heads at most n_heads, winners Q, E, M or
// ""); no value anywhere is a number given as a string. "" when the cell passes, else one line
// naming the file, the field and its value. A cell that fails is moved aside by plan_run to
// "<file>.invalid-<n>" and recomputed, never used.
std::string validate_cell_file(const Scenario&, const ScenarioCell&, const std::string& path, const nlohmann::json& cell);

// The signal that stopped the run ("SIGINT", "SIGTERM"; "a stop request" when none did).
std::string run_stop_signal_name();
// Set by the SIGINT/SIGTERM handler that run_scenario installs for its duration (SigintScope).
std::atomic<bool>& run_stop_flag();

}  // namespace tierlab
