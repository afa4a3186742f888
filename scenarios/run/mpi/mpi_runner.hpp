#pragma once
// `mpirun -n N tierlab run SCENARIO...`: the cells of a scenario across N MPI ranks
// (docs/cluster.md). Built when Open MPI is found at configure time (TIERLAB_MPI).
//
// Rank 0 schedules: it plans the run (plan_run: which cells are finished in its output
// folder), hands the pending cells out one at a time, largest estimated cost first, to
// whichever rank is free, and writes each result to DIR/cells/<id>.json (atomically, with
// its cell hash) the moment it arrives; when every cell is finished it writes the tables.
// Only rank 0 touches the output folder: results travel over MPI, so no shared file system
// is needed for them. Rank 0 computes cells too, on a thread beside the scheduler, unless
// scheduler_only. Ranks 1..N-1 compute: each rank loads the scenario files itself, and
// computes the cell it is handed from the traces and checkpoints named by path, which must
// be readable there (a rank that cannot read one, or whose copy differs from rank 0's (the
// cell hash), reports an error naming the cell and the rank). Synthetic and captured traces
// are written to the rank's temporary folder (TMPDIR, else /tmp) while their cell runs.
// A rank computes with the CUDA backend on device (local rank mod devices) when the backend
// asked for allows CUDA and the node has devices.
//
// Messages (MPI_COMM_WORLD, bytes: int32 cell, int32 code, text):
//   0 -> r  assign (cell index, its cell hash) | done (the scenario is finished) | abort
//   r -> 0  result (cell index, the cell JSON) | error (cell index, category, message) | cancelled
// An error on any rank stops the scheduling: rank 0 tells every rank to abort (a busy rank
// abandons its cell at its next step), keeps every result that arrived, and throws the error
// with its category (InputError, RecomputeError, internal) and "cell '<id>' (rank R on HOST)".
// SIGINT/SIGTERM on rank 0 (Ctrl-C on mpirun) stops the same way; finished cells are on disk.
#include <string>

#include "scenarios/run/runner.hpp"

namespace tierlab {

// MPI_Init_thread (MPI_THREAD_FUNNELED: only the main thread calls MPI) and MPI_Finalize.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // index among the ranks of this node
  const std::string& host() const { return host_; }
  // Collective: true on every rank when `ok` is true on every rank.
  bool all(bool ok) const;

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  std::string host_;
};

struct MpiRunOptions {
  bool scheduler_only = false;  // rank 0 does not compute cells itself (size > 1)
};

// Every rank calls it for the same scenario, in the same order. Rank 0 returns the run's
// result (RunResult::scheduler_* filled); the other ranks return what they computed, with
// interrupted = true when rank 0 told them to abort (they should then stop, not go on to the
// next scenario). Rank 0 throws the first error any rank reported.
RunResult run_scenario_mpi(const Scenario&, const RunOptions&, const MpiSession&, const MpiRunOptions& = {});

}  // namespace tierlab
