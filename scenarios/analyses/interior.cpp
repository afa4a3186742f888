// The interior analysis (interior.hpp).
#include "scenarios/analyses/interior.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "model/base/error.hpp"
#include "scenarios/analyses/interior_verdict.hpp"
#include "scenarios/analyses/stats.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"

namespace tierlab {

namespace {


// kMinCellsForRho, kMinClustersForRho, rho_standing, rho_verdict: interior_verdict.hpp (the
// summary and the figure state rho by the same rule).

// NaN -> null in JSON.
double verdict_err(const FamilyOutcome& f, QuerySet q) {
  if (!f.feasible) return std::numeric_limits<double>::quiet_NaN();
  return q == QuerySet::Decode ? f.decode.rel_error : f.obs.rel_error;
}

// Family with the least error, errors compared as max(err, floor); ties to the endpoint (Q,
// then E). "" when none is feasible or every feasible one is at or below the floor (a tie).
std::string winner(double q, double e, double m, double floor) {
  if (all_below_floor(m, q, e, floor)) return "";
  std::string best;
  double v = std::numeric_limits<double>::infinity();
  const std::pair<const char*, double> c[3] = {{"Q", q}, {"E", e}, {"M", m}};
  for (const auto& [name, err] : c)
    if (std::isfinite(err) && std::max(err, floor) < v) v = std::max(err, floor), best = name;
  return best;
}

// The mean measured rates of one family over the heads where it is feasible.
nlohmann::json family_rates(const std::vector<HeadInterior>& heads, FamilyOutcome HeadInterior::*f) {
  double code = 0, total = 0;
  int n = 0, repaired = 0;
  for (const HeadInterior& h : heads)
    if ((h.*f).feasible) code += (h.*f).rate.code_bits, total += (h.*f).rate.total_bits, ++n, repaired += (h.*f).repaired;
  return {{"code_bits", n ? nlohmann::json(code / n) : nlohmann::json()},
          {"total_bits", n ? nlohmann::json(total / n) : nlohmann::json()},
          {"heads", n},
          {"repaired", repaired}};
}

// R_h(2-bit tier) per head (surrogate on the observation queries): cell keys R2, R2_median.
// The interior pass computes each head's dominance report once (HeadInterior::R_2bit: the
// same surrogate costs, ladder and rate kind), so the heads are not read and costed again.
void add_dominance_ratios(const CellContext& ctx, const std::vector<HeadInterior>& heads, nlohmann::json& j) {
  nlohmann::json r2 = nlohmann::json::array();
  std::vector<double> r2v;
  if (ctx.scenario.ladder.index_of_bits(2) >= 0)
    for (const HeadInterior& h : heads) {  // (layer, head) order
      r2v.push_back(h.R_2bit);
      r2.push_back(finite_or_null(r2v.back()));
    }
  j["R2"] = r2;
  if (!r2v.empty()) {
    std::vector<double> s = r2v;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    j["R2_median"] = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  } else {
    j["R2_median"] = nullptr;
  }
}

// One row per budget: A per head, the family wins and the cell winner; dominated_share.
void add_budgets(const CellContext& ctx, const std::vector<std::string>& dense, nlohmann::json& j) {
  const Scenario& sc = ctx.scenario;
  Recomputer& backend = ctx.backend;
  const TraceReader& trace = ctx.trace;
  j["budgets"] = nlohmann::json::array();
  double dominated = std::nan("");
  InteriorOptions opt;
  opt.rate_kind = sc.rate_kind;
  opt.ladder = sc.ladder;
  opt.error_floor = sc.error_floor;
  opt.dense_quantizers = dense;
  // Every budget at once: each head's surrogate costs are computed once for all of them.
  const std::vector<InteriorReport> reports =
      interior_advantage(trace, opt, sc.budgets, backend, ctx.stop, ctx.step("interior: heads"), /*model_scope=*/true);
  add_dominance_ratios(ctx, reports.empty() ? std::vector<HeadInterior>() : reports.front().heads, j);
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) {
    const double B = sc.budgets[bi];
    const InteriorReport& rep = reports[bi];
    dominated = rep.dominated_share;
    nlohmann::json b = {
        {"budget", B},
        {"A", finite_or_null(sc.queries == QuerySet::Decode ? rep.mean_advantage_decode : rep.mean_advantage_obs)},
        {"A_decode", finite_or_null(rep.mean_advantage_decode)},
        {"A_obs", finite_or_null(rep.mean_advantage_obs)},
        {"A_surrogate", finite_or_null(rep.mean_advantage_surrogate)},
        {"heads", nlohmann::json::array()}};
    int wins[3] = {0, 0, 0}, defined = 0, below = 0;
    for (const HeadInterior& h : rep.heads) {
      const double q = verdict_err(h.Q, sc.queries), e = verdict_err(h.E, sc.queries), mm = verdict_err(h.M, sc.queries);
      const std::string w = winner(q, e, mm, sc.error_floor);
      if (w == "Q") ++wins[0];
      if (w == "E") ++wins[1];
      if (w == "M") ++wins[2];
      const double A = sc.queries == QuerySet::Decode ? h.advantage_decode : h.advantage_obs;
      const bool tie = sc.queries == QuerySet::Decode ? h.below_floor_decode : h.below_floor_obs;
      defined += std::isfinite(A) ? 1 : 0;
      below += tie ? 1 : 0;
      auto rate = [](const FamilyOutcome& o, bool total) {
        return o.feasible ? nlohmann::json(total ? o.rate.total_bits : o.rate.code_bits) : nlohmann::json();
      };
      std::string repaired;
      for (const auto& [letter, o] : {std::pair{"Q", &h.Q}, std::pair{"E", &h.E}, std::pair{"M", &h.M}})
        if (o->repaired) repaired += letter;
      b["heads"].push_back({{"layer", h.layer},
                            {"kv_head", h.kv_head},
                            {"A", finite_or_null(A)},
                            {"A_surrogate", finite_or_null(h.advantage_surrogate)},
                            {"err_Q", finite_or_null(q)},
                            {"err_E", finite_or_null(e)},
                            {"err_M", finite_or_null(mm)},
                            {"code_Q", rate(h.Q, false)}, {"total_Q", rate(h.Q, true)},
                            {"code_E", rate(h.E, false)}, {"total_E", rate(h.E, true)},
                            {"code_M", rate(h.M, false)}, {"total_M", rate(h.M, true)},
                            {"repaired", repaired},
                            {"below_floor", tie},
                            {"option_Q", h.Q.option},
                            {"winner", w},
                            {"dominated_2bit", h.dominated_2bit}});
      if (!dense.empty()) {
        nlohmann::json& hj = b["heads"].back();
        const bool dec = sc.queries == QuerySet::Decode;
        hj["dense_surrogate"] = h.dense.by_surrogate.choice;
        hj["dense_obs"] = h.dense.by_obs.choice;
        hj["err_dense_surrogate"] = finite_or_null(dec ? h.dense.by_surrogate.err_decode : h.dense.by_surrogate.err_obs);
        hj["err_dense_obs"] = finite_or_null(dec ? h.dense.by_obs.err_decode : h.dense.by_obs.err_obs);
      }
    }
    b["below_floor"] = below;
    b["share_below_floor"] = rep.heads.empty() ? nlohmann::json() : nlohmann::json(double(below) / rep.heads.size());
    b["rates"] = {{"Q", family_rates(rep.heads, &HeadInterior::Q)},
                  {"E", family_rates(rep.heads, &HeadInterior::E)},
                  {"M", family_rates(rep.heads, &HeadInterior::M)}};
    {  // the reference paper's allocator: routed with one model-wide budget (advantage.hpp)
      const ModelScopeReport& m = rep.model;
      auto fam = [&](const ModelFamily& f) {
        if (!f.feasible) return nlohmann::json{{"feasible", false}};
        return nlohmann::json{{"feasible", true},
                              {"err", finite_or_null(sc.queries == QuerySet::Decode ? f.err_decode : f.err_obs)},
                              {"code_bits", f.rate.code_bits},
                              {"total_bits", f.rate.total_bits},
                              {"surrogate", finite_or_null(f.surrogate)},
                              {"repaired", f.repaired}};
      };
      b["model"] = {{"A", finite_or_null(sc.queries == QuerySet::Decode ? m.advantage_decode : m.advantage_obs)},
                    {"Q", fam(m.Q)},
                    {"E", fam(m.E)},
                    {"routed", fam(m.routed)},
                    {"routed_to", {{"Q", m.routed_Q}, {"E", m.routed_E}, {"M", m.routed_M}}},
                    {"routed_is_endpoint", m.routed_is_endpoint}};
    }
    const CellAggregates agg = cell_aggregates(b, sc.error_floor);
    b["A_median"] = finite_or_null(agg.median);
    b["A_sum"] = finite_or_null(agg.sum);
    b["share_M_wins"] = finite_or_null(agg.wins);
    b["A_clipped_mean"] = finite_or_null(agg.clipped_mean);
    b["A_routed"] = finite_or_null(agg.routed);
    b["defined"] = defined;
    b["wins"] = {{"Q", wins[0]}, {"E", wins[1]}, {"M", wins[2]}};
    // Cell winner: the family winning the most heads (ties to the endpoint, Q before E).
    std::string cw = "Q";
    int best = wins[0];
    if (wins[1] > best) cw = "E", best = wins[1];
    if (wins[2] > best) cw = "M", best = wins[2];
    b["winner"] = best > 0 ? cw : "";
    j["budgets"].push_back(b);
  }
  j["dominated_share"] = finite_or_null(dominated);
}

// cells.csv, cells.json and heads.csv.
void write_cell_tables(const std::vector<nlohmann::json>& cells, const std::string& dir) {
  // ---- cells.csv / heads.csv
  CsvWriter cc({"cell", "preset", "seed", "prompt_len", "logit_scale", "budget", "dominated_share", "R2_median",
                "A_median", "A", "A_obs", "A_decode", "A_surrogate", "heads_defined", "wins_Q", "wins_E", "wins_M",
                "winner", "A_sum", "share_M_wins", "A_clipped_mean", "share_below_floor", "code_Q", "total_Q", "code_E",
                "total_E", "code_M", "total_M", "repaired_heads", "A_routed", "routed_Q", "routed_E", "routed_M",
                "routed_total_bits"});
  CsvWriter hc({"cell", "preset", "prompt_len", "logit_scale", "budget", "layer", "kv_head", "A", "A_surrogate", "err_Q",
                "err_E", "err_M", "winner", "dominated_2bit", "R2", "code_Q", "total_Q", "code_E", "total_E", "code_M",
                "total_M", "repaired", "below_floor"});
  // Errors and rates are written exactly (the shortest text that reads back the same double):
  // six digits flip the sign of A where two errors agree to six digits.
  auto exact = [](const nlohmann::json& j, const char* key) {
    const double v = double_or_nan(j, key);
    return std::isfinite(v) ? format_exact(v) : std::string("nan");
  };
  nlohmann::json cells_json = nlohmann::json::array();
  for (const auto& c : cells) {
    for (const auto& b : c["budgets"]) {
      const auto& w = b["wins"];
      cc.row() << c["id"].get<std::string>() << c["preset"].get<std::string>() << c["seed"].get<std::uint64_t>()
               << c["prompt_len"].get<int>() << format_or_nan(double_or_nan(c, "logit_scale"))
               << format_or_nan(b["budget"].get<double>()) << format_or_nan(double_or_nan(c, "dominated_share"))
               << format_or_nan(double_or_nan(c, "R2_median")) << format_or_nan(cell_median_advantage(b))
               << format_or_nan(double_or_nan(b, "A")) << format_or_nan(double_or_nan(b, "A_obs"))
               << format_or_nan(double_or_nan(b, "A_decode")) << format_or_nan(double_or_nan(b, "A_surrogate"))
               << b["defined"].get<int>() << w["Q"].get<int>() << w["E"].get<int>() << w["M"].get<int>()
               << b["winner"].get<std::string>() << format_or_nan(double_or_nan(b, "A_sum"))
               << format_or_nan(double_or_nan(b, "share_M_wins")) << format_or_nan(double_or_nan(b, "A_clipped_mean"))
               << format_or_nan(double_or_nan(b, "share_below_floor"));
      int repaired = 0;
      for (const char* f : {"Q", "E", "M"}) {
        const nlohmann::json r = b.contains("rates") ? b["rates"][f] : nlohmann::json::object();
        cc << exact(r, "code_bits") << exact(r, "total_bits");
        repaired += r.value("repaired", 0);
      }
      cc << repaired;
      const nlohmann::json md = b.value("model", nlohmann::json::object());
      const nlohmann::json to = md.value("routed_to", nlohmann::json::object());
      cc << format_or_nan(double_or_nan(md, "A")) << to.value("Q", 0) << to.value("E", 0) << to.value("M", 0)
         << exact(md.value("routed", nlohmann::json::object()), "total_bits");
      cells_json.push_back({{"cell", c["id"]}, {"preset", c["preset"]}, {"seed", c["seed"]}, {"prompt_len", c["prompt_len"]},
                            {"logit_scale", c["logit_scale"]}, {"budget", b["budget"]},
                            {"dominated_share", c["dominated_share"]}, {"R2_median", c["R2_median"]},
                            {"A_median", finite_or_null(cell_median_advantage(b))}, {"A", b["A"]},
                            {"A_obs", b["A_obs"]}, {"A_decode", b["A_decode"]}, {"A_surrogate", b["A_surrogate"]},
                            {"heads_defined", b["defined"]}, {"wins", w}, {"winner", b["winner"]},
                            {"A_sum", b.value("A_sum", nlohmann::json())},
                            {"share_M_wins", b.value("share_M_wins", nlohmann::json())},
                            {"A_clipped_mean", b.value("A_clipped_mean", nlohmann::json())},
                            {"share_below_floor", b.value("share_below_floor", nlohmann::json())},
                            {"rates", b.value("rates", nlohmann::json())},
                            {"model", b.value("model", nlohmann::json())}});
      std::size_t hi = 0;
      for (const auto& h : b["heads"]) {
        const double R2 = hi < c["R2"].size() && !c["R2"][hi].is_null() ? c["R2"][hi].get<double>() : kNaN;
        hc.row() << c["id"].get<std::string>() << c["preset"].get<std::string>() << c["prompt_len"].get<int>()
                 << format_or_nan(double_or_nan(c, "logit_scale")) << format_or_nan(b["budget"].get<double>())
                 << h["layer"].get<int>() << h["kv_head"].get<int>() << format_or_nan(double_or_nan(h, "A"))
                 << format_or_nan(double_or_nan(h, "A_surrogate")) << exact(h, "err_Q") << exact(h, "err_E")
                 << exact(h, "err_M") << h["winner"].get<std::string>() << h["dominated_2bit"].get<bool>()
                 << format_or_nan(R2);
        for (const char* k : {"code_Q", "total_Q", "code_E", "total_E", "code_M", "total_M"}) hc << exact(h, k);
        hc << h.value("repaired", std::string()) << h.value("below_floor", false);
        ++hi;
      }
    }
  }
  write_file_atomically(dir + "/cells.csv", cc.text());
  write_file_atomically(dir + "/heads.csv", hc.text());
  write_file_atomically(dir + "/cells.json", cells_json.dump(1) + "\n");

}

struct BudgetRows {
  nlohmann::json rows = nlohmann::json::array();
  double stop_budget = kNaN;
};

// budgets.csv: A vs budget over heads; the budget from which the interior stops paying.
BudgetRows write_budget_table(const Scenario& sc, const std::vector<nlohmann::json>& cells, const std::string& dir) {
  BudgetRows out;
  nlohmann::json& budgets = out.rows;
  // ---- A vs budget (per head)
  // A is unbounded below (err(M*) >> an endpoint's): medians and the mean of A clipped to
  // [-1, 1] only, never a plain mean.
  CsvWriter bc({"budget", "median_A_heads", "clipped_mean_A_heads", "share_heads_positive", "heads_defined", "wins_Q",
                "wins_E", "wins_M"});
  std::vector<double> mean_by_budget;
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) {
    double clipped = 0;
    std::vector<double> hv;
    int h_n = 0, pos = 0, wq = 0, we = 0, wm = 0;
    for (const auto& c : cells) {
      const auto& b = c["budgets"][bi];
      for (const auto& h : b["heads"])
        if (const double a = double_or_nan(h, "A"); std::isfinite(a))
          clipped += std::clamp(a, -1.0, 1.0), ++h_n, pos += a > 0 ? 1 : 0, hv.push_back(a);
      wq += b["wins"]["Q"].get<int>(), we += b["wins"]["E"].get<int>(), wm += b["wins"]["M"].get<int>();
    }
    const double cm = h_n ? clipped / h_n : kNaN, sp = h_n ? double(pos) / h_n : kNaN;
    const double med = quantile_or_nan(hv, 0.5);
    mean_by_budget.push_back(med);
    bc.row() << format_or_nan(sc.budgets[bi]) << format_or_nan(med) << format_or_nan(cm) << format_or_nan(sp) << h_n
             << wq << we << wm;
    budgets.push_back({{"budget", sc.budgets[bi]},
                       {"median_A_heads", finite_or_null(med)},
                       {"clipped_mean_A_heads", finite_or_null(cm)},
                       {"share_heads_positive", finite_or_null(sp)},
                       {"heads_defined", h_n},
                       {"wins", {{"Q", wq}, {"E", we}, {"M", wm}}}});
  }
  write_file_atomically(dir + "/budgets.csv", bc.text());
  // The interior stops paying at the smallest budget from which the median A over heads <= 0
  // for every larger one (the median: A is unbounded below, a few heads dominate a mean).
  std::vector<std::size_t> order(sc.budgets.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sc.budgets[a] < sc.budgets[b]; });
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (std::isfinite(mean_by_budget[*it]) && mean_by_budget[*it] <= 0) out.stop_budget = sc.budgets[*it];
    else break;
  }

  return out;
}

