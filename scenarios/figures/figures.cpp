#include "scenarios/figures/figures.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/error.hpp"
#include "scenarios/figures/figure.hpp"
#include "scenarios/figures/figures_methods.hpp"
#include "scenarios/figures/figures_smoothing.hpp"

namespace tierlab {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("figure: the table '" + path + "' is missing; run `tierlab run` first.");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("figure: the table '" + path + "' is not valid JSON (" + e.what() + ").");
  }
}

// heads.csv: the columns by name.
std::map<std::string, std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("figure: the table '" + path + "' is missing; run `tierlab run` first.");
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  {
    std::stringstream ss(line);
    std::string x;
    while (std::getline(ss, x, ',')) names.push_back(x);
  }
  std::map<std::string, std::vector<std::string>> cols;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string x;
    for (std::size_t i = 0; i < names.size() && std::getline(ss, x, ','); ++i) cols[names[i]].push_back(x);
  }
  return cols;
}

double val(const nlohmann::json& j, const char* k) {
  return j.contains(k) && !j[k].is_null() ? j[k].get<double>() : std::nan("");
}

void pad_range(double& lo, double& hi, double frac) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = -1, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const double p = (hi - lo) * frac;
  lo -= p, hi += p;
}

std::string fmt(double v, const char* f = "%.3g") {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return std::isfinite(v) ? b : "n/a";
}

}  // namespace

