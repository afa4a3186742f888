// Files and folders that several writers, runs or threads share (issue 33, item 7): temporary
// names of their own for every writer, the cleanup of killed runs' temporaries in the old and
// the new name formats, one run at a time into an output folder (DIR/.lock), a trace file
// changed under its open reader, and a recomputation stopped by its thread's cancel flag.
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/base/temporary_name.hpp"
#include "model/io/trace.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using tierlab::testing::error_of;
using tierlab::testing::slurp;
using tierlab::testing::TempDir;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string scenario_yaml() {
  return "name: shared\n"
         "traces:\n"
         "  synthetic:\n"
         "    presets: [tiny]\n"
         "    seeds: [0, 1, 2]\n"
         "    context_lengths: [48]\n"
         "    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
         "budgets: [2, 4]\n"
         "backend: cpu\n"
         "bootstrap: 100\n";
}

// A small synthetic trace file (2 x 2 heads, T = 512, d = 16: about 400 KB).
std::string write_trace_file(const TempDir& dir, const std::string& name, std::uint64_t seed = 1) {
  SynthParams p = synth_preset("tiny");
  p.seed = seed;
  p.n_layers = 2;
  p.n_kv_heads = 2;
  p.head_dim = 16;
  p.prompt_len = 512;
  p.obs_window = 8;
  p.decode_steps = 8;
  const std::string path = dir.file(name);
  write_synthetic_trace(p, path);
  return path;
}

std::vector<std::string> names_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("temporary names are new on every call and in every thread, and carry the pid and host", "[shared]") {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) CHECK(seen.insert(temporary_name("/x/cells.csv")).second);
  std::vector<std::string> from_threads(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { from_threads[static_cast<std::size_t>(t)] = temporary_name("/x/cells.csv"); });
  for (auto& t : threads) t.join();
  for (const auto& n : from_threads) CHECK(seen.insert(n).second);

  const std::string name = temporary_name("/x/cells.csv");
  REQUIRE(name.rfind("/x/cells.csv.tmp-", 0) == 0);
  const std::string tag = name.substr(std::string("/x/cells.csv.tmp-").size());
  long pid = 0;
  std::string_view host;
  REQUIRE(parse_temporary_tag(tag, pid, host));
  CHECK(pid == static_cast<long>(::getpid()));
  CHECK(std::string(host) == process_tag().substr(process_tag().find('@') + 1));
  // The formats of earlier versions still read; anything else does not.
  CHECK(parse_temporary_tag("1234", pid, host));
  CHECK((pid == 1234 && host.empty()));
  CHECK(parse_temporary_tag("1234@node-7.cluster", pid, host));
  CHECK((pid == 1234 && host == "node-7.cluster"));
  CHECK(parse_temporary_tag("1234-56@node-7", pid, host));
  CHECK((pid == 1234 && host == "node-7"));
  for (const char* bad : {"", "abc", "12-@h", "-12@h", "12-3", "12@", "0", "12x@h"}) CHECK_FALSE(parse_temporary_tag(bad, pid, host));
}

