#pragma once
// Time and work by phase of a computation (docs/performance.md, "Where a paper-scale cell's
// time goes"): generation of a synthetic trace, surrogate costs, solves, recomputation, and
// tables. Each phase's wall time is added by a PhaseScope on the thread that opened it; a scope
// opened while another is open on the same thread adds nothing (the outer phase holds the
// time), so the totals never count a second twice. Work -- floating-point operations of the
// dense products and bytes read or written -- is counted by the code that knows the shapes
// (add_phase_work), for the phase open at that moment. The totals are per thread: a cell runs on
// one thread (its OpenMP teams work inside the phases of that thread).
#include <array>
#include <chrono>
#include <string_view>

namespace tierlab {

enum class Phase { Generate, Surrogate, Solve, Recompute, Tables };
inline constexpr int kPhases = 5;
std::string_view to_string(Phase);  // "generate" | "surrogate" | "solve" | "recompute" | "tables"

struct PhaseTotals {
  std::array<double, kPhases> seconds{}, flops{}, bytes{};
};

// This thread's totals since the last reset.
PhaseTotals& phase_totals();
void reset_phase_totals();

class PhaseScope {
 public:
  explicit PhaseScope(Phase p);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase phase_;
  bool outermost_;
  std::chrono::steady_clock::time_point t0_;
};

// Work of `phase` (counted whether or not a scope of it is open: the shapes are known where the
// work is done).
void add_phase_work(Phase phase, double flops, double bytes);

}  // namespace tierlab
