// The interior analysis (interior.hpp).
#include "scenarios/analyses/interior.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "model/dominance.hpp"
#include "model/surrogate.hpp"
#include "scenarios/analyses/stats.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/run/atomic_file.hpp"
#include "scenarios/run/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Fewer cells than this: no rank correlation across cells is reported in summary.md (the
// tables keep rho and its interval).
constexpr std::size_t kMinCellsForRho = 5;

// NaN -> null in JSON.
double verdict_err(const FamilyOutcome& f, QuerySet q) {
  if (!f.feasible) return std::numeric_limits<double>::quiet_NaN();
  return q == QuerySet::Decode ? f.decode.rel_error : f.obs.rel_error;
}

// Family with the least error; ties to the endpoint (Q, then E). "" when none feasible.
std::string winner(double q, double e, double m) {
  std::string best;
  double v = std::numeric_limits<double>::infinity();
  const std::pair<const char*, double> c[3] = {{"Q", q}, {"E", e}, {"M", m}};
  for (const auto& [name, err] : c)
    if (std::isfinite(err) && err < v) v = err, best = name;
  return best;
}

// R_h(2-bit tier) per head (surrogate on the observation queries): cell keys R2, R2_median.
void add_dominance_ratios(const CellContext& ctx, nlohmann::json& j) {
  const Scenario& sc = ctx.scenario;
  const TraceReader& trace = ctx.trace;
  const TraceMeta& m = trace.meta();
  // R_h(2-bit tier) per head (surrogate on the observation queries).
  const int two = sc.ladder.index_of_bits(2);
  nlohmann::json r2 = nlohmann::json::array();
  std::vector<double> r2v;
  if (two >= 0)
    for (int l = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h) {
        const HeadData head = trace.head(l, h);
        const DominanceReport d =
            dominance(surrogate_costs(head, m.rope, observation_queries(head), sc.ladder), sc.rate_kind);
        r2v.push_back(d.R[static_cast<std::size_t>(two)]);
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
void add_budgets(const CellContext& ctx, nlohmann::json& j) {
  const Scenario& sc = ctx.scenario;
  Recomputer& backend = ctx.backend;
  const TraceReader& trace = ctx.trace;
  j["budgets"] = nlohmann::json::array();
  double dominated = std::nan("");
  InteriorOptions opt;
  opt.rate_kind = sc.rate_kind;
  opt.ladder = sc.ladder;
  // Every budget at once: each head's surrogate costs are computed once for all of them.
  const std::vector<InteriorReport> reports = interior_advantage(trace, opt, sc.budgets, backend, ctx.stop);
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
    int wins[3] = {0, 0, 0}, defined = 0;
    for (const HeadInterior& h : rep.heads) {
      const double q = verdict_err(h.Q, sc.queries), e = verdict_err(h.E, sc.queries), mm = verdict_err(h.M, sc.queries);
      const std::string w = winner(q, e, mm);
      if (w == "Q") ++wins[0];
      if (w == "E") ++wins[1];
      if (w == "M") ++wins[2];
      const double A = sc.queries == QuerySet::Decode ? h.advantage_decode : h.advantage_obs;
      defined += std::isfinite(A) ? 1 : 0;
      b["heads"].push_back({{"layer", h.layer},
                            {"kv_head", h.kv_head},
                            {"A", finite_or_null(A)},
                            {"A_surrogate", finite_or_null(h.advantage_surrogate)},
                            {"err_Q", finite_or_null(q)},
                            {"err_E", finite_or_null(e)},
                            {"err_M", finite_or_null(mm)},
                            {"option_Q", h.Q.option},
                            {"winner", w},
                            {"dominated_2bit", h.dominated_2bit}});
    }
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
  std::ostringstream cc, hc;
  cc << "cell,preset,seed,prompt_len,logit_scale,budget,dominated_share,R2_median,A_median,A,A_obs,A_decode,A_surrogate,"
        "heads_defined,wins_Q,wins_E,wins_M,winner\n";
  hc << "cell,preset,prompt_len,logit_scale,budget,layer,kv_head,A,A_surrogate,err_Q,err_E,err_M,winner,dominated_2bit,R2\n";
  nlohmann::json cells_json = nlohmann::json::array();
  for (const auto& c : cells) {
    for (const auto& b : c["budgets"]) {
      const auto& w = b["wins"];
      cc << c["id"].get<std::string>() << ',' << c["preset"].get<std::string>() << ',' << c["seed"].get<std::uint64_t>()
         << ',' << c["prompt_len"].get<int>() << ',' << format_or_nan(double_or_nan(c, "logit_scale")) << ','
         << format_or_nan(b["budget"].get<double>()) << ',' << format_or_nan(double_or_nan(c, "dominated_share")) << ','
         << format_or_nan(double_or_nan(c, "R2_median")) << ',' << format_or_nan(cell_median_advantage(b)) << ','
         << format_or_nan(double_or_nan(b, "A")) << ',' << format_or_nan(double_or_nan(b, "A_obs")) << ','
         << format_or_nan(double_or_nan(b, "A_decode")) << ',' << format_or_nan(double_or_nan(b, "A_surrogate")) << ','
         << b["defined"].get<int>() << ',' << w["Q"].get<int>() << ',' << w["E"].get<int>() << ',' << w["M"].get<int>()
         << ',' << b["winner"].get<std::string>() << '\n';
      cells_json.push_back({{"cell", c["id"]}, {"preset", c["preset"]}, {"seed", c["seed"]}, {"prompt_len", c["prompt_len"]},
                            {"logit_scale", c["logit_scale"]}, {"budget", b["budget"]},
                            {"dominated_share", c["dominated_share"]}, {"R2_median", c["R2_median"]},
                            {"A_median", finite_or_null(cell_median_advantage(b))}, {"A", b["A"]},
                            {"A_obs", b["A_obs"]}, {"A_decode", b["A_decode"]}, {"A_surrogate", b["A_surrogate"]},
                            {"heads_defined", b["defined"]}, {"wins", w}, {"winner", b["winner"]}});
      std::size_t hi = 0;
      for (const auto& h : b["heads"]) {
        const double R2 = hi < c["R2"].size() && !c["R2"][hi].is_null() ? c["R2"][hi].get<double>() : kNaN;
        hc << c["id"].get<std::string>() << ',' << c["preset"].get<std::string>() << ',' << c["prompt_len"].get<int>()
           << ',' << format_or_nan(double_or_nan(c, "logit_scale")) << ',' << format_or_nan(b["budget"].get<double>())
           << ',' << h["layer"].get<int>() << ',' << h["kv_head"].get<int>() << ','
           << format_or_nan(double_or_nan(h, "A")) << ',' << format_or_nan(double_or_nan(h, "A_surrogate")) << ','
           << format_or_nan(double_or_nan(h, "err_Q")) << ',' << format_or_nan(double_or_nan(h, "err_E")) << ','
           << format_or_nan(double_or_nan(h, "err_M")) << ',' << h["winner"].get<std::string>() << ','
           << (h["dominated_2bit"].get<bool>() ? 1 : 0) << ',' << format_or_nan(R2) << '\n';
        ++hi;
      }
    }
  }
  write_file_atomically(dir + "/cells.csv", cc.str());
  write_file_atomically(dir + "/heads.csv", hc.str());
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
  std::ostringstream bc;
  bc << "budget,mean_A_cells,mean_A_heads,median_A_heads,share_heads_positive,heads_defined,wins_Q,wins_E,wins_M\n";
  std::vector<double> mean_by_budget;
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) {
    double sc_sum = 0, h_sum = 0;
    std::vector<double> hv;
    int sc_n = 0, h_n = 0, pos = 0, wq = 0, we = 0, wm = 0;
    for (const auto& c : cells) {
      const auto& b = c["budgets"][bi];
      if (const double a = double_or_nan(b, "A"); std::isfinite(a)) sc_sum += a, ++sc_n;
      for (const auto& h : b["heads"])
        if (const double a = double_or_nan(h, "A"); std::isfinite(a))
          h_sum += a, ++h_n, pos += a > 0 ? 1 : 0, hv.push_back(a);
      wq += b["wins"]["Q"].get<int>(), we += b["wins"]["E"].get<int>(), wm += b["wins"]["M"].get<int>();
    }
    const double mc = sc_n ? sc_sum / sc_n : kNaN, mh = h_n ? h_sum / h_n : kNaN, sp = h_n ? double(pos) / h_n : kNaN;
    const double med = quantile_or_nan(hv, 0.5);
    mean_by_budget.push_back(med);
    bc << format_or_nan(sc.budgets[bi]) << ',' << format_or_nan(mc) << ',' << format_or_nan(mh) << ','
       << format_or_nan(med) << ',' << format_or_nan(sp) << ',' << h_n << ',' << wq << ',' << we << ',' << wm << '\n';
    budgets.push_back({{"budget", sc.budgets[bi]},
                       {"mean_A_cells", finite_or_null(mc)},
                       {"mean_A_heads", finite_or_null(mh)},
                       {"median_A_heads", finite_or_null(med)},
                       {"share_heads_positive", finite_or_null(sp)},
                       {"heads_defined", h_n},
                       {"wins", {{"Q", wq}, {"E", we}, {"M", wm}}}});
  }
  write_file_atomically(dir + "/budgets.csv", bc.str());
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

struct RhoAcrossCells {
  std::vector<double> xs, ys;
  double rho = kNaN, rho_within = kNaN;
  Interval iv;
  nlohmann::json points = nlohmann::json::array(), per_T = nlohmann::json::array();
  std::size_t n_T = 0;
};

RhoAcrossCells rho_across_cells(const Scenario& sc, const std::vector<nlohmann::json>& cells) {
  RhoAcrossCells r;
  std::vector<double>& xs = r.xs;
  std::vector<double>& ys = r.ys;
  nlohmann::json& points = r.points;
  // ---- (a) rho across cells at the primary budget
  std::size_t pb = 0;
  for (std::size_t i = 0; i < sc.budgets.size(); ++i)
    if (sc.budgets[i] == sc.primary_budget) pb = i;
  std::vector<std::string> models;
  for (const auto& c : cells) {
    const double x = double_or_nan(c, "dominated_share"), y = cell_median_advantage(c["budgets"][pb]);
    points.push_back({{"cell", c["id"]}, {"preset", c["preset"]}, {"prompt_len", c["prompt_len"]},
                      {"dominated_share", finite_or_null(x)}, {"A", finite_or_null(y)}});
    if (std::isfinite(x) && std::isfinite(y)) xs.push_back(x), ys.push_back(y), models.push_back(c["preset"]);
  }
  r.rho = spearman(xs, ys);
  r.iv = bootstrap_spearman(xs, ys, sc.bootstrap, sc.seed);
  // Controlling for the model: ranks minus each model's mean rank, then Pearson.
  {
    const std::set<std::string> distinct(models.begin(), models.end());
    if (distinct.size() > 1) {
      const auto rx = mid_ranks(xs), ry = mid_ranks(ys);
      std::map<std::string, std::pair<double, double>> sum;
      std::map<std::string, int> cnt;
      for (std::size_t i = 0; i < rx.size(); ++i) sum[models[i]].first += rx[i], sum[models[i]].second += ry[i], ++cnt[models[i]];
      std::vector<double> ex, ey;
      for (std::size_t i = 0; i < rx.size(); ++i)
        ex.push_back(rx[i] - sum[models[i]].first / cnt[models[i]]), ey.push_back(ry[i] - sum[models[i]].second / cnt[models[i]]);
      r.rho_within = pearson(ex, ey);
    }
  }
  // Per context length T: mean A at the primary budget and share of heads won by eviction.
  std::map<int, std::array<double, 4>> byT;  // -, -, E wins, heads
  std::map<int, std::vector<double>> medT;    // cell medians of A
  for (const auto& c : cells) {
    auto& t = byT[c["prompt_len"].get<int>()];
    const auto& b = c["budgets"][pb];
    if (const double a = cell_median_advantage(b); std::isfinite(a)) medT[c["prompt_len"].get<int>()].push_back(a);
    t[2] += b["wins"]["E"].get<int>();
    t[3] += static_cast<double>(b["heads"].size());
  }
  for (const auto& [T, t] : byT)
    r.per_T.push_back({{"prompt_len", T},
                    {"median_A", finite_or_null(quantile_or_nan(medT[T], 0.5))},
                    {"share_E_wins", finite_or_null(t[3] ? t[2] / t[3] : kNaN)}});
  r.n_T = byT.size();
  return r;
}

// The summary section: rho across cells, A per budget, per context length.
std::string summary_section(const Scenario& sc, const BudgetRows& br, const RhoAcrossCells& r) {
  const std::vector<double>& xs = r.xs;
  const double rho = r.rho, rho_within = r.rho_within, stop_budget = br.stop_budget;
  const Interval& iv = r.iv;
  const nlohmann::json& budgets = br.rows;
  const nlohmann::json& perT = r.per_T;
  std::ostringstream s;
  s << "A = 1 - err(M*) / min(err(Q*), err(E*)) (exact recomputation; A > 0: mixing tiers beats both endpoints). "
       "A is unbounded below (a head where an endpoint is almost exact gives A << 0), so a cell is summarised by the "
       "median of A over its heads; the means are in the tables.\n\n";
  s << "## Interior advantage vs dominated share (B = " << format_or_nan(sc.primary_budget) << ")\n\n";
  if (xs.size() < kMinCellsForRho) {
    // A scenario built for another analysis (staleness, mismatch, ...): a rank correlation
    // over a handful of cells says nothing, so none is reported.
    s << "- " << xs.size() << " cells with a defined A and dominated share: too few for a rank correlation across cells (at least "
      << kMinCellsForRho << "; the headline relation is tested by the scenarios with many cells). Per-cell values: `tables/cells.csv`.\n";
  } else {
  s << "- Spearman rho(dominated share, median A over the cell's heads) over " << xs.size()
    << " cells = " << format_or_nan(rho, "%.3f") << ", 95% bootstrap interval [" << format_or_nan(iv.lo, "%.3f") << ", "
    << format_or_nan(iv.hi, "%.3f") << "] (" << iv.used << " of " << sc.bootstrap << " resamples, seed " << sc.seed
    << ").\n";
  if (std::isfinite(rho_within))
    s << "- Controlling for the model (per-preset residual ranks): rho = " << format_or_nan(rho_within, "%.3f")
      << ".\n";
  std::string verdict;
  if (!std::isfinite(rho) || xs.size() < 3) verdict = "is undetermined (too few cells with a defined A and share, or constant values)";
  else if (iv.hi < 0) verdict = "holds: cells with more dominated heads gain less from the interior (interval below 0)";
  else if (iv.lo > 0) verdict = "is reversed: the interval lies above 0";
  else verdict = "is not established: the interval contains 0";
  s << "- The headline relation of MODEL.md section 5 (the dominated share orders the interior advantage: Spearman rho strongly negative; the reference paper reports -0.978 over 25 cells) " << verdict << ".\n";
  if (xs.size() < 12) s << "- Note: fewer than 12 cells; the interval is wide.\n";
  }
  s << "\n## Per-head advantage vs budget\n\n| B | median A (heads) | mean A (heads) | heads with A > 0 | wins Q / E / M |\n|---|---|---|---|---|\n";
  for (const auto& b : budgets)
    s << "| " << format_or_nan(b["budget"].get<double>()) << " | "
      << format_or_nan(double_or_nan(b, "median_A_heads"), "%.4f") << " | "
      << format_or_nan(double_or_nan(b, "mean_A_heads"), "%.4g") << " | "
      << format_or_nan(100 * double_or_nan(b, "share_heads_positive"), "%.1f") << "% | " << b["wins"]["Q"] << " / "
      << b["wins"]["E"] << " / " << b["wins"]["M"] << " |\n";
  if (std::isfinite(stop_budget))
    s << "\nThe interior stops paying (median A over heads <= 0 from there up) at B = " << format_or_nan(stop_budget)
      << ".\n";
  else s << "\nThe interior pays (median A over heads > 0) at the largest budget swept; no stop budget within the sweep.\n";
  if (r.n_T > 1) {
    s << "\n## Context length (B = " << format_or_nan(sc.primary_budget)
      << ")\n\n| T | median over cells of the cell's median A | share of heads won by eviction |\n|---|---|---|\n";
    for (const auto& t : perT)
      s << "| " << t["prompt_len"] << " | " << format_or_nan(double_or_nan(t, "median_A"), "%.4f") << " | "
        << format_or_nan(100 * double_or_nan(t, "share_E_wins"), "%.1f") << "% |\n";
    const double e0 = double_or_nan(perT.front(), "share_E_wins"), e1 = double_or_nan(perT.back(), "share_E_wins");
    s << "\nFrom T = " << perT.front()["prompt_len"] << " to T = " << perT.back()["prompt_len"]
      << " the share of heads won by eviction goes " << format_or_nan(100 * e0, "%.1f") << "% -> "
      << format_or_nan(100 * e1, "%.1f") << "% ("
      << (e1 > e0   ? "toward eviction"
          : e1 < e0 ? "away from eviction"
                    : "unchanged")
      << ").\n";
  }
  return s.str();
}

std::shared_ptr<const Analysis> parse(const YAML::Node&, const YamlReader&, const Scenario&) {
  return std::make_shared<InteriorAnalysis>();
}

std::vector<NamedFigure> figures(const std::string& dir) {
  const nlohmann::json in = read_table_json(dir + "/tables/interior.json");
  const std::string verdict = in.value("queries", std::string("decode"));
  std::vector<NamedFigure> out;
  {
    Figure f;
    f.title = "Interior advantage vs dominated share (B = " + format_label(double_or_nan(in, "primary_budget")) +
              "): rho = " + format_label(double_or_nan(in, "rho"), "%.2f") + " [" +
              format_label(double_or_nan(in, "ci_lo"), "%.2f") + ", " +
              format_label(double_or_nan(in, "ci_hi"), "%.2f") + "], n = " + std::to_string(in["n_cells"].get<int>());
    f.xlabel = "dominated share (fraction of the cell's heads with R_h(2-bit) >= 1)";
    f.ylabel = "median over heads of A (" + verdict + " queries)";
    std::map<std::string, Series> by;
    double ylo = INFINITY, yhi = -INFINITY;
    for (const auto& p : in["points"]) {
      const double x = double_or_nan(p, "dominated_share"), y = double_or_nan(p, "A");
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      Series& s = by[p["preset"].get<std::string>()];
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
    out.push_back({"interior_vs_dominated", f});
  }
  out.push_back({"advantage_vs_budget", advantage_vs_budget_figure(in, read_table_csv(dir + "/tables/heads.csv"))});
  return out;
}

}  // namespace

double cell_median_advantage(const nlohmann::json& budget) {
  std::vector<double> v;
  for (const auto& h : budget["heads"])
    if (const double a = double_or_nan(h, "A"); std::isfinite(a)) v.push_back(a);
  return quantile_or_nan(v, 0.5);
}

void InteriorAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  add_dominance_ratios(ctx, cell);
  add_budgets(ctx, cell);
}

std::string InteriorAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                           const std::string& dir) const {
  const std::string qname(to_string(sc.queries));
  write_cell_tables(cells, dir);
  const BudgetRows br = write_budget_table(sc, cells, dir);
  const RhoAcrossCells r = rho_across_cells(sc, cells);
  const nlohmann::json interior = {{"scenario", sc.name},
                                   {"queries", qname},
                                   {"primary_budget", sc.primary_budget},
                                   {"n_cells", r.xs.size()},
                                   {"rho", finite_or_null(r.rho)},
                                   {"ci_lo", finite_or_null(r.iv.lo)},
                                   {"ci_hi", finite_or_null(r.iv.hi)},
                                   {"resamples", sc.bootstrap},
                                   {"resamples_used", r.iv.used},
                                   {"seed", sc.seed},
                                   {"rho_within_model", finite_or_null(r.rho_within)},
                                   {"stop_budget", finite_or_null(br.stop_budget)},
                                   {"budgets", br.rows},
                                   {"per_context_length", r.per_T},
                                   {"points", r.points}};
  write_file_atomically(dir + "/interior.json", interior.dump(1) + "\n");
  return summary_section(sc, br, r);
}

