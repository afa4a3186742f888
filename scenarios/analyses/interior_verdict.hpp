#pragma once
// What the interior analysis's verdicts depend on (issue 31): each helper reads the cells'
// JSON (InteriorAnalysis::compute_cell) and none recomputes anything, so a run's shipped
// cells give the same numbers when the tables are rebuilt.
//
//   q_feasibility     per budget: heads (over all cells) whose family Q has no allocation
//                     measuring <= B (every finite tier, with its metadata, costs more), and
//                     cells whose model-wide Q is infeasible. Where Q is infeasible the
//                     interior advantage compares M with E only, so no verdict on "beats both
//                     endpoints" is given at that budget (the reason is printed).
//   stop_budgets      per preset: the smallest swept budget from which the median over the
//                     preset's heads of A is <= 0 at every larger budget, with a percentile
//                     interval from resampling the preset's clusters (seeds) with replacement;
//                     a resample without a stop counts as "beyond the sweep" (+infinity).
//   seed_level_rho    Pearson correlation of the mid-ranks of (dominated share, A) after each
//                     group's mean rank is removed, a group being one preset x T (x swept
//                     value or logit scale, where the scenario sweeps one): does the dominated
//                     share order A across seeds where everything else is held fixed?
//   context_trend     per preset (and pooled beside it): from the shortest to the longest T,
//                     the share of heads won by eviction (discrete) and err(E*)/err(M*)
//                     (continuous); "toward eviction" only where both move that way.
//   paper_comparison  the verdict line's comparison with the reference paper's rho = -0.978.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tierlab {

struct Scenario;

struct QFeasibility {
  int heads = 0;                    // head rows at this budget over all cells
  int heads_infeasible = 0;         // of them, Q infeasible
  int cells = 0, cells_model_infeasible = 0;  // cells whose model-wide Q is infeasible
  bool feasible() const { return heads_infeasible == 0 && cells_model_infeasible == 0; }
  // "" when feasible; else why no verdict is given at budget B (one sentence).
  std::string reason(const std::string& ladder, double B, const std::string& rate_kind) const;
};
QFeasibility q_feasibility(const std::vector<nlohmann::json>& cells, std::size_t budget_index);

struct StopBudget {  // per model group (model_group_of)
  std::string preset;
  double stop = std::numeric_limits<double>::quiet_NaN();  // NaN: the interior pays at the largest budget
  double lo = stop, hi = stop;       // percentile interval; +inf = beyond the sweep
  double share_no_stop = stop;       // resamples without a stop within the sweep
  int clusters = 0;
};
std::vector<StopBudget> stop_budgets(const Scenario&, const std::vector<nlohmann::json>& cells);
// The stop over pooled per-budget medians (budgets ascending in `budgets`): NaN when the last
// median is > 0 or undefined.
double stop_of(const std::vector<double>& budgets, const std::vector<double>& medians);

struct SeedLevelRho {
  double rho = std::numeric_limits<double>::quiet_NaN();
  std::size_t cells = 0, groups = 0;  // cells used; groups with >= 2 cells
};
// xs, ys, groups: the cells of the primary verdict (finite x and y) and their group labels
// (seed_group_of).
SeedLevelRho seed_level_rho(const std::vector<double>& xs, const std::vector<double>& ys,
                            const std::vector<std::string>& groups);
// A cell's group for seed_level_rho: "preset/T<T>" and, where set, "/<sweep_key><value>" or
// "/ls<logit scale>".
std::string seed_group_of(const nlohmann::json& cell);

// A cell's model group: its preset (or trained model) and, where the scenario varies one generator
// setting within it (traces.synthetic.sweep or logit_scales), that setting's value:
// "llama-like", "llama-like logit_scale=3", "llama-like outlier_token_rate=0.01". The per-model
// verdicts (stop budgets, context-length trends) are computed per group, so a dose-response of a
// generator setting within one preset gives one row per dose.
std::string model_group_of(const nlohmann::json& cell);
// The order of model groups: by preset, then by dose as a number ("x=3" before "x=12").
bool model_group_less(const std::string& a, const std::string& b);