std::vector<std::string> render_figures(const std::string& dir) {
  namespace fs = std::filesystem;
  const nlohmann::json in = read_json(dir + "/tables/interior.json");
  fs::create_directories(dir + "/figures");
  std::vector<std::string> files;
  const std::string verdict = in.value("queries", std::string("decode"));

  // 1. interior advantage vs dominated share, per cell.
  {
    Figure f;
    f.title = "Interior advantage vs dominated share (B = " + fmt(val(in, "primary_budget")) + "): rho = " +
              fmt(val(in, "rho"), "%.2f") + " [" + fmt(val(in, "ci_lo"), "%.2f") + ", " + fmt(val(in, "ci_hi"), "%.2f") +
              "], n = " + std::to_string(in["n_cells"].get<int>());
    f.xlabel = "dominated share (fraction of the cell's heads with R_h(2-bit) >= 1)";
    f.ylabel = "median over heads of A (" + verdict + " queries)";
    std::map<std::string, Series> by;
    double ylo = INFINITY, yhi = -INFINITY;
    for (const auto& p : in["points"]) {
      const double x = val(p, "dominated_share"), y = val(p, "A");
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
    const auto cols = read_csv(dir + "/tables/heads.csv");
    Figure f;
    f.title = "Per-head interior advantage vs budget";
    f.xlabel = "budget B (bits per key element)";
    f.ylabel = "interior advantage A (" + verdict + " queries)";
    Series pts{"heads (one point per head and cell)", Rgb{31, 119, 180, 90}, Style::Points, {}, {}, 6};
    const auto& bs = cols.at("budget");
    const auto& as = cols.at("A");
    std::vector<double> budgets;
    for (const auto& b : in["budgets"]) budgets.push_back(b["budget"].get<double>());
    double bspan = budgets.size() > 1 ? (*std::max_element(budgets.begin(), budgets.end()) - *std::min_element(budgets.begin(), budgets.end())) : 1;
    double ylo = 0, yhi = 1;
    for (std::size_t i = 0; i < bs.size() && i < as.size(); ++i) {
      const double a = std::strtod(as[i].c_str(), nullptr), b = std::strtod(bs[i].c_str(), nullptr);
      if (!std::isfinite(a)) continue;
      pts.x.push_back(b + (static_cast<double>(i % 9) - 4) * 0.006 * bspan);  // deterministic jitter
      pts.y.push_back(a);
    }
    Series mean{"median over heads", Rgb{214, 39, 40}, Style::Line, {}, {}, 6};
    for (const auto& b : in["budgets"])
      if (std::isfinite(val(b, "median_A_heads"))) mean.x.push_back(val(b, "budget")), mean.y.push_back(val(b, "median_A_heads"));
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
    if (below > 0) f.title += " (" + std::to_string(below) + " heads with A < " + fmt(ylo, "%.2g") + " drawn at the bottom edge)";
    f.series = {pts, mean, {"", Rgb{120, 120, 120}, Style::Dashed, {-100, 100}, {0, 0}, 1}};
    pad_range(ylo, yhi, 0.08);
    double xlo = budgets.empty() ? 0 : *std::min_element(budgets.begin(), budgets.end());
    double xhi = budgets.empty() ? 1 : *std::max_element(budgets.begin(), budgets.end());
    pad_range(xlo, xhi, 0.08);
    f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
    for (auto& x : render_figure(f, dir + "/figures/advantage_vs_budget")) files.push_back(x);
  }

  // 3. phase map.
  if (fs::exists(dir + "/tables/phase.json")) {
    const nlohmann::json ph = read_json(dir + "/tables/phase.json");
    Figure f;
    f.title = "Dominance phase map: winning family by exact recomputation";
    f.xlabel = "logit scale (multiplier of query norms, unitless)";
    f.ylabel = "budget B (bits per key element)";
    Series q{"Q wins (quantize only)", palette(0), Style::Squares, {}, {}, 26};
    Series e{"E wins (evict only)", palette(1), Style::Squares, {}, {}, 26};
    Series m{"M wins (mixed tiers)", palette(2), Style::Squares, {}, {}, 26};
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (const auto& r : ph["rows"]) {
      const double x = val(r, "logit_scale"), y = val(r, "budget");
      const std::string w = r["winner"].get<std::string>();
      Series* s = w == "Q" ? &q : w == "E" ? &e : w == "M" ? &m : nullptr;
      if (s) s->x.push_back(x), s->y.push_back(y);
      xlo = std::min(xlo, x), xhi = std::max(xhi, x), ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
    pad_range(ylo, yhi, 0.12);
    f.xlog = xlo > 0;
    if (f.xlog) xlo /= 1.4, xhi *= 1.4;
    else pad_range(xlo, xhi, 0.1);
    f.series = {q, e, m};
    const double bnd = val(ph, "boundary_logit_scale");
    if (std::isfinite(bnd))
      // Over the data rows only: the legend sits in the headroom above them and never covers the line.
      f.series.push_back({"surrogate boundary: median R_h(2) = 1 (logit scale " + fmt(bnd, "%.3g") + ")", Rgb{0, 0, 0},
                          Style::Dashed, {bnd, bnd}, {ylo, yhi}, 1});
    f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
    for (auto& x : render_figure(f, dir + "/figures/phase_map")) files.push_back(x);
  }

  // 4. the water-filling picture of one head.
  if (fs::exists(dir + "/tables/waterfill.json")) {
    const nlohmann::json w = read_json(dir + "/tables/waterfill.json");
    const double theta = val(w, "theta"), B = val(w, "budget");
    const std::string head = w["cell"].get<std::string>() + " L" + std::to_string(w["layer"].get<int>()) + ".H" +
                             std::to_string(w["kv_head"].get<int>());
    Series g{"marginal return at 0 bits, w_t alpha ln(beta)", palette(0), Style::Points, {}, {}, 5};
    Series bits{"bits per token b_t", palette(0), Style::Line, {}, {}, 4};
    double glo = INFINITY, ghi = 0, bhi = 0;
    const double n = static_cast<double>(w["rows"].size());
    for (const auto& r : w["rows"]) {
      const double x = val(r, "rank"), g0 = val(r, "g0"), b = val(r, "bits");
      if (g0 > 0) g.x.push_back(x), g.y.push_back(g0), glo = std::min(glo, g0), ghi = std::max(ghi, g0);
      bits.x.push_back(x), bits.y.push_back(b), bhi = std::max(bhi, b);
    }
    Figure f1;
    f1.title = "Reverse water-filling, " + head + ": water level theta = " + fmt(theta, "%.3g");
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
    f2.title = "Bits per token after water-filling, " + head + ", B = " + fmt(B) + " bits per element";
    f2.xlabel = "token rank by weight a_t (1 = heaviest)";
    f2.ylabel = "bits per key element of the token";
    f2.series = {bits, {"budget B (mean bits)", palette(3), Style::Dashed, {0, n + 1}, {B, B}, 1}};
    f2.xmin = 0, f2.xmax = n + 1, f2.ymin = 0, f2.ymax = std::max(bhi, B) * 1.1 + 0.1;
    for (auto& x : render_figure(f2, dir + "/figures/waterfill_bits")) files.push_back(x);
  }
  // 5. allocation staleness over decode steps.
  if (fs::exists(dir + "/tables/staleness.json")) {
    const nlohmann::json st = read_json(dir + "/tables/staleness.json");
    // Two figures: the error ratio spans orders of magnitude (log y), the overlaps live in [0, 1].
    Series ratio{"median error ratio err_stale / err_fresh", palette(3), Style::Line, {}, {}, 6};
    Series jac{"median Jaccard of evicted sets", palette(0), Style::Line, {}, {}, 6};
    Series agr{"median tier agreement", palette(2), Style::Line, {}, {}, 6};
    Series fam{"share of heads keeping their best family", palette(4), Style::Line, {}, {}, 6};
    double xlo = INFINITY, xhi = 0, rlo = 1, rhi = 1;
    for (const auto& r : st["rows"]) {
      const double x = val(r, "step");
      xlo = std::min(xlo, x), xhi = std::max(xhi, x);
      const std::pair<Series*, const char*> cols[4] = {
          {&ratio, "median_ratio"}, {&jac, "median_jaccard"}, {&agr, "median_agreement"}, {&fam, "share_same_family"}};
      for (const auto& [s, key] : cols) {
        const double y = val(r, key);
        if (!std::isfinite(y) || (s == &ratio && y <= 0)) continue;
        s->x.push_back(x), s->y.push_back(y);
        if (s == &ratio) rlo = std::min(rlo, y), rhi = std::max(rhi, y);
      }
    }
    if (std::isfinite(xlo) && xhi > 0) {
      const std::string B = fmt(val(st, "budget"));
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