// The cluster of a cell for the bootstrap: one model draw (synthetic preset and seed) or one
// prompt seed of a model; its context lengths are not independent of each other.
std::string cell_cluster(const nlohmann::json& c) {
  return c.value("preset", std::string()) + "/s" + std::to_string(c.value("seed", std::uint64_t{0}));
}

// rho(dominated share, one cell summary) at one budget across cells.
struct RhoOf {
  std::vector<double> xs, ys;
  std::vector<std::string> presets, groups;
  double rho = kNaN, rho_within = kNaN;
  Interval iv;  // cluster bootstrap
  std::size_t clusters = 0;
};

RhoOf rho_of(const Scenario& sc, const std::vector<nlohmann::json>& cells, std::size_t bi, const std::string& agg) {
  RhoOf r;
  std::vector<std::string> models, clusters;
  for (const auto& c : cells) {
    const double x = double_or_nan(c, "dominated_share");
    const double y = cell_aggregates(c["budgets"][bi], sc.error_floor).of(agg);
    if (std::isfinite(x) && std::isfinite(y))
      r.xs.push_back(x), r.ys.push_back(y), models.push_back(c["preset"]), clusters.push_back(cell_cluster(c)),
          r.groups.push_back(seed_group_of(c));
  r.presets = models;
  }
  r.rho = spearman(r.xs, r.ys);
  r.iv = cluster_bootstrap_spearman(r.xs, r.ys, clusters, sc.bootstrap, sc.seed);
  r.clusters = distinct_count(clusters);
  // Controlling for the model: ranks minus each model's mean rank, then Pearson.
  if (distinct_count(models) > 1) {
    const auto rx = mid_ranks(r.xs), ry = mid_ranks(r.ys);
    std::map<std::string, std::pair<double, double>> sum;
    std::map<std::string, int> cnt;
    for (std::size_t i = 0; i < rx.size(); ++i) sum[models[i]].first += rx[i], sum[models[i]].second += ry[i], ++cnt[models[i]];
    std::vector<double> ex, ey;
    for (std::size_t i = 0; i < rx.size(); ++i)
      ex.push_back(rx[i] - sum[models[i]].first / cnt[models[i]]), ey.push_back(ry[i] - sum[models[i]].second / cnt[models[i]]);
    r.rho_within = pearson(ex, ey);
  }
  return r;
}

