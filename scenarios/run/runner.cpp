#include "scenarios/run/runner.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "model/capture.hpp"
#include "model/llama2c.hpp"
#include "model/error.hpp"
#include "model/synthetic.hpp"
#include "scenarios/analyses/analysis.hpp"
#include "scenarios/run/tables.hpp"
#include "scenarios/run/atomic_file.hpp"
#include "scenarios/run/progress.hpp"
#include "scenarios/run/table_numbers.hpp"

namespace tierlab {

namespace fs = std::filesystem;

std::atomic<bool>& run_stop_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {

extern "C" void on_sigint(int) { run_stop_flag().store(true); }

}  // namespace

std::string cell_path(const std::string& out, const ScenarioCell& cell) { return out + "/cells/" + cell.id + ".json"; }

nlohmann::json compute_cell(const Scenario& sc, const ScenarioCell& cell, Recomputer& backend,
                            const std::string& work_dir, const std::atomic<bool>* stop) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string trace_path = cell.path;
  bool temporary = false;
  if (cell.source == "synthetic") {
    fs::create_directories(work_dir);
    trace_path = work_dir + "/" + cell.id + ".safetensors";
    write_synthetic_trace(cell.synth, trace_path);
    temporary = true;
  } else if (cell.source == "model") {
    fs::create_directories(work_dir);
    trace_path = work_dir + "/" + cell.id + ".safetensors";
    const Llama2cModel model(cell.checkpoint);
    if (cell.prompt_len + cell.decode_steps > model.config().seq_len)
      throw InputError(sc.file + ": cell '" + cell.id + "': context length " + std::to_string(cell.prompt_len) +
                       " plus " + std::to_string(cell.decode_steps) + " decode steps exceeds the model's seq_len " +
                       std::to_string(model.config().seq_len) + ".");
    CaptureOptions co;
    co.prompt.generate = cell.prompt_len;
    co.prompt.temperature = static_cast<float>(cell.temperature);
    co.prompt.seed = cell.seed;
    co.decode_steps = cell.decode_steps;
    write_trace(trace_path, capture(model, co));
    temporary = true;
  }
  struct Cleanup {
    std::string path;
    bool on;
    ~Cleanup() {
      std::error_code ec;
      if (on) fs::remove(path, ec);
    }
  } cleanup{trace_path, temporary};
  TraceReader trace(trace_path);
  const TraceMeta& m = trace.meta();
  if (sc.queries == QuerySet::Decode && m.decode_steps == 0)
    throw InputError(sc.file + ": cell '" + cell.id + "' has no decode steps; use 'queries: obs' for this trace.");

  nlohmann::json j = {{"id", cell.id},
                      {"source", cell.source},
                      {"trace", cell.source == "file" ? trace_path : std::string()},
                      {"preset", cell.source == "synthetic" ? cell.synth.preset
                                 : cell.source == "model"   ? cell.model_name
                                                            : std::string("file")},
                      {"seed", cell.source == "model" ? cell.seed : cell.synth.seed},
                      {"prompt_len", m.prompt_len},
                      {"decode_steps", m.decode_steps},
                      {"logit_scale", finite_or_null(cell.logit_scale > 0 ? cell.logit_scale : std::nan(""))},
                      {"n_heads", m.n_heads()},
                      {"ladder", sc.ladder.name()},
                      {"queries", std::string(to_string(sc.queries))},
                      {"backend", backend.name()}};

  const CellContext ctx{sc, cell, trace, backend, stop};
  for (const auto& a : sc.analyses) {
    ctx.check_stop();
    a->compute_cell(ctx, j);
  }
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return j;
}

RunResult run_scenario(const Scenario& sc, const RunOptions& opt) {
  if (opt.out.empty()) throw InputError("run: the output folder (--out) is empty.");
  if (opt.jobs < 1 || opt.jobs > 64) throw InputError("run: --jobs is " + std::to_string(opt.jobs) + "; it must be in [1, 64].");
  const Backend backend_kind = opt.backend ? *opt.backend : sc.backend;
  fs::create_directories(opt.out + "/cells");
  {
    std::ifstream in(sc.file);
    std::stringstream ss;
    ss << in.rdbuf();
    if (in) write_file_atomically(opt.out + "/scenario.yaml", ss.str());
  }
  RunResult res;
  res.cells_total = static_cast<int>(sc.cells.size());
  std::vector<const ScenarioCell*> pending;
  for (const auto& c : sc.cells) {
    if (!opt.force && fs::exists(cell_path(opt.out, c))) {
      ++res.cells_skipped;
      if (opt.on_cell) opt.on_cell(c.id, false);
    } else {
      pending.push_back(&c);
    }
  }

  std::atomic<bool>& stop = run_stop_flag();
  stop.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  struct Restore {
    decltype(previous) p;
    ~Restore() { std::signal(SIGINT, p); }
  } restore{previous};

  std::mutex mu;
  std::atomic<std::size_t> next{0};
  int done = 0;
  std::exception_ptr first_error;
  std::string first_error_context;
  TerminalProgress bar("run " + sc.name);
  if (opt.progress) bar.update(res.cells_skipped, res.cells_total);
  auto worker = [&]() {
    std::string note;
    std::unique_ptr<Recomputer> be;
    try {
      be = opt.backend_factory ? opt.backend_factory() : make_recomputer(backend_kind, &note);
      if (!be) throw InputError("backend unavailable: " + note);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first_error) first_error = std::current_exception(), first_error_context = "run";
      stop.store(true);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      res.backend = be->description();
    }
    while (!stop.load()) {
      const std::size_t i = next.fetch_add(1);
      if (i >= pending.size()) break;
      const ScenarioCell& cell = *pending[i];
      try {
        const nlohmann::json j = compute_cell(sc, cell, *be, opt.out + "/traces", &stop);
        write_file_atomically(cell_path(opt.out, cell), j.dump(1) + "\n");
        std::lock_guard<std::mutex> lock(mu);
        ++res.cells_computed, ++done;
        if (opt.on_cell) opt.on_cell(cell.id, true);
        if (opt.progress) bar.update(res.cells_skipped + done, res.cells_total);
      } catch (const Cancelled&) {
        break;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception(), first_error_context = "cell '" + cell.id + "'";
        stop.store(true);
      }
    }
  };
  const int n = std::min<int>(opt.jobs, std::max<int>(1, static_cast<int>(pending.size())));
  if (n == 1) {
    worker();
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }
  bar.finish();
  std::error_code ec;
  fs::remove(opt.out + "/traces", ec);  // only when empty
  if (first_error) rethrow_with_context(first_error, first_error_context);  // keeps the error's category
  if (stop.load()) {
    res.interrupted = true;
    return res;
  }
  std::vector<nlohmann::json> cells;
  for (const auto& c : sc.cells) {
    std::ifstream in(cell_path(opt.out, c));
    cells.push_back(nlohmann::json::parse(in));
  }
  write_analyses(sc, cells, opt.out);
  res.tables_written = true;
  return res;
}

}  // namespace tierlab
