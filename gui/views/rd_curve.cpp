// tierlab-explorer's rate-distortion curve view: Engine::rd_curve (engine.hpp).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "scenarios/methods/rd_methods.hpp"
#include "scenarios/methods/catalogue.hpp"
#include "solvers/scorers.hpp"
#include "solvers/seed_allocators.hpp"

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

std::string Engine::rd_key_(const Settings& s) const {
  const RdCurveOptions o = rd_options_(s, kRdCurveGrid, Scope::Head);
  return std::to_string(s.layer) + "." + std::to_string(s.kv_head) + "|" + o.solve.ladder.name() + "|" +
         std::string(to_string(s.rate_kind)) + "|" + std::string(to_string(o.solve.solver)) + "|s" +
         std::to_string(o.decode_step);
}

std::shared_ptr<const RdCurve> Engine::rd_curve_(const Settings& s, const Progress& progress,
                                                  const std::atomic<bool>* cancel) {
  const RdCurveOptions o = rd_options_(s, kRdCurveGrid, Scope::Head);
  const std::string key = rd_key_(s);
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
  ++rd_curves_computed_;
  return c;
}

std::string Engine::model_rd_key_(const Settings& s) const {
  const RdCurveOptions o = rd_options_(s, kRdModelGrid, Scope::Model);
  return "model|" + o.solve.ladder.name() + "|" + std::string(to_string(s.rate_kind)) + "|" +
         std::string(to_string(o.solve.solver)) + "|s" + std::to_string(o.decode_step);
}

std::shared_ptr<const RdCurve> Engine::model_rd_curve_(const Settings& s, const Progress& progress,
                                                        const std::atomic<bool>* cancel) {
  const RdCurveOptions o = rd_options_(s, kRdModelGrid, Scope::Model);
  const std::string key = model_rd_key_(s);
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
  ++rd_curves_computed_;
  return c;
}

std::vector<std::string> rd_method_texts(const std::string& field) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= field.size()) {
    const std::size_t end = std::min(field.find(';', pos), field.size());
    std::string t = field.substr(pos, end - pos);
    const std::size_t a = t.find_first_not_of(" \t"), b = t.find_last_not_of(" \t");
    if (a != std::string::npos) out.push_back(t.substr(a, b - a + 1));
    pos = end + 1;
  }
  return out;
}

// The menu is the catalogue's methods in the forms a scenario's `methods` list takes
// (scenarios/methods/catalogue.hpp); solvers draw the curve itself and are not offered.
std::vector<RdMethodChoice> rd_method_choices() {
  std::vector<RdMethodChoice> out;
  for (const CatalogueEntry& e : method_catalogue()) {
    std::string note = e.info.summary;
    if (e.kind == MethodKind::Scorer) note += " (at the keep ratios B/16 of the grid)";
    if (e.kind == MethodKind::Allocator) note += " (at B = 2)";
    if (e.kind == MethodKind::Policy) note = "every token alike: " + note;
    for (const std::string& text : e.scenario_texts) {
      const std::string label = e.kind == MethodKind::Policy ? text : e.info.name;
      out.push_back({e.info.kind, label, text, note});
    }
  }
  return out;
}

void check_rd_methods(const Settings& s) {
  RdCurveOptions o;
  o.budgets = parse_budget_grid(kRdCurveGrid, "explorer grid");
  o.solve.ladder = RateLadder::parse(s.ladder);
  parse_rd_methods(rd_method_texts(s.rd_methods), kRdMethodsField, o);
}

