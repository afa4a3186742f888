// The scenario runner: atomic per-cell files, resume, --force, SIGINT, determinism.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "tests/support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {
const char* kTiny =
    "name: tiny-run\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [0, 1, 2]\n"
    "    overrides: {n_layers: 1}\n"
    "budgets: [2, 4]\n"
    "backend: cpu\n"
    "bootstrap: 100\n";

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fresh_dir(const std::string& name) {
  const std::string d = tierlab::testing::process_dir("runner").file(name);
  fs::remove_all(d);
  return d;
}

int files_in(const std::string& d) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(d)) n += e.is_regular_file() ? 1 : 0;
  return n;
}
}  // namespace

TEST_CASE("a run writes one cell file per cell, a rerun skips them, --force recomputes") {
  const Scenario s = parse_scenario(kTiny, "tiny.yaml");
  RunOptions opt;
  opt.out = fresh_dir("resume");
  opt.progress = false;
  int computed = 0;
  opt.on_cell = [&](const std::string&, bool c) { computed += c ? 1 : 0; };
  RunResult r = run_scenario(s, opt);
  CHECK(r.cells_computed == 3);
  CHECK(computed == 3);
  CHECK(r.tables_written);
  CHECK(files_in(opt.out + "/cells") == 3);  // no temporary files left
  const nlohmann::json c = nlohmann::json::parse(slurp(cell_path(opt.out, s.cells[0])));
  CHECK(c["id"] == "tiny-s0-T64");
  CHECK(c["budgets"].size() == 2);
  CHECK(c["n_heads"] == 2);
  CHECK(fs::exists(opt.out + "/tables/cells.csv"));
  CHECK(fs::exists(opt.out + "/tables/interior.json"));
  CHECK(fs::exists(opt.out + "/summary.md"));
  const std::string table = slurp(opt.out + "/tables/cells.csv");

  computed = 0;
  r = run_scenario(s, opt);
  CHECK(r.cells_computed == 0);
  CHECK(r.cells_skipped == 3);
  CHECK(computed == 0);
  CHECK(slurp(opt.out + "/tables/cells.csv") == table);

  opt.force = true;
  r = run_scenario(s, opt);
  CHECK(r.cells_computed == 3);
  CHECK(computed == 3);
  CHECK(slurp(opt.out + "/tables/cells.csv") == table);  // deterministic

  // A finished cell removed: only it is recomputed.
  opt.force = false;
  computed = 0;
  fs::remove(cell_path(opt.out, s.cells[1]));
  r = run_scenario(s, opt);
  CHECK(r.cells_computed == 1);
  CHECK(r.cells_skipped == 2);
  CHECK(slurp(opt.out + "/tables/cells.csv") == table);
}

TEST_CASE("SIGINT keeps the finished cells and writes no partial file") {
  const Scenario s = parse_scenario(kTiny, "tiny.yaml");
  RunOptions opt;
  opt.out = fresh_dir("sigint");
  opt.progress = false;
  opt.on_cell = [&](const std::string&, bool c) {
    if (c) std::raise(SIGINT);  // Ctrl-C after the first cell
  };
  RunResult r = run_scenario(s, opt);
  CHECK(r.interrupted);
  CHECK(r.cells_computed == 1);
  CHECK_FALSE(r.tables_written);
  CHECK(files_in(opt.out + "/cells") == 1);
  CHECK_FALSE(fs::exists(opt.out + "/tables/cells.csv"));
  // Resume: the two missing cells are computed, the first is kept.
  opt.on_cell = {};
  r = run_scenario(s, opt);
  CHECK_FALSE(r.interrupted);
  CHECK(r.cells_computed == 2);
  CHECK(r.cells_skipped == 1);
  CHECK(r.tables_written);
}

TEST_CASE("two jobs give the same tables as one") {
  const Scenario s = parse_scenario(kTiny, "tiny.yaml");
  RunOptions a, b;
  a.out = fresh_dir("jobs1");
  b.out = fresh_dir("jobs2");
  a.progress = b.progress = false;
  b.jobs = 2;
  run_scenario(s, a);
  run_scenario(s, b);
  CHECK(slurp(a.out + "/tables/cells.csv") == slurp(b.out + "/tables/cells.csv"));
  CHECK(slurp(a.out + "/tables/heads.csv") == slurp(b.out + "/tables/heads.csv"));
}
