#include "scenarios/run/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
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

// Every parameter of a synthetic trace (model/synthetic.hpp synth_params_json), by name, with
// the ranges as [min, max] pairs and the head-kind mixture as one list (the cell identity's
// form since the first results: changing it would change every cell's hash).
nlohmann::json synth_json(const SynthParams& p) {
  nlohmann::json j = synth_params_json(p);
  auto take = [&j](const std::string& key) {
    nlohmann::json v = j.at(key);
    j.erase(key);
    return v;
  };
  j["mix"] = {take("mix_sink"), take("mix_local"), take("mix_retrieval"), take("mix_diffuse")};
  for (const char* range : {"logit_scale", "sink_mass", "local_mass", "span_mass"})
    j[range] = {take(std::string(range) + "_min"), take(std::string(range) + "_max")};
  return j;
}

const std::string& content_hash(ContentHashes& cache, const std::string& path, const std::string& what) {
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, file_content_hash(path, what)).first;
  return it->second;
}

}  // namespace

std::string file_content_hash(const std::string& path, const std::string& what) {
  const OpenRegularFile opened(path, what);
  const int fd = opened.fd();
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
                            const std::string& work_dir, const std::atomic<bool>* stop,
                            const std::function<void(const std::string&, int, int)>& on_step) {
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
  if (!cell.sweep_key.empty()) j["sweep_key"] = cell.sweep_key, j["sweep_value"] = cell.sweep_value;

  CellContext ctx{sc, cell, trace, backend, stop, on_step};
  for (const auto& a : sc.analyses) {
    ctx.check_stop();
    ctx.step(a->name());
    a->compute_cell(ctx, j);
  }
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return j;
}

std::string run_work_dir(const std::string& out) { return out + "/traces/" + process_tag(); }

double estimated_cell_cost(const Scenario& sc, const ScenarioCell& cell) {
  // heads x queries x keys x head dim: the recomputation's work for one budget (the same
  // number of budgets for every cell of a scenario). 0 when the trace cannot be read here.
  const auto cost = [&](double heads, double group, double keys, double obs, double decode, double dim) {
    const double queries = std::max(1.0, sc.queries == QuerySet::Obs ? obs : decode);
    return heads * group * keys * queries * dim;
  };
  if (cell.source == "synthetic") {
    const SynthParams& p = cell.synth;
    return cost(double(p.n_layers) * p.n_kv_heads, p.group_size, p.prompt_len, p.obs_window, p.decode_steps, p.head_dim);
  }
  if (cell.source == "model") {
    std::int32_t h[7] = {};
    std::ifstream in(cell.checkpoint, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(h), sizeof h)) return 0;
    const double n_heads = std::max(1, h[3]), n_kv = std::max(1, std::abs(h[4])), dim = std::max(1, h[0]);
    return cost(double(std::max(1, h[2])) * n_kv, n_heads / n_kv, cell.prompt_len, cell.prompt_len, cell.decode_steps,
                dim / n_heads);
  }
  try {
    const TraceMeta m = TraceReader(cell.path).meta();
    return cost(m.n_heads(), m.group_size, m.prompt_len, m.obs_window, m.decode_steps, m.head_dim);
  } catch (const std::exception&) {
    return 0;
  }
}

