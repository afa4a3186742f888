// `tierlab run` under faults (docs/reliability.md): SIGKILL at random moments, a full disk
// (a file-size limit), an output folder that cannot be written; and what a rerun finds in
// the output folder: stale cells (other inputs), damaged cell files, temporaries of killed
// runs.
#include <signal.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/base/error.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using tierlab::testing::slurp;
using tierlab::testing::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kTierlab = std::string(TIERLAB_BINARY_DIR) + "/tierlab";

std::string tiny_yaml(const std::string& budgets = "[2, 4]") {
  return "name: faults\n"
         "traces:\n"
         "  synthetic:\n"
         "    presets: [tiny]\n"
         "    seeds: [0, 1, 2, 3]\n"
         "    context_lengths: [48]\n"
         "    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
         "budgets: " + budgets + "\n"
         "backend: cpu\n"
         "bootstrap: 100\n";
}

// Runs a shell command line with `tierlab` at its start; returns the exit status, stderr in err.
int run_cli(const std::string& args, std::string& err, const std::string& prefix = "") {
  const std::string err_file = std::string(TIERLAB_BINARY_DIR) + "/test-tmp/faults-stderr-" + std::to_string(::getpid());
  const std::string cmd = prefix + "'" + kTierlab + "' " + args + " > /dev/null 2> '" + err_file + "'";
  const int rc = std::system(("/bin/sh -c \"" + cmd + "\"").c_str());
  err = slurp(err_file);
  fs::remove(err_file);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

// Every file under dir/tables, by relative path, with its bytes.
std::map<std::string, std::string> tables(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir / "tables"))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = slurp(e.path().string());
  return out;
}

std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp-") != std::string::npos || e.path().parent_path().filename() == "traces" || name == "traces")
      out.push_back(e.path().string());
  }
  return out;
}

std::string write_scenario(const TempDir& dir, const std::string& text) {
  const std::string p = dir.file("faults.yaml");
  std::ofstream(p) << text;
  return p;
}

}  // namespace

