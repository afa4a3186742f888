#pragma once
// Scenario files (docs/scenarios.md): one YAML file describes an experiment as a set of
// cells. A cell is one trace (a synthetic preset with its parameter overrides, one seed,
// one context length T and, optionally, one logit scale; or a captured trace file); every
// cell is evaluated at every budget B of the scenario by the interior analysis
// (scenarios/interior.hpp): each family's surrogate-optimal allocation (Q*, E*, M*)
// recomputed exactly, A = 1 - err(M*) / min(err(Q*), err(E*)), and the dominated share.
//
// Cells are the Cartesian product presets x seeds x context_lengths x logit_scales (for
// synthetic traces), then the model cells (seeds x context_lengths), then the listed files. Validation errors are InputErrors naming the
// file, the line (1-based) and the valid choices or range.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/synthetic.hpp"
#include "model/tier.hpp"
#include "gpu/recompute.hpp"
#include "scenarios/methods_spec.hpp"
#include "solvers/families.hpp"
#include "solvers/smoothing.hpp"

namespace tierlab {

// Which query set decides the verdict: "decode" (out-of-sample) or "obs" (in-sample).
enum class QuerySet { Decode, Obs };
QuerySet parse_query_set(const std::string&);  // InputError lists the choices

struct ScenarioCell {
  std::string id;      // file-name safe, unique: "tiny-s0-T64", "tiny-s0-T64-ls1.5", "file-<stem>", "stories260K-s0-T64"
  std::string source;  // "synthetic" | "file" | "model" (a llama2.c checkpoint captured on the fly, model/capture.hpp)
  SynthParams synth;   // synthetic cells: the full parameters (preset + overrides + cell values)
  std::string path;    // file cells: the trace path
  double logit_scale = 0;  // > 0 when the scenario sweeps logit_scales (min = max = this)
  // model cells: the checkpoint and its capture: a prompt of prompt_len tokens sampled by
  // the model itself from BOS (temperature, seed; greedy when temperature = 0), then
  // decode_steps greedy decode steps.
  std::string checkpoint, model_name;
  int prompt_len = 0, decode_steps = 0;
  double temperature = 0.8;
  std::uint64_t seed = 0;
};

// The water-filling picture of one head (solvers/waterfill.hpp): token weights w_t = a_t,
// the head's fitted KIVI noise model n_h(b) = alpha beta^(-b) (model/surrogate.hpp
// fit_noise), continuous reverse water-filling at `budget` bits per token (b_max = 16).
struct WaterfillSpec {
  bool enabled = false;
  std::string cell;  // a cell id (default: the first cell)
  int layer = 0, kv_head = 0;
  double budget = 2.0;
};

// Allocation staleness over decode steps (scenarios/staleness.hpp): per cell, every head's
// stale M* (observation queries) against a fresh M* at each listed decode step s, at `budget`.
struct StalenessSpec {
  bool enabled = false;
  std::vector<int> steps{1, 2, 4, 8, 16};  // increasing, each in [1, 4096]; steps > S are skipped
  double budget = 2.0;                     // (0, 16]
};

// Smoothed vs raw scores (scenarios/smoothing_study.hpp): per cell, head and budget, each
// family's optimum from the raw costs (kernel 1, always computed) and from the costs pooled
// by every pooling x kernel > 1 (padding as given): span truncation and recomputed error.
struct SmoothingSpec {
  bool enabled = false;
  std::vector<int> kernels{1, 3, 5, 7};  // odd, each in [1, 63]
  std::vector<PoolKind> pooling{PoolKind::Avg, PoolKind::Max};
  Padding padding = Padding::Reflect;
  std::vector<double> budgets{2.0};      // B, bits per key element, each in [0.01, 16]
  std::vector<Family> families{Family::Mixed, Family::Evict};  // M and/or E
};

struct Scenario {
  std::string file;         // where it was read from
  std::string name;         // "interior-synthetic"
  std::string description;  // free text
  std::vector<ScenarioCell> cells;
  RateLadder ladder = RateLadder::parse("evict,kivi2,kivi4,kivi8,exact");
  RateKind rate_kind = RateKind::Code;
  std::vector<double> budgets{2.0, 4.0};  // B, bits per key element; each in (0, 16]
  double primary_budget = 2.0;            // the budget of the per-cell correlation (one of budgets)
  QuerySet queries = QuerySet::Decode;
  Backend backend = Backend::Auto;
  std::uint64_t seed = 0;       // bootstrap seed
  int bootstrap = 1000;         // bootstrap resamples for the interval of rho (100..100000)
  bool phase_map = false;       // true when logit_scales is given: the dominance phase map
  WaterfillSpec waterfill;
  StalenessSpec staleness;
  std::vector<MethodSpec> methods;  // `methods` (scenarios/methods_spec.hpp), ranked by the proxy analysis
  MismatchSpec mismatch;            // distortion-model mismatch (scenarios/mismatch.hpp)
  ProxySpec proxy;                  // proxy vs end task (scenarios/proxy.hpp)
  SmoothingSpec smoothing;
  // The phase map over attention entropy x budget (scenarios/entropy_phase.hpp): on with
  // logit_scales (phase_map) or the key entropy_bins; equal-width bins, in [2, 40].
  bool entropy_phase = false;
  int entropy_bins = 8;
};

// Parses and validates a scenario file (relative trace paths are resolved against the
// file's folder). Throws InputError "FILE:LINE: ..." naming the key and the valid choices.
Scenario load_scenario(const std::string& path);
Scenario parse_scenario(const std::string& yaml_text, const std::string& file_name);

}  // namespace tierlab
