// tierlab-explorer's dominance view: Engine::dominance (engine.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "model/dominance.hpp"
#include "scenarios/analyses/phase_map.hpp"
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
    // The figure of `tierlab run` (one builder): the heatmap, ties, both boundaries.
    const Figure f = phase_map_figure(ph);
    std::vector<HoverPoint> hv;
    for (const auto& r : ph.value("rows", nlohmann::json::array())) {
      const double x = val(r, "logit_scale"), y = val(r, "budget");
      const std::string w = phase_outcome(r);
      hv.push_back({x, y, "logit scale " + format_label(x) + ", B = " + format_label(y) + "\n" +
                              (w == "tie" ? std::string("tie") : "winner " + (w.empty() ? std::string("-") : w)) +
                              "\nshare of heads won: Q " + format_label(val(r, "share_Q"), "%.2f") + ", E " +
                              format_label(val(r, "share_E"), "%.2f") + ", M " + format_label(val(r, "share_M"), "%.2f") +
                              "\nmedian R_h(2) " + format_label(val(r, "R2_median"), "%.3g") + ", mean A " +
                              format_label(val(r, "mean_A"), "%.3g")});
    }
    const double bnd = val(ph, "boundary_logit_scale");
    v.figures = {f};
    v.hover = {hv};
    v.info = "From the scenario run " + dir + " (tables/phase.json). Surrogate boundary at logit scale " + format_label(bnd, "%.3g") +
             "; hover a cell for its numbers.";
    v.seconds = ms_since(t0) / 1000;
    return v;
  }
  check(cancel);
  if (progress) progress(1, 5);
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, cancel);
  const DominanceReport& d = e->dom;
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  // The tiers evenly spaced on x (ticks: name and rate), R on a log axis: kivi4, kivi8 and
  // exact, close in R and far apart in rate, each get their place. The hull is drawn through
  // the same warp of the rate axis (piecewise linear between the tiers' rates), densely, so a
  // point above it in rate space is above it here.
  const int n = ladder.size();
  auto warp = [&](double r) {  // rate -> x position (tier j at j)
    for (int j = 0; j + 1 < n; ++j) {
      const double a = d.rate[static_cast<std::size_t>(j)], b = d.rate[static_cast<std::size_t>(j + 1)];
      if (r <= b || j + 2 == n) return b > a ? j + std::clamp((r - a) / (b - a), 0.0, 1.0) : static_cast<double>(j + 1);
    }
    return 0.0;
  };
  double rmin = kNaN;
  for (double r : d.R)
    if (r > 0 && !(r >= rmin)) rmin = r;
  const double floor_R = std::isfinite(rmin) ? rmin / 10 : 1e-6;  // where R = 0 (exact) is drawn
  Figure f;
  f.title = "Dominance of head " + head + "'s tiers: normalised cost R_h(tau) vs rate";
  f.xlabel = std::string("tier and its rate r(tau) (") + (s.rate_kind == RateKind::Code ? "code" : "total") +
             " bits per key element; tiers evenly spaced)";
  f.ylabel = "R_h(tau) = sum_t c_t(tau) / sum_t c_t(0) (log)";
  f.ylog = true;
  Series ok{"not dominated", palette(2), Style::Points, {}, {}, 12};
  Series hull_dom{"hull-dominated (never optimal for any lambda)", palette(1), Style::Points, {}, {}, 12};
  Series strict{"dominated: R >= 1 (worse than evicting)", palette(3), Style::Points, {}, {}, 12};
  Series hull{"lower convex hull (in rate)", Rgb{90, 90, 90}, Style::Line, {}, {}, 0};
  std::vector<HoverPoint> hv;
  double yhi = 2;
  for (int j = 0; j < n; ++j) {
    const double r = d.rate[static_cast<std::size_t>(j)], R = d.R[static_cast<std::size_t>(j)];
    const double x = j, y = std::max(R, floor_R);
    const bool finite = j > 0 && j < ladder.exact_index();
    Series& se = finite && d.dominated[static_cast<std::size_t>(j)] ? strict
                 : finite && d.hull_dominated[static_cast<std::size_t>(j)] ? hull_dom : ok;
    se.x.push_back(x), se.y.push_back(y);
    yhi = std::max(yhi, 2 * R);
    f.xticks.push_back({x, ladder.tiers[static_cast<std::size_t>(j)].name() + " (" + format_label(r, "%.3g") + ")"});
    hv.push_back({x, y, ladder.tiers[static_cast<std::size_t>(j)].name() + ": rate " + format_label(r, "%.3f") + ", R = " +
                            format_label(R, "%.4g") + (R > 0 ? std::string() : " (drawn at the axis floor)")});
  }
  const std::vector<int> vertices = lower_hull(d.rate, d.R);
  for (std::size_t k = 0; k + 1 < vertices.size(); ++k) {
    const double r0 = d.rate[static_cast<std::size_t>(vertices[k])], r1 = d.rate[static_cast<std::size_t>(vertices[k + 1])];
    const double R0 = d.R[static_cast<std::size_t>(vertices[k])], R1 = d.R[static_cast<std::size_t>(vertices[k + 1])];
    for (int i = 0; i <= 40; ++i) {
      const double r = r0 + (r1 - r0) * i / 40.0;
      hull.x.push_back(warp(r)), hull.y.push_back(std::max(R0 + (R1 - R0) * i / 40.0, floor_R));
    }
  }
  f.series = {hull, ok};
  if (!hull_dom.x.empty()) f.series.push_back(hull_dom);
  if (!strict.x.empty()) f.series.push_back(strict);
  f.series.push_back({"R = 1 (eviction's cost)", Rgb{120, 120, 120}, Style::Dashed, {-1, static_cast<double>(n)}, {1, 1}, 1});
  f.xmin = -0.5, f.xmax = n - 0.5;
  f.ymin = floor_R / 2, f.ymax = yhi;
  v.figures = {f};
  v.hover = {hv};
  std::ostringstream info;
  info << "Live, head " << head << " (open a phase-map scenario run, e.g. scenarios/files/02-phase-map.yaml, for the phase map).\n"
       << "x: the tiers evenly spaced, each with its rate; y: R on a log axis (R = 0, exact, at the floor); the hull is "
          "the lower convex hull in rate, drawn through the same spacing.\n";
  for (int j = 0; j < ladder.size(); ++j)
    info << ladder.tiers[static_cast<std::size_t>(j)].name() << ": R = " << format_label(d.R[static_cast<std::size_t>(j)], "%.4g")
         << (j > 0 && j < ladder.exact_index() && d.dominated[static_cast<std::size_t>(j)] ? " (dominated)" : "")
         << (j > 0 && j < ladder.exact_index() && d.hull_dominated[static_cast<std::size_t>(j)] ? " (hull-dominated)" : "") << "\n";
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(5, 5);
  return v;
}

}  // namespace tierlab::explorer
