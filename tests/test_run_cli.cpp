// `tierlab run` with several scenario files through the built binary: each scenario's
// folder under --out, the combined summary.md, and validation of every file before any work.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

using namespace std::string_literals;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string scenario(const std::string& name, int seed) {
  return "name: " + name + "\n"
         "traces:\n"
         "  synthetic:\n"
         "    presets: [tiny]\n"
         "    seeds: [" + std::to_string(seed) + ", " + std::to_string(seed + 1) + "]\n"
         "    overrides: {n_layers: 1}\n"
         "budgets: [2]\n"
         "backend: cpu\n"
         "bootstrap: 100\n";
}

// Runs build/tierlab with `args` (paths hold no quotes); returns the exit status.
int run(const std::string& args, const fs::path& log, const std::string& prefix = "") {
  const std::string cmd = prefix + "'"s + TIERLAB_BINARY_DIR + "/tierlab' " + args + " > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_CASE("tierlab run with several scenarios writes one folder each and a combined summary") {
  const fs::path d = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_out";
  fs::remove_all(d);
  fs::create_directories(d);
  write(d / "a.yaml", scenario("alpha", 0));
  write(d / "b.yaml", scenario("beta", 5));
  const fs::path out = d / "out";
  REQUIRE(run("run '" + (d / "a.yaml").string() + "' '" + (d / "b.yaml").string() + "' --out '" + out.string() + "'",
              d / "log.txt") == 0);
  for (const char* name : {"alpha", "beta"}) {
    CHECK(fs::exists(out / name / "summary.md"));
    CHECK(fs::exists(out / name / "tables" / "cells.csv"));
    CHECK(fs::exists(out / name / "figures" / "interior_vs_dominated.png"));
  }
  const std::string index = slurp(out / "summary.md");
  CHECK(index.find("## alpha") != std::string::npos);
  CHECK(index.find("## beta") != std::string::npos);
  // Each scenario's own findings are carried over, not only the headings.
  const std::string alpha = slurp(out / "alpha" / "summary.md");
  const auto row = alpha.find("\n| 2 | ");  // the per-head A at B = 2, with its numbers
  REQUIRE(row != std::string::npos);
  const std::string line = alpha.substr(row + 1, alpha.find('\n', row + 1) - row - 1);
  CHECK(line.size() > 12);
  CHECK(index.find(line) != std::string::npos);

  // `tierlab figure` on the multi-scenario folder re-renders every scenario's figures.
  for (const char* name : {"alpha", "beta"}) fs::remove_all(out / name / "figures");
  REQUIRE(run("figure '" + out.string() + "'", d / "figure.txt") == 0);
  CHECK(slurp(d / "figure.txt").find("a multi-scenario run; rendering its 2 scenarios") != std::string::npos);
  for (const char* name : {"alpha", "beta"}) CHECK(fs::exists(out / name / "figures" / "interior_vs_dominated.svg"));
}

TEST_CASE("tierlab run checks every scenario file before computing anything") {
  const fs::path d = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_bad";
  fs::remove_all(d);
  fs::create_directories(d);
  write(d / "a.yaml", scenario("alpha", 0));
  write(d / "b.yaml", scenario("beta", 0) + "budgets_typo: [3]\n");
  const fs::path out = d / "out";
  CHECK(run("run '" + (d / "a.yaml").string() + "' '" + (d / "b.yaml").string() + "' --out '" + out.string() + "'",
            d / "log.txt") != 0);
  const std::string log = slurp(d / "log.txt");
  CHECK(log.find("b.yaml:10") != std::string::npos);
  CHECK(log.find("budgets_typo") != std::string::npos);
  CHECK_FALSE(fs::exists(out / "alpha"));
}

