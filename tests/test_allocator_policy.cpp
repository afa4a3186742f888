// The allocator policy of tierlab's programs (model/base/allocator_policy.hpp): it keeps freed
// buffers in the heap unless the user has said how the allocator should behave.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/base/allocator_policy.hpp"

using namespace tierlab;

namespace {

// Sets (or, with nullptr, unsets) an environment variable for the scope, restoring it after.
struct EnvScope {
  std::string name;
  bool had = false;
  std::string old;
  EnvScope(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) had = true, old = v;
    if (value) ::setenv(n, value, 1);
    else ::unsetenv(n);
  }
  ~EnvScope() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("the allocator policy leaves a user's own allocator settings alone") {
  {
    const EnvScope a("TIERLAB_ALLOCATOR", "system"), t("GLIBC_TUNABLES", nullptr);
    CHECK_FALSE(keep_freed_buffers());
  }
  {
    const EnvScope a("TIERLAB_ALLOCATOR", nullptr), t("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1048576");
    CHECK_FALSE(keep_freed_buffers());
  }
#if defined(__GLIBC__)
  {  // another library's tunables only: the policy applies
    const EnvScope a("TIERLAB_ALLOCATOR", nullptr), t("GLIBC_TUNABLES", "glibc.pthread.rseq=0");
    CHECK(keep_freed_buffers());
  }
  {
    const EnvScope a("TIERLAB_ALLOCATOR", nullptr), t("GLIBC_TUNABLES", nullptr);
    CHECK(keep_freed_buffers());
  }
#endif
}

namespace {
// This process's resident memory in kB (/proc/self/status, VmRSS); -1 where there is none.
long resident_kb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmRSS:", 6) == 0) kb = std::strtol(line + 6, nullptr, 10);
  std::fclose(f);
  return kb;
}
}  // namespace

TEST_CASE("with the policy in force, freed buffers stay resident until release_freed_buffers gives them back") {
#if defined(__GLIBC__)
  const EnvScope a("TIERLAB_ALLOCATOR", nullptr), t("GLIBC_TUNABLES", nullptr);
  REQUIRE(keep_freed_buffers());
  if (resident_kb() < 0) {
    WARN("SKIPPED: no /proc/self/status here to read the resident memory from");
    return;
  }
  // 16 buffers of 4 MiB (below the 32 MiB mapping threshold: heap memory), written so that
  // their pages are resident, then freed in an order that leaves holes, the last one kept so
  // that the top of the heap is in use.
  constexpr std::size_t kMiB = 1024 * 1024;
  std::vector<char*> bufs;
  for (int i = 0; i < 16; ++i) {
    bufs.push_back(static_cast<char*>(std::malloc(4 * kMiB)));
    REQUIRE(bufs.back() != nullptr);
    std::memset(bufs.back(), 1 + i, 4 * kMiB);
  }
  char* top = static_cast<char*>(std::malloc(64 * 1024));
  const long full = resident_kb();
  for (char* b : bufs) std::free(b);
  const long freed = resident_kb();
  CHECK(freed > full - 16 * 1024);  // kept: less than 16 MiB of the 64 went back
  CHECK(release_freed_buffers());
  const long released = resident_kb();
  CHECK(released < freed - 48 * 1024);  // at least 48 of the 64 MiB given back
  std::free(top);
#else
  WARN("SKIPPED: the policy is glibc's (mallopt, malloc_trim)");
#endif
}

TEST_CASE("release_freed_buffers does nothing when the user's allocator settings are in force") {
  const EnvScope a("TIERLAB_ALLOCATOR", "system"), t("GLIBC_TUNABLES", nullptr);
  REQUIRE_FALSE(keep_freed_buffers());
  CHECK_FALSE(release_freed_buffers());
}