constexpr std::size_t kNAgg = 5;
const char* const kAggregations[kNAgg] = {"routed", "median", "sum", "wins", "clipped_mean"};
// What each cell summary is, in words: the sensitivity table's headers and the figure's y label.
const char* const kAggregationLabels[kNAgg] = {"A of the model-wide routed allocation", "median of per-head A",
                                               "A of summed errors (per-head budgets)", "share of heads won by M",
                                               "clipped mean of A"};

std::string aggregation_label(const std::string& name) {
  for (std::size_t a = 0; a < kNAgg; ++a)
    if (name == kAggregations[a]) return kAggregationLabels[a];
  return name;
}

struct RhoAcrossCells {
  std::vector<double> xs, ys;
  double rho = kNaN, rho_within = kNaN;
  SeedLevelRho seed_level;
  std::vector<QFeasibility> q;  // per budget
  std::vector<std::string> presets;  // of the primary's cells
  Interval iv;
  std::size_t clusters = 0;
  nlohmann::json points = nlohmann::json::array(), per_T = nlohmann::json::array();
  nlohmann::json sensitivity = nlohmann::json::array();  // budget x aggregation
  std::size_t n_T = 0;
};

std::size_t primary_index(const Scenario& sc) {
  std::size_t pb = 0;
  for (std::size_t i = 0; i < sc.budgets.size(); ++i)
    if (sc.budgets[i] == sc.primary_budget) pb = i;
  return pb;
}