std::vector<std::size_t> largest_first(const Scenario& sc, std::vector<std::size_t> cells) {
  std::vector<double> cost(sc.cells.size(), 0.0);
  for (const std::size_t i : cells) cost[i] = estimated_cell_cost(sc, sc.cells[i]);
  std::stable_sort(cells.begin(), cells.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  return cells;
}

std::vector<int> shard_assignment(const Scenario& sc, int shards) {
  if (shards < 1) throw InputError("run: the number of shards is " + std::to_string(shards) + "; it must be at least 1.");
  std::vector<std::size_t> all(sc.cells.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<int> shard(sc.cells.size(), 0);
  std::vector<double> load(static_cast<std::size_t>(shards), 0.0);
  std::vector<int> count(static_cast<std::size_t>(shards), 0);
  for (const std::size_t i : largest_first(sc, all)) {
    // The shard with the least estimated work so far (then the fewest cells, then the lowest index).
    const double c = estimated_cell_cost(sc, sc.cells[i]);
    int best = 0;
    for (int s = 1; s < shards; ++s)
      if (load[s] < load[best] || (load[s] == load[best] && count[s] < count[best])) best = s;
    shard[i] = best;
    load[best] += c;
    ++count[best];
  }
  return shard;
}

Shard parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto bad = [&](const std::string& why) {
    return InputError("run: --shard is '" + text + "'; " + why + " (I/N: shard I of N, 1 <= I <= N, e.g. 2/8).");
  };
  if (slash == std::string::npos) throw bad("it has no '/'");
  Shard s;
  const auto num = [&](std::string_view part, int& v) {
    const auto r = std::from_chars(part.data(), part.data() + part.size(), v);
    return r.ec == std::errc() && r.ptr == part.data() + part.size() && !part.empty();
  };
  const std::string_view t(text);
  if (!num(t.substr(0, slash), s.index) || !num(t.substr(slash + 1), s.count)) throw bad("I and N must be whole numbers");
  if (s.count < 1 || s.count > 100000) throw bad("N must be in [1, 100000]");
  if (s.index < 1 || s.index > s.count) throw bad("I must be in [1, N]");
  return s;
}

void write_cell_file(const std::string& out, const ScenarioCell& cell, nlohmann::json j, const std::string& hash) {
  j["cell_hash"] = hash;
  write_file_atomically(cell_path(out, cell), j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::vector<std::string> unfinished_cells(const Scenario& sc, const std::string& out,
                                          const std::map<std::string, std::string>& hashes) {
  std::vector<std::string> missing;
  for (const auto& c : sc.cells) {
    const std::string path = cell_path(out, c);
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      missing.push_back(c.id);
      continue;
    }
    const CellFile f = read_cell_file(path);
    if (!f.damage.empty() || f.json.value("cell_hash", std::string()) != hashes.at(c.id)) missing.push_back(c.id);
  }
  return missing;
}

RunPlan plan_run(const Scenario& sc, const RunOptions& opt, const std::vector<std::size_t>* only) {
  if (opt.out.empty()) throw InputError("run: the output folder (--out) is empty.");
  RunPlan plan;
  RunResult& res = plan.result;
  res.cells_total = static_cast<int>(sc.cells.size());
  // Temporary files of killed runs first (before this run writes any of its own).
  const auto removed = remove_stale_temporaries(opt.out);
  res.temporaries_removed = static_cast<int>(removed.size());
  if (!removed.empty())
    run_note(opt, "removed " + std::to_string(removed.size()) + " temporary file" + (removed.size() == 1 ? "" : "s") +
                      " of killed runs under '" + opt.out + "' (first: '" + removed.front() + "').");
  make_directories(opt.out + "/cells");
  if (!sc.file.empty() && fs::exists(sc.file))
    write_file_atomically(opt.out + "/scenario.yaml", read_regular_file(sc.file, "scenario file", kMaxScenarioBytes));

  // Which cells are finished for these inputs: the hash of each cell's inputs against its file.
  ContentHashes content_hashes;
  for (const auto& c : sc.cells) plan.hashes[c.id] = cell_hash(sc, c, content_hashes);
  std::vector<std::size_t> considered;
  if (only) {
    considered = *only;
  } else {
    for (std::size_t i = 0; i < sc.cells.size(); ++i) considered.push_back(i);
  }
  std::vector<std::size_t> pending;
  for (const std::size_t i : considered) {
    const ScenarioCell& c = sc.cells[i];
    const std::string path = cell_path(opt.out, c);
    bool finished = false;
    if (!opt.force && fs::exists(path)) {
      const CellFile f = read_cell_file(path);
      if (!f.damage.empty()) {
        std::error_code ec;
        fs::rename(path, path + ".damaged", ec);
        ++res.cells_damaged;
        run_note(opt, f.damage + " " +
                          (ec ? "It could not be moved aside (" + ec.message() + "); recomputing cell '" + c.id + "'."
                              : "Moved aside to '" + path + ".damaged'; recomputing cell '" + c.id + "'."));
      } else if (!f.json.contains("cell_hash") || f.json["cell_hash"] != plan.hashes[c.id]) {
        ++res.cells_stale;
        run_note(opt, "cell '" + c.id + "' in '" + path + "' was computed for other inputs (cell hash " +
                          (f.json.contains("cell_hash") ? f.json["cell_hash"].get<std::string>() : std::string("none")) +
                          ", now " + plan.hashes[c.id] +
                          ": the scenario's settings or the cell's trace changed); recomputing it.");
      } else {
        finished = true;
      }
    }
    if (finished) {
      ++res.cells_skipped;
      if (opt.on_cell) opt.on_cell(c.id, false);
    } else {
      pending.push_back(i);
    }
  }
  plan.pending = largest_first(sc, std::move(pending));  // cells differ widely in cost
  return plan;
}

void run_note(const RunOptions& opt, const std::string& text) {
  if (opt.on_note) {
    opt.on_note(text);
  } else {
    std::fprintf(stderr, "tierlab: %s\n", text.c_str());
  }
}

std::unique_ptr<Recomputer> make_run_backend(const Scenario& sc, const RunOptions& opt) {
  if (opt.backend_factory) return opt.backend_factory();
  std::string note;
  auto be = make_recomputer(opt.backend ? *opt.backend : sc.backend, &note);
  if (!be) throw InputError("backend unavailable: " + note);
  return be;
}

void remove_work_dir(const std::string& work_dir) {
  std::error_code ec;
  fs::remove_all(work_dir, ec);
  fs::remove(fs::path(work_dir).parent_path(), ec);  // traces/, only when empty
}

namespace {

// Computes the cells `todo` (indices into sc.cells) on opt.jobs threads, each with its own
// backend; writes each cell file as it finishes. Counts into res; the first error is kept.
void compute_locally(const Scenario& sc, const RunOptions& opt, const std::map<std::string, std::string>& hashes,
                     const std::vector<std::size_t>& todo, RunResult& res, int already, int total,
                     std::exception_ptr& first_error, std::string& first_error_context) {
  std::atomic<bool>& stop = run_stop_flag();
  std::mutex mu;
  std::atomic<std::size_t> next{0};
  int done = 0;
  const std::string work_dir = run_work_dir(opt.out);
  TerminalProgress bar("run " + sc.name);
  if (opt.progress) bar.update(already, total);
  auto worker = [&]() {
    std::unique_ptr<Recomputer> be;
    try {
      be = make_run_backend(sc, opt);
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
      if (i >= todo.size()) break;
      const ScenarioCell& cell = sc.cells[todo[i]];
      try {
        const auto on_step = [&](const std::string& step, int d, int t) {
          if (!opt.progress) return;
          std::lock_guard<std::mutex> lock(mu);
          bar.detail("cell " + cell.id + ": " + step + (t > 0 ? " " + std::to_string(d) + "/" + std::to_string(t) : ""),
                     cell.id + step);
          bar.update(already + done, total);
        };
        write_cell_file(opt.out, cell, compute_cell(sc, cell, *be, work_dir, &stop, on_step), hashes.at(cell.id));
        std::lock_guard<std::mutex> lock(mu);
        ++res.cells_computed, ++done;
        if (opt.on_cell) opt.on_cell(cell.id, true);
        if (opt.progress) bar.update(already + done, total);
      } catch (const Cancelled&) {
        break;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception(), first_error_context = "cell '" + cell.id + "'";
        stop.store(true);
      }
    }
  };
  const int n = std::min<int>(opt.jobs, std::max<int>(1, static_cast<int>(todo.size())));
  if (n == 1) {
    worker();
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }
  bar.finish();
  remove_work_dir(work_dir);
}

}  // namespace

SigintScope::SigintScope() : previous_int_(std::signal(SIGINT, on_sigint)), previous_term_(std::signal(SIGTERM, on_sigint)) {
  run_stop_flag().store(false);
}
SigintScope::~SigintScope() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

void write_run_tables(const Scenario& sc, const std::string& out, const std::map<std::string, std::string>& hashes) {
  std::vector<nlohmann::json> cells;
  for (const auto& c : sc.cells) {
    CellFile f = read_cell_file(cell_path(out, c));
    if (!f.damage.empty()) throw InputError(f.damage + " Rerun to recompute it.");
    if (f.json.value("cell_hash", std::string()) != hashes.at(c.id))
      throw InputError("cell file '" + cell_path(out, c) + "' changed during the run (another run into '" + out +
                       "'?); rerun to recompute it.");
    cells.push_back(std::move(f.json));
  }
  // Traces left by cells of killed runs of earlier versions (traces/<cell id>.safetensors).
  std::error_code ec;
  for (const auto& c : sc.cells) fs::remove(out + "/traces/" + c.id + ".safetensors", ec);
  fs::remove(out + "/traces", ec);
  write_analyses(sc, cells, out);
}

RunResult run_scenario(const Scenario& sc, const RunOptions& opt) {
  if (opt.jobs < 1 || opt.jobs > 64) throw InputError("run: --jobs is " + std::to_string(opt.jobs) + "; it must be in [1, 64].");
  if (opt.shard.count < 1 || opt.shard.index < 1 || opt.shard.index > opt.shard.count)
    throw InputError("run: the shard is " + std::to_string(opt.shard.index) + "/" + std::to_string(opt.shard.count) +
                     "; it must be I/N with 1 <= I <= N.");
  const bool sharded = opt.shard.count > 1;
  std::vector<std::size_t> mine;
  if (sharded) {
    const std::vector<int> shard = shard_assignment(sc, opt.shard.count);
    for (std::size_t i = 0; i < sc.cells.size(); ++i)
      if (shard[i] == opt.shard.index - 1) mine.push_back(i);
  }
  RunPlan plan = plan_run(sc, opt, sharded ? &mine : nullptr);
  RunResult res = plan.result;
  res.shard_cells = sharded ? static_cast<int>(mine.size()) : res.cells_total;

  SigintScope sigint;
  std::exception_ptr first_error;
  std::string first_error_context;
  compute_locally(sc, opt, plan.hashes, plan.pending, res, res.cells_skipped, res.shard_cells, first_error,
                  first_error_context);
  if (first_error) rethrow_with_context(first_error, first_error_context);  // keeps the error's category
  if (run_stop_flag().load()) {
    res.interrupted = true;
    return res;
  }
  if (sharded) {
    res.missing = unfinished_cells(sc, opt.out, plan.hashes);
    if (!res.missing.empty() && opt.complete_missing) {
      // The cells other shards have not finished (yet): computed here as well.
      std::vector<std::size_t> rest;
      for (std::size_t i = 0; i < sc.cells.size(); ++i)
        if (std::find(res.missing.begin(), res.missing.end(), sc.cells[i].id) != res.missing.end()) rest.push_back(i);
      rest = largest_first(sc, std::move(rest));
      compute_locally(sc, opt, plan.hashes, rest, res, 0, static_cast<int>(rest.size()), first_error, first_error_context);
      if (first_error) rethrow_with_context(first_error, first_error_context);
      if (run_stop_flag().load()) {
        res.interrupted = true;
        return res;
      }
      res.missing = unfinished_cells(sc, opt.out, plan.hashes);
    }
    if (!res.missing.empty()) return res;  // another shard writes the tables
  }
  write_run_tables(sc, opt.out, plan.hashes);
  res.tables_written = true;
  return res;
}

}  // namespace tierlab
