// Allocation staleness over decode steps, out of sample (staleness.hpp).
#include "scenarios/analyses/staleness.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "scenarios/analyses/stats.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "model/base/error.hpp"
#include "scenarios/pipeline/staleness_head.hpp"

namespace tierlab {

namespace {


std::shared_ptr<const Analysis> read_staleness_section(const YAML::Node& root, const YamlReader& c, const Scenario&) {
  const YAML::Node st = root["staleness"];
  if (!st) return nullptr;
  StalenessSpec spec;
  if (!st.IsMap()) c.fail(st, "key 'staleness' must be a mapping with the keys steps, budget, window, windows, horizon.");
  c.keys(st, "staleness", {"steps", "budget", "window", "windows", "horizon"});
  if (st["windows"])
    for (const auto& x : c.list(st["windows"], "staleness.windows")) {
      const int v = static_cast<int>(c.integer(x, "staleness.windows", 1, 4096));
      if (!spec.windows.empty() && v <= spec.windows.back())
        c.fail(x, "key 'staleness.windows' must be increasing; " + std::to_string(v) + " follows " +
                      std::to_string(spec.windows.back()) + ".");
      spec.windows.push_back(v);
    }
  if (st["steps"]) {
    spec.steps.clear();
    for (const auto& x : c.list(st["steps"], "staleness.steps")) {
      const int v = static_cast<int>(c.integer(x, "staleness.steps", 1, 4096));
      if (!spec.steps.empty() && v <= spec.steps.back())
        c.fail(x, "key 'staleness.steps' must be increasing; " + std::to_string(v) + " follows " +
                      std::to_string(spec.steps.back()) + ".");
      spec.steps.push_back(v);
    }
  }
  if (st["budget"]) spec.budget = c.num(st["budget"], "staleness.budget", 0.01, 16.0);
  if (st["window"]) spec.window = static_cast<int>(c.integer(st["window"], "staleness.window", 1, 4096));
  if (st["horizon"]) spec.horizon = static_cast<int>(c.integer(st["horizon"], "staleness.horizon", 1, 4096));
  return std::make_shared<StalenessAnalysis>(spec);
}

std::vector<NamedFigure> figures_staleness(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<NamedFigure> out;
  if (!fs::exists(dir + "/tables/staleness.json")) return out;
  const nlohmann::json st = read_table_json(dir + "/tables/staleness.json");
  // Two figures: the error ratios span orders of magnitude (log y), the overlaps live in [0, 1].
  Series ratio{"out of sample: median err_stale(s) / err_fresh(s), fresh decided from the W steps before s",
               palette(3), Style::Line, {}, {}, 6};
  Series aging{"aging: median err_stale(s) / err_stale(1)", palette(1), Style::Line, {}, {}, 6};
  Series bound{"bound (in-sample, not achievable): median err_stale(s) / err_insample(s)", palette(5), Style::Dashed,
               {}, {}, 6};
  Series jac{"median Jaccard of evicted sets (stale vs fresh)", palette(0), Style::Line, {}, {}, 6};
  Series agr{"median tier agreement (stale vs fresh)", palette(2), Style::Line, {}, {}, 6};
  Series fam{"share of heads whose recomputed-best family is the one after prefill", palette(4), Style::Line, {}, {}, 6};
  Series better{"share of heads where the fresh allocation beats the stale one (of those where they differ)", palette(1), Style::Dashed, {}, {}, 6};
  double xlo = INFINITY, xhi = 0, rlo = 1, rhi = 1;
  for (const auto& r : st.at("rows")) {
    const double x = double_or_nan(r, "step");
    xlo = std::min(xlo, x), xhi = std::max(xhi, x);
    const std::pair<Series*, const char*> cols[7] = {{&ratio, "median_ratio"},
                                                     {&aging, "median_aging"},
                                                     {&bound, "median_ratio_insample"},
                                                     {&jac, "median_jaccard"},
                                                     {&agr, "median_agreement"},
                                                     {&fam, "share_same_family"},
                                                     {&better, "share_fresh_better"}};
    for (const auto& [s, key] : cols) {
      const double y = double_or_nan(r, key);
      const bool log_axis = s == &ratio || s == &aging || s == &bound;
      if (!std::isfinite(y) || (log_axis && y <= 0)) continue;
      s->x.push_back(x), s->y.push_back(y);
      if (log_axis) rlo = std::min(rlo, y), rhi = std::max(rhi, y);
    }
  }
  if (std::isfinite(xlo) && xhi > 0) {
    const std::string B = format_label(double_or_nan(st, "budget"));
    Figure f;
    f.title = "Allocation staleness out of sample: error ratios, B = " + B + " bits per element";
    f.xlabel = "decode step s (log)";
    f.ylabel = "median over heads (log)";
    f.xlog = f.ylog = true;
    f.xmin = xlo / 1.3, f.xmax = xhi * 1.3;
    f.ymin = rlo / 2, f.ymax = rhi * 2;
    f.series = {ratio, aging, bound,
                {"ratio 1", Rgb{120, 120, 120}, Style::Dashed, {f.xmin, f.xmax}, {1, 1}, 1}};
    out.push_back({std::string("staleness"), f});
    Figure g;
    g.title = "Allocation staleness out of sample: overlaps and family stability, B = " + B + " bits per element";
    g.xlabel = "decode step s (log)";
    g.ylabel = "overlap or share, in [0, 1]";
    g.xlog = true;
    g.xmin = f.xmin, g.xmax = f.xmax;
    g.ymin = 0, g.ymax = 1.02;
    g.series = {jac, agr, fam, better};
    out.push_back({std::string("staleness_overlap"), g});
  }
  return out;
}

std::string pct_tenth(double share) { return std::isfinite(share) ? format_or_nan(100 * share, "%.1f") + "%" : "-"; }

// Cohen's kappa with its interval, or "not defined" (one family wins every head at both times:
// the chance agreement is 1, and kappa divides by 1 - 1).
std::string kappa_text(const nlohmann::json& r) {
  const double k = double_or_nan(r, "kappa"), lo = double_or_nan(r, "kappa_lo"), hi = double_or_nan(r, "kappa_hi");
  if (!std::isfinite(k)) return "not defined";
  return format_or_nan(k, "%.2f") + " [" + format_or_nan(lo, "%.2f", "-") + ", " + format_or_nan(hi, "%.2f", "-") + "]";
}
std::string num3(double v) { return format_or_nan(v, "%.3g"); }

}  // namespace

void StalenessAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& j) const {
  const Scenario& sc = ctx.scenario;
  const ScenarioCell& cell = ctx.cell;
  const TraceMeta& m = ctx.trace.meta();
  if (m.decode_steps == 0)
    throw InputError(sc.file + ": cell '" + cell.id + "' has no decode steps; the staleness analysis needs them.");
  StalenessOptions so;
  so.ladder = sc.ladder;
  so.rate_kind = sc.rate_kind;
  so.budget = spec.budget;
  so.steps = spec.steps;
  so.window = spec.window > 0 ? spec.window : m.obs_window;
  so.horizon = spec.horizon;
  so.rope = m.rope;
  nlohmann::json heads = nlohmann::json::array();
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      ctx.check_stop();
      const StalenessHead r = staleness_head(ctx.trace.head(l, h), so, ctx.backend);
      nlohmann::json steps = nlohmann::json::array();
      for (const StalenessStep& st : r.steps)
        steps.push_back({{"step", st.step},
                         {"scored_steps", st.scored_steps},
                         {"err_stale", finite_or_null(st.err_stale)},
                         {"err_fresh", finite_or_null(st.err_fresh)},
                         {"err_insample", finite_or_null(st.err_insample)},
                         {"ratio", finite_or_null(st.ratio)},
                         {"aging", finite_or_null(st.aging)},
                         {"ratio_insample", finite_or_null(st.ratio_insample)},
                         {"jaccard", finite_or_null(st.jaccard)},
                         {"agreement", finite_or_null(st.agreement)},
                         {"err_Q", finite_or_null(st.family_errors.Q)},
                         {"err_E", finite_or_null(st.family_errors.E)},
                         {"err_M", finite_or_null(st.family_errors.M)},
                         {"family", st.family},
                         {"same_family", st.same_family},
                         {"family_surrogate", st.family_surrogate}});
      heads.push_back({{"layer", l},
                       {"kv_head", h},
                       {"family_prefill", r.family_obs},
                       {"err_stale_first", finite_or_null(r.err_stale_first)},
                       {"steps", steps}});
    }
  j["staleness"] = {{"budget", so.budget}, {"window", so.window}, {"horizon", so.horizon}, {"heads", heads}};
  // The same out-of-sample comparison per decision window (compact: what the window changes).
  if (!spec.windows.empty()) {
    nlohmann::json by = nlohmann::json::array();
    for (const int w : spec.windows) {
      StalenessOptions ow = so;
      ow.window = w;
      nlohmann::json wh = nlohmann::json::array();
      for (int l = 0; l < m.n_layers; ++l)
        for (int h = 0; h < m.n_kv_heads; ++h) {
          ctx.check_stop();
          const StalenessHead r = staleness_head(ctx.trace.head(l, h), ow, ctx.backend);
          nlohmann::json steps = nlohmann::json::array();
          for (const StalenessStep& st : r.steps)
            steps.push_back({{"step", st.step},
                             {"err_stale", finite_or_null(st.err_stale)},
                             {"err_fresh", finite_or_null(st.err_fresh)},
                             {"ratio", finite_or_null(st.ratio)},
                             {"family", st.family}});
          wh.push_back({{"layer", l}, {"kv_head", h}, {"family_prefill", r.family_obs}, {"steps", steps}});
        }
      by.push_back({{"window", w}, {"heads", wh}});
    }
    j["staleness_by_window"] = by;
  }
}

