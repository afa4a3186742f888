#include "scenarios/figures/figures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "scenarios/figures/figure.hpp"
#include "scenarios/figures/figures_methods.hpp"
#include "scenarios/figures/figures_smoothing.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/table_numbers.hpp"

namespace tierlab {

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

std::vector<std::string> render_figures(const std::string& dir) {
  namespace fs = std::filesystem;
  const nlohmann::json in = read_table_json(dir + "/tables/interior.json");
  fs::create_directories(dir + "/figures");
  std::vector<std::string> files;
  const std::string verdict = in.value("queries", std::string("decode"));

  // 1. interior advantage vs dominated share, per cell.
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
    for (auto& x : render_figure(f, dir + "/figures/interior_vs_dominated")) files.push_back(x);
  }

  // 2. per-head advantage vs budget.
  {
    const Figure f = advantage_vs_budget_figure(in, read_table_csv(dir + "/tables/heads.csv"));
    for (auto& x : render_figure(f, dir + "/figures/advantage_vs_budget")) files.push_back(x);
  }

  // 3. phase map.
  if (fs::exists(dir + "/tables/phase.json")) {
    const nlohmann::json ph = read_table_json(dir + "/tables/phase.json");
    Figure f;
    f.title = "Dominance phase map: winning family by exact recomputation";
    f.xlabel = "logit scale (multiplier of query norms, unitless)";
    f.ylabel = "budget B (bits per key element)";
    const PhasePoints pts = phase_points(ph["rows"], "logit_scale", 26);
    double xlo = pts.xlo, xhi = pts.xhi, ylo = pts.ylo, yhi = pts.yhi;
    pad_range(ylo, yhi, 0.12);
    f.xlog = xlo > 0;
    if (f.xlog) xlo /= 1.4, xhi *= 1.4;
    else pad_range(xlo, xhi, 0.1);
    f.series = {pts.q, pts.e, pts.m};
    const double bnd = double_or_nan(ph, "boundary_logit_scale");
    if (std::isfinite(bnd))
      // Over the data rows only: the legend sits in the headroom above them and never covers the line.
      f.series.push_back({"surrogate boundary: median R_h(2) = 1 (logit scale " + format_label(bnd, "%.3g") + ")",
                          Rgb{0, 0, 0}, Style::Dashed, {bnd, bnd}, {ylo, yhi}, 1});
    f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
    for (auto& x : render_figure(f, dir + "/figures/phase_map")) files.push_back(x);
  }

  // 4. the water-filling picture of one head.
  if (fs::exists(dir + "/tables/waterfill.json")) {
    const nlohmann::json w = read_table_json(dir + "/tables/waterfill.json");
    const double theta = double_or_nan(w, "theta"), B = double_or_nan(w, "budget");
    const std::string head = w["cell"].get<std::string>() + " L" + std::to_string(w["layer"].get<int>()) + ".H" +
                             std::to_string(w["kv_head"].get<int>());
    Series g{"marginal return at 0 bits, w_t alpha ln(beta)", palette(0), Style::Points, {}, {}, 5};
    Series bits{"bits per token b_t", palette(0), Style::Line, {}, {}, 4};
    double glo = INFINITY, ghi = 0, bhi = 0;
    const double n = static_cast<double>(w["rows"].size());
    for (const auto& r : w["rows"]) {
      const double x = double_or_nan(r, "rank"), g0 = double_or_nan(r, "g0"), b = double_or_nan(r, "bits");
      if (g0 > 0) g.x.push_back(x), g.y.push_back(g0), glo = std::min(glo, g0), ghi = std::max(ghi, g0);
      bits.x.push_back(x), bits.y.push_back(b), bhi = std::max(bhi, b);
    }
    Figure f1;
    f1.title = "Reverse water-filling, " + head + ": water level theta = " + format_label(theta, "%.3g");
    f1.xlabel = "token rank by weight a_t (1 = heaviest)";
    f1.ylabel = "marginal return per bit (squared output / bit, log)";
    if (theta > 0) glo = std::min(glo, theta), ghi = std::max(ghi, theta);
    f1.ylog = glo > 0 && ghi > glo;
    f1.ymin = f1.ylog ? glo / 3 : 0, f1.ymax = f1.ylog ? ghi * 3 : 1;
    f1.xmin = 0, f1.xmax = n + 1;
    f1.series = {g};
    if (theta > 0) f1.series.push_back({"water level theta (tokens below get 0 bits)", palette(3), Style::Dashed, {0, n + 1}, {theta, theta}, 1});
    for (auto& x : render_figure(f1, dir + "/figures/waterfill_level")) files.push_back(x);
    Figure f2;
    f2.title = "Bits per token after water-filling, " + head + ", B = " + format_label(B) + " bits per element";
    f2.xlabel = "token rank by weight a_t (1 = heaviest)";
    f2.ylabel = "bits per key element of the token";
    f2.series = {bits, {"budget B (mean bits)", palette(3), Style::Dashed, {0, n + 1}, {B, B}, 1}};
    f2.xmin = 0, f2.xmax = n + 1, f2.ymin = 0, f2.ymax = std::max(bhi, B) * 1.1 + 0.1;
    for (auto& x : render_figure(f2, dir + "/figures/waterfill_bits")) files.push_back(x);
  }
  // 5. allocation staleness over decode steps.
  if (fs::exists(dir + "/tables/staleness.json")) {
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
      for (auto& x : render_figure(f, dir + "/figures/staleness")) files.push_back(x);
      Figure g;
      g.title = "Allocation staleness: overlap of stale and fresh allocations, B = " + B + " bits per element";
      g.xlabel = "decode step s (log)";
      g.ylabel = "overlap or share, in [0, 1]";
      g.xlog = true;
      g.xmin = f.xmin, g.xmax = f.xmax;
      g.ymin = 0, g.ymax = 1.02;
      g.series = {jac, agr, fam};
      for (auto& x : render_figure(g, dir + "/figures/staleness_overlap")) files.push_back(x);
    }
  }
  for (auto& x : render_smoothing_figures(dir)) files.push_back(x);  // smoothing, phase_map_entropy
  for (auto& x : render_method_figures(dir)) files.push_back(x);  // mismatch_*, proxy_* (figures_methods.hpp)
  return files;
}

}  // namespace tierlab