RhoAcrossCells rho_across_cells(const Scenario& sc, const std::vector<nlohmann::json>& cells) {
  RhoAcrossCells r;
  const std::size_t pb = primary_index(sc);
  for (const auto& c : cells) {
    const CellAggregates g = cell_aggregates(c["budgets"][pb], sc.error_floor);
    r.points.push_back({{"cell", c["id"]}, {"preset", c["preset"]}, {"prompt_len", c["prompt_len"]},
                        {"cluster", cell_cluster(c)},
                        {"dominated_share", c["dominated_share"]}, {"A", finite_or_null(g.of(sc.primary_aggregation))},
                        {"A_median", finite_or_null(g.median)}, {"A_sum", finite_or_null(g.sum)},
                        {"share_M_wins", finite_or_null(g.wins)}, {"A_clipped_mean", finite_or_null(g.clipped_mean)},
                        {"A_routed", finite_or_null(g.routed)}});
  }
  // (a) the primary definition at the primary budget; (b) the sensitivity table.
  const RhoOf primary = rho_of(sc, cells, pb, sc.primary_aggregation);
  r.xs = primary.xs, r.ys = primary.ys, r.rho = primary.rho, r.iv = primary.iv, r.rho_within = primary.rho_within;
  r.clusters = primary.clusters;
  r.seed_level = seed_level_rho(primary.xs, primary.ys, primary.groups);
  r.presets = primary.presets;
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) r.q.push_back(q_feasibility(cells, bi));
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi)
    for (const char* agg : kAggregations) {
      const RhoOf x = rho_of(sc, cells, bi, agg);
      r.sensitivity.push_back({{"budget", sc.budgets[bi]}, {"aggregation", agg}, {"n_cells", x.xs.size()},
                               {"clusters", x.clusters}, {"rho", finite_or_null(x.rho)},
                               {"ci_lo", finite_or_null(x.iv.lo)}, {"ci_hi", finite_or_null(x.iv.hi)},
                               {"rho_within_model", finite_or_null(x.rho_within)},
                               {"q_feasible", r.q[bi].feasible()},
                               {"primary", sc.budgets[bi] == sc.primary_budget && sc.primary_aggregation == agg}});
    }
  // Per context length T at the primary budget: the cells' primary summary, the share of heads
  // won by eviction, the continuous err(E*)/err(M*) (summed over the cell's heads; median over
  // cells) that moves where the discrete share does not, and the share of ties below the floor.
  std::map<int, std::array<double, 2>> byT;  // E wins, heads
  std::map<int, std::vector<double>> medT, ratioT, floorT;
  for (const auto& c : cells) {
    const int T = c["prompt_len"].get<int>();
    auto& t = byT[T];
    const auto& b = c["budgets"][pb];
    if (const double a = cell_aggregates(b, sc.error_floor).of(sc.primary_aggregation); std::isfinite(a))
      medT[T].push_back(a);
    if (const double q = summed_error_ratio(b); std::isfinite(q)) ratioT[T].push_back(q);
    if (const double f = double_or_nan(b, "share_below_floor"); std::isfinite(f)) floorT[T].push_back(f);
    t[0] += b["wins"]["E"].get<int>();
    t[1] += static_cast<double>(b["heads"].size());
  }
  for (const auto& [T, t] : byT)
    r.per_T.push_back({{"prompt_len", T},
                       {"median_A", finite_or_null(quantile_or_nan(medT[T], 0.5))},
                       {"share_E_wins", finite_or_null(t[1] ? t[0] / t[1] : kNaN)},
                       {"err_E_over_err_M", finite_or_null(quantile_or_nan(ratioT[T], 0.5))},
                       {"share_below_floor", finite_or_null(quantile_or_nan(floorT[T], 0.5))}});
  r.n_T = byT.size();
  return r;
}

