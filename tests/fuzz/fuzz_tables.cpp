// libFuzzer harness: what `tierlab run` does with the cell files of a finished run (read, hash,
// validate_cell_file, move a failing one aside, write the analyses' tables and summary.md,
// render the figures) and what `tierlab figure` does with a run's tables (read, check, build,
// render). The input is a mutated cell file or a mutated table of a valid run folder
// (tests/fuzz/tables_run.hpp); every other file of the folder is valid, written by the
// project's own code at start-up. Rule: success or tierlab::InputError; and a cell the run
// does not use is the mutated one, and no NaN or infinity is printed as a number in summary.md.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "tests/fuzz/fuzz_input.hpp"
#include "tests/fuzz/tables_run.hpp"

namespace fs = std::filesystem;
using namespace tierlab;

namespace {

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fuzz::cannot_write_input(p.string(), "write", errno);
}

// A broken invariant: says which, then traps (libFuzzer keeps the input).
[[noreturn]] void defect(const std::string& what) {
  std::fprintf(stderr, "fuzz_tables: %s\n", what.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// The valid run: its scenario, its cell files and its tables, made once per process.
struct ValidRun {
  Scenario scenario;
  fs::path dir;                               // the folder every input is tried in
  std::map<std::string, std::string> cells;   // cell id -> the cell file's bytes
  std::map<std::string, std::string> tables;  // file name under tables/ -> bytes
  std::string summary;
  FigureStyle style;

  ValidRun()
      : scenario(parse_scenario(fuzz::kTablesScenarioYaml, "/nonexistent-tierlab-fuzz/tables.yaml")),
        dir(fuzz::temporary_folder() + "/tierlab-fuzz-tables-" + std::to_string(::getpid())) {
    auto backend = make_recomputer(Backend::Cpu);
    ContentHashes hashes;
    fs::remove_all(dir);
    fs::create_directories(dir / "work");
    for (const ScenarioCell& c : scenario.cells) {
      nlohmann::json j = compute_cell(scenario, c, *backend, (dir / "work").string());
      j["cell_hash"] = cell_hash(scenario, c, hashes);
      cells[c.id] = j.dump(1) + "\n";
    }
    reset();
    // The project's own cells pass its validation (else every input would be refused).
    RunOptions opt;
    opt.out = dir.string();
    opt.progress = false;
    opt.on_note = [](const std::string& note) { std::fprintf(stderr, "fuzz_tables: valid run: %s\n", note.c_str()); };
    const RunPlan plan = plan_run(scenario, opt);
    if (!plan.pending.empty()) defect("the cells compute_cell wrote are refused by the run (above)");
    write_run_tables(scenario, dir.string(), plan.hashes);
    for (const auto& e : fs::directory_iterator(dir / "tables")) tables[e.path().filename().string()] = read_bytes(e.path());
    summary = read_bytes(dir / "summary.md");
    // One small format keeps an input under a second; what is drawn is the same in each.
    style.formats = {"svg"};
  }

  // The folder with every valid cell file and nothing else.
  void reset() const {
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir / "cells");
    for (const auto& [id, bytes] : cells) write_bytes(dir / "cells" / (id + ".json"), bytes);
  }

  static const ValidRun& instance() {
    static const ValidRun run;
    // Registered after `run` is made, so it runs before `run` is destroyed.
    static const bool cleanup = (std::atexit([] {
                                   std::error_code ec;
                                   fs::remove_all(instance().dir, ec);
                                 }),
                                 true);
    (void)cleanup;
    return run;
  }
};

// summary.md prints "not defined, because ..." where a number does not exist; a NaN or an
// infinity printed by printf or the stream operators is a defect.
void check_summary(const fs::path& p) {
  static const std::regex non_finite(R"((^|[^A-Za-z0-9_])[-+]?(nan|inf)([^A-Za-z0-9_]|$))", std::regex::icase);
  const std::string text = read_bytes(p);
  std::smatch m;
  if (!std::regex_search(text, m, non_finite)) return;
  const std::size_t a = text.rfind('\n', static_cast<std::size_t>(m.position(0))), b = text.find('\n', static_cast<std::size_t>(m.position(0)));
  const std::size_t from = a == std::string::npos ? 0 : a + 1;
  defect("summary.md prints a non-finite number: " + text.substr(from, b == std::string::npos ? std::string::npos : b - from));
}

// A mutated cell file among valid ones: the run either leaves that cell out (to recompute it)
// or uses it, and then writes the tables and figures or names what is wrong.
void try_cell(const ValidRun& run, const std::string& text) {
  const ScenarioCell* target = &run.scenario.cells.front();
  try {
    const nlohmann::json j = parse_json_checked(text, "fuzz input");
    if (j.is_object() && j.contains("id") && j["id"].is_string())
      for (const ScenarioCell& c : run.scenario.cells)
        if (c.id == j["id"].get<std::string>()) target = &c;
  } catch (const InputError&) {  // not JSON: it goes to the first cell
  }
  write_bytes(cell_path(run.dir.string(), *target), text);

  RunOptions opt;
  opt.out = run.dir.string();
  opt.progress = false;
  opt.on_note = [](const std::string&) {};
  const RunPlan plan = plan_run(run.scenario, opt);
  if (!plan.pending.empty()) {
    // Only the mutated cell may be refused; the valid ones are always used.
    if (plan.pending.size() != 1 || run.scenario.cells[plan.pending.front()].id != target->id)
      defect("a valid cell file was refused beside the mutated one ('" + target->id + "')");
    return;
  }
  write_run_tables(run.scenario, run.dir.string(), plan.hashes);
  check_summary(run.dir / "summary.md");
  render_figures_of_run(run.dir.string(), run.style);
}

// A mutated table of a valid run: `tierlab figure` reads, checks and draws.
void try_table(const ValidRun& run, const std::string& name, const std::string& bytes) {
  if (!run.tables.count(name)) return;  // a file no reader opens
  fs::create_directories(run.dir / "tables");
  for (const auto& [n, b] : run.tables) write_bytes(run.dir / "tables" / n, n == name ? bytes : b);
  write_bytes(run.dir / "summary.md", run.summary);
  render_figures_of_run(run.dir.string(), run.style);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ValidRun& run = ValidRun::instance();
  const std::string input(reinterpret_cast<const char*>(data), size);
  run.reset();
  try {
    const std::string prefix = fuzz::kTableInputPrefix;
    const std::size_t eol = input.find('\n');
    if (input.compare(0, prefix.size(), prefix) == 0 && eol != std::string::npos)
      try_table(run, input.substr(prefix.size(), eol - prefix.size()), input.substr(eol + 1));
    else
      try_cell(run, input);
  } catch (const InputError&) {
  }
  return 0;
}