TEST_CASE("two writers of one path at once each write their own temporary file and both commit", "[shared]") {
  // Before issue 33 both used "<path>.tmp-<pid>": the second truncated the first's file and
  // the first's rename took it away, so the second's commit failed.
  TempDir dir("shared-writers");
  const std::string path = dir.file("x.safetensors");
  const float a[2] = {1, 2}, b[2] = {3, 4};
  SafetensorsWriter first(path, {});
  first.declare("x", DType::F32, {2});
  SafetensorsWriter second(path, {});
  second.declare("x", DType::F32, {2});
  first.write_f32("x", a, 2);
  second.write_f32("x", b, 2);
  CHECK(names_starting(dir.path, "x.safetensors.tmp-").size() == 2);
  first.commit();
  CHECK(SafetensorsFile(path).read_f32("x") == std::vector<float>{1, 2});
  second.commit();
  CHECK(SafetensorsFile(path).read_f32("x") == std::vector<float>{3, 4});
  CHECK(names_starting(dir.path, "x.safetensors.tmp-").empty());

  // Whole files from several threads at once into one path: every write lands whole.
  const std::string text_path = dir.file("t.json");
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        try {
          write_file_atomically(text_path, std::string(1000, static_cast<char>('a' + t)));
        } catch (...) {
          ++failures;
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  const std::string last = slurp(text_path);
  CHECK(last.size() == 1000);
  CHECK(last.find_first_not_of(last[0]) == std::string::npos);
  CHECK(names_starting(dir.path, "t.json.tmp-").empty());
}

TEST_CASE("temporaries of killed runs are removed in the new and the old name formats, a live process's are kept",
          "[shared]") {
  TempDir dir("shared-cleanup");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string mine = process_tag();
  const std::string host = mine.substr(mine.find('@'));
  const std::string dead = std::to_string(child), live = std::to_string(::getppid());
  const std::vector<std::string> stale = {"a.csv.tmp-" + dead, "b.csv.tmp-" + dead + host,
                                          "c.csv.tmp-" + dead + "-17" + host};
  const std::vector<std::string> kept = {"d.csv.tmp-" + live + "-3" + host, "e.csv.tmp-" + live + host,
                                         "f.csv.tmp-" + std::to_string(::getpid()) + "-9" + host, "g.csv.tmp-notatag"};
  for (const auto& n : stale) std::ofstream(dir.file(n)) << "partial";
  for (const auto& n : kept) std::ofstream(dir.file(n)) << "partial";
  const auto removed = remove_stale_temporaries(dir.path.string());
  CHECK(removed.size() == stale.size());
  for (const auto& n : stale) CHECK_FALSE(fs::exists(dir.file(n)));
  for (const auto& n : kept) CHECK(fs::exists(dir.file(n)));
}

TEST_CASE("a second run into a folder waits for the first and then computes no cell", "[shared]") {
  TempDir dir("shared-lock");
  const Scenario s = parse_scenario(scenario_yaml(), dir.file("s.yaml"));
  const std::string out = dir.file("out");
  std::mutex mu;
  std::condition_variable cv;
  bool second_waits = false;
  RunOptions first;
  first.out = out;
  first.progress = false;
  first.on_note = [](const std::string&) {};
  // The first run finishes its first cell only once the second has said that it waits.
  first.on_cell = [&](const std::string&, bool computed) {
    if (!computed) return;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return second_waits; });
  };
  RunOptions second = first;
  second.on_cell = {};
  std::vector<std::string> notes;
  second.on_note = [&](const std::string& n) {
    std::lock_guard<std::mutex> lock(mu);
    notes.push_back(n);
    if (n.find("waiting for the run of process") != std::string::npos) second_waits = true;
    cv.notify_all();
  };
  RunResult a, b;
  std::thread t1([&] { a = run_scenario(s, first); });
  // The second starts once the first holds the lock.
  for (int i = 0; i < 600; ++i) {
    const int fd = ::open((out + "/.lock").c_str(), O_RDONLY | O_CLOEXEC);
    const bool held = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    if (fd >= 0) ::close(fd);
    if (held) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::thread t2([&] { b = run_scenario(s, second); });
  t1.join();
  t2.join();
  CHECK(second_waits);
  CHECK(a.cells_computed == 3);
  CHECK(b.cells_computed == 0);
  CHECK(b.cells_skipped == 3);
  CHECK(b.tables_written);
  int waiting = 0;
  for (const auto& n : notes)
    if (n.find("waiting for the run of process") != std::string::npos) {
      ++waiting;
      CHECK_THAT(n, Contains(process_tag()) && Contains(out + "/.lock"));
    }
  CHECK(waiting == 1);
}

TEST_CASE("a second tierlab run process into the same --out waits for the first and reports 0 computed", "[shared]") {
  TempDir dir("shared-lock-cli");
  const std::string yaml = dir.file("s.yaml"), out = dir.file("out");
  std::string text = scenario_yaml();
  text.replace(text.find("[48]"), 4, "[1024]");  // cells that take the first run a few seconds
  std::ofstream(yaml) << text;
  const std::string tierlab = std::string(TIERLAB_BINARY_DIR) + "/tierlab";
  auto start = [&](const std::string& name) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const std::string cmd = "exec '" + tierlab + "' run '" + yaml + "' --out '" + out + "' > '" + dir.file(name + ".out") +
                              "' 2> '" + dir.file(name + ".err") + "'";
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return pid;
  };
  const pid_t first = start("first");
  // The second starts once the first holds DIR/.lock.
  bool held = false;
  for (int i = 0; i < 1200 && !held; ++i) {
    const int fd = ::open((out + "/.lock").c_str(), O_RDONLY | O_CLOEXEC);
    held = fd >= 0 && ::flock(fd, LOCK_SH | LOCK_NB) != 0;
    if (fd >= 0) ::close(fd);
    if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  REQUIRE(held);
  const pid_t second = start("second");
  int status1 = 0, status2 = 0;
  REQUIRE(::waitpid(first, &status1, 0) == first);
  REQUIRE(::waitpid(second, &status2, 0) == second);
  CHECK((WIFEXITED(status1) && WEXITSTATUS(status1) == 0));
  CHECK((WIFEXITED(status2) && WEXITSTATUS(status2) == 0));
  CHECK_THAT(slurp(dir.file("first.out")), Contains("cells: 3 computed"));
  const std::string said = slurp(dir.file("second.err"));
  CHECK_THAT(said, Contains("waiting for the run of process " + std::to_string(first) + "@"));
  CHECK(said.find("waiting for the run") == said.rfind("waiting for the run"));  // said once
  CHECK_THAT(slurp(dir.file("second.out")), Contains("cells: 0 computed, 3 already finished"));
}