// err(E*)/err(M*) of a cell at one budget: sum over heads of err_E over the sum of err_M (NaN
// when a head lacks either, or the sum of err_M is 0).
double summed_error_ratio(const nlohmann::json& budget);

struct ContextTrend {
  std::string preset;  // "(pooled)" for all presets together
  int T0 = 0, T1 = 0;
  double e_share0 = std::numeric_limits<double>::quiet_NaN(), e_share1 = e_share0;
  double ratio0 = e_share0, ratio1 = e_share0;  // median over cells of err(E*)/err(M*)
  std::string direction;  // "toward eviction" | "away from eviction" | "no clear direction (...)"
};
std::vector<ContextTrend> context_trends(const Scenario&, const std::vector<nlohmann::json>& cells,
                                         std::size_t budget_index);

// Routing as the reference paper routes (pipeline/dense_routing.hpp), per budget: the share of
// heads each router sends to M* and to each dense quantizer, and the median over heads of
// A_dense = 1 - err(routed) / min(err(Q*), err(E*)). Empty text when no head has dense
// routing; `csv` receives tables/dense_routing.csv.
std::string dense_routing_section(const Scenario&, const std::vector<nlohmann::json>& cells, std::string* csv);

// A dose-response (traces.synthetic.sweep: one generator parameter varied within a preset):
// per value, the median over cells of the dominated share and of the cell summary `of`
// (CellAggregates at the primary budget), and Spearman rho of the value with each. Empty when
// no cell carries a sweep value.
std::string dose_response_section(const Scenario&, const std::vector<nlohmann::json>& cells, std::size_t primary,
                                  const std::function<double(const nlohmann::json& budget)>& of,
                                  const std::string& of_label);

// "sign and size reproduced" | "sign reproduced, size not" | ... for an interval [lo, hi]
// of rho compared with the reference paper's value.
inline constexpr double kPaperRho = -0.978;
std::string paper_comparison(double lo, double hi, double paper = kPaperRho);

// What may be said of the rank correlation across cells: summary.md's headline and the
// interior_vs_dominated figure (and the explorer's interior view, which draws that figure) use
// this one rule, its thresholds and its words.
//   - fewer than kMinCellsForRho cells with a defined A and dominated share: no rho at all;
//   - fewer than kMinClustersForRho independent clusters (model draw x seed): rho, but no
//     interval and no verdict (a cluster bootstrap over 2 draws says nothing);
//   - otherwise rho, its cluster-bootstrap interval and a verdict.
inline constexpr std::size_t kMinCellsForRho = 5;
inline constexpr std::size_t kMinClustersForRho = 5;
struct RhoEvidence {
  std::size_t cells = 0, clusters = 0;
  double rho = std::numeric_limits<double>::quiet_NaN();
  double lo = std::numeric_limits<double>::quiet_NaN(), hi = std::numeric_limits<double>::quiet_NaN();
  std::string withheld;         // non-empty: why no verdict at this budget (e.g. Q infeasible)
  bool share_constant = false;  // the dominated share is the same in every cell
  double share = std::numeric_limits<double>::quiet_NaN();  // ... that value
};
enum class RhoStanding { TooFewCells, TooFewClusters, Interval };
RhoStanding rho_standing(const RhoEvidence&);
// The verdict clause of summary.md ("holds in sign: ...", "is not established: ...", "is
// withheld: ...", "cannot be tested here: ..."); empty unless the standing is Interval.
std::string rho_verdict(const RhoEvidence&);
// The figure's statement in one or two sentences: rho, the interval where there is one, the
// counts, and the verdict in the summary's words (or why there is none).
std::string rho_statement(const RhoEvidence&);

}  // namespace tierlab