// The summary section: the verdict on the primary definition, the sensitivity table, A per
// budget with the measured rates and the ties below the floor, per context length.
std::string summary_section(const Scenario& sc, const std::vector<nlohmann::json>& cells, const BudgetRows& br,
                            const RhoAcrossCells& r) {
  const std::vector<double>& xs = r.xs;
  const double rho = r.rho, rho_within = r.rho_within, stop_budget = br.stop_budget;
  const Interval& iv = r.iv;
  const nlohmann::json& budgets = br.rows;
  const nlohmann::json& perT = r.per_T;
  std::ostringstream s;
  s << "A = 1 - err(M*) / min(err(Q*), err(E*)) (exact recomputation on the " << to_string(sc.queries)
    << " queries; A > 0: mixing tiers beats both endpoints), each family's allocation at the same "
    << to_string(sc.rate_kind) << "-bit budget as its materialised allocation measures it"
    << (sc.rate_kind == RateKind::Total ? " (equal memory: codes, metadata and partial groups counted)"
                                        : " (the code-bit variant: metadata is NOT counted, so the families' memory differs; "
                                          "see the measured total bits below)")
    << ". Errors at or below the floor " << format_or_nan(sc.error_floor, "%.3g")
    << " (float32 rounding of the output) tie; A is not reported for a head where every family is below it. "
       "The cell summary named before the run (`primary_aggregation`) is **" << sc.primary_aggregation << "**.\n\n";
  s << "## Interior advantage vs dominated share (B = " << format_or_nan(sc.primary_budget) << ", "
    << sc.primary_aggregation << ")\n\n";
  RhoEvidence ev;
  ev.cells = xs.size(), ev.clusters = r.clusters, ev.rho = rho, ev.lo = iv.lo, ev.hi = iv.hi;
  ev.share_constant = !xs.empty() && std::all_of(xs.begin(), xs.end(), [&](double x) { return x == xs.front(); });
  ev.share = xs.empty() ? kNaN : xs.front();
  if (const QFeasibility& q0 = r.q[primary_index(sc)]; !q0.feasible())
    ev.withheld = q0.reason(sc.ladder.name(), sc.primary_budget, std::string(to_string(sc.rate_kind)));
  if (rho_standing(ev) == RhoStanding::TooFewCells) {
    // A scenario built for another analysis (staleness, mismatch, ...): a rank correlation
    // over a handful of cells says nothing, so none is reported.
    s << "- " << xs.size() << " cells with a defined A and dominated share: too few for a rank correlation across cells (at least "
      << kMinCellsForRho << "; the headline relation is tested by the scenarios with many cells). Per-cell values: `tables/cells.csv`.\n";
  } else if (rho_standing(ev) == RhoStanding::TooFewClusters) {
    s << "- Spearman rho(dominated share, the cell's " << aggregation_label(sc.primary_aggregation) << ") over " << xs.size()
      << " cells = " << format_or_nan(rho, "%.3f") << ", but the cells come from " << r.clusters
      << " independent model draws (preset x seed; at least " << kMinClustersForRho
      << " are needed): no interval and no verdict across cells (the cells of one draw are not independent samples; the "
         "headline relation is tested by scenario 01). Per-cell values: `tables/cells.csv`.\n";
  } else {
    const QFeasibility& qp = r.q[primary_index(sc)];
    s << "- Spearman rho(dominated share, the cell's " << aggregation_label(sc.primary_aggregation) << ") over " << xs.size()
      << " cells in " << r.clusters << " independent clusters (model draw x seed)";
    if (std::isfinite(rho) && std::isfinite(iv.lo) && std::isfinite(iv.hi))
      s << " = " << format_or_nan(rho, "%.3f") << ", 95% cluster-bootstrap interval [" << format_or_nan(iv.lo, "%.3f")
        << ", " << format_or_nan(iv.hi, "%.3f") << "] (" << iv.used << " of " << sc.bootstrap
        << " resamples of whole clusters, seed " << sc.seed << ").\n";
    else
      s << ": not defined, because the dominated share or the cell's A is the same in every cell (a rank correlation "
           "needs both to vary); no interval.\n";
    if (std::isfinite(rho_within))
      s << "- Controlling for the model (per-preset residual ranks, the within-model partial rho): "
        << format_or_nan(rho_within, "%.3f") << ".\n";
    if (r.seed_level.groups > 0)
      s << "- Seed level (ranks minus each group's mean rank, a group = preset x T"
        << (sc.sweeps_logit_scales ? " x logit scale" : "")
        << (std::any_of(cells.begin(), cells.end(), [](const nlohmann::json& c) { return c.contains("sweep_key"); })
                ? " x swept value"
                : "")
        << "; " << r.seed_level.cells << " cells in "
        << r.seed_level.groups << (r.seed_level.groups == 1 ? " group" : " groups")
        << ": everything but the seed held fixed): rho = "
        << format_or_nan(r.seed_level.rho, "%.3f", "not defined (constant within every group)") << ".\n";
    const std::string verdict = rho_verdict(ev);
    s << "- **Verdict**: the headline relation of docs/model.md (the dominated share orders the interior advantage: "
         "Spearman rho strongly negative; the reference paper reports -0.978 over 25 cells) " << verdict << ".\n";
    // Where the sign differs from the primary's among the sensitivity rows with a verdict.
    {
      std::vector<std::string> differ;
      const int primary_sign = iv.hi < 0 ? -1 : iv.lo > 0 ? 1 : 0;
      for (const auto& e : r.sensitivity) {
        if (!e.value("q_feasible", true) || e["primary"].get<bool>()) continue;
        const double lo = double_or_nan(e, "ci_lo"), hi = double_or_nan(e, "ci_hi");
        if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
        const int sign = hi < 0 ? -1 : lo > 0 ? 1 : 0;
        if (sign != primary_sign)
          differ.push_back("B = " + format_or_nan(e["budget"].get<double>()) + " " + e["aggregation"].get<std::string>() +
                           (sign < 0 ? " (below 0)" : sign > 0 ? " (above 0)" : " (contains 0)"));
      }
      if (qp.feasible())
        s << "- The verdict depends on the budget and the cell summary where the sensitivity table's intervals say otherwise: "
          << (differ.empty() ? std::string("none (every row with a verdict agrees in sign)") : join(differ, ", "))
          << "; the ladder, the rate convention and the generator settings are varied by the sensitivity scenarios "
             "(docs/scenarios.md, \"What the headline depends on\").\n";
    }
    if (const std::size_t np = distinct_count(r.presets); np == 1)
      s << "- The interval resamples clusters (seeds of one preset): it covers new seeds of this preset, not other "
           "architectures.\n";
    else
      s << "- The interval resamples clusters (preset x seed); the presets are " << np
        << " fixed architectures, a fixed effect: it covers new seeds of these presets, not new architectures.\n";
    if (r.clusters < 12) s << "- Note: " << r.clusters << " independent clusters; the interval is wide.\n";
    s << "\nSensitivity (rho and its cluster-bootstrap interval for each cell summary and budget; **bold** = primary; "
         "no verdict where Q is infeasible):\n\n| B |";
    for (const char* label : kAggregationLabels) s << ' ' << label << " |";
    s << "\n|---|";
    for (std::size_t a = 0; a < kNAgg; ++a) s << "---|";
    s << '\n';
    for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) {
      s << "| " << format_or_nan(sc.budgets[bi]);
      for (std::size_t a = 0; a < kNAgg; ++a) {
        const auto& e = r.sensitivity[bi * kNAgg + a];
        const double er = double_or_nan(e, "rho"), elo = double_or_nan(e, "ci_lo"), ehi = double_or_nan(e, "ci_hi");
        std::string cell = std::isfinite(er) && std::isfinite(elo) && std::isfinite(ehi)
                               ? format_or_nan(er, "%.2f") + " [" + format_or_nan(elo, "%.2f") + ", " + format_or_nan(ehi, "%.2f") + "]"
                               : std::string("not defined (constant)");
        if (!r.q[bi].feasible()) cell += " (Q infeasible: M vs E only, no verdict)";
        s << " | " << (e["primary"].get<bool>() ? "**" + cell + "**" : cell);
      }
      s << " |\n";
    }
  }
  {  // Q's feasibility per budget, whatever the number of cells.
    std::vector<std::string> reasons;
    for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi)
      if (!r.q[bi].feasible())
        reasons.push_back(r.q[bi].reason(sc.ladder.name(), sc.budgets[bi], std::string(to_string(sc.rate_kind))));
    if (!reasons.empty()) {
      s << "\nWhere Q is infeasible:\n\n";
      for (const auto& x : reasons) s << "- " << x << ".\n";
    }
  }
  s << "\n## Per-head advantage vs budget\n\n| B | median A (heads) | mean of A clipped to [-1, 1] (heads) | heads with A > 0 | ties below floor | "
       "wins Q / E / M | measured total bits Q / E / M | code bits Q / E / M | model-wide routed: heads to Q / E / M, "
       "median A_model |\n|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t bi = 0; bi < budgets.size(); ++bi) {
    const auto& b = budgets[bi];
    // Mean over the cells' heads of each family's measured rates, and the ties below the floor.
    double tot[3] = {0, 0, 0}, code[3] = {0, 0, 0}, n[3] = {0, 0, 0}, below = 0, heads = 0;
    int to[3] = {0, 0, 0};
    std::vector<double> a_model;
    for (const auto& c : cells) {
      const auto& cb = c["budgets"][bi];
      if (cb.contains("model")) {
        const auto& md = cb["model"];
        if (const double a = double_or_nan(md, "A"); std::isfinite(a)) a_model.push_back(a);
        to[0] += md["routed_to"].value("Q", 0), to[1] += md["routed_to"].value("E", 0), to[2] += md["routed_to"].value("M", 0);
      }
      below += cb.value("below_floor", 0), heads += static_cast<double>(cb["heads"].size());
      for (int f = 0; f < 3; ++f) {
        const char* F = f == 0 ? "Q" : f == 1 ? "E" : "M";
        if (!cb.contains("rates")) continue;
        const auto& rr = cb["rates"][F];
        const double k = rr.value("heads", 0);
        if (k > 0) tot[f] += k * double_or_nan(rr, "total_bits"), code[f] += k * double_or_nan(rr, "code_bits"), n[f] += k;
      }
    }
    auto mean3 = [&](const double* v) {
      std::string o;
      for (int f = 0; f < 3; ++f) o += (f ? " / " : "") + (n[f] > 0 ? format_or_nan(v[f] / n[f], "%.3f") : std::string("-"));
      return o;
    };
    s << "| " << format_or_nan(b["budget"].get<double>()) << " | "
      << format_or_nan(double_or_nan(b, "median_A_heads"), "%.4f") << " | "
      << format_or_nan(double_or_nan(b, "clipped_mean_A_heads"), "%.4f") << " | "
      << format_or_nan(100 * double_or_nan(b, "share_heads_positive"), "%.1f") << "% | "
      << format_or_nan(heads > 0 ? 100 * below / heads : kNaN, "%.1f") << "% | " << b["wins"]["Q"] << " / "
      << b["wins"]["E"] << " / " << b["wins"]["M"] << " | " << mean3(tot) << " | " << mean3(code) << " | " << to[0]
      << " / " << to[1] << " / " << to[2] << ", " << format_or_nan(quantile_or_nan(a_model, 0.5), "%.4f") << " |\n";
  }
  if (std::isfinite(stop_budget))
    s << "\nPooled over the cells, the interior stops paying (median A over heads <= 0 from there up) at B = "
      << format_or_nan(stop_budget) << ".\n";
  else
    s << "\nPooled over the cells, the interior pays (median A over heads > 0) at the largest budget swept (B = "
      << format_or_nan(*std::max_element(sc.budgets.begin(), sc.budgets.end())) << "); no stop budget within the sweep.\n";
  {
    const std::vector<StopBudget> stops = stop_budgets(sc, cells);
    if (stops.size() > 1 || (stops.size() == 1 && stops.front().clusters > 1)) {
      s << "\nPer preset (the stop budget and its 95% interval from resampling the preset's seeds; \"beyond\" = no stop "
           "within the sweep):\n\n| preset | clusters | stop budget | 95% interval | resamples without a stop |\n|---|---|---|---|---|\n";
      auto b = [](double v) { return std::isinf(v) ? std::string("beyond") : format_or_nan(v); };
      for (const StopBudget& x : stops)
        s << "| " << x.preset << " | " << x.clusters << " | " << (std::isfinite(x.stop) ? format_or_nan(x.stop) : "beyond")
          << " | [" << b(x.lo) << ", " << b(x.hi) << "] | " << format_or_nan(100 * x.share_no_stop, "%.0f") << "% |\n";
    }
  }
  if (r.n_T > 1) {
    s << "\n## Context length (B = " << format_or_nan(sc.primary_budget)
      << ")\n\nPooled over presets (the per-preset trends follow; presets can move in opposite directions):\n\n"
         "| T | median over cells of the cell's " << sc.primary_aggregation
      << " A | share of heads won by eviction | err(E*)/err(M*) (cell sums, median over cells) | ties below floor |\n|---|---|---|---|---|\n";
    for (const auto& t : perT)
      s << "| " << t["prompt_len"] << " | " << format_or_nan(double_or_nan(t, "median_A"), "%.4f") << " | "
        << format_or_nan(100 * double_or_nan(t, "share_E_wins"), "%.1f") << "% | "
        << format_or_nan(double_or_nan(t, "err_E_over_err_M"), "%.4g") << " | "
        << format_or_nan(100 * double_or_nan(t, "share_below_floor"), "%.1f") << "% |\n";
    s << "\nFrom the shortest to the longest context, per preset (\"toward eviction\" only where the share of heads won by "
         "eviction rises AND err(E*)/err(M*) falls):\n\n| preset | T | heads won by eviction | err(E*)/err(M*) | direction |\n"
         "|---|---|---|---|---|\n";
    for (const ContextTrend& t : context_trends(sc, cells, primary_index(sc)))
      s << "| " << t.preset << " | " << t.T0 << " -> " << t.T1 << " | " << format_or_nan(100 * t.e_share0, "%.1f")
        << "% -> " << format_or_nan(100 * t.e_share1, "%.1f") << "% | " << format_or_nan(t.ratio0, "%.4g") << " -> "
        << format_or_nan(t.ratio1, "%.4g") << " | " << t.direction << " |\n";
  }
  return s.str();
}

