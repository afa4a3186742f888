// `tierlab run` beyond one process (docs/cluster.md): as shards of a job array (--shard I/N)
// and under MPI (mpirun -n N; built when Open MPI was found: TIERLAB_HAVE_MPI). The reference
// is the same scenario run as one process: every mode must write the same tables, byte for
// byte, and a killed shard or rank must lose only its unfinished cells.
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using namespace tierlab::testing;
namespace fs = std::filesystem;

namespace {

const std::string kTierlab = std::string(TIERLAB_BINARY_DIR) + "/tierlab";

// Six cells of two sizes (a few tenths of a second in all), with the rate-distortion curve
// analysis on two of them (its tables once held timings and temporary paths).
const char* kSmall =
    "name: cluster-small\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [0, 1, 2]\n"
    "    context_lengths: [48, 96]\n"
    "    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
    "budgets: [2, 4]\n"
    "backend: cpu\n"
    "bootstrap: 100\n"
    "rd_curve:\n"
    "  budgets: 0:8:1\n"
    "  cells: [tiny-s0-T48, tiny-s1-T96]\n";

// Eight cells of about 1.4 s each on one core (T = 8192; measured 2026-12-05): long enough to
// kill a process in the middle. At T = 1536 a cell took 0.3 s once the recomputation got
// faster, and on CI all eight were on disk before the SIGINT to mpirun had stopped its ranks.
const char* kSlow =
    "name: cluster-slow\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [0, 1, 2, 3, 4, 5, 6, 7]\n"
    "    context_lengths: [8192]\n"
    "    overrides: {n_layers: 2, n_kv_heads: 2, head_dim: 32, obs_window: 16, decode_steps: 64}\n"
    "budgets: [2, 3, 4]\n"
    "backend: cpu\n"
    "bootstrap: 100\n";

std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string p = dir.file(name);
  std::ofstream(p) << text;
  return p;
}

// Runs a shell command; returns its exit status, its stdout in out (stderr appended).
int shell(const std::string& cmd, std::string& out) {
  const std::string file = std::string(TIERLAB_BINARY_DIR) + "/test-tmp/cluster-out-" + std::to_string(::getpid());
  const int rc = std::system(("(" + cmd + ") > '" + file + "' 2>&1").c_str());
  out = slurp(file);
  fs::remove(file);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

std::string q(const std::string& s) { return "'" + s + "'"; }

std::map<std::string, std::string> tables(const fs::path& dir) {
  std::map<std::string, std::string> out;
  if (!fs::exists(dir / "tables")) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir / "tables"))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = slurp(e.path().string());
  return out;
}

std::set<std::string> cell_files(const fs::path& dir) {
  std::set<std::string> out;
  if (!fs::exists(dir / "cells")) return out;
  for (const auto& e : fs::directory_iterator(dir / "cells"))
    if (e.path().extension() == ".json") out.insert(e.path().stem().string());
  return out;
}

// Temporary files and work folders left under dir.
std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos || name == "traces" || name.find(".damaged") != std::string::npos)
      out.push_back(e.path().string());
  }
  return out;
}

// "cells: C computed, F already finished" of the tool's output (summed over its lines).
std::pair<int, int> computed_finished(const std::string& out) {
  static const std::regex re("cells: ([0-9]+) computed, ([0-9]+) already finished");
  int c = 0, f = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    c += std::stoi((*it)[1]), f += std::stoi((*it)[2]);
  return {c, f};
}

// Starts a command line in its own process group; returns the group's leader.
pid_t spawn(const std::string& cmd) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setpgid(0, 0);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits until dir/cells holds at least n cell files (or the process ended); false on timeout.
bool wait_for_cells(const fs::path& dir, std::size_t n, pid_t pid, double timeout_s = 120) {
  const auto t0 = std::chrono::steady_clock::now();
  while (cell_files(dir).size() < n) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Waits up to timeout_s for pid to end (its exit status in status); false if it has not.
bool wait_at_most(pid_t pid, int& status, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

#ifdef TIERLAB_TEST_MPIRUN
const std::string kMpirun = std::string(TIERLAB_TEST_MPIRUN) + " --allow-run-as-root --oversubscribe";

// The pid of the tierlab process that is MPI rank `rank` of a run into `out` (from /proc), or 0.
pid_t rank_pid(int rank, const std::string& out) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = slurp((e.path() / "cmdline").string());
    if (cmdline.find(out) == std::string::npos || cmdline.find("tierlab") == std::string::npos ||
        cmdline.find("mpirun") != std::string::npos)
      continue;
    std::string env = slurp((e.path() / "environ").string());
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (env.find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos) return std::stoi(name);
  }
  return 0;
}
#endif

}  // namespace

