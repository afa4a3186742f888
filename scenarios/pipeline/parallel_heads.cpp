// Heads side by side on one OpenMP team (parallel_heads.hpp).
#include "scenarios/pipeline/parallel_heads.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <exception>
#include <mutex>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "model/base/phases.hpp"

namespace tierlab {

namespace {
thread_local int head_thread_limit = 0;  // limit_head_threads; 0: none
}  // namespace

void limit_head_threads(int n) { head_thread_limit = std::max(0, n); }

int head_threads(int n, const Recomputer& backend) {
  if (n < 2 || !backend.concurrent_calls() || omp_in_parallel()) return 1;
  int threads = std::min(n, omp_get_max_threads());
  if (head_thread_limit > 0) threads = std::min(threads, head_thread_limit);
  return std::max(1, threads);
}

void for_each_head(int n, const Recomputer& backend, const std::function<void(int)>& body) {
  const int threads = head_threads(n, backend);
  if (threads == 1) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  const std::atomic<bool>* cancel = current_cancel_flag();
  const bool caller_in_phase = phase_open();
  std::atomic<int> next{0};
  std::atomic<int> first_failed{INT_MAX};
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  PhaseTotals others;  // the team's other threads' additions
  std::mutex merge;
#pragma omp parallel num_threads(threads)
  {
    const bool caller = omp_get_thread_num() == 0;  // the encountering thread is the team's 0
    // One thread per head, said to everything inside: OpenMP regions, the CPU backend and
    // Eigen's products (which size their blocking by omp_get_max_threads(): with 2 there, a
    // product inside the head would block for 2 threads, run on 1, and sum in another order
    // than in a run on one thread). The setting is this implicit task's and ends with it.
    omp_set_num_threads(1);
    CancelScope scope(cancel);
    const PhaseTotals before = phase_totals();
    for (;;) {
      const int i = next.fetch_add(1);
      if (i >= n || i > first_failed.load()) break;
      try {
        body(i);
      } catch (...) {
        errors[static_cast<std::size_t>(i)] = std::current_exception();
        int seen = first_failed.load();
        while (i < seen && !first_failed.compare_exchange_weak(seen, i)) {
        }
      }
    }
    if (!caller) {
      const PhaseTotals delta = phase_totals_since(before);
      std::lock_guard<std::mutex> lock(merge);
      add_phase_totals(others, delta);
    }
  }
  // The caller's own open phase, if any, already holds the wall time: only the work is added.
  if (caller_in_phase) others.seconds = {};
  others.threads = threads;
  add_phase_totals(phase_totals(), others);
  if (const int f = first_failed.load(); f != INT_MAX) std::rethrow_exception(errors[static_cast<std::size_t>(f)]);
}

}  // namespace tierlab
