#include "model/base/allocator_policy.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tierlab {

namespace {
bool policy_in_force = false;  // set by keep_freed_buffers (main's thread, before the work starts)
}  // namespace

bool keep_freed_buffers() {
#if defined(__GLIBC__)
  policy_in_force = false;
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc.")) return false;
  if (const char* a = std::getenv("TIERLAB_ALLOCATOR"); a && std::strcmp(a, "system") == 0) return false;
  // 32 MiB: the largest mapping threshold glibc accepts on 64-bit systems (larger blocks are
  // still mapped and returned); setting it also fixes it (no more raising on the fly).
  const bool mmap_set = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1;
  const bool trim_set = mallopt(M_TRIM_THRESHOLD, static_cast<int>(2147483647)) == 1;  // about 2 GiB (an int)
  policy_in_force = mmap_set && trim_set;
  return policy_in_force;
#else
  return false;
#endif
}

bool release_freed_buffers() {
#if defined(__GLIBC__)
  return policy_in_force && malloc_trim(0) == 1;
#else
  return false;
#endif
}

}  // namespace tierlab
