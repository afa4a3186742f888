// tierlab-explorer's layer x head map view: Engine::head_map (engine.hpp).
#include <algorithm>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "scenarios/figures/tables_io.hpp"

namespace tierlab::explorer {

using namespace detail;

// ---------------------------------------------------------------------------------------
// (b) head map

namespace {

// The map of the heads computed so far (`entries`, in layer-major order; the rest blank) and
// its numbers; `total` heads in all.
ViewResult head_map_result(const std::vector<HeadMapEntry>& entries, const Settings& s, const TraceMeta& m,
                           const RateLadder& ladder, int two) {
  const int total = m.n_heads();
  const bool partial = static_cast<int>(entries.size()) < total;
  Figure f;
  f.title = "Layer x head map at B = " + format_label(s.budget) + ": routed family, 2-bit dominance (click a head)";
  if (partial) f.title += " - " + std::to_string(entries.size()) + " of " + std::to_string(total) + " heads so far";
  f.xlabel = "KV head h";
  f.ylabel = "layer l";
  const double cell = std::min(760.0 / m.n_kv_heads, 430.0 / (m.n_layers + 0.9 + 0.27 * 4));
  Series q{"Q: quantize only", palette(0), Style::Squares, {}, {}, cell * 0.82};
  Series ee{"E: evict only", palette(1), Style::Squares, {}, {}, cell * 0.82};
  Series mm{"M: mixed tiers", palette(2), Style::Squares, {}, {}, cell * 0.82};
  Series dom{"R_h(2-bit) >= 1: 2-bit tier dominated", Rgb{0, 0, 0}, Style::Points, {}, {}, std::max(5.0, cell * 0.22)};
  Series sel{"selected head", palette(3), Style::Squares, {}, {}, std::max(5.0, cell * 0.22)};
  std::vector<HoverPoint> hover;
  for (const auto& he : entries) {
    Series* sp = he.family == 'Q' ? &q : he.family == 'E' ? &ee : he.family == 'M' ? &mm : nullptr;
    if (sp) sp->x.push_back(he.kv_head), sp->y.push_back(he.layer);
    if (he.dominated) dom.x.push_back(he.kv_head - 0.2), dom.y.push_back(he.layer);
    if (he.layer == s.layer && he.kv_head == s.kv_head) sel.x.push_back(he.kv_head + 0.2), sel.y.push_back(he.layer);
    hover.push_back({static_cast<double>(he.kv_head), static_cast<double>(he.layer),
                     "head L" + std::to_string(he.layer) + ".H" + std::to_string(he.kv_head) + "\nrouted: " +
                         (he.option.empty() ? std::string("infeasible") : he.option) + "\nR_h(2-bit) = " +
                         format_label(he.R2, "%.4g") + (he.dominated ? " (dominated)" : "") +
                         "\nsurrogate error (rel) = " + format_label(he.objective, "%.4g")});
  }
  for (Series* sp : {&q, &ee, &mm, &dom, &sel})
    if (!sp->x.empty() || sp == &q || sp == &ee || sp == &mm) f.series.push_back(*sp);
  f.xmin = -0.6, f.xmax = m.n_kv_heads - 0.4;
  f.ymin = -0.6, f.ymax = m.n_layers - 0.4;
  // Ticks at integer heads and layers only ("H3", "L0"), every k-th when there are many.
  auto int_ticks = [](int n, const char* prefix, int most) {
    std::vector<Tick> ticks;
    const int step = std::max(1, (n + most - 1) / most);
    for (int i = 0; i < n; i += step) ticks.push_back({static_cast<double>(i), prefix + std::to_string(i)});
    return ticks;
  };
  f.xticks = int_ticks(m.n_kv_heads, "H", 16);
  f.yticks = int_ticks(m.n_layers, "L", 16);
  ViewResult v;
  v.figures = {f};
  v.hover = {hover};
  int counts[3] = {0, 0, 0}, ndom = 0;
  for (const auto& he : entries) {
    counts[0] += he.family == 'Q', counts[1] += he.family == 'E', counts[2] += he.family == 'M';
    ndom += he.dominated;
  }
  std::ostringstream info;
  if (partial) info << "computing: " << entries.size() << " of " << total << " heads so far (the map fills in head by head)\n";
  info << m.n_layers << " layers x " << m.n_kv_heads << " KV heads, ladder " << ladder.name() << ", B = " << format_label(s.budget)
       << "\nrouted (head scope, exact): Q " << counts[0] << ", E " << counts[1] << ", M " << counts[2] << "\n";
  if (two >= 0)
    info << "dominated share (R_h(2-bit) >= 1): " << ndom << " / " << entries.size() << " = "
         << format_label(static_cast<double>(ndom) / std::max<std::size_t>(1, entries.size()), "%.3f") << "\n";
  else
    info << "the ladder has no 2-bit tier: no dominance marks\n";
  info << "click a square to pick the head for the other views";
  v.info = info.str();
  return v;
}

}  // namespace

ViewResult Engine::head_map(const Settings& s, std::vector<HeadMapEntry>* out, const Progress& progress,
                            const std::atomic<bool>* cancel, const PartialView& partial) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  const TraceMeta& m = source_->meta();
  const int two = ladder.index_of_bits(2);
  std::vector<HeadMapEntry> entries;
  const int total = m.n_heads();
  Settings rs = s;
  if (rs.solver == FamilySolver::Waterfill) rs.solver = FamilySolver::Exact;  // routing compares options exactly
  PartialPacer pace(partial_ms_);
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      check(cancel);
      if (progress) progress(l * m.n_kv_heads + h, total);
      auto e = ladder_(l, h, ladder, s.rate_kind, cancel);
      HeadMapEntry he;
      he.layer = l, he.kv_head = h;
      he.R2 = two >= 0 ? e->dom.R[static_cast<std::size_t>(two)] : kNaN;
      he.dominated = two >= 0 && e->dom.dominated[static_cast<std::size_t>(two)];
      const HeadSolution r = solve_(*e, e->costs.cost, rs, FamilyChoice::Routed, ladder, &he.option);
      he.family = he.option.empty() ? '-' : he.option[0];
      he.objective = r.tiers.empty() ? kNaN : r.objective / std::max(e->costs.output_norm2, 1e-300);
      entries.push_back(he);
      if (partial && static_cast<int>(entries.size()) < total && pace.due()) partial(head_map_result(entries, s, m, ladder, two));
    }
  ViewResult v = head_map_result(entries, s, m, ladder, two);
  v.seconds = ms_since(t0) / 1000;
  if (out) *out = std::move(entries);
  if (progress) progress(total, total);
  return v;
}

}  // namespace tierlab::explorer