TEST_CASE("tierlab run killed with SIGKILL at 20 random moments and rerun writes tables byte-identical to an "
          "uninterrupted run and leaves no temporary files",
          "[reliability][faults]") {
  TempDir dir("faults-kill");
  const std::string sc = write_scenario(dir, tiny_yaml());
  const fs::path ref = dir.path / "ref";
  std::string err;
  // The duration of an uninterrupted run: the shorter of two (a busy machine slows one).
  double full = 1e9;
  for (const fs::path& p : {ref, dir.path / "ref2"}) {
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(run_cli("run '" + sc + "' --out '" + p.string() + "'", err) == 0);
    full = std::min(full, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const auto want = tables(ref);
  CHECK(tables(dir.path / "ref2") == want);  // an uninterrupted run is reproducible
  REQUIRE(want.size() >= 3);

  std::mt19937_64 rng(20);  // seeded: the same sequence of moments on every run of the test
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const fs::path out = dir.path / "out";
  // Starts `tierlab run` into out and kills it with SIGKILL after `at` seconds. Returns -1
  // when it was killed while running, otherwise the time it took to finish by itself.
  auto run_and_kill = [&](double at) -> double {
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      ::execl(kTierlab.c_str(), "tierlab", "run", sc.c_str(), "--out", out.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    for (;;) {
      const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (::waitpid(pid, &status, WNOHANG) != 0) return now;  // finished before the moment came
      if (now >= at) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return -1;
  };
  // The moment of each kill is uniform in [0, the run's duration]: the duration estimate
  // starts at the uninterrupted run's and drops to a run's own time when it finished
  // before its kill (a busy machine makes durations vary); that kill is then drawn again.
  int kills = 0, missed = 0;
  double estimate[2] = {full, full};  // a fresh run, a resumed one
  for (int trial = 0; trial < 20; ++trial) {
    INFO("trial " << trial);
    // A fresh run killed at a random moment, its resumed run killed again, then a rerun
    // that completes.
    for (int k = 0; k < 2; ++k) {
      for (;;) {
        const double finished = run_and_kill(unit(rng) * estimate[k]);
        if (finished < 0) break;
        estimate[k] = finished;
        REQUIRE(++missed < 200);
      }
      ++kills;
    }
    REQUIRE(run_cli("run '" + sc + "' --out '" + out.string() + "'", err) == 0);
    CHECK(tables(out) == want);
    CHECK(leftovers(out).empty());
    fs::remove_all(out);
  }
  CHECK(kills == 40);
  std::printf("faults: %d SIGKILLs of a running tierlab run (%d more draws came after the run had finished; "
              "uninterrupted run %.2f s)\n", kills, missed, full);
}

TEST_CASE("A full disk (a file-size limit) during tierlab run is a clear error with exit status 2 and keeps the "
          "finished cells",
          "[reliability][faults]") {
  TempDir dir("faults-disk");
  const std::string sc = write_scenario(dir, tiny_yaml());
  const fs::path ref = dir.path / "ref", out = dir.path / "out";
  std::string err;
  REQUIRE(run_cli("run '" + sc + "' --out '" + ref.string() + "'", err) == 0);
  // One finished cell in the output folder; the next cell's trace cannot be written (4 KiB).
  fs::create_directories(out / "cells");
  const std::string first = "tiny-s0-T48.json";
  fs::copy_file(ref / "cells" / first, out / "cells" / first);
  const std::string before = slurp((out / "cells" / first).string());
  const int rc = run_cli("run '" + sc + "' --out '" + out.string() + "'", err, "ulimit -f 8; exec ");
  CHECK(rc == 2);
  CHECK_THAT(err, Catch::Contains("tierlab: error:") && Catch::Contains("File too large"));
  CHECK_THAT(err, !Catch::Contains("internal error"));
  CHECK(slurp((out / "cells" / first).string()) == before);
  CHECK(leftovers(out).empty());
  // Room again: the rerun finishes and gives the same tables.
  REQUIRE(run_cli("run '" + sc + "' --out '" + out.string() + "'", err) == 0);
  CHECK(tables(out) == tables(ref));
}

TEST_CASE("An output folder that cannot be written is a clear error with exit status 2", "[reliability][faults]") {
  TempDir dir("faults-ro");
  const std::string sc = write_scenario(dir, tiny_yaml());
  std::string err;
  // A folder below a regular file cannot be created, for root too.
  std::ofstream(dir.file("plain")) << "x";
  CHECK(run_cli("run '" + sc + "' --out '" + dir.file("plain") + "/out'", err) == 2);
  CHECK_THAT(err, Catch::Contains("cannot create the folder") && Catch::Contains("Not a directory"));
  CHECK_THAT(err, !Catch::Contains("internal error"));
  if (::geteuid() == 0) {
    WARN("running as root: a read-only folder (chmod) does not stop root's writes; only the folder-below-a-file case ran");
    return;
  }
  const fs::path out = dir.path / "ro";
  REQUIRE(run_cli("run '" + sc + "' --out '" + out.string() + "'", err) == 0);
  const std::string cell = slurp((out / "cells/tiny-s0-T48.json").string());
  fs::remove(out / "cells/tiny-s1-T48.json");
  fs::permissions(out / "cells", fs::perms::owner_read | fs::perms::owner_exec);
  CHECK(run_cli("run '" + sc + "' --out '" + out.string() + "'", err) == 2);
  CHECK_THAT(err, Catch::Contains("Permission denied") && !Catch::Contains("internal error"));
  fs::permissions(out / "cells", fs::perms::owner_all);
  CHECK(slurp((out / "cells/tiny-s0-T48.json").string()) == cell);
}

TEST_CASE("A rerun after the scenario's budgets change recomputes every cell and says why", "[reliability]") {
  TempDir dir("faults-stale");
  const Scenario a = parse_scenario(tiny_yaml("[2, 4]"), dir.file("s.yaml"));
  const Scenario b = parse_scenario(tiny_yaml("[2, 3]"), dir.file("s.yaml"));
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  std::vector<std::string> notes;
  opt.on_note = [&](const std::string& n) { notes.push_back(n); };
  CHECK(run_scenario(a, opt).cells_computed == 4);
  const RunResult again = run_scenario(a, opt);
  CHECK(again.cells_skipped == 4);
  CHECK(notes.empty());
  const RunResult changed = run_scenario(b, opt);
  CHECK(changed.cells_stale == 4);
  CHECK(changed.cells_computed == 4);
  REQUIRE(notes.size() == 4);
  CHECK_THAT(notes[0], Catch::Contains("cell 'tiny-s0-T48'") && Catch::Contains("was computed for other inputs"));
  const std::string budgets = slurp(opt.out + "/tables/budgets.csv");
  CHECK_THAT(budgets, Catch::Contains("\n3,") || Catch::Contains(",3,"));
  // A synthetic override changes every cell's hash too; the same file parsed twice does not.
  ContentHashes h;
  const Scenario c = parse_scenario(tiny_yaml(), dir.file("s.yaml"));
  std::string edited = tiny_yaml();
  edited.replace(edited.find("head_dim: 16"), 12, "head_dim: 32");
  CHECK(cell_hash(a, a.cells[0], h) == cell_hash(c, c.cells[0], h));
  const Scenario e = parse_scenario(edited, dir.file("s.yaml"));
  REQUIRE(e.cells[0].id == a.cells[0].id);
  CHECK(cell_hash(a, a.cells[0], h) != cell_hash(e, e.cells[0], h));
  CHECK(cell_hash(a, a.cells[0], h) != cell_hash(a, a.cells[1], h));
}

TEST_CASE("A damaged cell file is named and moved aside and recomputed and temporaries of dead processes are removed",
          "[reliability]") {
  TempDir dir("faults-damaged");
  const Scenario s = parse_scenario(tiny_yaml(), dir.file("s.yaml"));
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  std::vector<std::string> notes;
  opt.on_note = [&](const std::string& n) { notes.push_back(n); };
  run_scenario(s, opt);
  const std::string cell0 = opt.out + "/cells/tiny-s0-T48.json", cell1 = opt.out + "/cells/tiny-s1-T48.json";
  const std::string good0 = slurp(cell0);
  std::ofstream(cell0, std::ios::trunc) << good0.substr(0, good0.size() / 2);  // truncated
  std::ofstream(cell1, std::ios::trunc) << "{\"foreign\": true}";              // JSON, not a cell
  // A temporary of a process that is gone (a child that exited) and one of this live process.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = opt.out + "/tables/cells.csv.tmp-" + std::to_string(child);
  const std::string live = opt.out + "/tables/cells.csv.tmp-" + std::to_string(::getppid());
  std::ofstream(dead) << "partial";
  std::ofstream(live) << "partial";
  const RunResult r = run_scenario(s, opt);
  CHECK(r.cells_damaged == 2);
  CHECK(r.cells_computed == 2);
  CHECK(r.temporaries_removed == 1);
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
  fs::remove(live);
  CHECK(fs::exists(cell0 + ".damaged"));
  CHECK(slurp(cell0 + ".damaged") == good0.substr(0, good0.size() / 2));
  bool named = false;
  for (const auto& n : notes) named = named || (n.find(cell0) != std::string::npos && n.find("Moved aside") != std::string::npos);
  CHECK(named);
  CHECK_THAT(notes.back(), Catch::Contains("not a tierlab cell") || Catch::Contains("does not parse"));
  // The recomputed cell is the same computation as the original (timings aside).
  auto strip = [](nlohmann::json j) {
    j.erase("seconds");
    j.erase("phases");
    j.erase("content_hash");  // a hash over the payload, seconds included
    return j;
  };
  CHECK(strip(nlohmann::json::parse(slurp(cell0))) == strip(nlohmann::json::parse(good0)));
}

TEST_CASE("tierlab run into a folder computed for another budget says on stderr which cells it recomputes",
          "[reliability]") {
  TempDir dir("faults-stale-cli");
  const std::string out = dir.file("out");
  std::string err;
  REQUIRE(run_cli("run '" + write_scenario(dir, tiny_yaml("[2, 4]")) + "' --out '" + out + "'", err) == 0);
  CHECK(err.find("computed for other inputs") == std::string::npos);
  REQUIRE(run_cli("run '" + write_scenario(dir, tiny_yaml("[2, 3]")) + "' --out '" + out + "'", err) == 0);
  CHECK_THAT(err, Catch::Contains("tierlab: cell 'tiny-s0-T48' in '" + out + "/cells/tiny-s0-T48.json' was computed for "
                                  "other inputs") &&
                      Catch::Contains("cell 'tiny-s3-T48'"));
  CHECK_THAT(slurp(out + "/cells/tiny-s0-T48.json"), Catch::Contains("\"cell_hash\""));
}

namespace {

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(slurp(path)); }
void write_json(const std::string& path, const nlohmann::json& j) { std::ofstream(path, std::ios::trunc) << j.dump(1); }

}  // namespace

TEST_CASE("A cell file that parses but holds a string number, a missing budget, reordered budgets or a wrong id is "
          "named with its field, moved aside and recomputed, never used",
          "[reliability]") {
  TempDir dir("faults-invalid-cells");
  const Scenario s = parse_scenario(tiny_yaml(), dir.file("s.yaml"));
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  std::vector<std::string> notes;
  opt.on_note = [&](const std::string& n) { notes.push_back(n); };
  run_scenario(s, opt);
  const auto before = tables(opt.out);
  const auto cell = [&](int i) { return opt.out + "/cells/tiny-s" + std::to_string(i) + "-T48.json"; };
  // Files of an earlier version (no content hash), so only the content checks can catch them.
  std::vector<nlohmann::json> j;
  for (int i = 0; i < 4; ++i) {
    j.push_back(read_json(cell(i)));
    REQUIRE(j.back().contains("content_hash"));
    j.back().erase("content_hash");
  }
  j[0]["budgets"][0]["A"] = "0.5";                                     // a number given as a string
  j[1]["budgets"].erase(1);                                            // a budget missing
  std::swap(j[2]["budgets"][0], j[2]["budgets"][1]);                   // budgets reordered
  j[3]["id"] = "tiny-s0-T48";                                          // another cell's id
  for (int i = 0; i < 4; ++i) write_json(cell(i), j[i]);
  const RunResult r = run_scenario(s, opt);
  CHECK(r.cells_damaged == 4);
  CHECK(r.cells_computed == 4);
  CHECK(r.tables_written);
  for (int i = 0; i < 4; ++i) {
    CHECK(fs::exists(cell(i) + ".invalid-1"));
    CHECK(read_json(cell(i)).contains("content_hash"));
  }
  const auto note_of = [&](int i) {  // the latest note about cell i
    for (const auto& n : std::vector<std::string>(notes.rbegin(), notes.rend()))
      if (n.find("'" + cell(i) + "'") != std::string::npos && n.find("Moved aside") != std::string::npos) return n;
    return std::string();
  };
  CHECK_THAT(note_of(0), Catch::Contains("field 'budgets[0].A' is \"0.5\", a number given as a string"));
  CHECK_THAT(note_of(1), Catch::Contains("field 'budgets' has 1 entries; the scenario has 2 budgets"));
  CHECK_THAT(note_of(2), Catch::Contains("field 'budgets[0].budget' is 4.0; the scenario's budget 1 is 2"));
  CHECK_THAT(note_of(3), Catch::Contains("field 'id' is \"tiny-s0-T48\", not the file's name \"tiny-s3-T48\""));
  CHECK(tables(opt.out) == before);  // the recomputed cells give the tables of the first run
  // A second file moved aside for the same cell does not replace the first.
  nlohmann::json again = read_json(cell(0));
  again.erase("content_hash");
  again["n_heads"] = "2";
  write_json(cell(0), again);
  CHECK(run_scenario(s, opt).cells_damaged == 1);
  CHECK(fs::exists(cell(0) + ".invalid-2"));
  CHECK_THAT(note_of(0), Catch::Contains("field 'n_heads' is \"2\""));
}

TEST_CASE("A cell file records a content hash that catches an edited number and a cell file of an earlier version "
          "without one is still used",
          "[reliability]") {
  TempDir dir("faults-content-hash");
  const Scenario s = parse_scenario(tiny_yaml(), dir.file("s.yaml"));
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  std::vector<std::string> notes;
  opt.on_note = [&](const std::string& n) { notes.push_back(n); };
  run_scenario(s, opt);
  const std::string cell0 = opt.out + "/cells/tiny-s0-T48.json", cell1 = opt.out + "/cells/tiny-s1-T48.json";
  nlohmann::json edited = read_json(cell0);
  REQUIRE(edited["content_hash"].is_string());
  REQUIRE(edited["content_hash"] == cell_content_hash(edited));
  edited["budgets"][1]["A"] = 0.123456;  // a plausible number: only the hash can tell
  write_json(cell0, edited);
  nlohmann::json old = read_json(cell1);
  old.erase("content_hash");  // as written before content hashes
  write_json(cell1, old);
  const RunResult r = run_scenario(s, opt);
  CHECK(r.cells_damaged == 1);
  CHECK(r.cells_computed == 1);
  CHECK(r.cells_skipped == 3);
  CHECK(fs::exists(cell0 + ".damaged"));
  CHECK_FALSE(fs::exists(cell1 + ".damaged"));
  CHECK_FALSE(read_json(cell1).contains("content_hash"));  // used as it is
  CHECK_THAT(notes.back(), Catch::Contains("cell file '" + cell0 + "': field 'content_hash' is \"") &&
                               Catch::Contains("the file was edited or damaged after it was written"));
}

TEST_CASE("tierlab figure on a table with a value of the wrong type names the file the row and the column with exit "
          "status 2",
          "[reliability]") {
  TempDir dir("faults-figure-tables");
  const std::string out = dir.file("out");
  std::string err;
  REQUIRE(run_cli("run '" + write_scenario(dir, tiny_yaml()) + "' --out '" + out + "'", err) == 0);
  const std::string interior = out + "/tables/interior.json", heads = out + "/tables/heads.csv";
  const std::string good_interior = slurp(interior), good_heads = slurp(heads);
  const auto figure = [&](std::string& e) { return run_cli("figure '" + out + "'", e); };
  REQUIRE(figure(err) == 0);

  nlohmann::json j = nlohmann::json::parse(good_interior);
  j["budgets"][0]["median_A_heads"] = "0.5";
  write_json(interior, j);
  CHECK(figure(err) == 2);
  CHECK_THAT(err, Catch::Contains("the table '" + interior + "', row 1 of 'budgets', column 'median_A_heads': \"0.5\" "
                                  "is a number given as a string"));
  j = nlohmann::json::parse(good_interior);
  j["budgets"][1]["budget"] = true;
  write_json(interior, j);
  CHECK(figure(err) == 2);
  CHECK_THAT(err, Catch::Contains("row 2 of 'budgets', column 'budget': true is true/false, but row 1 holds a number"));
  std::ofstream(interior, std::ios::trunc) << good_interior;

  const auto edit_heads = [&](const std::function<void(std::vector<std::string>&)>& edit) {
    std::vector<std::string> lines;
    std::istringstream in(good_heads);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    edit(lines);
    std::ofstream o(heads, std::ios::trunc);
    for (const auto& l : lines) o << l << "\n";
  };
  edit_heads([](std::vector<std::string>& l) { l[0].replace(l[0].find(",budget,"), 8, ",budgte,"); });
  CHECK(figure(err) == 2);  // was: internal error: map::at
  CHECK_THAT(err, Catch::Contains("the table '" + heads + "', header line: the column 'budget' is missing"));
  edit_heads([](std::vector<std::string>& l) {
    std::vector<std::string> f;
    std::istringstream row(l[3]);
    for (std::string x; std::getline(row, x, ',');) f.push_back(x);
    f[7] = "abc";  // column A
    l[3].clear();
    for (std::size_t i = 0; i < f.size(); ++i) l[3] += (i ? "," : "") + f[i];
  });
  CHECK(figure(err) == 2);
  CHECK_THAT(err, Catch::Contains("the table '" + heads + "', row 3, column 'A': 'abc' is not a number"));
  edit_heads([](std::vector<std::string>& l) { l[2] += ",x"; });
  CHECK(figure(err) == 2);
  CHECK_THAT(err, Catch::Contains("the table '" + heads + "', row 2: 24 fields; the header has 23 columns"));
  std::ofstream(heads, std::ios::trunc) << good_heads;
  CHECK(figure(err) == 0);
}

TEST_CASE("A scenario whose context is shorter than KIVI's residual window writes not defined because in summary.md "
          "and never nan",
          "[reliability]") {
  TempDir dir("faults-kivi-window");
  const Scenario s = parse_scenario(
      "name: mm\n"
      "traces:\n"
      "  synthetic:\n"
      "    presets: [tiny]\n"
      "    seeds: [0]\n"
      "    context_lengths: [48]\n"
      "    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
      "budgets: [2]\n"
      "rate_kind: code\n"
      "mismatch:\n"
      "  quantizers: [kivi, token]\n"
      "  bits: [2, 3, 4]\n"
      "  budgets: [3]\n"
      "backend: cpu\n"
      "bootstrap: 100\n",
      dir.file("m.yaml"));
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  opt.on_note = [](const std::string&) {};
  REQUIRE(run_scenario(s, opt).tables_written);
  const std::string summary = slurp(opt.out + "/summary.md");
  CHECK(summary.find("nan") == std::string::npos);  // was: "matched allocation nan (nan x uniform)"
  CHECK_THAT(summary, Catch::Contains("- kivi, B = 3: not defined, because uniform 3-bit quantization with kivi has "
                                      "recomputed error 0"));
  CHECK_THAT(summary, Catch::Contains("kivi: beta not defined, because"));
  CHECK_THAT(summary, Catch::Contains("- token, B = 3: uniform error"));
}

TEST_CASE("A hash or a file name that reads as a number is text, never a number given as a string", "[reliability]") {
  // A content hash in hex such as "1653829e07198737" reads as a number in exponent form; the
  // default run once stopped at the table writer on one such cell.
  TempDir dir("faults-hex-hash");
  const Scenario s = parse_scenario(tiny_yaml(), dir.file("s.yaml"));
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  run_scenario(s, opt);
  const std::string path = opt.out + "/cells/tiny-s0-T48.json";
  nlohmann::json j = read_json(path);
  for (const char* hash : {"1653829e07198737", "0123456789012345"}) {
    j["content_hash"] = hash;
    j["cell_hash"] = hash;
    CHECK(validate_cell_file(s, s.cells.front(), path, j).empty());
  }
  j["budgets"][0]["A"] = "1e5";  // a real number given as a string is still caught
  CHECK_THAT(validate_cell_file(s, s.cells.front(), path, j), Catch::Contains("a number given as a string"));
}
