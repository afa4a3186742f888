#pragma once
// Long work (a scenario run, a trace evaluation, an explorer view) reports its progress and
// can be cancelled, through one type each, at every layer:
//   Progress      progress(done, total): `done` of `total` units (heads, cells, budgets)
//   Cancelled     thrown by the work when its cancel flag (std::atomic<bool>, owned by the
//                 caller: the SIGINT handler of `tierlab run`, the explorer's newer request)
//                 is set; the caller catches it, keeps what finished and reports the stop.
#include <atomic>
#include <exception>
#include <functional>

namespace tierlab {

using Progress = std::function<void(int done, int total)>;

struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};

inline void throw_if_cancelled(const std::atomic<bool>* flag) {
  if (flag && flag->load()) throw Cancelled();
}

// The cancel flag of the work running on the calling thread, for loops deep inside it that no
// flag reaches as an argument: the CPU backend's tiles and selections (gpu/cpu_recompute.cpp)
// and the surrogate's query chunks (model/surrogate.cpp), so that Ctrl-C in a Python call
// stops a single long head within a fraction of a second, not after it (issue 33). A
// CancelScope sets it for its lifetime (the Python module's call_released does, and each
// worker of a scenario run with the run's stop flag). It is per thread: code that starts
// threads reads it on the calling thread and passes it on (or opens a CancelScope of it in each
// thread). nullptr: none.
namespace cancel_detail {
inline thread_local const std::atomic<bool>* current_flag = nullptr;
}  // namespace cancel_detail
inline const std::atomic<bool>* current_cancel_flag() { return cancel_detail::current_flag; }
inline bool cancel_requested(const std::atomic<bool>* flag) {
  return flag && flag->load(std::memory_order_relaxed);
}

class CancelScope {
 public:
  explicit CancelScope(const std::atomic<bool>* flag) : previous_(cancel_detail::current_flag) {
    cancel_detail::current_flag = flag;
  }
  ~CancelScope() { cancel_detail::current_flag = previous_; }
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const std::atomic<bool>* previous_;
};

}  // namespace tierlab