TEST_CASE("On a terminal, tierlab run shows where a long cell is: its analysis and heads done of the cell's heads",
          "[progress]") {
  if (std::system("command -v script > /dev/null 2>&1") != 0) {
    WARN("skipped: util-linux 'script' (a pseudo-terminal) is not installed");
    return;
  }
  const fs::path d = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_progress";
  fs::remove_all(d);
  fs::create_directories(d);
  write(d / "s.yaml", "name: progress\n"
                      "traces:\n"
                      "  synthetic:\n"
                      "    presets: [tiny]\n"
                      "    seeds: [0]\n"
                      "    context_lengths: [256]\n"
                      "    overrides: {n_layers: 2, n_kv_heads: 3, obs_window: 8, decode_steps: 16}\n"
                      "budgets: [2]\n"
                      "backend: cpu\n"
                      "bootstrap: 100\n");
  // `script` runs the tool on a pseudo-terminal (stderr a tty), its output copied to the log.
  const std::string cmd = "script -qec \"'"s + TIERLAB_BINARY_DIR + "/tierlab' run '" + (d / "s.yaml").string() +
                          "' --out '" + (d / "out").string() + "'\" /dev/null > '" + (d / "log.txt").string() +
                          "' 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string log = slurp(d / "log.txt");
  CHECK(log.find("cell tiny-s0-T256: interior: heads") != std::string::npos);
  // Without a terminal (a pipe, a log file) there is no progress line at all.
  REQUIRE(run("run '" + (d / "s.yaml").string() + "' --out '" + (d / "out2").string() + "'", d / "log2.txt") == 0);
  CHECK(slurp(d / "log2.txt").find("interior: heads") == std::string::npos);
}

TEST_CASE("A run whose dominated share is the same in every cell says rho is not defined and never writes nan") {
  // The zoo's 4-layer model: no head's 2-bit tier is dominated, so the share is 0 in every
  // cell and a rank correlation across cells does not exist (it used to read "= nan [nan, nan]").
  const fs::path dir = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_constant_share";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write(dir / "zoo.yaml", "name: zoo-constant\n"
                          "traces:\n"
                          "  model:\n"
                          "    checkpoint: "s + TIERLAB_SOURCE_DIR + "/data/zoo/kjv-l4-mha-d16/kjv-l4-mha-d16.bin\n"
                          "    seeds: [0, 1, 2, 3, 4]\n"
                          "    context_lengths: [64]\n"
                          "    decode_steps: 8\n"
                          "ladder: evict,kivi1,kivi2,kivi4,kivi8,exact\n"
                          "budgets: [2]\n"
                          "backend: cpu\n"
                          "bootstrap: 100\n");
  REQUIRE(run("run '" + (dir / "zoo.yaml").string() + "' --out '" + (dir / "out").string() + "'", dir / "log") == 0);
  const std::string summary = slurp(dir / "out" / "summary.md");
  INFO(summary);
  CHECK(summary.find("cannot be tested here: the dominated share is 0 in every cell") != std::string::npos);
  CHECK(summary.find("not defined") != std::string::npos);
  CHECK_FALSE(std::regex_search(summary, std::regex(R"(\b-?(nan|inf)\b)", std::regex::icase)));
}

TEST_CASE("SIGTERM stops a run within seconds even while it generates a large synthetic trace, and is named") {
  // A Llama-3.1-8B-shaped cell at T = 32768: its trace (13 GB) takes minutes to generate; the
  // generation used to ignore the stop request until it was written.
  const fs::path dir = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_sigterm";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write(dir / "big.yaml", "name: big\n"
                          "traces:\n"
                          "  synthetic:\n"
                          "    presets: [llama-3.1-8b]\n"
                          "    seeds: [0]\n"
                          "    context_lengths: [32768]\n"
                          "budgets: [2]\n"
                          "backend: cpu\n"
                          "bootstrap: 100\n");
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run("run '" + (dir / "big.yaml").string() + "' --out '" + (dir / "out").string() + "'", dir / "log", "timeout --preserve-status -s TERM 3 ");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = slurp(dir / "log");
  INFO(log);
  CHECK(rc == 2);
  CHECK(seconds < 20);
  CHECK(log.find("interrupted by SIGTERM") != std::string::npos);
  // No temporary trace left behind.
  std::size_t left = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "out"))
    if (e.path().string().find(".tmp-") != std::string::npos) ++left;
  CHECK(left == 0);
}

