// Time and work by phase (phases.hpp).
#include "model/base/phases.hpp"

#include <algorithm>

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

bool phase_open() { return depth > 0; }

PhaseTotals phase_totals_since(const PhaseTotals& before) {
  PhaseTotals d;
  d.threads = totals.threads;
  for (std::size_t k = 0; k < static_cast<std::size_t>(kPhases); ++k) {
    d.seconds[k] = totals.seconds[k] - before.seconds[k];
    d.flops[k] = totals.flops[k] - before.flops[k];
    d.bytes[k] = totals.bytes[k] - before.bytes[k];
  }
  return d;
}

void add_phase_totals(PhaseTotals& to, const PhaseTotals& from) {
  to.threads = std::max(to.threads, from.threads);
  for (std::size_t k = 0; k < static_cast<std::size_t>(kPhases); ++k) {
    to.seconds[k] += from.seconds[k];
    to.flops[k] += from.flops[k];
    to.bytes[k] += from.bytes[k];
  }
}

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
