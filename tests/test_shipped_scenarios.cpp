// Every scenario file shipped under scenarios/files (the default set and paper/) parses
// and validates, and the default set is what `tierlab run` without arguments runs.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "scenarios/analyses/claims.hpp"
#include "scenarios/run/runner.hpp"
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
    // A claim scenario's variations (robustness, dose-responses, trained models) are valid too.
    std::vector<Scenario> variations;
    REQUIRE_NOTHROW(variations = claim_variations(s));
    for (const Scenario& v : variations) {
      CHECK(!v.cells.empty());
      CHECK(names.insert(v.name).second);
      for (const auto& c : v.cells)
        if (c.source == "model") CHECK(fs::exists(c.checkpoint));
    }
    // Model cells point at the checkpoint shipped in data/.
    for (const auto& c : s.cells)
      if (c.source == "model") CHECK(fs::exists(c.checkpoint));
    ++n;
  }
  CHECK(n >= 8);
}

TEST_CASE("the slices of paper/01 are cells of the full file: same ids and cell hashes, so their cells resume it") {
  const fs::path dir = fs::path(TIERLAB_SOURCE_DIR) / "scenarios/files/paper";
  const Scenario full = load_scenario((dir / "01-interior-paper.yaml").string());
  ContentHashes hashes;
  std::map<std::string, std::string> by_id;
  for (const auto& c : full.cells) by_id[c.id] = cell_hash(full, c, hashes);
  CHECK(by_id.size() == 36);
  std::vector<fs::path> slices;  // every 01-interior-paper-*.yaml beside the full file
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.rfind("01-interior-paper-", 0) == 0 && e.path().extension() == ".yaml") slices.push_back(e.path());
  }
  CHECK(slices.size() >= 3);
  for (const auto& slice : slices) {
    INFO(slice.string());
    const Scenario s = load_scenario(slice.string());
    CHECK(s.cells.size() < full.cells.size());
    for (const auto& c : s.cells) {
      INFO(c.id);
      REQUIRE(by_id.count(c.id) == 1);
      CHECK(cell_hash(s, c, hashes) == by_id[c.id]);
    }
  }
}
