// tierlab-explorer's sources (source.hpp).
#include "gui/source.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "model/base/cancel.hpp"
#include "model/llama2c/capture.hpp"
#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/llama2c/llama2c.hpp"
#include "scenarios/analyses/waterfill.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/run/runner.hpp"

namespace tierlab::explorer {

namespace fs = std::filesystem;

namespace {

std::string lower_ext(const std::string& p) {
  std::string e = fs::path(p).extension().string();
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Sources

std::string SourceSpec::describe() const {
  switch (kind) {
    case SourceKind::Trace: return "trace " + path;
    case SourceKind::Synthetic:
      return "synthetic preset " + (synth ? synth->preset : preset) +
             (synth ? ", T = " + std::to_string(synth->prompt_len)
                    : context_length > 0 ? ", T = " + std::to_string(context_length) : std::string()) +
             ", seed " + std::to_string(synth ? synth->seed : seed);
    case SourceKind::Model:
      return "model " + path + (context_length > 0 ? ", T = " + std::to_string(context_length) : std::string());
    case SourceKind::Scenario: return "scenario " + path;
  }
  return path;
}

SourceSpec parse_source(const std::string& arg) {
  SourceSpec s;
  const std::string ext = lower_ext(arg);
  const auto names = synth_preset_names();
  if (arg.rfind("preset:", 0) == 0) {
    s.kind = SourceKind::Synthetic;
    std::string rest = arg.substr(7);
    const auto colon = rest.find(':');
    s.preset = rest.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string t = rest.substr(colon + 1);
      const std::optional<std::int64_t> v = read_integer(t);  // model/base/numbers.hpp: the whole text
      if (!v || *v <= 0 || *v > INT32_MAX)
        throw InputError("explorer: the context length '" + t + "' in '" + arg + "' is not a positive integer.");
      s.context_length = static_cast<int>(*v);
    }
    synth_preset(s.preset);  // InputError listing the presets
    return s;
  }
  if (std::find(names.begin(), names.end(), arg) != names.end() && !fs::exists(arg)) {
    s.kind = SourceKind::Synthetic;
    s.preset = arg;
    return s;
  }
  s.path = arg;
  if (fs::is_directory(arg)) {
    if (!fs::exists(fs::path(arg) / "scenario.yaml"))
      throw InputError("explorer: the folder '" + arg + "' is not a scenario run (it has no scenario.yaml).");
    s.kind = SourceKind::Scenario;
  } else if (ext == ".yaml" || ext == ".yml") {
    s.kind = SourceKind::Scenario;
  } else if (ext == ".bin") {
    s.kind = SourceKind::Model;
  } else {
    s.kind = SourceKind::Trace;
  }
  return s;
}

HeadData Source::head(int layer, int kv_head) const {
  if (layer < 0 || layer >= meta_.n_layers || kv_head < 0 || kv_head >= meta_.n_kv_heads)
    throw InputError("explorer: head L" + std::to_string(layer) + ".H" + std::to_string(kv_head) +
                     " is outside the trace (" + std::to_string(meta_.n_layers) + " layers x " +
                     std::to_string(meta_.n_kv_heads) + " KV heads).");
  if (reader_) return reader_->head(layer, kv_head);
  if (synth_) return synth_head(*synth_, layer, kv_head);
  return captured_.at(static_cast<std::size_t>(layer * meta_.n_kv_heads + kv_head));
}

int model_context_limit(const std::string& checkpoint) {
  return Llama2cModel(checkpoint).config().seq_len - kModelDecodeSteps;
}

bool Source::has_tables() const {
  return !run_dir_.empty() && fs::exists(fs::path(run_dir_) / "tables" / "interior.json");
}

namespace {

void open_model(const std::string& checkpoint, int prompt_len, int decode_steps, double temperature, std::uint64_t seed,
                TraceMeta& meta, std::vector<HeadData>& heads, const Progress& progress) {
  if (progress) progress(1, 10);  // loading the checkpoint
  const Llama2cModel model(checkpoint);
  const int seq = model.config().seq_len;
  if (prompt_len <= 0) prompt_len = std::min(256, seq - decode_steps);
  if (prompt_len + decode_steps > seq)
    throw InputError("explorer: context length " + std::to_string(prompt_len) + " plus " +
                     std::to_string(decode_steps) + " decode steps exceeds the model's seq_len " + std::to_string(seq) +
                     " (" + checkpoint + ").");
  CaptureOptions co;
  co.prompt.generate = prompt_len;
  co.prompt.temperature = static_cast<float>(temperature);
  co.prompt.seed = seed;
  co.decode_steps = decode_steps;
  if (progress) progress(2, 10);  // capturing the prompt and the decode steps
  CaptureResult r = capture(model, co);
  meta = std::move(r.meta);
  heads = std::move(r.heads);
}

}  // namespace

std::shared_ptr<Source> Source::open(const SourceSpec& spec, const Progress& progress, const std::atomic<bool>* cancel) {
  auto s = std::shared_ptr<Source>(new Source());
  s->spec_ = spec;
  throw_if_cancelled(cancel);
  switch (spec.kind) {
    case SourceKind::Trace: {
      if (!fs::exists(spec.path)) throw InputError("explorer: the trace file '" + spec.path + "' does not exist.");
      if (progress) progress(1, 10);  // reading the trace
      s->reader_ = std::make_unique<TraceReader>(spec.path);
      s->meta_ = s->reader_->meta();
      s->description_ = "trace " + fs::path(spec.path).filename().string();
      break;
    }
    case SourceKind::Synthetic: {
      SynthParams p = spec.synth ? *spec.synth : synth_preset(spec.preset);
      if (!spec.synth) {
        p.seed = spec.seed;
        if (spec.context_length > 0) {
          p.prompt_len = spec.context_length;
          p.obs_window = std::min(p.obs_window, std::max(1, spec.context_length / 4));
        }
      }
      p.validate();
      s->synth_ = p;
      s->meta_ = synth_meta(p);
      s->description_ = "synthetic " + p.preset + " (T = " + std::to_string(p.prompt_len) + ", seed " +
                        std::to_string(p.seed) + ")";
      break;
    }
    case SourceKind::Model: {
      if (!fs::exists(spec.path)) throw InputError("explorer: the checkpoint '" + spec.path + "' does not exist.");
      open_model(spec.path, spec.context_length, kModelDecodeSteps, 0.8, spec.seed, s->meta_, s->captured_, progress);
      s->description_ = fs::path(spec.path).stem().string() + " captured (T = " + std::to_string(s->meta_.prompt_len) +
                        ", S = " + std::to_string(s->meta_.decode_steps) + ")";
      break;
    }
    case SourceKind::Scenario: {
      std::string yaml = spec.path;
      if (fs::is_directory(spec.path)) {
        yaml = (fs::path(spec.path) / "scenario.yaml").string();
        s->run_dir_ = spec.path;
      }
      if (!fs::exists(yaml)) throw InputError("explorer: the scenario file '" + yaml + "' does not exist.");
      if (progress) progress(1, 10);  // reading the scenario
      s->scenario_ = load_scenario(yaml);
      const Scenario& sc = *s->scenario_;
      // The scenario.yaml inside a run folder (beside its cells/ or tables/) is that run's.
      const fs::path beside = fs::path(yaml).parent_path();
      if (s->run_dir_.empty() && spec.run_dir.empty() && !beside.empty() &&
          (fs::is_directory(beside / "cells") || fs::is_directory(beside / "tables")))
        s->run_dir_ = beside.string();
      if (s->run_dir_.empty()) s->run_dir_ = spec.run_dir.empty() ? "out/" + sc.name : spec.run_dir;
      if (sc.cells.empty()) throw InputError("explorer: the scenario '" + yaml + "' has no cells.");
      const ScenarioCell* cell = &sc.cells.front();
      if (const WaterfillAnalysis* w = sc.find<WaterfillAnalysis>()) {
        for (const auto& c : sc.cells)
          if (c.id == w->spec.cell) cell = &c;
        s->initial_layer_ = w->spec.layer, s->initial_kv_head_ = w->spec.kv_head;
      }
      s->cell_id_ = cell->id;
      throw_if_cancelled(cancel);
      if (cell->source == "synthetic") {
        s->synth_ = cell->synth;
        s->meta_ = synth_meta(cell->synth);
      } else if (cell->source == "model") {
        open_model(cell->checkpoint, cell->prompt_len, cell->decode_steps, cell->temperature, cell->seed, s->meta_,
                   s->captured_, progress);
      } else {
        s->reader_ = std::make_unique<TraceReader>(cell->path);
        s->meta_ = s->reader_->meta();
      }
      s->description_ = "scenario " + sc.name + " (cell " + cell->id + ")";
      break;
    }
  }
  if (s->meta_.n_heads() <= 0) throw FormatError("explorer: '" + spec.describe() + "' has no heads.");
  if (progress) progress(10, 10);
  return s;
}

ScenarioRunSummary run_source_scenario(const Source& src, const Progress& progress, const std::atomic<bool>* cancel) {
  if (!src.scenario()) throw InputError("explorer: the source is not a scenario; there is nothing to run.");
  const Scenario& sc = *src.scenario();
  RunOptions o;
  o.out = src.run_dir();
  o.jobs = 1;
  o.progress = false;
  int done = 0;
  const int total = static_cast<int>(sc.cells.size());
  o.on_cell = [&](const std::string&, bool) {
    ++done;
    if (progress) progress(done, total + 1);  // the last unit: the figures
  };
  if (progress) progress(0, total + 1);
  run_stop_flag() = cancel && cancel->load();
  // Cancelling stops the run at the runner's next check (between budgets of a cell).
  struct Watcher {
    std::atomic<bool> done{false};
    std::thread thread;
    ~Watcher() {
      done = true;
      if (thread.joinable()) thread.join();
    }
  } watcher;
  if (cancel)
    watcher.thread = std::thread([&watcher, cancel] {
      while (!watcher.done.load()) {
        if (cancel->load()) run_stop_flag() = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  const RunResult r = run_scenario(sc, o);
  if (r.interrupted) throw Cancelled();
  ScenarioRunSummary out;
  out.tables_written = r.tables_written;
  if (r.tables_written) {  // what `tierlab run` writes after the tables: the figures (summary.md is written with them)
    if (progress) progress(total, total + 1);  // drawing the figures
    const FiguresWritten f = render_figures_of_run(o.out);
    out.figures = f.files.size();
    out.skipped = f.skipped;
  }
  return out;
}

}  // namespace tierlab::explorer
