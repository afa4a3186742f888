#pragma once
// Scenario files (docs/scenarios.md): one YAML file describes an experiment as a set of
// cells. A cell is one trace (a synthetic preset with its parameter overrides, one seed,
// one context length T and, optionally, one logit scale; or a captured trace file); every
// cell is evaluated at every budget B of the scenario by the interior analysis
// (scenarios/pipeline/advantage.hpp): each family's surrogate-optimal allocation (Q*, E*, M*)
// recomputed exactly, A = 1 - err(M*) / min(err(Q*), err(E*)), and the dominated share.
//
// Cells are the Cartesian product presets x seeds x context_lengths x logit_scales (for
// synthetic traces), then the model cells (seeds x context_lengths), then the listed files.
// Each further key belongs to one analysis (scenarios/scenario/analysis.hpp), which reads
// and validates it. Validation errors are InputErrors naming the file, the line (1-based)
// and the valid choices or range.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/synthetic/synthetic.hpp"
#include "model/quantizers/tier.hpp"
#include "gpu/recompute.hpp"
#include "scenarios/scenario/analysis.hpp"
#include "scenarios/figures/figure.hpp"
#include "scenarios/methods/methods_spec.hpp"
#include "solvers/problem.hpp"

namespace tierlab {

struct ScenarioCell {
  std::string id;      // file-name safe, unique: "tiny-s0-T64", "tiny-s0-T64-ls1.5", "file-<stem>", "stories260K-s0-T64"
  std::string source;  // "synthetic" | "file" | "model" (a llama2.c checkpoint captured on the fly, model/llama2c/capture.hpp)
  SynthParams synth;   // synthetic cells: the full parameters (preset + overrides + cell values)
  std::string path;    // file cells: the trace path
  double logit_scale = 0;  // > 0 when the scenario sweeps logit_scales (min = max = this)
  // traces.synthetic.sweep: the one generator parameter varied and this cell's value ("" and
  // NaN otherwise); cell JSON keys sweep_key, sweep_value.
  std::string sweep_key;
  double sweep_value = std::numeric_limits<double>::quiet_NaN();
  // model cells: the checkpoint and its capture: a prompt of prompt_len tokens sampled by
  // the model itself from BOS (temperature, seed; greedy when temperature = 0), then
  // decode_steps greedy decode steps.
  std::string checkpoint, model_name;
  int prompt_len = 0, decode_steps = 0;
  double temperature = 0.8;
  std::uint64_t seed = 0;
};

struct Scenario {
  std::string file;         // where it was read from
  std::string name;         // "interior-synthetic"
  std::string description;  // free text
  std::vector<ScenarioCell> cells;
  // The problem's parts (solvers/problem.hpp, docs/model.md section 12, convention 11) with
  // their one default: equal memory (conventions 1 and 5), budgets count total bits (codes +
  // metadata) unless the file states `rate_kind: code` (the code-bit variant).
  RateLadder ladder = RateLadder::parse(kDefaultLadder);
  RateKind rate_kind = kDefaultRateKind;
  std::vector<double> budgets{2.0, 4.0};  // B, bits per key element; each in (0, 16]
  double primary_budget = 2.0;            // the budget of the per-cell correlation (one of budgets)
  // The cell summary the verdict is stated on, named before the run (`primary_aggregation`):
  // routed (the model-wide routed allocation, the reference paper's), median (of per-head A), sum (A of the cell's summed errors), wins (share of heads won by
  // M), clipped_mean (mean of A clipped to [-1, 1]); the others are the sensitivity table.
  std::string primary_aggregation = "routed";
  double error_floor = 0x1p-48;  // ties of recomputed errors (pipeline/head.hpp kFloat32ErrorFloor)
  QuerySet queries = ProblemOptions{}.queries;
  Backend backend = Backend::Auto;
  std::uint64_t seed = 0;       // bootstrap seed
  int bootstrap = 1000;         // bootstrap resamples for the interval of rho (100..100000)
  bool sweeps_logit_scales = false;  // traces.synthetic.logit_scales is given (the phase maps)
  std::vector<MethodSpec> methods;   // `methods` (scenarios/methods/methods_spec.hpp), ranked by the proxy analysis
  // `figures: {style, width, height, font_size, format, dpi}`: how the run's figures are drawn
  // (scenarios/figures/figure.hpp; `tierlab figure` options override it). Not a cell setting.
  FigureStyle figure_style;
  // The analyses the file asks for, in registry order (scenarios/scenario/analysis.hpp);
  // the interior analysis is always first.
  std::vector<std::shared_ptr<const Analysis>> analyses;
  // Every key of the file but name, description and traces, as canonical JSON (keys sorted,
  // scalars as written): with a cell's own trace spec, what determines its results
  // (scenarios/run/runner.hpp cell_hash).
  std::string settings_json;

  // The scenario's analysis of type A, or nullptr when the file does not ask for it.
  template <class A>
  const A* find() const {
    for (const auto& a : analyses)
      if (const auto* p = dynamic_cast<const A*>(a.get())) return p;
    return nullptr;
  }
};

// Largest scenario file read (docs/scenarios.md "Limits"); the YAML tree's limits are
// YamlReader::kMaxDepth and kMaxNodes.
constexpr std::uint64_t kMaxScenarioBytes = 1u << 20;

// Parses and validates a scenario file (relative trace paths are resolved against the
// file's folder). Throws InputError "FILE:LINE: ..." naming the key and the valid choices.
Scenario load_scenario(const std::string& path);
Scenario parse_scenario(const std::string& yaml_text, const std::string& file_name);

}  // namespace tierlab
