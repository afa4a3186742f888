#include "model/base/openmp_policy.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include <Eigen/Core>

namespace tierlab {

namespace {

// The processes an MPI launcher started on this node (Open MPI, MPICH/Hydra, Slurm), or 0.
int ranks_on_this_node() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* v = std::getenv(name);
    if (v == nullptr) continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && *end == '\0' && n > 0 && n < 100000) return static_cast<int>(n);
  }
  return 0;
}

}  // namespace

void use_passive_openmp_wait(char** argv) {
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr)
    changed = setenv("OMP_WAIT_POLICY", "passive", 1) == 0;
  // Several ranks on one node share its cores: each gets its share of threads.
  const int local = ranks_on_this_node();
  if (local > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const unsigned share = std::max(1u, cores / static_cast<unsigned>(local));
    changed = setenv("OMP_NUM_THREADS", std::to_string(share).c_str(), 1) == 0 || changed;
  }
  if (!changed) return;
  // The same executable, arguments and environment (plus the variables). /proc/self/exe is
  // this program even when argv[0] is a bare name found on PATH.
  execv("/proc/self/exe", argv);
  // Only reached when the restart failed: libgomp keeps the policy it read at load time.
}

void same_bits_on_any_thread_count() { Eigen::setNbThreads(1); }

}  // namespace tierlab
