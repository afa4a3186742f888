#pragma once
// tierlab-explorer's sources (no Qt types): what the explorer opens, head by head.
//
// Sources
//   trace      a trace file (.safetensors, model/io/trace.hpp), read head by head
//   synthetic  a preset (model/synthetic/synthetic.hpp) at a context length T, generated in memory
//              head by head (synth_head)
//   model      a llama2.c checkpoint (e.g. data/stories260K/stories260K.bin) captured on the
//              fly (model/llama2c/capture.hpp): a prompt of T tokens sampled by the model from BOS,
//              then S greedy decode steps
//   scenario   a scenario YAML (scenarios/scenario/scenario.hpp) or a run folder holding
//              scenario.yaml: its trace views use the scenario's water-filling cell (else its
//              first cell); its tables (RUN/tables) feed the interior, phase-map and
//              staleness views; without tables the scenario can be run (run_scenario).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/base/cancel.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab::explorer {

// Progress and cancel are the library's one pair of types (model/base/cancel.hpp): work reports
// progress(done, total) in its own units (steps of opening a source, cells of a run, heads of
// a view) and, when its cancel flag is set (a newer request superseded it), throws
// tierlab::Cancelled.

enum class SourceKind { Trace, Synthetic, Model, Scenario };

struct SourceSpec {
  SourceKind kind = SourceKind::Synthetic;
  std::string path;              // trace file, checkpoint, scenario YAML or run folder
  std::string preset = "tiny";   // synthetic
  int context_length = 0;        // T for synthetic presets and the model (0: the default)
  std::uint64_t seed = 0;
  std::optional<SynthParams> synth;  // synthetic: full parameters (overrides preset/T)
  std::string run_dir;           // scenario YAML: its run folder (default out/<name>, as `tierlab run`)

  std::string describe() const;
};

// The command-line argument: a folder with scenario.yaml (a run), *.yaml / *.yml (a
// scenario), *.bin (a llama2.c checkpoint), a preset name or "preset:NAME[:T]" (synthetic),
// anything else a trace file.
SourceSpec parse_source(const std::string& arg);

// Decode steps captured after the prompt when the explorer opens a llama2.c model.
constexpr int kModelDecodeSteps = 16;
// The longest context length T the explorer can open the checkpoint at: its seq_len minus
// kModelDecodeSteps (reads the checkpoint's header; throws InputError naming the file).
int model_context_limit(const std::string& checkpoint);

// An opened source. head() may be called from any thread (const, no shared state).
class Source {
 public:
  // Throws InputError/FormatError naming the file and the fault; Cancelled when *cancel.
  static std::shared_ptr<Source> open(const SourceSpec&, const Progress& = {},
                                      const std::atomic<bool>* cancel = nullptr);

  const SourceSpec& spec() const { return spec_; }
  const TraceMeta& meta() const { return meta_; }
  HeadData head(int layer, int kv_head) const;
  std::string description() const { return description_; }

  bool is_scenario() const { return scenario_.has_value(); }
  const Scenario* scenario() const { return scenario_ ? &*scenario_ : nullptr; }
  std::string run_dir() const { return run_dir_; }  // where the scenario's run is (or goes)
  bool has_tables() const;                          // run_dir/tables/interior.json exists
  std::string cell_id() const { return cell_id_; }  // scenario: the cell behind the trace views
  int initial_layer() const { return initial_layer_; }   // scenario: its water-filling head
  int initial_kv_head() const { return initial_kv_head_; }

 private:
  SourceSpec spec_;
  TraceMeta meta_;
  std::string description_;
  std::unique_ptr<TraceReader> reader_;
  std::optional<SynthParams> synth_;
  std::vector<HeadData> captured_;
  std::optional<Scenario> scenario_;
  std::string run_dir_, cell_id_;
  int initial_layer_ = 0, initial_kv_head_ = 0;
};

// Runs the scenario of a source into its run_dir (cells already there are kept). *cancel
// stops it between cells (run_stop_flag). Then draws the figures, as `tierlab run` does.
struct ScenarioRunSummary {
  bool tables_written = false;
  std::size_t figures = 0;            // files written under run_dir/figures
  std::vector<std::string> skipped;   // figures without content, not drawn: "NAME: why"
};
ScenarioRunSummary run_source_scenario(const Source&, const Progress& = {}, const std::atomic<bool>* cancel = nullptr);

}  // namespace tierlab::explorer