std::shared_ptr<const std::vector<RdMethodGroup>> Engine::rd_methods_(const Settings& s, const RdCurve& curve,
                                                                      bool model, const std::string& curve_key,
                                                                      const std::atomic<bool>* cancel) {
  const std::vector<std::string> texts = rd_method_texts(s.rd_methods);
  if (texts.empty()) return nullptr;
  const std::string key = curve_key + "|methods " + s.rd_methods;
  if (auto it = rd_points_.find(key); it != rd_points_.end()) return it->second;
  const std::vector<MethodSpec> specs = parse_rd_methods(texts, kRdMethodsField, curve.options);  // the CLI's reading
  const TraceMeta& meta = source_->meta();
  std::vector<std::vector<HeadData>> heads;
  if (model) {
    for (int l = 0; l < meta.n_layers; ++l) {
      heads.emplace_back();
      for (int h = 0; h < meta.n_kv_heads; ++h) check(cancel), heads.back().push_back(*head_(l, h));
    }
  } else {  // the selected head alone, as head (0, 0) of a one-head model (the compressors index by position)
    heads = {{*head_(s.layer, s.kv_head)}};
    heads[0][0].layer = 0, heads[0][0].kv_head = 0;
  }
  MethodContext mc;
  mc.rope = meta.rope;
  mc.group_size = meta.group_size;
  const std::vector<RdMethodPoint> points = rd_method_points(heads, mc, curve, specs, backend_.get(), {}, cancel);
  auto groups = std::make_shared<std::vector<RdMethodGroup>>();
  std::size_t next = 0;
  for (const std::string& t : texts) {  // each entry's points, in order
    const std::size_t n = parse_rd_methods({t}, kRdMethodsField, curve.options).size();
    groups->push_back({t, std::vector<RdMethodPoint>(points.begin() + next, points.begin() + next + n)});
    next += n;
  }
  if (rd_points_.size() >= 8) rd_points_.clear();
  rd_points_[key] = groups;
  return groups;
}

namespace {

// The named methods' points (one series per entry of the field; an entry of one point is
// labelled with its name), their hover texts and their numbers in `info`; `lo`, `hi` take
// their errors (the y range).
void add_method_points(Figure& f, const std::vector<RdMethodGroup>& groups, double budget, RateKind kind,
                       std::vector<HoverPoint>& hv, std::ostringstream& info, double& lo, double& hi) {
  info << "Named methods (" << kRdMethodsField << "; rate in " << to_string(kind) << " bits, recomputed on the curve's queries):\n";
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const RdMethodGroup& g = groups[k];
    Series se{g.text, palette(static_cast<int>(4 + k)), Style::Points, {}, {}, 10};
    int above = 0;
    const RdMethodPoint* nearest = nullptr;
    for (const RdMethodPoint& p : g.points) {
      above += p.above_hull;
      if (!nearest || std::fabs(p.x - budget) < std::fabs(nearest->x - budget)) nearest = &p;
      const std::string text = p.label + ": rate " + format_label(p.x, "%.3f") + ", recomputed " +
                               format_label(p.error, "%.4g") + ", surrogate " + format_label(p.surrogate, "%.4g") +
                               (p.above_hull ? " (above the hull)" : "");
      if (!(p.error > 0) || !std::isfinite(p.x)) continue;  // exact: off the log axis
      se.x.push_back(p.x), se.y.push_back(p.error);
      lo = std::min(lo, p.error), hi = std::max(hi, p.error);
      hv.push_back({p.x, p.error, text});
      if (g.points.size() == 1) f.labels.push_back({p.x, p.error, p.label});
    }
    f.series.push_back(std::move(se));
    if (g.points.size() == 1) {
      const RdMethodPoint& p = g.points[0];
      info << "  " << p.label << ": rate " << format_label(p.x, "%.3f") << ", recomputed " << format_label(p.error, "%.4g")
           << ", surrogate " << format_label(p.surrogate, "%.4g") << (p.above_hull ? ", above the hull" : "") << "\n";
    } else if (nearest) {
      info << "  " << g.text << ": " << g.points.size() << " points, " << above << " above the hull; nearest B: "
           << nearest->label << " rate " << format_label(nearest->x, "%.3f") << ", recomputed "
           << format_label(nearest->error, "%.4g") << (nearest->above_hull ? ", above the hull" : "") << "\n";
    }
  }
}

// The figure of one curve with B marked (the grid point nearest B per family), its hover
// points, and its numbers appended to `info`. `what`: "head L0.H1" or "model (32 heads, ...)".
Figure curve_figure(const RdCurve& cv, const Settings& s, const std::string& what, std::vector<HoverPoint>& hv,
                    std::ostringstream& info, const std::vector<RdMethodGroup>* methods) {
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
  if (methods && !methods->empty()) add_method_points(f, *methods, s.budget, s.rate_kind, hv, info, lo, hi);
  if (!(hi > 0)) lo = 1e-6, hi = 1;
  f.ylog = true;
  f.ymin = lo / 2, f.ymax = hi * 2;  // the legend has its own row below the axes
  f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {s.budget, s.budget}, {f.ymin, f.ymax}, 1});
  double xmax = s.budget;
  for (const RdPoint& p : c->points)
    if (p.feasible) xmax = std::max(xmax, p.x);
  if (methods)
    for (const RdMethodGroup& g : *methods)
      for (const RdMethodPoint& p : g.points)
        if (std::isfinite(p.x)) xmax = std::max(xmax, p.x);
  f.xmin = -0.2, f.xmax = xmax * 1.04 + 0.2;
  return f;
}

}  // namespace

