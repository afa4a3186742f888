// Allocation staleness over decode steps (staleness.hpp).
#include "scenarios/analyses/staleness.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>

#include "scenarios/figures/tables_io.hpp"
#include "scenarios/run/atomic_file.hpp"
#include "scenarios/run/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/scenario/yaml_reader.hpp"
#include "model/error.hpp"
#include "scenarios/pipeline/staleness_head.hpp"

namespace tierlab {

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::shared_ptr<const Analysis> parse(const YAML::Node& root, const YamlReader& c, const Scenario&) {
  const YAML::Node st = root["staleness"];
  if (!st) return nullptr;
  StalenessSpec spec;
  if (!st.IsMap()) c.fail(st, "key 'staleness' must be a mapping with the keys steps, budget.");
  c.keys(st, "staleness", {"steps", "budget"});
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
  return std::make_shared<StalenessAnalysis>(spec);
}

std::vector<NamedFigure> figures(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<NamedFigure> out;
  if (!fs::exists(dir + "/tables/staleness.json")) return out;
  const nlohmann::json st = read_table_json(dir + "/tables/staleness.json");
  // Two figures: the error ratio spans orders of magnitude (log y), the overlaps live in [0, 1].
  Series ratio{"median error ratio err_stale / err_fresh", palette(3), Style::Line, {}, {}, 6};
  Series jac{"median Jaccard of evicted sets", palette(0), Style::Line, {}, {}, 6};
  Series agr{"median tier agreement", palette(2), Style::Line, {}, {}, 6};
  Series fam{"share of heads keeping their best family", palette(4), Style::Line, {}, {}, 6};
  double xlo = INFINITY, xhi = 0, rlo = 1, rhi = 1;
  for (const auto& r : st["rows"]) {
    const double x = double_or_nan(r, "step");
    xlo = std::min(xlo, x), xhi = std::max(xhi, x);
    const std::pair<Series*, const char*> cols[4] = {
        {&ratio, "median_ratio"}, {&jac, "median_jaccard"}, {&agr, "median_agreement"}, {&fam, "share_same_family"}};
    for (const auto& [s, key] : cols) {
      const double y = double_or_nan(r, key);
      if (!std::isfinite(y) || (s == &ratio && y <= 0)) continue;
      s->x.push_back(x), s->y.push_back(y);
      if (s == &ratio) rlo = std::min(rlo, y), rhi = std::max(rhi, y);
    }
  }
  if (std::isfinite(xlo) && xhi > 0) {
    const std::string B = format_label(double_or_nan(st, "budget"));
    Figure f;
    f.title = "Allocation staleness: error ratio stale / fresh, B = " + B + " bits per element";
    f.xlabel = "decode step s (log)";
    f.ylabel = "median over heads of err_stale / err_fresh (log)";
    f.xlog = f.ylog = true;
    f.xmin = xlo / 1.3, f.xmax = xhi * 1.3;
    f.ymin = rlo / 2, f.ymax = rhi * 2;
    f.series = {ratio, {"ratio 1: the stale allocation is as good as a fresh one", Rgb{120, 120, 120}, Style::Dashed,
                        {f.xmin, f.xmax}, {1, 1}, 1}};
    out.push_back({std::string("staleness"), f});
    Figure g;
    g.title = "Allocation staleness: overlap of stale and fresh allocations, B = " + B + " bits per element";
    g.xlabel = "decode step s (log)";
    g.ylabel = "overlap or share, in [0, 1]";
    g.xlog = true;
    g.xmin = f.xmin, g.xmax = f.xmax;
    g.ymin = 0, g.ymax = 1.02;
    g.series = {jac, agr, fam};
    out.push_back({std::string("staleness_overlap"), g});
  }
  return out;
}

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
  so.rope = m.rope;
  nlohmann::json heads = nlohmann::json::array();
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      ctx.check_stop();
      const StalenessHead r = staleness_head(ctx.trace.head(l, h), so, ctx.backend);
      nlohmann::json steps = nlohmann::json::array();
      for (const StalenessStep& st : r.steps)
        steps.push_back({{"step", st.step},
                         {"err_stale", finite_or_null(st.err_stale)},
                         {"err_fresh", finite_or_null(st.err_fresh)},
                         {"ratio", finite_or_null(st.ratio)},
                         {"jaccard", finite_or_null(st.jaccard)},
                         {"agreement", finite_or_null(st.agreement)},
                         {"family", st.family},
                         {"same_family", st.same_family}});
      heads.push_back({{"layer", l}, {"kv_head", h}, {"family_obs", r.family_obs}, {"steps", steps}});
    }
  j["staleness"] = {{"budget", so.budget}, {"heads", heads}};
}