namespace {

// The summary.md section: the per-step table and the verdict, from the per-step rows.
std::string staleness_summary(const StalenessSpec& spec, const nlohmann::json& rows, const std::string& window_text,
                              int horizon) {
  std::ostringstream s;
  s << "\n## Allocation staleness over decode steps (B = " << format_or_nan(spec.budget) << ", W = " << window_text
    << (spec.window > 0 ? "" : " (the observation window)") << ", k = " << horizon << ")\n\n"
    << "Per head: the stale allocation is M* decided once from the observation queries after prefill; the fresh "
       "allocation at step s is M* decided from the queries of the W decode steps before s (observation rows filling "
       "in while s - 1 < W), so it never sees the queries it is scored on. Both are recomputed exactly on steps "
       "s..s+k-1. Out of sample = err_stale(s) / err_fresh(s) (> 1: re-deciding pays); aging = err_stale(s) / "
       "err_stale(1); bound = err_stale(s) / err_insample(s), with M* fitted on the scored queries themselves (an "
       "in-sample optimum no causal policy can reach; it is not the reference). Family = which of Q*, E*, M* decided "
       "from the same W steps has the least exact error on steps s..s+k-1; same family = that family is the one after "
       "prefill (Q*, E*, M* from the observation queries, recomputed on step 1). The surrogate's argmin is M by "
       "construction and is not used.\n\n"
    << "| step s | heads | median out of sample | fresh better (of heads where they differ) | median aging | median bound (in-sample) | "
       "median Jaccard | median tier agreement | best Q / E / M | same family as after prefill | Cohen's kappa (family vs after prefill) [95%] |\n"
       "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    s << "| " << r["step"] << " | " << r["heads"] << " | " << num3(double_or_nan(r, "median_ratio")) << " | "
      << pct_tenth(double_or_nan(r, "share_fresh_better")) << " | " << num3(double_or_nan(r, "median_aging")) << " | "
      << num3(double_or_nan(r, "median_ratio_insample")) << " | "
      << format_or_nan(double_or_nan(r, "median_jaccard"), "%.3f") << " | "
      << format_or_nan(double_or_nan(r, "median_agreement"), "%.3f") << " | "
      << format_or_nan(100 * double_or_nan(r, "share_Q"), "%.0f") << " / "
      << format_or_nan(100 * double_or_nan(r, "share_E"), "%.0f") << " / "
      << format_or_nan(100 * double_or_nan(r, "share_M"), "%.0f") << "% | "
      << pct_tenth(double_or_nan(r, "share_same_family")) << " | " << kappa_text(r) << " |\n";
  // The verdict, over the steps after the first (at s = 1 with W = W_obs fresh is stale).
  std::vector<double> later_ratio, later_share, later_same;
  for (const auto& r : rows)
    if (r["step"].get<int>() > 1) {
      later_ratio.push_back(double_or_nan(r, "median_ratio"));
      later_share.push_back(double_or_nan(r, "share_fresh_better"));
    }
  for (const auto& r : rows) later_same.push_back(double_or_nan(r, "share_same_family"));
  const auto& r1 = rows.back();
  // The least and largest finite value (NaN when none).
  const auto range = [](const std::vector<double>& v) {
    double lo = kNaN, hi = kNaN;
    for (const double x : v)
      if (std::isfinite(x)) lo = std::isnan(lo) ? x : std::min(lo, x), hi = std::isnan(hi) ? x : std::max(hi, x);
    return std::pair{lo, hi};
  };
  const auto [lo_ratio, hi_ratio] = range(later_ratio);
  const auto [lo_share, hi_share] = range(later_share);
  const double min_same = range(later_same).first;
  const double last_ratio = double_or_nan(r1, "median_ratio");
  const double last_bound = double_or_nan(r1, "median_ratio_insample");
  // A step where re-deciding pays: median ratio > 1.05 and the fresh allocation better for
  // most heads; where it hurts: median ratio < 0.95; else within 5%.
  int pays = 0, hurts = 0;
  for (std::size_t i = 0; i < later_ratio.size(); ++i) {
    if (later_ratio[i] > 1.05 && later_share[i] > 0.5) ++pays;
    else if (later_ratio[i] < 0.95) ++hurts;
  }
  const int n_later = static_cast<int>(later_ratio.size());
  s << "\n**Verdict.** ";
  if (later_ratio.empty()) {
    s << "Only step 1 was scored, where the fresh decision is the stale one; no out-of-sample comparison.";
  } else {
    s << "Out of sample, over steps 2.." << r1["step"] << " the median err_stale / err_fresh lies in ["
      << num3(lo_ratio) << ", " << num3(hi_ratio) << "] and the fresh allocation beats the stale one for "
      << pct_tenth(lo_share) << " to " << pct_tenth(hi_share) << " of the heads where the two differ. ";
    if (pays == n_later)
      s << "Re-deciding from the last W steps pays at every scored step after the first";
    else if (2 * pays > n_later)
      s << "Re-deciding from the last W steps pays at most scored steps (" << pays << " of " << n_later << ")";
    else if (2 * hurts > n_later)
      s << "Re-deciding from the last W steps does NOT pay at most scored steps (" << hurts << " of " << n_later
        << " have a median ratio below 0.95)";
    else
      s << "Mixed: re-deciding from the last W steps pays at " << pays << " of " << n_later
        << " scored steps (median ratio > 1.05, fresh better for most heads), does not pay at " << hurts
        << " (below 0.95) and is within 5% at the rest";
    s << "; at step " << r1["step"] << " the median ratio is " << num3(last_ratio) << " (fresh better for "
      << pct_tenth(double_or_nan(r1, "share_fresh_better")) << " of the heads where they differ).";
  }
  s << " The stale allocation's median error at step " << r1["step"] << " is "
    << num3(double_or_nan(r1, "median_aging")) << " times its error at step 1 (aging"
    << (double_or_nan(r1, "median_aging") < 1
            ? "; below 1 because the exact decode keys appended since step 1 take attention from the prompt's "
              "tokens, so compare allocations at one step rather than one allocation across steps"
            : "")
    << "). The in-sample bound err_stale / err_insample is " << num3(last_bound) << " at step " << r1["step"]
    << " against " << num3(last_ratio) << " out of sample: "
    << (last_bound >= last_ratio
            ? "the difference is in-sample fit (M* fitted on the queries it is scored on), which no causal policy can "
              "have."
            : "here the allocation fitted on the scored step's own queries recomputes worse than the fresh one (the "
              "surrogate on one step's g queries is not the exact error), so in-sample fit is no bound on the exact "
              "error.")
    << " The recomputed-best family is the one after prefill for "
    << pct_tenth(double_or_nan(r1, "share_same_family")) << " of heads at step " << r1["step"]
    << " (lowest over the steps: " << pct_tenth(min_same) << "); chance-corrected, Cohen's kappa at step " << r1["step"] << " is "
    << kappa_text(r1) << ": the family is ";
  {
    const double klo = double_or_nan(r1, "kappa_lo"), k = double_or_nan(r1, "kappa");
    if (!std::isfinite(k))
      s << "the same for every head at both times (one family wins every head: agreement cannot tell stability from chance)";
    else if (std::isfinite(klo) && klo > 0.6) s << "stable beyond chance";
    else if (std::isfinite(klo) && klo > 0) s << "more stable than chance, but not strongly (kappa's interval is below 0.6 at its lower end)";
    else
      s << (min_same >= 0.9 ? "NOT shown stable: agreement is high but no better than chance (one family wins most heads)"
                            : "NOT stable");
  }
  if (horizon == 1 && min_same < 0.9)
    s << " (each step is scored on its own g query rows, so close families can swap from one step to the next; "
         "`staleness.horizon` > 1 scores steps s..s+k-1 together)";
  s << ".\n";
  return s.str();
}

// The out-of-sample comparison per decision window (cell key staleness_by_window): per window
// and step, the median err_stale / err_fresh, the share of heads where fresh beats stale (of
// those where they differ) and Cohen's kappa of the family at s with the family after prefill.
// Writes staleness_windows.csv; returns the summary section ("" without windows).
std::string window_section(const Scenario& sc, const std::vector<nlohmann::json>& cells, const std::string& dir) {
  struct Acc {
    std::vector<double> ratio;
    int better = 0, compared = 0;
    std::vector<std::string> fam, prefill;
  };
  std::map<int, std::map<int, Acc>> by;  // window -> step
  for (const auto& c : cells)
    if (c.contains("staleness_by_window"))
      for (const auto& w : c["staleness_by_window"])
        for (const auto& h : w["heads"])
          for (const auto& st : h["steps"]) {
            Acc& a = by[w["window"].get<int>()][st["step"].get<int>()];
            const double r = double_or_nan(st, "ratio"), es = double_or_nan(st, "err_stale"), ef = double_or_nan(st, "err_fresh");
            if (std::isfinite(r)) a.ratio.push_back(r);
            if (std::isfinite(es) && std::isfinite(ef) && es != ef) ++a.compared, a.better += ef < es ? 1 : 0;
            const std::string f = st["family"].get<std::string>(), p = h["family_prefill"].get<std::string>();
            if (!f.empty() && !p.empty()) a.fam.push_back(f), a.prefill.push_back(p);
          }
  if (by.empty()) return "";
  std::ostringstream s;
  CsvWriter csv({"window", "step", "median_ratio", "share_fresh_better", "kappa"});
  nlohmann::json rows = nlohmann::json::array();  // the same table for readers of JSON (the claims ledger)
  std::set<int> steps;
  for (const auto& [w, per] : by)
    for (const auto& [st, a] : per) {
      steps.insert(st);
      const double median = quantile_or_nan(a.ratio, 0.5);
      const double fresh_better = a.compared ? static_cast<double>(a.better) / a.compared : kNaN;
      const double kappa = cohen_kappa(a.fam, a.prefill);
      csv.row() << w << st << format_or_nan(median) << format_or_nan(fresh_better) << format_or_nan(kappa);
      rows.push_back({{"window", w}, {"step", st}, {"median_ratio", finite_or_null(median)},
                      {"share_fresh_better", finite_or_null(fresh_better)}, {"kappa", finite_or_null(kappa)}});
    }
  write_file_atomically(dir + "/staleness_windows.csv", csv.text());
  write_file_atomically(dir + "/staleness_windows.json", nlohmann::json{{"rows", rows}}.dump(2) + "\n");
  s << "\n### By decision window\n\nThe fresh allocation at step s decided from the W decode steps before s: with a "
       "long W the fresh decision at small s shares most of its query rows with the stale one (observation rows fill "
       "in while s - 1 < W), so only short windows can show staleness within a few steps. Each entry: median "
       "err_stale / err_fresh (fresh better for the share of heads where they differ; kappa of the family at s with "
       "the family after prefill).\n\n| step s |";
  for (const auto& [w, per] : by) s << " W = " << w << " |";
  s << "\n|---|";
  for (std::size_t i = 0; i < by.size(); ++i) s << "---|";
  s << '\n';
  for (const int st : steps) {
    s << "| " << st << " |";
    for (auto& [w, per] : by) {
      auto it = per.find(st);
      if (it == per.end()) {
        s << " - |";
        continue;
      }
      const Acc& a = it->second;
      s << ' ' << num3(quantile_or_nan(a.ratio, 0.5)) << " (" << pct_tenth(a.compared ? static_cast<double>(a.better) / a.compared : kNaN)
        << "; kappa " << format_or_nan(cohen_kappa(a.fam, a.prefill), "%.2f") << ") |";
    }
    s << '\n';
  }
  (void)sc;
  return s.str();
}

}  // namespace

