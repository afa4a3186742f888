// tierlab-explorer's rate-distortion curve view: Engine::rd_curve (engine.hpp).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/rd_curve.hpp"

namespace tierlab::explorer {

using namespace detail;

// ---------------------------------------------------------------------------------------
// (f) rate-distortion curve

std::shared_ptr<const RdCurve> Engine::rd_curve_(const Settings& s, const Progress& progress,
                                                  const std::atomic<bool>* cancel) {
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  const int S = source_->meta().decode_steps;
  const int step = std::clamp(s.decode_step, 1, std::max(S, 1));
  const std::string key = std::to_string(s.layer) + "." + std::to_string(s.kv_head) + "|" + ladder.name() + "|" +
                          std::string(to_string(s.rate_kind)) + "|" + std::string(to_string(s.solver)) + "|s" +
                          std::to_string(step);
  if (auto it = curves_.find(key); it != curves_.end()) return it->second;
  const std::shared_ptr<const HeadData> head = head_(s.layer, s.kv_head);
  RdCurveOptions o;
  o.budgets = parse_budget_grid(kRdCurveGrid, "explorer grid");
  o.families = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
  o.solve.ladder = ladder;
  o.solve.rate_kind = s.rate_kind;
  o.solve.solver = s.solver == FamilySolver::Smoothed ? FamilySolver::Exact : s.solver;
  o.solve.scope = Scope::Head;
  o.queries = RdQueries::Step;  // decode step s's g queries, as the water-filling view (obs without decode steps)
  o.decode_step = step;
  // The surrogate costs the other views cached for this head, ladder and rate kind.
  const std::shared_ptr<LadderEntry> e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, cancel);
  HeadCosts hc;
  hc.layer = s.layer, hc.kv_head = s.kv_head;
  hc.cost = e->costs.cost;
  hc.a = e->costs.weights.a;
  hc.output_norm2 = e->costs.output_norm2;
  hc.rates = e->rates;
  hc.spans = head->spans;
  if (o.solve.solver == FamilySolver::Waterfill) hc.noise = DistortionModel{e->fit.alpha, e->fit.beta};
  auto c = std::make_shared<const RdCurve>(tierlab::rd_curve(
      std::vector<const HeadData*>{head.get()}, source_->meta().rope, o,
      [&](int done, int total) {
        if (progress) progress(double(done) / std::max(total, 1), "rate-distortion curve");
      },
      cancel, {std::move(hc)}));
  if (curves_.size() >= 8) curves_.clear();  // a few heads' curves (each a few kB)
  curves_[key] = c;
  return c;
}