TEST_CASE("Shards of a run compute disjoint shares that cover every cell, the same assignment on every call",
          "[cluster]") {
  TempDir dir("cluster-assign");
  const Scenario sc = parse_scenario(kSlow, dir.file("s.yaml"));
  for (int n : {1, 2, 3, 5, 8, 11}) {
    const std::vector<int> a = shard_assignment(sc, n), b = shard_assignment(sc, n);
    CHECK(a == b);
    std::vector<int> per(static_cast<std::size_t>(n), 0);
    for (int s : a) {
      REQUIRE(s >= 0);
      REQUIRE(s < n);
      ++per[static_cast<std::size_t>(s)];
    }
    // Equal-cost cells: the counts differ by at most one.
    CHECK(*std::max_element(per.begin(), per.end()) - *std::min_element(per.begin(), per.end()) <= 1);
  }
  CHECK(parse_shard("2/8").index == 2);
  CHECK(parse_shard("2/8").count == 8);
  for (const char* bad : {"0/3", "4/3", "3", "a/b", "1/0", "-1/2", "1/2/3"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_shard(bad), Catch::Contains("--shard is '" + std::string(bad) + "'"));
  }
}

TEST_CASE("Larger cells are computed first: the cells by decreasing estimated cost", "[cluster]") {
  TempDir dir("cluster-order");
  const Scenario sc = parse_scenario(kSmall, dir.file("s.yaml"));
  std::vector<std::size_t> all(sc.cells.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::vector<std::size_t> order = largest_first(sc, all);
  for (std::size_t k = 1; k < order.size(); ++k)
    CHECK(estimated_cell_cost(sc, sc.cells[order[k - 1]]) >= estimated_cell_cost(sc, sc.cells[order[k]]));
  CHECK(sc.cells[order.front()].synth.prompt_len == 96);
  CHECK(sc.cells[order.back()].synth.prompt_len == 48);
}

TEST_CASE("Three shards into one folder write tables identical to a single-process run; the last shard to finish "
          "writes them and the others name the missing cells",
          "[cluster]") {
  TempDir dir("cluster-shards");
  const std::string sc = write_file(dir, "s.yaml", kSmall);
  std::string out;
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(dir.file("one")), out) == 0);
  const auto want = tables(dir.path / "one");
  REQUIRE(want.size() >= 3);
  const std::string shared = dir.file("shared");
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(shared) + " --shard 1/3", out) == 0);
  CHECK_THAT(out, Catch::Contains("of other shards are not finished yet"));
  CHECK(tables(shared).empty());
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(shared) + " --shard 3/3", out) == 0);
  CHECK(tables(shared).empty());
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(shared) + " --shard 2/3", out) == 0);
  CHECK(computed_finished(out).first == 2);
  CHECK(tables(shared) == want);
  CHECK(leftovers(shared).empty());
  // A shard rerun finds its cells finished and recomputes nothing.
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(shared) + " --shard 2/3", out) == 0);
  CHECK(computed_finished(out) == std::make_pair(0, 2));
  // --complete: one shard alone computes what the others left.
  const std::string alone = dir.file("alone");
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(alone) + " --shard 1/3 --complete", out) == 0);
  CHECK(computed_finished(out).first == 6);
  CHECK(tables(alone) == want);
  // Bad shards are usage errors naming the option.
  CHECK(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(alone) + " --shard 4/3", out) == 2);
  CHECK_THAT(out, Catch::Contains("--shard is '4/3'"));
  CHECK(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(alone) + " --complete", out) == 2);
  CHECK_THAT(out, Catch::Contains("--complete goes with --shard"));
}

