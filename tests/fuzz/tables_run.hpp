#pragma once
// The run folder fuzz_tables mutates (docs/reliability.md), shared with fuzz_make_seeds so that
// the seeds' cell hashes are this scenario's: two tiny synthetic cells (the correlation figure
// needs two) with the interior analysis, whose tables and figures `tierlab run` and `tierlab
// figure` write and read. Its cells are computed by the project's own code (compute_cell).
//
// A fuzz_tables input is one of
//   - a cell file's JSON: it replaces the file of the cell its "id" names (else the first
//     cell's) in a run folder whose other cells are valid; the run then plans (read, hash,
//     validate_cell_file: a cell that fails is moved aside), writes the tables and summary.md
//     and renders the figures, as `tierlab run` over finished cells does;
//   - "tables/NAME\n" and a table's bytes: they replace DIR/tables/NAME of a valid run, whose
//     figures are then read and rendered, as `tierlab figure DIR` does.
#include <string>

namespace tierlab::fuzz {

inline const char* const kTablesScenarioYaml =
    "name: fuzz-tables\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [0, 1]\n"
    "    context_lengths: [32]\n"
    "    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
    "budgets: [2, 4]\n"
    "backend: cpu\n"
    "bootstrap: 100\n";

// The first line of a table input.
inline const char* const kTableInputPrefix = "tables/";

}  // namespace tierlab::fuzz
