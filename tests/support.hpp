#pragma once
// Helpers shared by the test files (not production code).
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace tierlab::testing {

// A fresh directory under the build tree, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    namespace fs = std::filesystem;
    fs::create_directories(fs::path(TIERLAB_BINARY_DIR) / "test-tmp");
    std::string tmpl = (fs::path(TIERLAB_BINARY_DIR) / "test-tmp" / (tag + "-XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// A TempDir of this test process, made on first use (inside a test case) and removed at
// exit (one per process: the first call names it): for the files a test file's helpers write
// outside any one test's scope.
inline const TempDir& process_dir(const std::string& tag) {
  static const TempDir dir(tag);
  return dir;
}

// The message of the exception of type E that f() throws; fails the test otherwise.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected another exception type, got: " << e.what());
  }
  FAIL("expected an exception, nothing was thrown");
  return {};
}

// The whole content of the file at path, byte for byte; empty when it cannot be opened.
inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tierlab::testing

#include <cstdint>
#include <vector>

#include "solvers/mckp.hpp"

namespace tierlab::testing {

// A knapsack instance that owns its costs (item-major N x m), for the solver tests.
struct OwnedInstance {
  std::vector<double> rates;
  std::vector<double> costs;  // item-major
  std::int64_t n = 0;
  double budget = 0;
  MckpInstance view() const {
    return MckpInstance{rates, CostView::item_major(costs.data(), n, static_cast<int>(rates.size())), budget};
  }
};

}  // namespace tierlab::testing
