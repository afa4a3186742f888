#pragma once
// Smoothed scores vs raw scores (docs/model.md sections 9 and 11, "smoothing"): do pooled token
// scores keep planted multi-token spans whole, and what does that cost in recomputed error?
//
// Per head at budget B (bits per key element, code or total), for each family f of
// {M (the whole ladder), E (evict, exact)} and each smoothing variant v (solvers/smoothing.hpp:
// pool avg|max over a centred window of odd size k, stated padding; k = 1 is the raw scores):
//   costs      c_t(tau_j) of the observation queries (model/surrogate.hpp), tier-major
//   decision   every cost row pooled by v (the exact tier's zero row stays 0), then the
//              family's surrogate optimum on the pooled costs, exact knapsack at head scope
//              (solvers/families.hpp solve_families_per_head): the same allocation as
//              `tierlab solve --solver smoothed` (scenarios/pipeline/allocate.hpp)
//   surrogate  sum_t c_t(tau_t) on the TRUE costs (never below the raw allocation's, which is
//              optimal for them); also relative to mean_q ||o_q||^2
//   errors     the allocation materialised (model/quantizers/quantizer.hpp) and recomputed exactly
//              (gpu/recompute.hpp): relative output error e = ||o^ - o||^2 / ||o||^2 on the
//              observation queries (in-sample) and on the decode queries (out-of-sample: step
//              s attends to the T prompt tokens and the s appended tokens, exact;
//              scenarios/pipeline/evaluation.hpp evaluate_decode_steps)
//   spans      for the head's recorded spans [b, e) (synthetic retrieval heads; none for other
//              heads): truncated = some but not all of the span's tokens evicted (docs/model.md
//              section 9), fully evicted, and split = the span's tokens not all at one tier
//              (truncated spans are split; a span kept whole at mixed precisions is split but
//              not truncated)
//     span truncation rate = truncated spans / spans;  split rate = split spans / spans.
#include <atomic>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario/analysis.hpp"
#include "gpu/recompute.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "solvers/families.hpp"
#include "solvers/smoothing.hpp"
#include "solvers/problem.hpp"

namespace tierlab {

struct Scenario;

struct SmoothingStudyOptions {
  RateLadder ladder = RateLadder::parse(kDefaultLadder);
  RateKind rate_kind = kDefaultRateKind;
  double budget = 2.0;  // B, bits per key element
  // The variants compared; by convention the first is the raw scores (kernel 1).
  std::vector<SmoothingOptions> variants{SmoothingOptions{PoolKind::Avg, 1, Padding::Reflect}};
  std::vector<Family> families{Family::Mixed, Family::Evict};  // Mixed and/or Evict
  RopeParams rope;  // the trace's (TraceMeta::rope), for the tiers that need the head
  void validate() const;  // InputError naming the option and value
};

// A variant's short name: "raw" for kernel 1, else pool and kernel ("avg5", "max3").
std::string variant_name(const SmoothingOptions&);

// One family and one variant of one head.
struct SmoothingOutcome {
  Family family = Family::Mixed;
  int variant = 0;  // index into SmoothingStudyOptions::variants
  bool feasible = false;
  std::vector<std::uint8_t> tiers;  // ladder tier per prompt token
  SpanTruncation spans;
  int split = 0;  // spans whose tokens are not all at one tier
  double evicted_fraction = 0;
  double surrogate = 0, surrogate_rel = 0;  // true costs: sum_t c_t(tau_t), and / mean_q ||o_q||^2
  ErrorMetrics obs, decode;
};

struct SmoothingHead {
  int layer = 0, kv_head = 0;
  int n_spans = 0;
  std::vector<SmoothingOutcome> outcomes;  // family-major: families x variants
};

// Spans whose tokens do not all share one tier (InputError for a span outside the tiers).
int spans_split(const std::vector<Span>& spans, const std::vector<std::uint8_t>& tiers);

// One head (spans from head.spans). Throws InputError on a failed recomputation.
SmoothingHead smoothing_head(const HeadData& head, const SmoothingStudyOptions& opt, Recomputer& backend);

// The scenario key `smoothing`.
struct SmoothingSpec {
  std::vector<int> kernels{1, 3, 5, 7};  // odd, each in [1, 63]
  std::vector<PoolKind> pooling{PoolKind::Avg, PoolKind::Max};
  Padding padding = Padding::Reflect;
  std::vector<double> budgets{2.0};      // B, bits per key element, each in [0.01, 16]
  std::vector<Family> families{Family::Mixed, Family::Evict};  // M and/or E
};

// The scenario's `smoothing` key applied to every head of a trace at each of its budgets: the
// cell's "smoothing" JSON (budgets, padding, variants, families, and per head its spans and
// outcomes, each with its budget). Throws Cancelled (model/base/cancel.hpp) when *stop becomes true.
nlohmann::json smoothing_cell(const Scenario& sc, const SmoothingSpec& spec, const TraceReader& trace, Recomputer& backend,
                              const std::atomic<bool>* stop = nullptr);

// Tables from the cells' "smoothing" JSON: DIR/tables/smoothing.csv/.json (per family x
// budget x variant, over all cells' heads: spans, truncated, fully evicted, split, the rates,
// mean and median errors on the verdict query set, the median over heads of err(v) / err(raw)
// and of surrogate(v) / surrogate(raw), shares of heads better / worse than raw) and
// smoothing_heads.csv (per cell x head x budget x family x variant). Returns the summary.md
// section ("" when no cell has the key).
std::string write_smoothing_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                   const std::string& tables_dir);

class SmoothingAnalysis final : public Analysis {
 public:
  explicit SmoothingAnalysis(SmoothingSpec s) : spec(std::move(s)) {}
  std::string name() const override { return "smoothing"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  SmoothingSpec spec;
};

}  // namespace tierlab