TEST_CASE("A shard killed mid-run loses only its unfinished cell: the rerun computes exactly the missing cells, "
          "none twice, and the tables equal a single-process run",
          "[cluster][faults]") {
  TempDir dir("cluster-shard-kill");
  const std::string sc = write_file(dir, "s.yaml", kSlow);
  std::string out;
  REQUIRE(shell("OMP_NUM_THREADS=1 " + q(kTierlab) + " run " + q(sc) + " --out " + q(dir.file("one")), out) == 0);
  const auto want = tables(dir.path / "one");
  const std::string shared = dir.file("shared");
  // Shard 1 of 2 (four cells) killed once its first cell is on disk.
  const pid_t pid = spawn("exec env OMP_NUM_THREADS=1 " + q(kTierlab) + " run " + q(sc) + " --out " + q(shared) +
                          " --shard 1/2");
  const bool mid = wait_for_cells(shared, 1, pid);
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  REQUIRE(mid);
  const std::size_t kept = cell_files(shared).size();
  REQUIRE(kept >= 1);
  REQUIRE(kept < 4);
  // Both shards again: shard 1 computes exactly what it had not finished, shard 2 its four.
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(shared) + " --shard 2/2", out) == 0);
  CHECK(computed_finished(out) == std::make_pair(4, 0));
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(shared) + " --shard 1/2", out) == 0);
  CHECK(computed_finished(out) == std::make_pair(static_cast<int>(4 - kept), static_cast<int>(kept)));
  CHECK(cell_files(shared).size() == 8);
  CHECK(tables(shared) == want);
  CHECK(leftovers(shared).empty());  // the killed shard's work folder and temporaries removed
}

#ifdef TIERLAB_TEST_MPIRUN
TEST_CASE("mpirun -n 3 tierlab run writes tables identical to a single-process run and to three shards, and "
          "resumes a run finished by any mode",
          "[cluster][mpi]") {
  TempDir dir("cluster-mpi");
  const std::string sc = write_file(dir, "s.yaml", kSmall);
  std::string out;
  REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(dir.file("one")), out) == 0);
  const auto want = tables(dir.path / "one");
  const std::string mpi = dir.file("mpi");
  REQUIRE(shell(kMpirun + " -n 3 " + q(kTierlab) + " run " + q(sc) + " --out " + q(mpi), out) == 0);
  CHECK_THAT(out, Catch::Contains("(3 MPI ranks)"));
  CHECK_THAT(out, Catch::Contains("scheduler: "));
  CHECK(computed_finished(out) == std::make_pair(6, 0));
  CHECK(tables(mpi) == want);
  CHECK(leftovers(mpi).empty());
  // The folder of the single-process run, resumed under MPI: nothing to compute.
  REQUIRE(shell(kMpirun + " -n 2 " + q(kTierlab) + " run " + q(sc) + " --out " + q(dir.file("one")), out) == 0);
  CHECK(computed_finished(out) == std::make_pair(0, 6));
  // --scheduler-only: rank 0 hands out, ranks 1 and 2 compute.
  const std::string sched = dir.file("sched");
  REQUIRE(shell(kMpirun + " -n 3 " + q(kTierlab) + " run " + q(sc) + " --out " + q(sched) + " --scheduler-only", out) == 0);
  CHECK_THAT(out, Catch::Contains("done on rank 1"));
  CHECK(out.find("done on rank 0") == std::string::npos);
  CHECK(tables(sched) == want);
  // --jobs under MPI is refused with a sentence.
  CHECK(shell(kMpirun + " -n 2 " + q(kTierlab) + " run " + q(sc) + " --out " + q(sched) + " --jobs 2", out) != 0);
  CHECK_THAT(out, Catch::Contains("start more ranks instead"));
}

