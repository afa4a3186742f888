// Figures of the smoothing study and the entropy phase map (figures_smoothing.hpp).
#include "scenarios/figures/figures_smoothing.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "scenarios/figures/figure.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/table_numbers.hpp"

namespace tierlab {

namespace {

const char* family_words(const std::string& f) { return f == "M" ? "M* (mixed)" : f == "E" ? "E* (evict only)" : "?"; }

// Lines of `key` vs kernel k for one family: one per (budget, pooling), colour by budget,
// solid for avg and dashed for max pooling; the raw row (kernel 1) starts every line.
// normalize: each line divided by its raw value (so every line starts at 1).
std::vector<Series> curves(const nlohmann::json& table, const std::string& family, const char* key, double scale,
                           bool normalize, double& ylo, double& yhi, double& kmax) {
  std::vector<double> budgets;
  std::vector<std::string> pools;
  for (const auto& r : table["rows"]) {
    if (r["family"] != family) continue;
    const double B = r["budget"].get<double>();
    const std::string pool = r["pool"].get<std::string>();
    if (std::find(budgets.begin(), budgets.end(), B) == budgets.end()) budgets.push_back(B);
    if (pool != "none" && std::find(pools.begin(), pools.end(), pool) == pools.end()) pools.push_back(pool);
  }
  std::vector<Series> out;
  for (std::size_t bi = 0; bi < budgets.size(); ++bi)
    for (const auto& pool : pools) {
      Series s;
      // Legend: one entry per budget (the avg line); the max lines share one grey entry.
      s.name = pool == "avg" || std::find(pools.begin(), pools.end(), "avg") == pools.end()
                   ? "B = " + format_label(budgets[bi]) + " bits per element"
                   : "";
      s.color = palette(static_cast<int>(bi));
      s.style = pool == "avg" ? Style::Line : Style::Dashed;
      double raw = 1.0;
      for (const auto& r : table["rows"])
        if (normalize && r["family"] == family && r["budget"].get<double>() == budgets[bi] && r["kernel"].get<int>() == 1)
          raw = double_or_nan(r, key);
      if (!(raw > 0)) continue;
      for (const auto& r : table["rows"]) {
        if (r["family"] != family || r["budget"].get<double>() != budgets[bi]) continue;
        const std::string p = r["pool"].get<std::string>();
        if (p != "none" && p != pool) continue;
        const double y = double_or_nan(r, key) * scale / raw;
        if (!std::isfinite(y)) continue;
        s.x.push_back(r["kernel"].get<int>()), s.y.push_back(y);
      }
      for (double y : s.y) ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      for (double x : s.x) kmax = std::max(kmax, x);
      if (!s.x.empty()) out.push_back(std::move(s));
    }
  if (pools.size() > 1)  // a legend-only entry (no points) for the line styles
    out.push_back({"dashed: max pooling (solid: avg)", Rgb{90, 90, 90}, Style::Dashed, {}, {}, 1});
  return out;
}

}  // namespace

std::vector<std::string> render_smoothing_figures(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (fs::exists(dir + "/tables/smoothing.json")) {
    const nlohmann::json t = read_table_json(dir + "/tables/smoothing.json");
    const std::string pad = t.value("padding", std::string("reflect")), q = t.value("queries", std::string("decode"));
    std::vector<std::string> families;
    for (const auto& r : t["rows"])
      if (std::find(families.begin(), families.end(), r["family"].get<std::string>()) == families.end())
        families.push_back(r["family"].get<std::string>());
    for (const std::string& fam : families) {
      int spans = 0;
      for (const auto& r : t["rows"])
        if (r["family"] == fam && r["kernel"].get<int>() == 1) spans = std::max(spans, r["spans"].get<int>());
      const std::string xlabel = "pooling kernel k (tokens, " + pad + " padding; k = 1: raw scores)";
      {
        double ylo = 0, yhi = 0, kmax = 1;
        Figure f;
        f.series = curves(t, fam, "truncation_rate", 100.0, false, ylo, yhi, kmax);
        f.title = "Span truncation of " + std::string(family_words(fam)) + " vs smoothing kernel (" +
                  std::to_string(spans) + " spans)";
        f.xlabel = xlabel;
        f.ylabel = "span truncation rate (% of spans partly evicted)";
        f.xmin = 0.5, f.xmax = kmax + 0.5;
        f.ymax = std::min(std::max(yhi * 1.08, 1.0), 100.0);
        f.ymin = -0.03 * f.ymax;  // a rate of 0 stays visible above the axis
        for (auto& x : render_figure(f, dir + "/figures/smoothing_truncation_" + fam)) files.push_back(x);
      }
      {
        double ylo = 1, yhi = 1, kmax = 1;
        Figure f;
        f.series = curves(t, fam, "mean_err", 1.0, true, ylo, yhi, kmax);
        f.title = "Recomputed error of " + std::string(family_words(fam)) + " with smoothed vs raw scores";
        f.xlabel = xlabel;
        f.ylabel = "mean error (smoothed) / mean error (raw), " + q + " queries";
        f.xmin = 0.5, f.xmax = kmax + 0.5;
        const double pad_y = std::max((yhi - ylo) * 0.08, 0.02);
        f.ymin = std::max(0.0, ylo - pad_y), f.ymax = yhi + pad_y;
        f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {f.xmin, f.xmax}, {1, 1}, 1});
        for (auto& x : render_figure(f, dir + "/figures/smoothing_error_" + fam)) files.push_back(x);
      }
    }
  }
  if (fs::exists(dir + "/tables/phase_entropy.json")) {
    const nlohmann::json ph = read_table_json(dir + "/tables/phase_entropy.json");
    Figure f;
    f.title = "Phase map over attention entropy: winning family by exact recomputation";
    const PhasePoints pts = phase_points(ph["rows"], "entropy_median", 22);
    const double xlo = pts.xlo, xhi = pts.xhi, ylo = pts.ylo, yhi = pts.yhi;
    if (std::isfinite(xlo)) {
      // Entropies crowd near 0 (sharp heads): a log axis when every bin's median is > 0.
      f.xlog = xlo > 0;
      f.xlabel = std::string("median attention entropy of the bin's heads (nats, observation queries") +
                 (f.xlog ? ", log)" : ")");
      f.ylabel = "budget B (bits per key element)";
      if (f.xlog) f.xmin = xlo / 1.6, f.xmax = xhi * 1.6;
      else f.xmin = xlo - std::max((xhi - xlo) * 0.06, 0.05), f.xmax = xhi + std::max((xhi - xlo) * 0.06, 0.05);
      const double py = std::max((yhi - ylo) * 0.12, 0.5);
      f.ymin = ylo - py, f.ymax = yhi + py;
      for (const Series* s : {&pts.q, &pts.e, &pts.m})
        if (!s->x.empty()) f.series.push_back(*s);
      const double bnd = double_or_nan(ph, "boundary_entropy");
      // The boundary spans the data rows only, so the legend (in the headroom above) never covers it.
      if (std::isfinite(bnd) && (!f.xlog || bnd > 0))
        f.series.push_back({"surrogate boundary: median R_h(2) = 1 (H = " + format_label(bnd, "%.2f") + " nats)",
                            Rgb{0, 0, 0}, Style::Dashed, {bnd, bnd}, {f.ymin, f.ymax}, 1});
      else
        f.title += " (median R_h(2) < 1 in every bin)";
      for (auto& x : render_figure(f, dir + "/figures/phase_map_entropy")) files.push_back(x);
    }
  }
  return files;
}

}  // namespace tierlab