ViewResult Engine::rd_curve(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  check(cancel);
  const std::shared_ptr<const RdCurve> c = rd_curve_(s, progress, cancel);
  const RdCurveOptions& o = c->options;
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  // The grid budget nearest B: the points marked as "the current budget".
  std::size_t kb = 0;
  for (std::size_t k = 1; k < o.budgets.size(); ++k)
    if (std::fabs(o.budgets[k] - s.budget) < std::fabs(o.budgets[kb] - s.budget)) kb = k;

  Figure f;
  const std::string where = c->queries == RdQueries::Step ? "decode step " + std::to_string(o.decode_step) + "'s queries"
                                                           : "observation queries";
  f.title = "RD curve, head " + head + " (recomputed: " +
            (c->queries == RdQueries::Step ? "step " + std::to_string(o.decode_step) : std::string("obs")) +
            "; dashed: surrogate; grey: B = " + format_label(s.budget, "%.3g") + ")";
  f.xlabel = std::string("key rate, ") + std::string(to_string(s.rate_kind)) + " bits per element (measured)";
  f.ylabel = "relative output error (log)";
  std::vector<HoverPoint> hv;
  double lo = INFINITY, hi = 0;
  // The y range follows the recomputed errors (a surrogate far above them is clipped).
  auto add = [&](Series& se, double x, double y, bool ranged = true) {
    if (!(y > 0) || !std::isfinite(x)) return;
    se.x.push_back(x), se.y.push_back(y);
    if (ranged) lo = std::min(lo, y), hi = std::max(hi, y);
  };
  std::vector<Series> marks;
  std::ostringstream info;
  info << "Head " << head << ", " << c->tokens << " tokens, recomputed on " << where << "; curve over B = " << kRdCurveGrid << " ("
       << o.budgets.size() << " budgets, " << c->evaluations << " distinct allocations recomputed in "
       << format_label(c->seconds, "%.2f") << " s).\nAt B = " << format_label(o.budgets[kb], "%.3g") << " (the grid point nearest "
       << format_label(s.budget, "%.3g") << "):\n";
  for (std::size_t fi = 0; fi < o.families.size(); ++fi) {
    Series line{std::string(to_string(o.families[fi])), palette(static_cast<int>(fi)), Style::Line, {}, {}, 3};
    Series sur{"", palette(static_cast<int>(fi)), Style::Dashed, {}, {}, 1};
    for (std::size_t k = 0; k < o.budgets.size(); ++k) {
      const RdPoint& p = c->at(static_cast<int>(fi), static_cast<int>(k));
      if (!p.feasible) continue;
      add(line, p.x, p.error.rel_error);
      add(sur, p.x, p.surrogate, false);
      hv.push_back({p.x, p.error.rel_error,
                    std::string(to_string(p.family)) + " at B = " + format_label(p.budget) + ": rate " +
                        format_label(p.x, "%.3f") + ", recomputed " + format_label(p.error.rel_error, "%.4g") +
                        ", surrogate " + format_label(p.surrogate, "%.4g")});
    }
    f.series.push_back(line);
    f.series.push_back(sur);
    const RdPoint& p = c->at(static_cast<int>(fi), static_cast<int>(kb));
    info << "  " << to_string(p.family) << ": ";
    if (p.feasible) {
      Series m{"", palette(static_cast<int>(fi)), Style::Points, {}, {}, 12};
      add(m, p.x, p.error.rel_error);
      marks.push_back(m);
      info << "rate " << format_label(p.x, "%.3f") << ", recomputed " << format_label(p.error.rel_error, "%.4g")
           << ", surrogate " << format_label(p.surrogate, "%.4g") << "\n";
    } else {
      info << "infeasible (" << p.message << ")\n";
    }
  }
  Series hull{"lower convex hull", Rgb{0, 0, 0}, Style::Dashed, {}, {}, 1};
  for (std::size_t i = 0; i < c->hull.x.size(); ++i) add(hull, c->hull.x[i], c->hull.y[i]);
  f.series.push_back(hull);
  Series on{"ladder tier on the hull", Rgb{0, 0, 0}, Style::Squares, {}, {}, 9};
  Series off{"ladder tier above the hull (dominated)", Rgb{200, 0, 0}, Style::Squares, {}, {}, 11};
  info << "Ladder points (every token at one tier):";
  for (const RdLadderPoint& l : c->ladder) {
    add(l.above_hull ? off : on, l.x, l.error);
    hv.push_back({l.x, l.error, "tier " + l.tier + ": rate " + format_label(l.x, "%.3f") + ", recomputed " +
                                    format_label(l.error, "%.4g") + (l.above_hull ? " (above the hull: dominated)" : "")});
    info << " " << l.tier << (l.above_hull ? " (dominated)" : "");
  }
  info << "\n";
  f.series.push_back(on);
  if (!off.x.empty()) f.series.push_back(off);
  for (Series& m : marks) f.series.push_back(std::move(m));
  if (!(hi > 0)) lo = 1e-6, hi = 1;
  f.ylog = true;
  f.ymin = lo / 2, f.ymax = hi * 2;  // draw_figure adds the legend's headroom
  f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {s.budget, s.budget}, {f.ymin, f.ymax}, 1});
  double xmax = s.budget;
  for (const RdPoint& p : c->points)
    if (p.feasible) xmax = std::max(xmax, p.x);
  f.xmin = -0.2, f.xmax = xmax * 1.04 + 0.2;
  ViewResult v;
  v.figures = {f};
  v.hover = {hv};
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  return v;
}

}  // namespace tierlab::explorer