std::string StalenessAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                            const std::string& dir) const {
  CsvWriter hc({"cell", "layer", "kv_head", "step", "scored_steps", "err_stale", "err_fresh", "err_insample", "ratio",
                "aging", "ratio_insample", "jaccard", "agreement", "err_Q", "err_E", "err_M", "family_prefill", "family",
                "same_family", "family_surrogate"});
  // staleness.csv: the step, its heads, then these columns of its row (staleness.json).
  const std::vector<std::string> step_columns = {
      "median_ratio", "mean_ratio", "share_fresh_better", "median_aging", "mean_aging", "median_ratio_insample",
      "median_jaccard", "mean_jaccard", "median_agreement", "mean_agreement", "share_Q", "share_E", "share_M",
      "share_same_family", "kappa", "kappa_lo", "kappa_hi"};
  std::vector<std::string> step_header = {"step", "heads"};
  step_header.insert(step_header.end(), step_columns.begin(), step_columns.end());
  CsvWriter pc(step_header);
  struct Acc {
    std::vector<double> ratio, aging, bound, jaccard, agreement;
    int heads = 0, same = 0, fresh_better = 0, compared = 0;
    std::map<std::string, int> family;
    std::vector<std::string> fam_s, fam_prefill, cluster;  // heads where both families are defined
  };
  std::map<int, Acc> by_step;
  std::set<int> windows;
  int horizon = spec.horizon;
  for (const auto& c : cells) {
    if (!c.contains("staleness")) continue;
    const nlohmann::json& cs = c["staleness"];
    if (!cs.contains("window"))
      throw InputError(sc.file + ": cell '" + c["id"].get<std::string>() +
                       "' holds staleness results of an older definition (in-sample fresh allocation); rerun the "
                       "scenario with --force.");
    windows.insert(cs["window"].get<int>());
    horizon = cs.value("horizon", horizon);
    for (const auto& h : cs["heads"])
      for (const auto& st : h["steps"]) {
        const int step = st["step"].get<int>();
        const double r = double_or_nan(st, "ratio"), ag = double_or_nan(st, "aging"),
                     b = double_or_nan(st, "ratio_insample"), jac = double_or_nan(st, "jaccard"),
                     agr = double_or_nan(st, "agreement");
        const double es = double_or_nan(st, "err_stale"), ef = double_or_nan(st, "err_fresh");
        const bool same = st["same_family"].get<bool>();
        const std::string fam = st["family"].get<std::string>();
        hc.row() << c["id"].get<std::string>() << h["layer"].get<int>() << h["kv_head"].get<int>() << step
                 << st["scored_steps"].get<int>() << format_or_nan(es) << format_or_nan(ef)
                 << format_or_nan(double_or_nan(st, "err_insample")) << format_or_nan(r) << format_or_nan(ag)
                 << format_or_nan(b) << format_or_nan(jac) << format_or_nan(agr)
                 << format_or_nan(double_or_nan(st, "err_Q")) << format_or_nan(double_or_nan(st, "err_E"))
                 << format_or_nan(double_or_nan(st, "err_M")) << h["family_prefill"].get<std::string>() << fam << same
                 << st["family_surrogate"].get<std::string>();
        Acc& a = by_step[step];
        if (std::isfinite(r)) a.ratio.push_back(r);
        if (std::isfinite(ag)) a.aging.push_back(ag);
        if (std::isfinite(b)) a.bound.push_back(b);
        if (std::isfinite(jac)) a.jaccard.push_back(jac);
        if (std::isfinite(agr)) a.agreement.push_back(agr);
        if (std::isfinite(es) && std::isfinite(ef) && es != ef) ++a.compared, a.fresh_better += ef < es ? 1 : 0;
        ++a.heads;
        a.same += same ? 1 : 0;
        if (!fam.empty()) ++a.family[fam];
        if (const std::string fp = h["family_prefill"].get<std::string>(); !fam.empty() && !fp.empty())
          a.fam_s.push_back(fam), a.fam_prefill.push_back(fp), a.cluster.push_back(c["id"].get<std::string>());
      }
  }
  nlohmann::json rows = nlohmann::json::array();
  const auto share_of = [](int n, int d) { return d ? static_cast<double>(n) / d : kNaN; };
  std::set<std::string> cell_ids;
  for (const auto& c : cells) cell_ids.insert(c["id"].get<std::string>());
  for (auto& [step, a] : by_step) {
    // Chance-corrected family stability; clusters = cells when there are several.
    const double kappa = cohen_kappa(a.fam_s, a.fam_prefill);
    const Interval kiv = bootstrap_kappa(a.fam_s, a.fam_prefill, cell_ids.size() > 1 ? a.cluster : std::vector<std::string>{},
                                         sc.bootstrap, sc.seed);
    const nlohmann::json r = {{"step", step},
                              {"kappa", finite_or_null(kappa)},
                              {"kappa_lo", finite_or_null(kiv.used > 0 ? kiv.lo : kNaN)},
                              {"kappa_hi", finite_or_null(kiv.used > 0 ? kiv.hi : kNaN)},
                              {"heads", a.heads},
                              {"median_ratio", finite_or_null(quantile_or_nan(a.ratio, 0.5))},
                              {"mean_ratio", finite_or_null(mean_or_nan(a.ratio))},
                              {"share_fresh_better", finite_or_null(share_of(a.fresh_better, a.compared))},
                              {"median_aging", finite_or_null(quantile_or_nan(a.aging, 0.5))},
                              {"mean_aging", finite_or_null(mean_or_nan(a.aging))},
                              {"median_ratio_insample", finite_or_null(quantile_or_nan(a.bound, 0.5))},
                              {"median_jaccard", finite_or_null(quantile_or_nan(a.jaccard, 0.5))},
                              {"mean_jaccard", finite_or_null(mean_or_nan(a.jaccard))},
                              {"median_agreement", finite_or_null(quantile_or_nan(a.agreement, 0.5))},
                              {"mean_agreement", finite_or_null(mean_or_nan(a.agreement))},
                              {"share_Q", finite_or_null(share_of(a.family["Q"], a.heads))},
                              {"share_E", finite_or_null(share_of(a.family["E"], a.heads))},
                              {"share_M", finite_or_null(share_of(a.family["M"], a.heads))},
                              {"share_same_family", finite_or_null(share_of(a.same, a.heads))}};
    pc.row() << step << a.heads;
    for (const std::string& k : step_columns) pc << format_or_nan(double_or_nan(r, k.c_str()));
    rows.push_back(r);
  }
  std::string window_text;
  for (const int w : windows) window_text += (window_text.empty() ? "" : ", ") + std::to_string(w);
  const nlohmann::json stale = {{"budget", spec.budget},
                                {"window", spec.window > 0 ? nlohmann::json(spec.window) : nlohmann::json("trace")},
                                {"windows", std::vector<int>(windows.begin(), windows.end())},
                                {"horizon", horizon},
                                {"rows", rows}};
  const std::string by_window = window_section(sc, cells, dir);
  write_file_atomically(dir + "/staleness_heads.csv", hc.text());
  write_file_atomically(dir + "/staleness.csv", pc.text());
  write_file_atomically(dir + "/staleness.json", stale.dump(1) + "\n");
  if (rows.empty()) return "";
  return staleness_summary(spec, rows, window_text, horizon) + by_window;
}

AnalysisType StalenessAnalysis::type() {
  return {"staleness",
          "stale M* (observation queries) vs fresh M* decided from the W decode steps before s, scored on steps "
          "s..s+k-1: out-of-sample ratio, aging, in-sample bound, overlaps, recomputed-best family",
          {"staleness"}, read_staleness_section, figures_staleness};
}

}  // namespace tierlab
