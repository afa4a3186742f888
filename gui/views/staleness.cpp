// tierlab-explorer's staleness view: Engine::staleness (engine.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "model/error.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/staleness_head.hpp"

namespace tierlab::explorer {

namespace fs = std::filesystem;

using namespace detail;

// ---------------------------------------------------------------------------------------
// (e) staleness

ViewResult Engine::staleness(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  ViewResult v;
  const std::string dir = source_->run_dir();
  Series ratio{"", palette(3), Style::Line, {}, {}, 6};
  Series jac{"", palette(0), Style::Line, {}, {}, 6};
  Series agr{"", palette(2), Style::Line, {}, {}, 6};
  std::vector<HoverPoint> hv, hv_overlap;
  // Two figures: the error ratio (1 = as good as fresh; up to 100+) on a log axis, and the
  // overlaps (0..1) on their own linear axis, so neither flattens the other.
  Figure f, g;
  f.xlabel = g.xlabel = "decode step s (log)";
  f.ylabel = "error ratio err_stale / err_fresh (log)";
  g.ylabel = "overlap (0 to 1)";
  f.xlog = g.xlog = true;
  f.ylog = true;
  double yhi = 1, ylo = 1;
  if (source_->has_tables() && fs::exists(dir + "/tables/staleness.json")) {
    const nlohmann::json st = read_table_json(dir + "/tables/staleness.json");
    ratio.name = "median error ratio err_stale / err_fresh";
    jac.name = "median Jaccard of evicted sets";
    agr.name = "median tier agreement";
    for (const auto& r : st.value("rows", nlohmann::json::array())) {
      const double x = val(r, "step");
      const double ys[3] = {val(r, "median_ratio"), val(r, "median_jaccard"), val(r, "median_agreement")};
      Series* ss[3] = {&ratio, &jac, &agr};
      for (int k = 0; k < 3; ++k)
        if (std::isfinite(ys[k]) && (k > 0 || ys[k] > 0)) ss[k]->x.push_back(x), ss[k]->y.push_back(ys[k]);
      if (std::isfinite(ys[0]) && ys[0] > 0) yhi = std::max(yhi, ys[0]), ylo = std::min(ylo, ys[0]);
      hv.push_back({x, std::isfinite(ys[0]) ? ys[0] : 1,
                    "step " + format_label(x) + "\nmedian ratio " + format_label(ys[0], "%.4g") + ", Jaccard " + format_label(ys[1], "%.3f") +
                        ", agreement " + format_label(ys[2], "%.3f") + "\nshare same family " + format_label(val(r, "share_same_family"), "%.3f")});
      hv_overlap.push_back({x, std::isfinite(ys[1]) ? ys[1] : 0, hv.back().text});
    }
    f.title = "Allocation staleness over decode steps (scenario run), B = " + format_label(val(st, "budget")) + " bits";
    g.title = "Overlap of the stale and fresh allocations (scenario run)";
    v.info = "From the scenario run " + dir + " (tables/staleness.json): medians over all cells' heads.";
  } else {
    check(cancel);
    const std::shared_ptr<const HeadData> head_data = head_(s.layer, s.kv_head);  // held: the cache may drop it
    const HeadData& hd = *head_data;
    const int S = static_cast<int>(hd.decode_keys.rows());
    if (S == 0) throw InputError("explorer: the trace has no decode steps, so there is no staleness to show.");
    StalenessOptions so;
    so.ladder = RateLadder::parse(s.ladder);
    so.rate_kind = s.rate_kind;
    so.budget = s.budget;
    for (int k = 1; k <= S; k *= 2) so.steps.push_back(k);
    if (so.steps.back() != S) so.steps.push_back(S);
    const int cur = std::clamp(s.decode_step, 1, S);
    if (std::find(so.steps.begin(), so.steps.end(), cur) == so.steps.end()) {
      so.steps.push_back(cur);
      std::sort(so.steps.begin(), so.steps.end());
    }
    if (progress) progress(1, 10);
    const StalenessHead sh = staleness_head(hd, so, *backend_);
    check(cancel);
    ratio.name = "error ratio err_stale / err_fresh";
    jac.name = "Jaccard of evicted sets";
    agr.name = "tier agreement";
    for (const auto& st : sh.steps) {
      const double x = st.step;
      if (std::isfinite(st.ratio) && st.ratio > 0)
        ratio.x.push_back(x), ratio.y.push_back(st.ratio), yhi = std::max(yhi, st.ratio), ylo = std::min(ylo, st.ratio);
      jac.x.push_back(x), jac.y.push_back(st.jaccard);
      agr.x.push_back(x), agr.y.push_back(st.agreement);
      hv.push_back({x, std::isfinite(st.ratio) ? st.ratio : 1,
                    "step " + std::to_string(st.step) + "\nerr stale " + format_label(st.err_stale, "%.4g") + ", fresh " +
                        format_label(st.err_fresh, "%.4g") + "\nratio " + format_label(st.ratio, "%.4g") + ", Jaccard " +
                        format_label(st.jaccard, "%.3f") + ", agreement " + format_label(st.agreement, "%.3f") + "\nbest family " +
                        st.family + (st.same_family ? " (same as obs)" : " (changed)")});
      hv_overlap.push_back({x, st.jaccard, hv.back().text});
    }
    const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
    f.title = "Staleness of head " + head + "'s M* over decode steps, B = " + format_label(s.budget) + " bits";
    g.title = "Overlap of head " + head + "'s stale and fresh M*";
    std::ostringstream info;
    info << "Live, head " << head << ": M* from the observation queries (stale) vs M* decided from the W steps before s (fresh, out of sample).\n"
         << "best family on the observation queries: " << (sh.family_obs.empty() ? "-" : sh.family_obs);
    if (sh.steps.empty()) info << "\nM is infeasible at B = " << format_label(s.budget);
    v.info = info.str();
    f.series.push_back({"selected decode step", Rgb{150, 150, 150}, Style::Dashed, {double(cur), double(cur)}, {1e-12, 1e12}, 1});
    g.series.push_back({"", Rgb{150, 150, 150}, Style::Dashed, {double(cur), double(cur)}, {-1, 2}, 1});
  }
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
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(10, 10);
  return v;
}

}  // namespace tierlab::explorer
