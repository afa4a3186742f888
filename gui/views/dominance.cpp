// tierlab-explorer's dominance view: Engine::dominance (engine.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "model/dominance.hpp"
#include "scenarios/figures/tables_io.hpp"

namespace tierlab::explorer {

namespace fs = std::filesystem;

using namespace detail;

// ---------------------------------------------------------------------------------------
// (d) dominance

ViewResult Engine::dominance(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  ViewResult v;
  const std::string dir = source_->run_dir();
  if (source_->has_tables() && fs::exists(dir + "/tables/phase.json")) {
    const nlohmann::json ph = read_table_json(dir + "/tables/phase.json");
    Figure f;
    f.title = "Dominance phase map: winning family by exact recomputation";
    f.xlabel = "logit scale (multiplier of query norms, log)";
    f.ylabel = "budget B (bits per key element)";
    Series q{"Q wins (quantize only)", palette(0), Style::Squares, {}, {}, 30};
    Series e{"E wins (evict only)", palette(1), Style::Squares, {}, {}, 30};
    Series mm{"M wins (mixed tiers)", palette(2), Style::Squares, {}, {}, 30};
    std::vector<HoverPoint> hv;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    std::map<double, std::vector<std::pair<double, std::string>>> by_budget;
    for (const auto& r : ph.value("rows", nlohmann::json::array())) {
      const double x = val(r, "logit_scale"), y = val(r, "budget");
      const std::string w = r.value("winner", std::string());
      Series* sp = w == "Q" ? &q : w == "E" ? &e : w == "M" ? &mm : nullptr;
      if (sp) sp->x.push_back(x), sp->y.push_back(y);
      by_budget[y].push_back({x, w});
      xlo = std::min(xlo, x), xhi = std::max(xhi, x), ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      hv.push_back({x, y, "logit scale " + format_label(x) + ", B = " + format_label(y) + "\nwinner " + (w.empty() ? "-" : w) +
                              "\nshare of heads won: Q " + format_label(val(r, "share_Q"), "%.2f") + ", E " +
                              format_label(val(r, "share_E"), "%.2f") + ", M " + format_label(val(r, "share_M"), "%.2f") +
                              "\nmedian R_h(2) " + format_label(val(r, "R2_median"), "%.3g") + ", mean A " +
                              format_label(val(r, "mean_A"), "%.3g")});
    }
    // The recomputed boundary: per budget, the first logit scale from which eviction wins.
    Series rb{"recomputed boundary: E wins from here (per budget)", Rgb{90, 90, 90}, Style::Line, {}, {}, 6};
    for (auto& [b, row] : by_budget) {
      std::sort(row.begin(), row.end());
      for (std::size_t i = 1; i < row.size(); ++i)
        if (row[i].second == "E" && row[i - 1].second != "E") {
          rb.x.push_back(std::sqrt(row[i].first * row[i - 1].first));
          rb.y.push_back(b);
          break;
        }
    }
    pad_range(ylo, yhi, 0.12);
    f.xlog = xlo > 0;
    if (f.xlog) xlo /= 1.5, xhi *= 1.5;
    else pad_range(xlo, xhi, 0.1);
    f.series = {q, e, mm};
    if (!rb.x.empty()) f.series.push_back(rb);
    const double bnd = val(ph, "boundary_logit_scale");
    if (std::isfinite(bnd))
      f.series.push_back({"surrogate boundary: median R_h(2) = 1", Rgb{0, 0, 0}, Style::Dashed, {bnd, bnd}, {ylo - 10, yhi + 10}, 1});
    f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
    v.figures = {f};
    v.hover = {hv};
    v.info = "From the scenario run " + dir + " (tables/phase.json). Surrogate boundary at logit scale " + format_label(bnd, "%.3g") +
             "; hover a square for its numbers.";
    v.seconds = ms_since(t0) / 1000;
    return v;
  }
  check(cancel);
  if (progress) progress(0.2, "dominance of the selected head");
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, cancel);
  const DominanceReport& d = e->dom;
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  Figure f;
  f.title = "Dominance of head " + head + "'s tiers: normalised cost R_h(tau) vs rate";
  f.xlabel = std::string("rate r(tau) (") + (s.rate_kind == RateKind::Code ? "code" : "total") + " bits per key element)";
  f.ylabel = "R_h(tau) = sum_t c_t(tau) / sum_t c_t(0)";
  Series ok{"not dominated", palette(2), Style::Points, {}, {}, 12};
  Series hull_dom{"hull-dominated (never optimal for any lambda)", palette(1), Style::Points, {}, {}, 12};
  Series strict{"dominated: R >= 1 (worse than evicting)", palette(3), Style::Points, {}, {}, 12};
  Series hull{"lower convex hull", Rgb{90, 90, 90}, Style::Line, {}, {}, 6};
  std::vector<HoverPoint> hv;
  double yhi = 1.2;
  for (int j = 0; j < ladder.size(); ++j) {
    const double x = d.rate[static_cast<std::size_t>(j)], y = d.R[static_cast<std::size_t>(j)];
    const bool finite = j > 0 && j < ladder.exact_index();
    Series& se = finite && d.dominated[static_cast<std::size_t>(j)] ? strict
                 : finite && d.hull_dominated[static_cast<std::size_t>(j)] ? hull_dom : ok;
    se.x.push_back(x), se.y.push_back(y);
    yhi = std::max(yhi, y);
    hv.push_back({x, y, ladder.tiers[static_cast<std::size_t>(j)].name() + ": rate " + format_label(x, "%.3f") + ", R = " + format_label(y, "%.4g")});
  }
  for (int k : lower_hull(d.rate, d.R)) hull.x.push_back(d.rate[static_cast<std::size_t>(k)]), hull.y.push_back(d.R[static_cast<std::size_t>(k)]);
  f.series = {hull, ok};
  if (!hull_dom.x.empty()) f.series.push_back(hull_dom);
  if (!strict.x.empty()) f.series.push_back(strict);
  f.series.push_back({"R = 1 (eviction's cost)", Rgb{120, 120, 120}, Style::Dashed, {-1, 100}, {1, 1}, 1});
  f.xmin = -0.6, f.xmax = *std::max_element(d.rate.begin(), d.rate.end()) + 0.6;
  f.ymin = -0.05, f.ymax = yhi * 1.05;
  v.figures = {f};
  v.hover = {hv};
  std::ostringstream info;
  info << "Live, head " << head << " (open a phase-map scenario run, e.g. scenarios/files/02-phase-map.yaml, for the phase map).\n";
  for (int j = 0; j < ladder.size(); ++j)
    info << ladder.tiers[static_cast<std::size_t>(j)].name() << ": R = " << format_label(d.R[static_cast<std::size_t>(j)], "%.4g")
         << (j > 0 && j < ladder.exact_index() && d.dominated[static_cast<std::size_t>(j)] ? " (dominated)" : "")
         << (j > 0 && j < ladder.exact_index() && d.hull_dominated[static_cast<std::size_t>(j)] ? " (hull-dominated)" : "") << "\n";
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(1.0, "dominance done");
  return v;
}

}  // namespace tierlab::explorer
