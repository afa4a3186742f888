#include "scenarios/run/launch.hpp"

#include <cstdlib>
#include <string>

namespace tierlab {

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 && n < 1000000000 ? static_cast<int>(n) : 0;
}

}  // namespace

int launched_ranks() {
  if (const int n = env_int("OMPI_COMM_WORLD_SIZE")) return n;
  if (const int n = env_int("PMI_SIZE")) return n;
  if (std::getenv("PMIX_RANK") != nullptr) {
    if (const int n = env_int("SLURM_NTASKS")) return n;
    if (const int n = env_int("SLURM_NPROCS")) return n;
    return 2;  // started by a PMIx launcher that does not say how many: treat as several
  }
  return 0;
}

bool built_with_mpi() {
#ifdef TIERLAB_HAVE_MPI
  return true;
#else
  return false;
#endif
}

}  // namespace tierlab
