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

// The options of the view's curves: Q, E and M over `grid`, recomputed on decode step s
// (the observation queries without decode steps), the solver as set (smoothed: exact).
RdCurveOptions Engine::rd_options_(const Settings& s, const char* grid, Scope scope) const {
  RdCurveOptions o;
  o.budgets = parse_budget_grid(grid, "explorer grid");
  o.families = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
  o.solve.ladder = RateLadder::parse(s.ladder);
  o.solve.ladder.validate();
  o.solve.rate_kind = s.rate_kind;
  o.solve.solver = s.solver == FamilySolver::Smoothed ? FamilySolver::Exact : s.solver;
  o.solve.scope = scope;
  o.queries = RdQueries::Step;
  o.decode_step = std::clamp(s.decode_step, 1, std::max(source_->meta().decode_steps, 1));
  return o;
}

// The surrogate costs the other views cached for head (l, h), as the curve reads them.
HeadCosts Engine::rd_costs_(int l, int h, const RdCurveOptions& o, const std::atomic<bool>* cancel) {
  const std::shared_ptr<LadderEntry> e = ladder_(l, h, o.solve.ladder, o.solve.rate_kind, cancel);
  HeadCosts hc;
  hc.layer = l, hc.kv_head = h;
  hc.cost = e->costs.cost;
  hc.a = e->costs.weights.a;
  hc.output_norm2 = e->costs.output_norm2;
  hc.rates = e->rates;
  if (o.solve.solver == FamilySolver::Waterfill) hc.noise = DistortionModel{e->fit.alpha, e->fit.beta};
  return hc;
}

std::shared_ptr<const RdCurve> Engine::rd_curve_(const Settings& s, const Progress& progress,
                                                  const std::atomic<bool>* cancel) {
  const RdCurveOptions o = rd_options_(s, kRdCurveGrid, Scope::Head);
  const std::string key = std::to_string(s.layer) + "." + std::to_string(s.kv_head) + "|" + o.solve.ladder.name() + "|" +
                          std::string(to_string(s.rate_kind)) + "|" + std::string(to_string(o.solve.solver)) + "|s" +
                          std::to_string(o.decode_step);
  if (auto it = curves_.find(key); it != curves_.end()) return it->second;
  const std::shared_ptr<const HeadData> head = head_(s.layer, s.kv_head);
  HeadCosts hc = rd_costs_(s.layer, s.kv_head, o, cancel);
  hc.spans = head->spans;
  auto c = std::make_shared<const RdCurve>(tierlab::rd_curve(
      std::vector<const HeadData*>{head.get()}, source_->meta().rope, o,
      [&](int done, int total) {
        if (progress) progress(500 * done / std::max(total, 1), 1000);  // the head's curve: the first half
      },
      cancel, {std::move(hc)}));
  if (curves_.size() >= 8) curves_.clear();  // a few heads' curves (each a few kB)
  curves_[key] = c;
  return c;
}

std::shared_ptr<const RdCurve> Engine::model_rd_curve_(const Settings& s, const Progress& progress,
                                                        const std::atomic<bool>* cancel) {
  const RdCurveOptions o = rd_options_(s, kRdModelGrid, Scope::Model);
  const std::string key = "model|" + o.solve.ladder.name() + "|" + std::string(to_string(s.rate_kind)) + "|" +
                          std::string(to_string(o.solve.solver)) + "|s" + std::to_string(o.decode_step);
  if (auto it = curves_.find(key); it != curves_.end()) return it->second;
  const TraceMeta& meta = source_->meta();
  std::vector<std::shared_ptr<const HeadData>> heads;
  std::vector<const HeadData*> ptrs;
  std::vector<HeadCosts> costs;
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      check(cancel);
      heads.push_back(head_(l, h));
      ptrs.push_back(heads.back().get());
      costs.push_back(rd_costs_(l, h, o, cancel));
      costs.back().spans = heads.back()->spans;
      if (progress) progress(500 + 200 * static_cast<int>(heads.size()) / meta.n_heads(), 1000);  // every head's costs
    }
  auto c = std::make_shared<const RdCurve>(tierlab::rd_curve(
      ptrs, meta.rope, o,
      [&](int done, int total) {
        if (progress) progress(700 + 300 * done / std::max(total, 1), 1000);  // the model-wide curve
      },
      cancel, std::move(costs)));
  if (curves_.size() >= 8) curves_.clear();
  curves_[key] = c;
  return c;
}