std::shared_ptr<const Analysis> read_interior_section(const YAML::Node& root, const YamlReader& c, const Scenario&) {
  auto a = std::make_shared<InteriorAnalysis>();
  if (const YAML::Node d = root["dense_routing"]) {
    for (const auto& q : c.list(d, "dense_routing")) a->dense_quantizers.push_back(c.str(q, "dense_routing"));
    c.wrap(d, "dense_routing", [&] {
      validate_dense_quantizers(a->dense_quantizers, "dense_routing");
      return 0;
    });
  }
  return a;
}

std::vector<NamedFigure> figures_interior(const std::string& dir) {
  const nlohmann::json in = read_table_json(dir + "/tables/interior.json");
  const std::string verdict = in.value("queries", std::string("decode"));
  std::vector<NamedFigure> out;
  {
    Figure f;
    f.title = "Interior advantage vs dominated share (B = " + format_label(double_or_nan(in, "primary_budget")) + ")";
    // The statistic as summary.md states it (interior_verdict.hpp: one rule for both).
    RhoEvidence ev;
    ev.cells = in.value("n_cells", std::size_t{0}), ev.clusters = in.value("clusters", std::size_t{0});
    ev.rho = double_or_nan(in, "rho"), ev.lo = double_or_nan(in, "ci_lo"), ev.hi = double_or_nan(in, "ci_hi");
    for (const auto& q : in.value("q_feasible", nlohmann::json::array()))
      if (q.value("budget", kNaN) == double_or_nan(in, "primary_budget") && !q.value("feasible", true))
        ev.withheld = "Q is infeasible at B = " + format_label(double_or_nan(in, "primary_budget"));
    {
      std::vector<double> shares;
      for (const auto& p : in.at("points"))
        if (const double x = double_or_nan(p, "dominated_share"); std::isfinite(x)) shares.push_back(x);
      ev.share_constant = !shares.empty() && std::all_of(shares.begin(), shares.end(), [&](double x) { return x == shares.front(); });
      ev.share = shares.empty() ? kNaN : shares.front();
    }
    f.note = rho_statement(ev);
    f.xlabel = "dominated share (fraction of the cell's heads with R_h(2-bit) >= 1)";
    f.ylabel = "cell's " + aggregation_label(in.value("primary_aggregation", Scenario{}.primary_aggregation)) + " (" + verdict +
               " queries)";
    std::map<std::string, Series> by;
    double ylo = INFINITY, yhi = -INFINITY;
    for (const auto& p : in.at("points")) {
      const double x = double_or_nan(p, "dominated_share"), y = double_or_nan(p, "A");
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      Series& s = by[p.at("preset").get<std::string>()];
      s.x.push_back(x), s.y.push_back(y);
      ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
    int k = 0;
    for (auto& [name, s] : by) {
      s.name = name;
      s.color = palette(k++);
      s.size = 10;
      f.series.push_back(s);
    }
    ylo = std::min(ylo, 0.0), yhi = std::max(yhi, 0.0);
    pad_range(ylo, yhi, 0.12);
    f.xmin = -0.05, f.xmax = 1.05, f.ymin = ylo, f.ymax = yhi;
    f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {-1, 2}, {0, 0}, 1});
    // A correlation across cells needs cells: with one (or none with a finite A) the figure
    // would only say "rho = n/a, n = 1".
    std::size_t points = 0;
    for (const auto& [name, s] : by) points += s.x.size();
    std::string skipped;
    if (points < 2)
      skipped = "rho across cells is n/a (" + std::to_string(points) + " cell" + (points == 1 ? "" : "s") +
                " with a finite A and dominated share; a correlation across cells needs at least 2)";
    out.push_back({"interior_vs_dominated", f, skipped});
  }
  {
    const Figure f = advantage_vs_budget_figure(in, read_table_csv(dir + "/tables/heads.csv"));
    out.push_back({"advantage_vs_budget", f, f.series.at(0).x.empty() ? "no head has a finite interior advantage A" : ""});
  }
  return out;
}

}  // namespace

