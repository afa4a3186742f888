// Every scenario file shipped under scenarios/files (the default set and paper/) parses
// and validates, and the default set is what `tierlab run` without arguments runs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "scenarios/scenario/scenario.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

TEST_CASE("the shipped scenario files are valid and their names are unique") {
  const fs::path root = fs::path(TIERLAB_SOURCE_DIR) / "scenarios/files";
  std::set<std::string> names;
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    Scenario s;
    REQUIRE_NOTHROW(s = load_scenario(e.path().string()));
    CHECK(!s.cells.empty());
    CHECK(!s.description.empty());
    CHECK(names.insert(s.name).second);  // out/<name> must not collide
    // Model cells point at the checkpoint shipped in data/.
    for (const auto& c : s.cells)
      if (c.source == "model") CHECK(fs::exists(c.checkpoint));
    ++n;
  }
  CHECK(n >= 8);
}