AnalysisType InteriorAnalysis::type() {
  return {"interior",
          "A = 1 - err(M*) / min(err(Q*), err(E*)) per head and budget; rho(dominated share, A) across cells",
          {},
          parse,
          figures};
}

Figure advantage_vs_budget_figure(const nlohmann::json& interior,
                                  const std::map<std::string, std::vector<std::string>>& heads,
                                  std::vector<std::size_t>* rows) {
  if (rows) rows->clear();
  Figure f;
  f.title = "Per-head interior advantage vs budget";
  f.xlabel = "budget B (bits per key element)";
  f.ylabel = "interior advantage A (" + interior.value("queries", std::string("decode")) + " queries)";
  Series pts{"heads (one point per head and cell)", Rgb{31, 119, 180, 90}, Style::Points, {}, {}, 6};
  const auto& bs = heads.at("budget");
  const auto& as = heads.at("A");
  std::vector<double> budgets;
  for (const auto& b : interior["budgets"]) budgets.push_back(b["budget"].get<double>());
  double bspan = budgets.size() > 1 ? (*std::max_element(budgets.begin(), budgets.end()) - *std::min_element(budgets.begin(), budgets.end())) : 1;
  double ylo = 0, yhi = 1;
  for (std::size_t i = 0; i < bs.size() && i < as.size(); ++i) {
    const double a = std::strtod(as[i].c_str(), nullptr), b = std::strtod(bs[i].c_str(), nullptr);
    if (!std::isfinite(a)) continue;
    pts.x.push_back(b + (static_cast<double>(i % 9) - 4) * 0.006 * bspan);  // deterministic jitter
    pts.y.push_back(a);
    if (rows) rows->push_back(i);
  }
  Series mean{"median over heads", Rgb{214, 39, 40}, Style::Line, {}, {}, 6};
  for (const auto& b : interior["budgets"])
    if (std::isfinite(double_or_nan(b, "median_A_heads")))
      mean.x.push_back(double_or_nan(b, "budget")), mean.y.push_back(double_or_nan(b, "median_A_heads"));
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
  if (below > 0)
    f.title +=
        " (" + std::to_string(below) + " heads with A < " + format_label(ylo, "%.2g") + " drawn at the bottom edge)";
  f.series = {pts, mean, {"", Rgb{120, 120, 120}, Style::Dashed, {-100, 100}, {0, 0}, 1}};
  pad_range(ylo, yhi, 0.08);
  double xlo = budgets.empty() ? 0 : *std::min_element(budgets.begin(), budgets.end());
  double xhi = budgets.empty() ? 1 : *std::max_element(budgets.begin(), budgets.end());
  pad_range(xlo, xhi, 0.08);
  f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
  return f;
}

}  // namespace tierlab