double cell_median_advantage(const nlohmann::json& budget) {
  std::vector<double> v;
  for (const auto& h : budget.at("heads"))
    if (const double a = double_or_nan(h, "A"); std::isfinite(a)) v.push_back(a);
  return quantile_or_nan(v, 0.5);
}

CellAggregates cell_aggregates(const nlohmann::json& budget, double floor) {
  CellAggregates g;
  g.median = cell_median_advantage(budget);
  double sq = 0, se = 0, sm = 0, clipped = 0;
  bool q_all = true, e_all = true, m_all = true;
  int n = 0, decided = 0, m_wins = 0;
  for (const auto& h : budget.at("heads")) {
    const double q = double_or_nan(h, "err_Q"), e = double_or_nan(h, "err_E"), m = double_or_nan(h, "err_M");
    q_all = q_all && std::isfinite(q), e_all = e_all && std::isfinite(e), m_all = m_all && std::isfinite(m);
    if (std::isfinite(q)) sq += q;
    if (std::isfinite(e)) se += e;
    if (std::isfinite(m)) sm += m;
    if (const double a = double_or_nan(h, "A"); std::isfinite(a)) clipped += std::clamp(a, -1.0, 1.0), ++n;
    const std::string w = h.value("winner", std::string());
    if (!w.empty()) ++decided, m_wins += w == "M" ? 1 : 0;
  }
  const double heads = static_cast<double>(budget.at("heads").size());
  if (m_all && heads > 0)
    g.sum = interior_advantage_of(sm, q_all ? sq : kNaN, e_all ? se : kNaN, floor * heads);
  g.wins = decided ? static_cast<double>(m_wins) / decided : kNaN;
  g.clipped_mean = n ? clipped / n : kNaN;
  if (budget.contains("model")) g.routed = double_or_nan(budget.at("model"), "A");
  return g;
}

double CellAggregates::of(const std::string& name) const {
  if (name == "median") return median;
  if (name == "sum") return sum;
  if (name == "wins") return wins;
  if (name == "clipped_mean") return clipped_mean;
  if (name == "routed") return routed;
  throw InputError("cell aggregation '" + name + "': choose routed, median, sum, wins or clipped_mean.");
}

void InteriorAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  add_budgets(ctx, dense_quantizers, cell);  // and R2 (add_dominance_ratios)
}

