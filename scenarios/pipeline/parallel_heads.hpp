#pragma once
// The heads of a trace computed side by side (issue 38: a cell's heads one after another, with
// OpenMP teams inside each, kept about 1.5 of 2 cores busy, because much of a head's work --
// the solves, materialising allocations, the smaller products -- runs on one thread).
//
// for_each_head(n, backend, body) calls body(i) for every i in [0, n), each exactly once, on up
// to omp_get_max_threads() threads of one OpenMP team, handing out indices in increasing order.
// Inside body, omp_get_max_threads() is 1 (omp_set_num_threads(1) in each thread of the team),
// so OpenMP regions, the CPU backend and Eigen's products all run on that one thread, exactly
// as in a run with OMP_NUM_THREADS=1. The numbers do not depend on it: a cell gives the same
// bits on any number of threads (tests/test_parallel_heads.cpp; tests/test_rd_curve_incremental.cpp,
// "The thread count changes no bit"), and body writes only its own head's slot; sums over heads
// are taken by the caller afterwards, in head order.
//
// Heads run one at a time, on the calling thread, when the backend does not take concurrent
// calls (Recomputer::concurrent_calls: a CUDA device is one queue), when the caller is itself
// inside a parallel region or has one OpenMP thread, when its limit is 1 (limit_head_threads:
// a `tierlab run --jobs N` worker gets cores / N, scenarios/run/runner.cpp), or when n < 2.
//
// What a thread of the team inherits from the caller: the cancel flag (model/base/cancel.hpp:
// a CancelScope of the caller's current_cancel_flag() in every thread), and the phase totals
// (model/base/phases.hpp): each thread's additions are merged into the caller's at the end,
// so a phase's seconds sum the busy time of the threads (more than its wall time when heads ran
// side by side; the cell JSON's "head_threads" says how many ran).
//
// Errors: once body has thrown for head i, no head after i is started (those already running
// finish); every head before i is computed, and the exception of the smallest failed index is
// rethrown on the calling thread (the error a one-thread run would have raised first).
#include <functional>

namespace tierlab {

class Recomputer;

// The number of threads for_each_head would use for n heads on backend (1: one at a time).
int head_threads(int n, const Recomputer& backend);

// The most heads the calling thread's for_each_head runs side by side (0, the default: as many
// as its OpenMP threads). `tierlab run --jobs N` sets cores / N in each job's thread, so that N
// jobs hold about as many heads at once as there are cores. It leaves the job's OpenMP thread
// count alone: products that Eigen splits over threads outside a head sum in an order that
// depends on that count, and the tables must not depend on N.
void limit_head_threads(int n);

void for_each_head(int n, const Recomputer& backend, const std::function<void(int)>& body);

}  // namespace tierlab