// The named methods' points, or none with the reason in `note`: a method the trace cannot
// run (a scorer's window longer than its observation queries) leaves the curve drawn.
std::shared_ptr<const std::vector<RdMethodGroup>> Engine::methods_or_note(const Settings& s, const RdCurve& curve,
                                                                          bool model, const std::string& key,
                                                                          const std::atomic<bool>* cancel,
                                                                          std::string& note) {
  try {
    return rd_methods_(s, curve, model, key, cancel);
  } catch (const InputError& e) {
    note = std::string("Named methods not drawn: ") + e.what() + "\n";
    return nullptr;
  }
}

namespace {

// The model figure while the model-wide curve is computed: the head's axes, no data.
Figure pending_figure(const Figure& head, const std::string& what) {
  Figure f;
  f.title = "RD curve, " + what + " - being computed";
  f.xlabel = head.xlabel, f.ylabel = head.ylabel;
  f.xmin = head.xmin, f.xmax = head.xmax, f.ymin = head.ymin, f.ymax = head.ymax, f.ylog = true;
  return f;
}

}  // namespace

// In stages, each delivered to `partial` when the next one is not cached: the head's curve
// (0), with its named methods (1), the model-wide curve (2), with its named methods (3).
ViewResult Engine::rd_curve(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel,
                            const PartialView& partial) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  check(cancel);
  const int heads = source_->meta().n_heads();
  const bool named = !rd_method_texts(s.rd_methods).empty();
  const std::string what = "model (" + std::to_string(heads) + " heads share B)";
  const std::string head_key = rd_key_(s), model_key = model_rd_key_(s);
  auto has_points = [&](const std::string& key) { return !named || rd_points_.count(key + "|methods " + s.rd_methods) > 0; };
  const std::shared_ptr<const RdCurve> c = rd_curve_(s, progress, cancel);
  std::shared_ptr<const RdCurve> mc;
  std::shared_ptr<const std::vector<RdMethodGroup>> hm, mm;
  std::string head_note, model_note;
  auto view = [&](int stage) {
    ViewResult v;
    std::ostringstream info;
    std::vector<HoverPoint> hv, mh;
    v.figures.push_back(curve_figure(*c, s, "head L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head), hv,
                                     info, stage >= 1 ? hm.get() : nullptr));
    info << head_note;
    if (stage == 0 && named) info << "computing: the named methods on the head's curve...\n";
    v.hover.push_back(std::move(hv));
    if (heads > 1) {  // a whole trace: the model-wide curve (all heads share B)
      info << "\n";
      if (stage >= 2) {
        v.figures.push_back(curve_figure(*mc, s, what, mh, info, stage >= 3 ? mm.get() : nullptr));
        info << model_note;
        if (stage == 2 && named) info << "computing: the named methods on the model-wide curve (" << heads << " heads)...\n";
      } else {
        v.figures.push_back(pending_figure(v.figures[0], what));
        info << "computing: the " << what << " curve over B = " << kRdModelGrid
             << " (every head's surrogate costs, then each budget's allocation of all heads)...\n";
      }
      v.hover.push_back(std::move(mh));
    }
    v.info = info.str();
    return v;
  };
  if (partial && !has_points(head_key)) partial(view(0));
  hm = methods_or_note(s, *c, false, head_key, cancel, head_note);
  if (heads > 1) {
    if (partial && (!curves_.count(model_key) || !has_points(model_key))) partial(view(1));
    mc = model_rd_curve_(s, progress, cancel);
    if (partial && !has_points(model_key)) partial(view(2));
    mm = methods_or_note(s, *mc, true, model_key, cancel, model_note);
  }
  ViewResult v = view(3);
  v.seconds = ms_since(t0) / 1000;
  return v;
}

}  // namespace tierlab::explorer