std::string InteriorAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                           const std::string& dir) const {
  const std::string qname(to_string(sc.queries));
  write_cell_tables(cells, dir);
  const BudgetRows br = write_budget_table(sc, cells, dir);
  const RhoAcrossCells r = rho_across_cells(sc, cells);
  {
    CsvWriter sv({"budget", "aggregation", "n_cells", "clusters", "rho", "ci_lo", "ci_hi", "rho_within_model", "primary"});
    for (const auto& e : r.sensitivity)
      sv.row() << format_or_nan(e["budget"].get<double>()) << e["aggregation"].get<std::string>()
               << e["n_cells"].get<std::size_t>() << e["clusters"].get<std::size_t>()
               << format_or_nan(double_or_nan(e, "rho")) << format_or_nan(double_or_nan(e, "ci_lo"))
               << format_or_nan(double_or_nan(e, "ci_hi")) << format_or_nan(double_or_nan(e, "rho_within_model"))
               << e["primary"].get<bool>();
    write_file_atomically(dir + "/sensitivity.csv", sv.text());
  }
  nlohmann::json stops_json = nlohmann::json::array(), q_json = nlohmann::json::array();
  // A bound beyond the sweep is null with its *_beyond_sweep flag true (a column holds numbers
  // or null only: the tables' readers refuse a column of mixed kinds).
  for (const StopBudget& x : stop_budgets(sc, cells))
    stops_json.push_back({{"preset", x.preset}, {"clusters", x.clusters}, {"stop", finite_or_null(x.stop)},
                          {"stop_beyond_sweep", std::isinf(x.stop)},
                          {"ci_lo", finite_or_null(x.lo)}, {"ci_lo_beyond_sweep", std::isinf(x.lo)},
                          {"ci_hi", finite_or_null(x.hi)}, {"ci_hi_beyond_sweep", std::isinf(x.hi)},
                          {"share_no_stop", finite_or_null(x.share_no_stop)}});
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi)
    q_json.push_back({{"budget", sc.budgets[bi]}, {"feasible", r.q[bi].feasible()},
                      {"heads_infeasible", r.q[bi].heads_infeasible}, {"heads", r.q[bi].heads},
                      {"cells_model_infeasible", r.q[bi].cells_model_infeasible}});
  const nlohmann::json interior = {{"scenario", sc.name},
                                   {"queries", qname},
                                   {"rate_kind", std::string(to_string(sc.rate_kind))},
                                   {"error_floor", sc.error_floor},
                                   {"primary_budget", sc.primary_budget},
                                   {"primary_aggregation", sc.primary_aggregation},
                                   {"clusters", r.clusters},
                                   {"sensitivity", r.sensitivity},
                                   {"n_cells", r.xs.size()},
                                   {"rho", finite_or_null(r.rho)},
                                   {"ci_lo", finite_or_null(r.iv.lo)},
                                   {"ci_hi", finite_or_null(r.iv.hi)},
                                   {"resamples", sc.bootstrap},
                                   {"resamples_used", r.iv.used},
                                   {"seed", sc.seed},
                                   {"rho_within_model", finite_or_null(r.rho_within)},
                                   {"stop_budget", finite_or_null(br.stop_budget)},
                                   {"stop_budget_per_preset", stops_json},
                                   {"rho_seed_level", finite_or_null(r.seed_level.rho)},
                                   {"paper_rho", kPaperRho},
                                   {"paper_comparison", paper_comparison(r.iv.lo, r.iv.hi)},
                                   {"q_feasible", q_json},
                                   {"budgets", br.rows},
                                   {"per_context_length", r.per_T},
                                   {"points", r.points}};
  write_file_atomically(dir + "/interior.json", interior.dump(1) + "\n");
  std::string dense_csv;
  const std::string dense = dense_routing_section(sc, cells, &dense_csv);
  if (!dense_csv.empty()) write_file_atomically(dir + "/dense_routing.csv", dense_csv);
  const std::string dose = dose_response_section(
      sc, cells, primary_index(sc),
      [&](const nlohmann::json& b) { return cell_aggregates(b, sc.error_floor).of(sc.primary_aggregation); },
      "cell's " + aggregation_label(sc.primary_aggregation));
  return summary_section(sc, cells, br, r) + dose + dense;
}

AnalysisType InteriorAnalysis::type() {
  return {"interior",
          "A = 1 - err(M*) / min(err(Q*), err(E*)) per head and budget; rho(dominated share, A) across cells",
          {"dense_routing"},
          read_interior_section,
          figures_interior};
}

Figure advantage_vs_budget_figure(const nlohmann::json& interior,
                                  const std::map<std::string, std::vector<std::string>>& heads,
                                  std::vector<std::size_t>* rows) {
  if (rows) rows->clear();
  Figure f;
  f.title = "Per-head interior advantage A vs budget";
  f.xlabel = "budget B (bits per key element)";
  f.ylabel = "A (" + interior.value("queries", std::string("decode")) + " queries)";  // the title names A
  Series pts{"heads (one point per head and cell)", faded(palette(0), 90), Style::Points, {}, {}, 6};
  pts.marker = Marker::Disc;
  const auto& bs = heads.at("budget");
  const auto& as = heads.at("A");
  // The swept budgets as categories 1..n (evenly spaced, labelled with their value): no
  // empty column for a budget between them that was not swept.
  std::vector<double> budgets;
  for (const auto& b : interior.at("budgets")) budgets.push_back(b.at("budget").get<double>());
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  auto column = [&](double b) {  // 1-based position of budget b; 0 when b was not swept
    for (std::size_t k = 0; k < budgets.size(); ++k)
      if (std::abs(budgets[k] - b) <= 1e-9 * std::max(1.0, std::abs(b))) return static_cast<double>(k + 1);
    return 0.0;
  };
  for (std::size_t k = 0; k < budgets.size(); ++k) f.xticks.push_back({static_cast<double>(k + 1), format_label(budgets[k], "%g")});
  double ylo = 0, yhi = 1;
  for (std::size_t i = 0; i < bs.size() && i < as.size(); ++i) {
    const double a = std::strtod(as[i].c_str(), nullptr), x = column(std::strtod(bs[i].c_str(), nullptr));
    if (!std::isfinite(a) || x == 0) continue;
    pts.x.push_back(x + (static_cast<double>(i % 9) - 4) * 0.03);  // deterministic jitter within the column
    pts.y.push_back(a);
    if (rows) rows->push_back(i);
  }
  Series median{"median over heads", palette(4), Style::Line, {}, {}, 6};
  median.marker = Marker::Diamond;
  for (const auto& b : interior.at("budgets"))
    if (std::isfinite(double_or_nan(b, "median_A_heads")) && column(double_or_nan(b, "budget")) > 0)
      median.x.push_back(column(double_or_nan(b, "budget"))), median.y.push_back(double_or_nan(b, "median_A_heads"));
  // A is unbounded below (err(M*) >> the endpoints): clip the axis at the 5th percentile.
  std::vector<double> sorted = pts.y;
  std::sort(sorted.begin(), sorted.end());
  int below = 0;
  if (!sorted.empty()) {
    const double p5 = sorted[sorted.size() / 20];
    ylo = std::min(0.0, std::max(p5, -2.0));
    for (double& y : pts.y)
      if (y < ylo) y = ylo, ++below;
  }
  f.note = std::to_string(pts.x.size()) + " points, every one drawn; columns jittered within a budget.";
  if (below > 0)
    f.note += " " + std::to_string(below) + " heads with A < " + format_label(ylo, "%.2g") + " are drawn at A = " +
              format_label(ylo, "%.2g") + " (the axis is clipped at the 5th percentile, at most -2 below 0).";
  // Drawn in this order: the points, the zero line, the median on top of both.
  f.series = {pts, {"", Rgb{120, 120, 120}, Style::Dashed, {-100, 100}, {0, 0}, 1}, median};
  pad_range(ylo, yhi, 0.08);
  f.xmin = 0.5, f.xmax = budgets.size() + 0.5, f.ymin = ylo, f.ymax = yhi;
  return f;
}

}  // namespace tierlab
