#pragma once
// Proxy vs end task (docs/model.md section 11, item 6): do the surrogate, the recomputed attention
// error and the real model's next-token behaviour rank compression methods the same way?
//
// Per cell, every method m of the scenario's `methods` (scenarios/methods/methods_spec.hpp)
// compresses every head's prompt keys at once; over the cell's heads (means):
//   surrogate  S_m = mean_h sum_t [kept ? c_t(k^_t) : c_t(0)] / mean_q ||o_q||^2
//              (the local surrogate's predicted relative error, observation queries)
//   error      E_m = mean_h relative output error ||o^ - o||^2 / ||o||^2, exactly recomputed
//              on the decode queries (the observation queries when the trace has no decode steps)
// and, on model cells (a llama2.c checkpoint), the compressed-cache replay of
// scenarios/pipeline/replay.hpp with the same prompt, observation window and S decode steps
// (teacher-forced by default, proxy.mode):
//   agreement  share of decode steps whose greedy token matches the full cache's
//   mean KL    mean_s KL(P_s || Q_s), nats.
// Across cells each metric is averaged per method. The methods are ranked by each metric
// (ascending; agreement descending), and each pair of rankings is compared over the
// methods by Spearman rho (Pearson of mid-ranks; scenarios/analyses/stats.hpp) with a percentile
// bootstrap interval over methods resampled with replacement (the scenario's bootstrap
// count and seed), and by Kendall tau-b
//   tau_b = (C - D) / sqrt((n0 - n1)(n0 - n2)),  n0 = n(n-1)/2,
// C/D the concordant/discordant pairs, n1/n2 the pairs tied in x/y.
// Tables: proxy.csv/.json (per method: metrics and ranks; the correlations),
// proxy_cells.csv (per cell x method).
#include <atomic>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario/analysis.hpp"
#include "gpu/recompute.hpp"
#include "model/io/trace.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

// Kendall tau-b of two equally long samples; NaN when n < 2 or either is constant.
double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y);

// One method's metrics on one cell (means over the cell's heads).
struct ProxyMethodResult {
  std::string label, kind;
  double code_bits = 0, total_bits = 0, evicted = 0;
  double surrogate = 0, error = 0;
  bool replayed = false;
  double agreement = 0, mean_kl = 0, ppl_compressed = 0;
  int first_divergence = -1;
};

// The per-cell part (runner.cpp). Model cells also replay each method on the model.
// The scenario key `proxy` (over the scenario's `methods`).
struct ProxySpec {
  std::string mode = "teacher-forced";  // replay mode on model cells (scenarios/pipeline/replay.hpp)
};

nlohmann::json proxy_cell(const Scenario&, const ProxySpec&, const ScenarioCell&, const TraceReader&, Recomputer&,
                          const std::atomic<bool>* stop = nullptr);

// Rankings and rank correlations from per-method metrics (one entry per method, aggregated
// over cells). Returns the "correlations" array of proxy.json.
nlohmann::json proxy_correlations(const std::vector<ProxyMethodResult>& methods, int resamples, std::uint64_t seed);

// Writes the proxy tables under dir (= DIR/tables) and returns the summary.md section
// (empty when the scenario has no proxy analysis).
std::string write_proxy_tables(const Scenario&, const ProxySpec&, const std::vector<nlohmann::json>& cells,
                               const std::string& dir);

class ProxyAnalysis final : public Analysis {
 public:
  explicit ProxyAnalysis(ProxySpec s) : spec(std::move(s)) {}
  std::string name() const override { return "proxy"; }
  void compute_cell(const CellContext&, nlohmann::json& cell) const override;
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  bool uses_methods() const override { return true; }
  static AnalysisType type();

  ProxySpec spec;
};

}  // namespace tierlab
