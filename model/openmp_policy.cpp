#include "model/openmp_policy.hpp"

#include <unistd.h>

#include <cstdlib>

namespace tierlab {

void use_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  // The same executable, arguments and environment (plus the variable). /proc/self/exe is
  // this program even when argv[0] is a bare name found on PATH.
  execv("/proc/self/exe", argv);
  // Only reached when the restart failed: libgomp keeps the policy it read at load time.
}

}  // namespace tierlab