TEST_CASE("An error on a worker rank reaches the user with the cell and the rank: a rank whose copy of a trace "
          "differs from rank 0's is refused",
          "[cluster][mpi]") {
  TempDir dir("cluster-mpi-error");
  // Two folders, each with the same scenario and a trace of the same name and shape but other
  // contents; rank 0 runs in one, rank 1 in the other (mpirun's MPMD form, --wdir).
  std::string out;
  for (const char* sub : {"a", "b"}) {
    fs::create_directories(dir.path / sub);
    REQUIRE(shell(q(kTierlab) + " synth --preset tiny --tokens 64 --layers 1 --kv-heads 2 --seed " +
                      (std::string(sub) == "a" ? "1" : "2") + " -o " + q((dir.path / sub / "t.safetensors").string()),
                  out) == 0);
    std::ofstream((dir.path / sub / "s.yaml").string()) << "name: cluster-error\n"
                                                          "traces:\n"
                                                          "  files: [t.safetensors]\n"
                                                          "budgets: [2]\n"
                                                          "backend: cpu\n";
  }
  const std::string o = dir.file("o");
  const std::string tool = q(kTierlab) + " run s.yaml --out " + q(o) + " --scheduler-only";
  const int rc = shell(kMpirun + " -n 1 --wdir " + q((dir.path / "a").string()) + " " + tool + " : -n 1 --wdir " +
                           q((dir.path / "b").string()) + " " + tool,
                       out);
  CHECK(rc == 2);
  CHECK_THAT(out, Catch::Contains("cell 'file-t'"));
  CHECK_THAT(out, Catch::Contains("rank 1 on "));
  CHECK_THAT(out, Catch::Contains("differ between rank 0"));
  CHECK(cell_files(o).empty());
}

TEST_CASE("A killed worker rank, or Ctrl-C on mpirun, loses only unfinished cells: the rerun computes exactly "
          "the missing cells and the tables equal a single-process run",
          "[cluster][mpi][faults]") {
  TempDir dir("cluster-mpi-kill");
  const std::string sc = write_file(dir, "s.yaml", kSlow);
  std::string out;
  REQUIRE(shell("OMP_NUM_THREADS=1 " + q(kTierlab) + " run " + q(sc) + " --out " + q(dir.file("one")), out) == 0);
  const auto want = tables(dir.path / "one");
  for (const bool interrupt : {false, true}) {
    INFO((interrupt ? "SIGINT to mpirun" : "SIGKILL to rank 1"));
    const std::string o = dir.file(interrupt ? "int" : "kill");
    const pid_t pid = spawn("exec " + kMpirun + " -n 3 " + q(kTierlab) + " run " + q(sc) + " --out " + q(o));
    const bool mid = wait_for_cells(o, 1, pid);
    if (interrupt) {
      ::kill(pid, SIGINT);
    } else {
      const pid_t r1 = rank_pid(1, o);
      REQUIRE(r1 > 0);
      ::kill(r1, SIGKILL);
    }
    // Open MPI 4.1's mpirun can deadlock in its own signal handling when the SIGINT meets the
    // ranks' end (seen once here: ranks reaped by nobody, mpirun waiting on a mutex); that is not
    // tierlab's to test, so after 60 s it is ended with SIGTERM (which it obeys) and the cells
    // are checked all the same.
    int status = 0;
    if (!wait_at_most(pid, status, 60)) {
      WARN("mpirun had not ended 60 s after " << (interrupt ? "SIGINT" : "its rank's death") << "; sent SIGTERM");
      ::kill(pid, SIGTERM);
      if (!wait_at_most(pid, status, 30)) {
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
    }
    // mpirun has ended; its ranks end with it (mpirun kills them): wait until they are gone.
    for (int r = 0; r < 3; ++r)
      for (int k = 0; k < 2000 && rank_pid(r, o) != 0; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    REQUIRE(mid);
    CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    const std::size_t kept = cell_files(o).size();
    REQUIRE(kept >= 1);
    REQUIRE(kept < 8);
    // Every cell file on disk is whole (atomic writes), and the rerun (one process) computes
    // exactly the others.
    REQUIRE(shell(q(kTierlab) + " run " + q(sc) + " --out " + q(o), out) == 0);
    CHECK(computed_finished(out) == std::make_pair(static_cast<int>(8 - kept), static_cast<int>(kept)));
    CHECK(out.find("damaged") == std::string::npos);
    CHECK(tables(fs::path(o)) == want);
    for (const auto& l : leftovers(o)) UNSCOPED_INFO("left: " << l);
    CHECK(leftovers(o).empty());
  }
}
#endif
