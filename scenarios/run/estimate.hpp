#pragma once
// The size of a run before any work (issue 33): `tierlab run` prints it, and refuses a run
// whose estimate exceeds the machine's memory or free disk, or a stated limit, unless asked
// to go on (RunOptions::force_size, `--force-size`).
//
// Per cell, from the scenario alone (no trace is generated or read; a trace file's header
// and a checkpoint's 28-byte header are read):
//   trace bytes   every head's tensors as stored: T d (keys, pre-RoPE keys, values) +
//                 g W d + g S d (queries) + 2 S d (decode keys, values), times 4 bytes
//                 (2 for F16/BF16), times the heads. A captured cell writes it to a
//                 temporary file under the output folder (removed when the cell is done); a
//                 synthetic cell generates its heads in memory as they are read, and a trace
//                 file is read in place (no disk for either).
//   resident      what one cell holds at once: the model-wide allocation keeps every head's
//                 surrogate costs (L x T doubles per head, L the ladder's tiers), and one
//                 head in flight holds its tensors, the L materialised key variants
//                 (T d floats each) and the prepared exact softmax of its query rows
//                 (g (W + S) x T doubles, twice), plus a fixed 64 MiB:
//                   64 MiB + 8 H L T + 4 T d (4 + L) + 16 g (W + S) T      (bytes)
//                 with no margin: the peaks measured on paper/01's 256-head cells with one
//                 thread (a `--jobs 2` job) are 0.89 of it at 32k tokens (584 MB; 940 MB
//                 until the model-wide solves read the costs in place) and 0.69 at 4k (97 MB),
//                 2026-12-05 (docs/performance.md, "Tenth" to "Twelfth").
// A run of J jobs holds the J largest pending cells at once: its disk and memory are the
// sums over those J cells.
#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

struct CellSize {
  double heads = 0, tokens = 0;  // KV heads; T + S per head
  double trace_bytes = 0;        // the trace as stored
  double disk_bytes = 0;         // trace_bytes when the run writes it (captured cells), else 0
  double resident_bytes = 0;
};
// InputError when a trace file or checkpoint the cell names cannot be read.
CellSize estimate_cell(const Scenario&, const ScenarioCell&);

struct RunEstimate {
  int cells = 0;                   // the cells to compute
  double head_tokens = 0;          // sum over them of heads x (T + S)
  double trace_bytes = 0;          // sum over them of the traces' sizes
  double peak_disk_bytes = 0;      // the J largest temporary traces at once
  double peak_resident_bytes = 0;  // the J largest cells at once
  double heads = 0;                // KV heads over the cells
  double min_tokens = 0, max_tokens = 0;  // T + S of the smallest and largest cell
  // One line: "5 cells to compute, 1,280 KV heads x 4,112-32,784 tokens (3.1e+07 head-tokens);
  // traces 20.4 GB in all, at most 26.8 GB on disk at once; about 1.7 GB resident (2 jobs)".
  std::string describe(int jobs) const;
};
RunEstimate estimate_run(const Scenario&, const std::vector<std::size_t>& cells, int jobs);

// The limits a run is held to: the machine's physical memory and the free space of the
// filesystem that holds `out` (its nearest existing folder), or the stated ones (> 0).
struct SizeLimits {
  double memory_bytes = 0, disk_bytes = 0;
  std::string memory_source, disk_source;  // "physical memory", "--max-memory", "free space of '/x'"
};
SizeLimits size_limits(const std::string& out, double max_memory, double max_disk);

// "" when the estimate fits the limits, else the sentence saying which it exceeds and by how
// much, with the estimate.
std::string size_fault(const RunEstimate&, const SizeLimits&, int jobs);

// "8G", "512M", "1.5T", "100000" (bytes; K, M, G, T are powers of 1024, an optional "B" or
// "iB" after them): InputError naming `what` and the text otherwise.
double parse_size(const std::string& text, const std::string& what);
// 1.7 GB-style (powers of 1024: KiB, MiB, GiB, TiB, PiB).
std::string format_bytes(double bytes);

}  // namespace tierlab
