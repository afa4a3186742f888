#include "scenarios/run/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
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
#include "model/safetensors.hpp"
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

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

namespace {

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Every parameter of a synthetic trace (model/synthetic.hpp SynthParams), by name.
nlohmann::json synth_json(const SynthParams& p) {
  return {{"preset", p.preset},
          {"seed", p.seed},
          {"n_layers", p.n_layers},
          {"n_kv_heads", p.n_kv_heads},
          {"group_size", p.group_size},
          {"head_dim", p.head_dim},
          {"prompt_len", p.prompt_len},
          {"obs_window", p.obs_window},
          {"decode_steps", p.decode_steps},
          {"mix", {p.mix_sink, p.mix_local, p.mix_retrieval, p.mix_diffuse}},
          {"logit_scale", {p.logit_scale_min, p.logit_scale_max}},
          {"sink_mass", {p.sink_mass_min, p.sink_mass_max}},
          {"local_mass", {p.local_mass_min, p.local_mass_max}},
          {"span_mass", {p.span_mass_min, p.span_mass_max}},
          {"background", p.background},
          {"outlier_channels", p.outlier_channels},
          {"outlier_strength", p.outlier_strength},
          {"query_outlier_strength", p.query_outlier_strength},
          {"outlier_token_rate", p.outlier_token_rate},
          {"spans_per_head", p.spans_per_head},
          {"span_len", p.span_len},
          {"query_drift", p.query_drift},
          {"rope_theta", p.rope_theta},
          {"storage", std::string(dtype_name(p.storage))}};
}

const std::string& content_hash(ContentHashes& cache, const std::string& path, const std::string& what) {
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, file_content_hash(path, what)).first;
  return it->second;
}

}  // namespace

std::string file_content_hash(const std::string& path, const std::string& what) {
  std::uint64_t size = 0;
  const int fd = open_regular_file(path, what, size);
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  std::vector<unsigned char> buf(1 << 20);
  std::uint64_t h = 14695981039346656037ull, total = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw InputError("Cannot read " + what + " '" + path + "': " + std::strerror(errno) + ".");
    if (r == 0) break;
    h = fnv1a64(buf.data(), static_cast<std::size_t>(r), h);
    total += static_cast<std::uint64_t>(r);
  }
  return hex64(h) + "-" + std::to_string(total);
}

nlohmann::json cell_inputs(const Scenario& sc, const ScenarioCell& cell, ContentHashes& hashes) {
  nlohmann::json spec = {{"id", cell.id}, {"source", cell.source}};
  if (cell.source == "synthetic") {
    spec["synthetic"] = synth_json(cell.synth);
    spec["logit_scale"] = cell.logit_scale;
  } else if (cell.source == "model") {
    spec["checkpoint"] = content_hash(hashes, cell.checkpoint, "llama2.c checkpoint");
    spec["model"] = cell.model_name;
    spec["prompt_len"] = cell.prompt_len;
    spec["decode_steps"] = cell.decode_steps;
    spec["temperature"] = cell.temperature;
    spec["seed"] = cell.seed;
  } else {
    spec["trace"] = content_hash(hashes, cell.path, "trace");
  }
  nlohmann::json settings = sc.settings_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(sc.settings_json);
  return {{"format", kCellFormat}, {"settings", std::move(settings)}, {"cell", std::move(spec)}};
}

std::string cell_hash(const Scenario& sc, const ScenarioCell& cell, ContentHashes& hashes) {
  const std::string text = cell_inputs(sc, cell, hashes).dump();
  return hex64(fnv1a64(text.data(), text.size()));
}

CellFile read_cell_file(const std::string& path) {
  CellFile f;
  try {
    f.json = parse_json_checked(read_regular_file(path, "cell file"), "cell file '" + path + "'");
  } catch (const InputError& e) {
    f.json = nlohmann::json();
    f.damage = e.what();
    return f;
  }
  if (!f.json.is_object() || !f.json.contains("id") || !f.json["id"].is_string()) {
    f.damage = "cell file '" + path + "' is JSON but not a tierlab cell (no string 'id').";
    f.json = nlohmann::json();
  } else if (f.json.contains("cell_hash") && !f.json["cell_hash"].is_string()) {
    f.damage = "cell file '" + path + "' has a 'cell_hash' that is not a string.";
    f.json = nlohmann::json();
  }  // a cell without a hash was written before cell hashes: stale, not damaged
  return f;
}