TEST_CASE("An option given an empty value is a usage error naming the option, never read as 0") {
  const fs::path dir = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_empty_value";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // solve --budget '' used to solve at B = 0.
  CHECK(run("synth --preset tiny -o '" + (dir / "t.safetensors").string() + "'", dir / "synth.log") == 0);
  CHECK(run("solve '" + (dir / "t.safetensors").string() + "' --budget ''", dir / "log") == 2);
  CHECK(slurp(dir / "log").find("--budget: an empty value is not a value") != std::string::npos);
  CHECK(run("synth --preset tiny --seed '' -o '" + (dir / "u.safetensors").string() + "'", dir / "log2") == 2);
  CHECK(slurp(dir / "log2").find("--seed") != std::string::npos);
}

TEST_CASE("Each of --jobs N cells runs at most cores / N heads side by side, and the tables do not depend on N") {
  const fs::path d = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_jobs";
  fs::remove_all(d);
  fs::create_directories(d);
  write(d / "s.yaml", "name: jobs\ntraces:\n  synthetic:\n    presets: [tiny]\n    seeds: [0, 1]\n"
                      "    overrides: {n_layers: 4, n_kv_heads: 16}\nbudgets: [2]\nbackend: cpu\nbootstrap: 100\n");
  // The threads that computed a cell's heads side by side (phases.threads), in each cell file.
  auto threads_of = [&](const fs::path& out) {
    std::vector<int> t;
    for (const auto& e : fs::directory_iterator(out / "cells"))
      if (e.path().extension() == ".json") t.push_back(nlohmann::json::parse(slurp(e.path()))["phases"]["threads"].get<int>());
    return t;
  };
  // The machine's cores as OpenMP counts them, from a one-job run with OMP_NUM_THREADS unset
  // (64 heads: at most 64 side by side, more than the machines this runs on have cores).
  REQUIRE(run("run '" + (d / "s.yaml").string() + "' --out '" + (d / "one").string() + "'", d / "log1",
              "env -u OMP_NUM_THREADS ") == 0);
  const std::vector<int> one = threads_of(d / "one");
  REQUIRE(one.size() == 2);
  const int cores = one[0];
  REQUIRE(run("run '" + (d / "s.yaml").string() + "' --out '" + (d / "two").string() + "' --jobs 2", d / "log2",
              "env -u OMP_NUM_THREADS ") == 0);
  for (int t : threads_of(d / "two")) CHECK(t == std::max(1, cores / 2));
  REQUIRE(run("run '" + (d / "s.yaml").string() + "' --out '" + (d / "set").string() + "' --jobs 2", d / "log3",
              "OMP_NUM_THREADS=4 ") == 0);
  for (int t : threads_of(d / "set")) CHECK(t == 2);
  // The numbers do not depend on it: every table the same.
  for (const char* other : {"two", "set"})
    for (const auto& e : fs::directory_iterator(d / "one" / "tables"))
      if (e.is_regular_file()) CHECK(slurp(e.path()) == slurp(d / other / "tables" / e.path().filename()));
}

TEST_CASE("OMP_NUM_THREADS=1 and 2 give every table the same bits, the channel-variance analysis's key covariance "
          "(a product Eigen would split over threads) included") {
  const fs::path d = fs::path(TIERLAB_BINARY_DIR) / "test_run_cli_eigen_threads";
  fs::remove_all(d);
  fs::create_directories(d);
  write(d / "s.yaml", "name: eigen-threads\ntraces:\n  synthetic:\n    presets: [llama-like]\n    seeds: [0]\n"
                      "    context_lengths: [512]\n    overrides: {n_layers: 1, n_kv_heads: 4}\n"
                      "budgets: [2]\nbackend: cpu\nbootstrap: 100\nchannel_variance: {}\n");
  for (const char* t : {"1", "2"})
    REQUIRE(run("run '" + (d / "s.yaml").string() + "' --out '" + (d / t).string() + "'", d / (std::string("log") + t),
                std::string("OMP_NUM_THREADS=") + t + " ") == 0);
  int compared = 0;
  for (const auto& e : fs::directory_iterator(d / "1" / "tables"))
    if (e.is_regular_file()) {
      CHECK(slurp(e.path()) == slurp(d / "2" / "tables" / e.path().filename()));
      ++compared;
    }
  CHECK(fs::exists(d / "1" / "tables" / "channel_variance.csv"));
  CHECK(compared >= 3);
}
