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
  if (progress) progress(5, 5);
  return v;
}

}  // namespace tierlab::explorer