TEST_CASE("a trace truncated, replaced or removed under an open reader is an InputError naming it, not SIGBUS",
          "[shared]") {
  TempDir dir("shared-trace");
  const std::string path = write_trace_file(dir, "t.safetensors");
  SECTION("truncated") {
    const TraceReader r(path);
    CHECK(r.head(1, 1).keys.rows() == 512);
    const auto size = fs::file_size(path);
    fs::resize_file(path, size / 2);
    const std::string msg = error_of<InputError>([&] { r.head(1, 1); });
    CHECK_THAT(msg, Contains(path) && Contains("was truncated from " + std::to_string(size)));
  }
  SECTION("replaced by another file (renamed over it)") {
    const TraceReader r(path);
    const std::string other = write_trace_file(dir, "other.safetensors", 2);
    fs::rename(other, path);
    CHECK_THAT(error_of<InputError>([&] { r.head(0, 0); }), Contains(path) && Contains("replaced by another file"));
  }
  SECTION("removed") {
    const TraceReader r(path);
    fs::remove(path);
    CHECK_THAT(error_of<InputError>([&] { r.head(0, 0); }), Contains(path) && Contains("no longer there"));
  }
  SECTION("unchanged: read as before") {
    const TraceReader r(path);
    CHECK_NOTHROW(r.check_unchanged());
    CHECK(r.head(0, 1).values.rows() == 512);
  }
}

TEST_CASE("the cpu backend stops a long recomputation soon after its thread's cancel flag is set", "[shared]") {
  // One head of 2048 query rows x 8192 tokens and four key variants: seconds of work on the
  // CPU reference. The flag is set after 0.3 s; recompute() throws Cancelled well within a second.
  const int R = 2048, T = 8192, d = 64;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto random = [&](int rows) {
    MatrixRM m(rows, d);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
    return m;
  };
  const MatrixRM q = random(R), k = random(T), v = random(T);
  std::vector<MatrixRM> variants;
  for (int i = 0; i < 4; ++i) variants.push_back(k + 0.01f * random(T));
  HeadBatch b;
  b.problem.queries = &q;
  b.problem.exact_keys = &k;
  b.problem.values = &v;
  for (const auto& m : variants) b.problem.variants.push_back(&m);
  Selection sel(static_cast<std::size_t>(T));
  for (int t = 0; t < T; ++t) sel[static_cast<std::size_t>(t)] = static_cast<std::uint8_t>(t % 5);
  b.selections.assign(4, sel);
  auto backend = make_recomputer(Backend::Cpu);
  std::atomic<bool> stop{false};
  const CancelScope scope(&stop);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  bool cancelled = false;
  try {
    recompute(*backend, {b});
  } catch (const Cancelled&) {
    cancelled = true;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  setter.join();
  CHECK(cancelled);
  CHECK(seconds < 1.3);
}

TEST_CASE("the surrogate costs of a long head stop soon after their thread's cancel flag is set", "[shared]") {
  // T = 32768, d = 128, 512 queries: seconds of surrogate costs; the flag is set after 0.3 s.
  const int T = 32768, d = 128, m = 512;
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto random = [&](int rows) {
    MatrixRM x(rows, d);
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = n(rng);
    return x;
  };
  const MatrixRM k = random(T), v = random(T), q = random(m);
  const CausalQueries qs = all_visible(q, T);
  std::atomic<bool> stop{false};
  const CancelScope scope(&stop);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.store(true);
  });
  const auto t0 = std::chrono::steady_clock::now();
  bool cancelled = false;
  try {
    surrogate_costs(k, v, qs, RateLadder::kivi({2, 4}));
  } catch (const Cancelled&) {
    cancelled = true;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  setter.join();
  CHECK(cancelled);
  CHECK(seconds < 1.3);
}
