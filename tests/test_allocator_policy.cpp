// The allocator policy of tierlab's programs (model/base/allocator_policy.hpp): it keeps freed
// buffers in the heap unless the user has said how the allocator should behave.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

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
