#pragma once
// Wall-clock timing for reports (steady clock, seconds as a double).
#include <chrono>

namespace tierlab {

// Seconds elapsed since t0.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace tierlab
