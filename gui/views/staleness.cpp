// tierlab-explorer's staleness view: Engine::staleness (engine.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "model/base/error.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/staleness_head.hpp"

namespace tierlab::explorer {

namespace fs = std::filesystem;

using namespace detail;

// ---------------------------------------------------------------------------------------
// (e) staleness

namespace {

// The view's two figures as they are filled: the error ratio (1 = as good as fresh; up to
// 100+) on a log axis, and the overlaps (0..1) on their own linear axis, so neither flattens
// the other.
struct StalenessPlot {
  Series ratio{"", palette(3), Style::Line, {}, {}, 6};
  Series jac{"", palette(0), Style::Line, {}, {}, 6};
  Series agr{"", palette(2), Style::Line, {}, {}, 6};
  std::vector<HoverPoint> hv, hv_overlap;
  Figure f, g;
  double yhi = 1, ylo = 1;
  StalenessPlot() {
    f.xlabel = g.xlabel = "decode step s (log)";
    f.ylabel = "error ratio err_stale / err_fresh (log)";
    g.ylabel = "overlap (0 to 1)";
    f.xlog = g.xlog = true;
    f.ylog = true;
  }
  void add_ratio(double x, double y) {
    if (std::isfinite(y) && y > 0) ratio.x.push_back(x), ratio.y.push_back(y), yhi = std::max(yhi, y), ylo = std::min(ylo, y);
  }
  // The figures with their ranges and reference lines; `v` receives them.
  void finish(ViewResult& v) {
    double xlo = INFINITY, xhi = 0;
    for (const Series* se : {&ratio, &jac, &agr})
      for (double x : se->x) xlo = std::min(xlo, x), xhi = std::max(xhi, x);
    if (!std::isfinite(xlo)) xlo = 1, xhi = 2;
    f.xmin = g.xmin = xlo / 1.3, f.xmax = g.xmax = xhi * 1.3;
    f.ymin = ylo / 1.5, f.ymax = yhi * 1.5;  // log axis around 1 (the line where stale = fresh)
    g.ymin = 0, g.ymax = 1.05;                // overlaps and agreement are fractions
    f.series.insert(f.series.begin(), ratio);
    f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {f.xmin, f.xmax}, {1, 1}, 1});
    g.series.insert(g.series.begin(), {jac, agr});
    v.figures = {f, g};
    v.hover = {hv, hv_overlap};
  }
};

ViewResult run_result(const std::string& dir) {
  StalenessPlot p;
  ViewResult v;
  const nlohmann::json st = read_table_json(dir + "/tables/staleness.json");
  p.ratio.name = "median error ratio err_stale / err_fresh";
  p.jac.name = "median Jaccard of evicted sets";
  p.agr.name = "median tier agreement";
  for (const auto& r : st.value("rows", nlohmann::json::array())) {
    const double x = val(r, "step");
    const double ys[3] = {val(r, "median_ratio"), val(r, "median_jaccard"), val(r, "median_agreement")};
    p.add_ratio(x, ys[0]);
    if (std::isfinite(ys[1])) p.jac.x.push_back(x), p.jac.y.push_back(ys[1]);
    if (std::isfinite(ys[2])) p.agr.x.push_back(x), p.agr.y.push_back(ys[2]);
    p.hv.push_back({x, std::isfinite(ys[0]) ? ys[0] : 1,
                    "step " + format_label(x) + "\nmedian ratio " + format_label(ys[0], "%.4g") + ", Jaccard " +
                        format_label(ys[1], "%.3f") + ", agreement " + format_label(ys[2], "%.3f") + "\nshare same family " +
                        format_label(val(r, "share_same_family"), "%.3f")});
    p.hv_overlap.push_back({x, std::isfinite(ys[1]) ? ys[1] : 0, p.hv.back().text});
  }
  p.f.title = "Allocation staleness over decode steps (scenario run), B = " + format_label(val(st, "budget")) + " bits";
  p.g.title = "Overlap of the stale and fresh allocations (scenario run)";
  v.info = "From the scenario run " + dir + " (tables/staleness.json): medians over all cells' heads.";
  p.finish(v);
  return v;
}