std::string StalenessAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                            const std::string& dir) const {
  nlohmann::json stale;
  std::ostringstream hc, pc;
  hc << "cell,layer,kv_head,step,err_stale,err_fresh,ratio,jaccard,agreement,family_obs,family,same_family\n";
  pc << "step,heads,median_ratio,mean_ratio,median_jaccard,mean_jaccard,median_agreement,mean_agreement,share_same_family\n";
  struct Acc {
    std::vector<double> ratio, jaccard, agreement;
    int heads = 0, same = 0;
  };
  std::map<int, Acc> by_step;
  for (const auto& c : cells) {
    if (!c.contains("staleness")) continue;
    for (const auto& h : c["staleness"]["heads"])
      for (const auto& st : h["steps"]) {
        const int step = st["step"].get<int>();
        const double r = double_or_nan(st, "ratio"), jac = double_or_nan(st, "jaccard"),
                     ag = double_or_nan(st, "agreement");
        const bool same = st["same_family"].get<bool>();
        hc << c["id"].get<std::string>() << ',' << h["layer"] << ',' << h["kv_head"] << ',' << step << ','
           << format_or_nan(double_or_nan(st, "err_stale")) << ',' << format_or_nan(double_or_nan(st, "err_fresh"))
           << ',' << format_or_nan(r) << ',' << format_or_nan(jac) << ',' << format_or_nan(ag) << ','
           << h["family_obs"].get<std::string>() << ',' << st["family"].get<std::string>() << ',' << (same ? 1 : 0)
           << '\n';
        Acc& a = by_step[step];
        if (std::isfinite(r)) a.ratio.push_back(r);
        if (std::isfinite(jac)) a.jaccard.push_back(jac);
        if (std::isfinite(ag)) a.agreement.push_back(ag);
        ++a.heads;
        a.same += same ? 1 : 0;
      }
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [step, a] : by_step) {
    const double share = a.heads ? static_cast<double>(a.same) / a.heads : kNaN;
    const nlohmann::json r = {{"step", step},
                              {"heads", a.heads},
                              {"median_ratio", finite_or_null(quantile_or_nan(a.ratio, 0.5))},
                              {"mean_ratio", finite_or_null(mean_or_nan(a.ratio))},
                              {"median_jaccard", finite_or_null(quantile_or_nan(a.jaccard, 0.5))},
                              {"mean_jaccard", finite_or_null(mean_or_nan(a.jaccard))},
                              {"median_agreement", finite_or_null(quantile_or_nan(a.agreement, 0.5))},
                              {"mean_agreement", finite_or_null(mean_or_nan(a.agreement))},
                              {"share_same_family", finite_or_null(share)}};
    pc << step << ',' << a.heads << ',' << format_or_nan(double_or_nan(r, "median_ratio")) << ','
       << format_or_nan(double_or_nan(r, "mean_ratio")) << ',' << format_or_nan(double_or_nan(r, "median_jaccard"))
       << ',' << format_or_nan(double_or_nan(r, "mean_jaccard")) << ','
       << format_or_nan(double_or_nan(r, "median_agreement")) << ','
       << format_or_nan(double_or_nan(r, "mean_agreement")) << ',' << format_or_nan(share) << '\n';
    rows.push_back(r);
  }
  stale = {{"budget", spec.budget}, {"rows", rows}};
  write_file_atomically(dir + "/staleness_heads.csv", hc.str());
  write_file_atomically(dir + "/staleness.csv", pc.str());
  write_file_atomically(dir + "/staleness.json", stale.dump(1) + "\n");
  if (rows.empty()) return "";
  std::ostringstream s;
  s << "\n## Allocation staleness over decode steps (B = " << format_or_nan(spec.budget) << ")\n\n"
    << "Per head, M* decided once from the observation queries (stale) vs M* solved for the g queries of decode step s "
       "(fresh), both recomputed exactly on step s's queries over T + s tokens. Ratio = err_stale / err_fresh; Jaccard of "
       "the evicted sets; tier agreement = share of prompt tokens with the same tier; same family = the best of Q*, E*, M* "
       "by the surrogate equals the observation window's.\n\n"
    << "| step s | heads | median ratio | mean ratio | median Jaccard | median tier agreement | same family |\n|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    s << "| " << r["step"] << " | " << r["heads"] << " | " << format_or_nan(double_or_nan(r, "median_ratio"), "%.3f")
      << " | " << format_or_nan(double_or_nan(r, "mean_ratio"), "%.3f") << " | "
      << format_or_nan(double_or_nan(r, "median_jaccard"), "%.3f") << " | "
      << format_or_nan(double_or_nan(r, "median_agreement"), "%.3f") << " | "
      << format_or_nan(100 * double_or_nan(r, "share_same_family"), "%.1f") << "% |\n";
  const auto& r0 = rows.front();
  const auto& r1 = rows.back();
  s << "\nFrom step " << r0["step"] << " to step " << r1["step"] << " the median error ratio goes "
    << format_or_nan(double_or_nan(r0, "median_ratio"), "%.3f") << " -> "
    << format_or_nan(double_or_nan(r1, "median_ratio"), "%.3f") << ", the median tier agreement "
    << format_or_nan(double_or_nan(r0, "median_agreement"), "%.3f") << " -> "
    << format_or_nan(double_or_nan(r1, "median_agreement"), "%.3f")
    << ", and the share of heads keeping their best family "
    << format_or_nan(100 * double_or_nan(r0, "share_same_family"), "%.1f") << "% -> "
    << format_or_nan(100 * double_or_nan(r1, "share_same_family"), "%.1f") << "%.\n";
  return s.str();
}

AnalysisType StalenessAnalysis::type() {
  return {"staleness", "stale (observation) vs fresh (decode step s) M* per head: error ratio, overlaps, family",
          {"staleness"}, parse, figures};
}

}  // namespace tierlab
