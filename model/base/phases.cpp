// Time and work by phase (phases.hpp).
#include "model/base/phases.hpp"

namespace tierlab {

namespace {
thread_local PhaseTotals totals;
thread_local int depth = 0;
}  // namespace

std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::Generate: return "generate";
    case Phase::Surrogate: return "surrogate";
    case Phase::Solve: return "solve";
    case Phase::Recompute: return "recompute";
    case Phase::Tables: return "tables";
  }
  return "?";
}

PhaseTotals& phase_totals() { return totals; }
void reset_phase_totals() { totals = PhaseTotals{}; }

PhaseScope::PhaseScope(Phase p) : phase_(p), outermost_(depth++ == 0), t0_(std::chrono::steady_clock::now()) {}

PhaseScope::~PhaseScope() {
  --depth;
  if (outermost_)
    totals.seconds[static_cast<std::size_t>(phase_)] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void add_phase_work(Phase phase, double flops, double bytes) {
  totals.flops[static_cast<std::size_t>(phase)] += flops;
  totals.bytes[static_cast<std::size_t>(phase)] += bytes;
}

}  // namespace tierlab
