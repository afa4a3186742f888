#pragma once
// Time and work by phase of a computation (docs/performance.md, "Where a paper-scale cell's
// time goes"): generation of a synthetic trace, surrogate costs, solves, recomputation, and
// tables. Each phase's wall time is added by a PhaseScope on the thread that opened it; a scope
// opened while another is open on the same thread adds nothing (the outer phase holds the
// time), so the totals never count a second twice. Work -- floating-point operations of the
// dense products and bytes read or written -- is counted by the code that knows the shapes
// (add_phase_work), for the phase open at that moment. The totals are per thread: a cell runs on
// one thread (its OpenMP teams work inside the phases of that thread), except where its heads
// run side by side, whose threads' totals are merged into the cell's thread.
#include <array>
#include <chrono>
#include <string_view>

namespace tierlab {

enum class Phase { Generate, Surrogate, Solve, Recompute, Tables };
inline constexpr int kPhases = 5;
std::string_view to_string(Phase);  // "generate" | "surrogate" | "solve" | "recompute" | "tables"

struct PhaseTotals {
  std::array<double, kPhases> seconds{}, flops{}, bytes{};
  // The most threads that computed side by side and merged their totals here (heads in
  // parallel): the seconds above are busy time summed over them.
  int threads = 1;
};

// This thread's totals since the last reset.
PhaseTotals& phase_totals();
void reset_phase_totals();

// For work split over threads (scenarios/pipeline/parallel_heads.hpp): whether a phase scope is
// open on this thread, this thread's additions since `before` (a copy of phase_totals() taken
// earlier), and one set of totals added to another. Merged seconds sum busy time over threads.
bool phase_open();
PhaseTotals phase_totals_since(const PhaseTotals& before);
void add_phase_totals(PhaseTotals& to, const PhaseTotals& from);

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