// The live view of one head from the steps scored so far (`sh.steps`, of `total` listed; the
// final result when `final`), with decode step `cur` marked.
ViewResult live_result(const StalenessHead& sh, const Settings& s, int cur, int total, bool final) {
  StalenessPlot p;
  ViewResult v;
  p.ratio.name = "error ratio err_stale / err_fresh";
  p.jac.name = "Jaccard of evicted sets";
  p.agr.name = "tier agreement";
  for (const auto& st : sh.steps) {
    const double x = st.step;
    p.add_ratio(x, st.ratio);
    p.jac.x.push_back(x), p.jac.y.push_back(st.jaccard);
    p.agr.x.push_back(x), p.agr.y.push_back(st.agreement);
    p.hv.push_back({x, std::isfinite(st.ratio) ? st.ratio : 1,
                    "step " + std::to_string(st.step) + "\nerr stale " + format_label(st.err_stale, "%.4g") + ", fresh " +
                        format_label(st.err_fresh, "%.4g") + "\nratio " + format_label(st.ratio, "%.4g") + ", Jaccard " +
                        format_label(st.jaccard, "%.3f") + ", agreement " + format_label(st.agreement, "%.3f") +
                        "\nbest family " + st.family + (st.same_family ? " (same as obs)" : " (changed)")});
    p.hv_overlap.push_back({x, st.jaccard, p.hv.back().text});
  }
  const int done = static_cast<int>(sh.steps.size());
  const bool so_far = !final;
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  const std::string counted = " - " + std::to_string(done) + " of " + std::to_string(total) + " steps so far";
  p.f.title = "Staleness of head " + head + "'s M* over decode steps, B = " + format_label(s.budget) + " bits";
  p.g.title = "Overlap of head " + head + "'s stale and fresh M*";
  if (so_far) p.f.title += counted, p.g.title += counted;
  std::ostringstream info;
  if (so_far)
    info << "computing: " << done << " of " << total << " steps so far (the curve fills in step by step)\n";
  info << "Live, head " << head
       << ": M* from the observation queries (stale) vs M* decided from the W steps before s (fresh, out of sample).\n"
       << "best family on the observation queries: " << (sh.family_obs.empty() ? "-" : sh.family_obs);
  if (!so_far && sh.steps.empty()) info << "\nM is infeasible at B = " << format_label(s.budget);
  v.info = info.str();
  p.f.series.push_back({"selected decode step", Rgb{150, 150, 150}, Style::Dashed, {double(cur), double(cur)}, {1e-12, 1e12}, 1});
  p.g.series.push_back({"", Rgb{150, 150, 150}, Style::Dashed, {double(cur), double(cur)}, {-1, 2}, 1});
  p.finish(v);
  return v;
}

}  // namespace

ViewResult Engine::staleness(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel,
                             const PartialView& partial) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  const std::string dir = source_->run_dir();
  if (source_->has_tables() && fs::exists(dir + "/tables/staleness.json")) {
    ViewResult v = run_result(dir);
    v.seconds = ms_since(t0) / 1000;
    return v;
  }
  check(cancel);
  const std::shared_ptr<const HeadData> head_data = head_(s.layer, s.kv_head);  // held: the cache may drop it
  const HeadData& hd = *head_data;
  const int S = static_cast<int>(hd.decode_keys.rows());
  if (S == 0) throw InputError("explorer: the trace has no decode steps, so there is no staleness to show.");
  StalenessOptions so;
  so.ladder = RateLadder::parse(s.ladder);
  so.rate_kind = s.rate_kind;
  so.budget = s.budget;
  so.rope = source_->meta().rope;
  for (int k = 1; k <= S; k *= 2) so.steps.push_back(k);
  if (so.steps.back() != S) so.steps.push_back(S);
  const int cur = std::clamp(s.decode_step, 1, S);
  if (std::find(so.steps.begin(), so.steps.end(), cur) == so.steps.end()) {
    so.steps.push_back(cur);
    std::sort(so.steps.begin(), so.steps.end());
  }
  const int total = static_cast<int>(so.steps.size());
  if (progress) progress(0, total);
  PartialPacer pace(partial_ms_);
  const StalenessHead sh = staleness_head(hd, so, *backend_, [&](const StalenessHead& so_far) {
    check(cancel);
    const int done = static_cast<int>(so_far.steps.size());
    if (progress) progress(done, total);
    if (partial && done < total && pace.due()) partial(live_result(so_far, s, cur, total, false));
  });
  check(cancel);
  ViewResult v = live_result(sh, s, cur, total, true);
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(total, total);
  return v;
}

}  // namespace tierlab::explorer