namespace {

// The figure of one curve with B marked (the grid point nearest B per family), its hover
// points, and its numbers appended to `info`. `what`: "head L0.H1" or "model (32 heads, ...)".
Figure curve_figure(const RdCurve& cv, const Settings& s, const std::string& what, std::vector<HoverPoint>& hv,
                    std::ostringstream& info) {
  const RdCurve* c = &cv;
  const RdCurveOptions& o = c->options;
  std::size_t kb = 0;
  for (std::size_t k = 1; k < o.budgets.size(); ++k)
    if (std::fabs(o.budgets[k] - s.budget) < std::fabs(o.budgets[kb] - s.budget)) kb = k;
  const std::string head = what;
  Figure f;
  const std::string where = c->queries == RdQueries::Step ? "decode step " + std::to_string(o.decode_step) + "'s queries"
                                                           : "observation queries";
  f.title = "RD curve, " + head + " (recomputed: " +
            (c->queries == RdQueries::Step ? "step " + std::to_string(o.decode_step) : std::string("obs")) +
            "; dashed: surrogate; grey: B = " + format_label(s.budget, "%.3g") + ")";
  f.xlabel = std::string("key rate, ") + std::string(to_string(s.rate_kind)) + " bits per element (measured)";
  f.ylabel = "relative output error (log)";
  double lo = INFINITY, hi = 0;
  // The y range follows the recomputed errors (a surrogate far above them is clipped).
  auto add = [&](Series& se, double x, double y, bool ranged = true) {
    if (!(y > 0) || !std::isfinite(x)) return;
    se.x.push_back(x), se.y.push_back(y);
    if (ranged) lo = std::min(lo, y), hi = std::max(hi, y);
  };
  std::vector<Series> marks;
  info << what << ", " << c->tokens << " tokens per head, recomputed on " << where << "; curve over B = "
       << format_label(o.budgets.front(), "%.3g") << ".." << format_label(o.budgets.back(), "%.3g") << " ("
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
  f.ymin = lo / 2, f.ymax = hi * 2;  // the legend has its own row below the axes
  f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {s.budget, s.budget}, {f.ymin, f.ymax}, 1});
  double xmax = s.budget;
  for (const RdPoint& p : c->points)
    if (p.feasible) xmax = std::max(xmax, p.x);
  f.xmin = -0.2, f.xmax = xmax * 1.04 + 0.2;
  return f;
}

}  // namespace

ViewResult Engine::rd_curve(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  check(cancel);
  const std::shared_ptr<const RdCurve> c = rd_curve_(s, progress, cancel);
  ViewResult v;
  std::ostringstream info;
  std::vector<HoverPoint> hv;
  v.figures.push_back(curve_figure(*c, s, "head L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head), hv, info));
  v.hover.push_back(std::move(hv));
  if (source_->meta().n_heads() > 1) {  // a whole trace: the model-wide curve (all heads share B)
    const std::shared_ptr<const RdCurve> mc = model_rd_curve_(s, progress, cancel);
    std::vector<HoverPoint> mh;
    info << "\n";
    v.figures.push_back(curve_figure(*mc, s, "model (" + std::to_string(mc->heads) + " heads share B)", mh, info));
    v.hover.push_back(std::move(mh));
  }
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  return v;
}

}  // namespace tierlab::explorer
