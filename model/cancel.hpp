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

}  // namespace tierlab