nlohmann::json compute_cell(const Scenario& sc, const ScenarioCell& cell, Recomputer& backend,
                            const std::string& work_dir, const std::atomic<bool>* stop) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string trace_path = cell.path;
  bool temporary = false;
  if (cell.source == "synthetic") {
    make_directories(work_dir);
    trace_path = work_dir + "/" + cell.id + ".safetensors";
    write_synthetic_trace(cell.synth, trace_path);
    temporary = true;
  } else if (cell.source == "model") {
    make_directories(work_dir);
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
                      {"cell_format", kCellFormat},
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
  const auto note = [&](const std::string& text) {
    if (opt.on_note) {
      opt.on_note(text);
    } else {
      std::fprintf(stderr, "tierlab: %s\n", text.c_str());
    }
  };
  RunResult res;
  res.cells_total = static_cast<int>(sc.cells.size());
  // Temporary files of killed runs first (before this run writes any of its own).
  const auto removed = remove_stale_temporaries(opt.out);
  res.temporaries_removed = static_cast<int>(removed.size());
  if (!removed.empty())
    note("removed " + std::to_string(removed.size()) + " temporary file" + (removed.size() == 1 ? "" : "s") +
         " of killed runs under '" + opt.out + "' (first: '" + removed.front() + "').");
  make_directories(opt.out + "/cells");
  if (!sc.file.empty() && fs::exists(sc.file)) write_file_atomically(opt.out + "/scenario.yaml", read_regular_file(sc.file, "scenario file", kMaxScenarioBytes));

  // Which cells are finished for these inputs: the hash of each cell's inputs against its file.
  ContentHashes content_hashes;
  std::map<std::string, std::string> hashes;  // cell id -> cell_hash
  for (const auto& c : sc.cells) hashes[c.id] = cell_hash(sc, c, content_hashes);
  std::vector<const ScenarioCell*> pending;
  for (const auto& c : sc.cells) {
    const std::string path = cell_path(opt.out, c);
    bool finished = false;
    if (!opt.force && fs::exists(path)) {
      const CellFile f = read_cell_file(path);
      if (!f.damage.empty()) {
        std::error_code ec;
        fs::rename(path, path + ".damaged", ec);
        ++res.cells_damaged;
        note(f.damage + " " +
             (ec ? "It could not be moved aside (" + ec.message() + "); recomputing cell '" + c.id + "'."
                 : "Moved aside to '" + path + ".damaged'; recomputing cell '" + c.id + "'."));
      } else if (!f.json.contains("cell_hash") || f.json["cell_hash"] != hashes[c.id]) {
        ++res.cells_stale;
        note("cell '" + c.id + "' in '" + path + "' was computed for other inputs (cell hash " +
             (f.json.contains("cell_hash") ? f.json["cell_hash"].get<std::string>() : std::string("none")) +
             ", now " + hashes[c.id] + ": the scenario's settings or the cell's trace changed); recomputing it.");
      } else {
        finished = true;
      }
    }
    if (finished) {
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
        nlohmann::json j = compute_cell(sc, cell, *be, opt.out + "/traces", &stop);
        j["cell_hash"] = hashes.at(cell.id);
        write_file_atomically(cell_path(opt.out, cell), j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
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
    CellFile f = read_cell_file(cell_path(opt.out, c));
    if (!f.damage.empty()) throw InputError(f.damage + " Rerun to recompute it.");
    if (f.json.value("cell_hash", std::string()) != hashes[c.id])
      throw InputError("cell file '" + cell_path(opt.out, c) + "' changed during the run (another run into '" + opt.out +
                       "'?); rerun to recompute it.");
    cells.push_back(std::move(f.json));
  }
  // Traces left by cells of killed runs (each finished cell removes its own).
  for (const auto& c : sc.cells) fs::remove(opt.out + "/traces/" + c.id + ".safetensors", ec);
  fs::remove(opt.out + "/traces", ec);
  write_analyses(sc, cells, opt.out);
  res.tables_written = true;
  return res;
}

}  // namespace tierlab
