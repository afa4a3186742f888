// tierlab-explorer's interior-advantage view: Engine::interior (engine.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "gui/engine_detail.hpp"
#include "scenarios/scenario/analysis.hpp"
#include "scenarios/analyses/interior.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/head.hpp"
#include "scenarios/run/render_figures.hpp"

namespace tierlab::explorer {

using namespace detail;

// ---------------------------------------------------------------------------------------
// (c) interior advantage

const Engine::Advantage& Engine::advantage_(int l, int h, const RateLadder& ladder, RateKind kind, double budget,
                                            const std::atomic<bool>* cancel) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", budget);
  const std::string key = std::to_string(l) + "." + std::to_string(h) + "|" + ladder.name() + "|" +
                          std::string(to_string(kind)) + "|" + b;
  if (auto it = advantages_.find(key); it != advantages_.end()) return *it->second;
  const std::shared_ptr<LadderEntry> e = ladder_(l, h, ladder, kind, cancel);
  const std::shared_ptr<const HeadData> hd = head_(l, h);  // held: the cache may drop it
  InteriorOptions io;
  io.budget = budget;
  io.rate_kind = kind;
  io.ladder = ladder;
  const HeadInterior hi = head_interior(*hd, source_->meta().rope, e->costs, e->rates, io, *backend_);
  auto r = std::make_shared<Advantage>();
  r->A_decode = hi.advantage_decode, r->A_obs = hi.advantage_obs, r->A_sur = hi.advantage_surrogate;
  const FamilyOutcome* f[3] = {&hi.Q, &hi.E, &hi.M};
  for (int k = 0; k < 3; ++k) {
    r->options[k] = f[k]->option;
    if (f[k]->feasible && hd->decode_keys.rows() > 0) r->err_dec[k] = f[k]->decode.rel_error;
  }
  if (advantages_.size() >= 4096) advantages_.clear();  // a few dozen bytes each
  return *(advantages_[key] = std::move(r));
}

ViewResult Engine::interior(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel,
                            const PartialView& partial) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  ViewResult v;
  const std::string dir = source_->run_dir();
  if (source_->has_tables()) {
    const nlohmann::json in = read_table_json(dir + "/tables/interior.json");
    std::string skipped;  // why `tierlab run` does not draw interior_vs_dominated ("" when it does)
    {
      // The figure of `tierlab run` (its own builder, labels and statistics; the analysis says
      // when it skips it), with the cells to hover.
      Figure f;
      for (const AnalysisType& t : analysis_types())
        if (t.name == "interior" && t.figures)
          for (NamedFigure& nf : analysis_figures(t, dir))
            if (nf.name == "interior_vs_dominated") f = std::move(nf.figure), skipped = std::move(nf.skipped);
      if (!skipped.empty()) f.title += " - not drawn by tierlab run (see the text)";
      std::vector<HoverPoint> hv;
      for (const auto& p : in.value("points", nlohmann::json::array())) {
        const double x = val(p, "dominated_share"), y = val(p, "A");
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        hv.push_back({x, y, p.value("cell", p.value("preset", std::string("cell"))) + "\ndominated share " + format_label(x, "%.3f") + "\n" +
                                f.ylabel + " " + format_label(y, "%.4g")});
      }
      v.figures.push_back(f);
      v.hover.push_back(hv);
    }
    {
      const auto cols = read_table_csv(dir + "/tables/heads.csv");
      std::vector<std::size_t> rows;
      const Figure f = advantage_vs_budget_figure(in, cols, &rows);
      std::vector<HoverPoint> hv;
      const Series& pts = f.series.at(0);
      for (std::size_t k = 0; k < rows.size() && k < pts.x.size(); ++k) {
        const std::size_t i = rows[k];
        std::string txt = "B = " + cols.at("budget")[i] + ", A = " + format_label(std::strtod(cols.at("A")[i].c_str(), nullptr), "%.4g");
        for (const char* c : {"cell", "layer", "kv_head", "winner"})
          if (cols.count(c) && i < cols.at(c).size()) txt += std::string("\n") + c + " " + cols.at(c)[i];
        hv.push_back({pts.x[k], pts.y[k], txt});
      }
      v.figures.push_back(f);
      v.hover.push_back(hv);
    }
    v.info = "From the scenario run " + dir + " (tables/interior.json, tables/heads.csv): the figures of `tierlab run` "
             "(figures/interior_vs_dominated, figures/advantage_vs_budget); summary.md states rho, its interval and the "
             "verdict when the cells allow them.\ncells: " + std::to_string(in.value("n_cells", 0)) +
             (skipped.empty() ? std::string() : "\ninterior_vs_dominated is not drawn by tierlab run: " + skipped);
    v.seconds = ms_since(t0) / 1000;
    return v;
  }

  // Live: the selected head vs budget, and every head at B.
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  const TraceMeta& m = source_->meta();
  std::vector<double> budgets;
  for (double b : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0}) budgets.push_back(b);
  if (std::find(budgets.begin(), budgets.end(), s.budget) == budgets.end()) budgets.push_back(s.budget);
  std::sort(budgets.begin(), budgets.end());
  const int total = static_cast<int>(budgets.size()) + m.n_heads();
  int done = 0;
  auto tick = [&](const std::string& what) {
    check(cancel);
    (void)what;
    if (progress) progress(done++, total);
  };
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  Series sd{"A on decode queries (verdict)", palette(3), Style::Line, {}, {}, 6};
  Series so{"A on observation queries", palette(0), Style::Line, {}, {}, 6};
  Series ss{"A by the surrogate", palette(2), Style::Dashed, {}, {}, 1};
  std::vector<HoverPoint> hv1;
  double ylo = -0.2, yhi = 1;
  for (double b : budgets) {
    tick(head + " at B = " + format_label(b));
    const Advantage r = advantage_(s.layer, s.kv_head, ladder, s.rate_kind, b, cancel);
    auto add = [&](Series& se, double y) {
      if (std::isfinite(y)) se.x.push_back(b), se.y.push_back(std::max(y, -2.0)), ylo = std::min(ylo, std::max(y, -2.0));
    };
    add(sd, r.A_decode), add(so, r.A_obs), add(ss, r.A_sur);
    hv1.push_back({b, std::isfinite(r.A_decode) ? std::max(r.A_decode, -2.0) : 0,
                   "B = " + format_label(b) + "\nA decode " + format_label(r.A_decode, "%.4g") + ", obs " + format_label(r.A_obs, "%.4g") +
                       ", surrogate " + format_label(r.A_sur, "%.4g") + "\nerr (decode): " + r.options[0] + " " +
                       format_label(r.err_dec[0], "%.3g") + ", E " + format_label(r.err_dec[1], "%.3g") + ", M " + format_label(r.err_dec[2], "%.3g")});
  }
  Figure f1;
  f1.title = "Interior advantage of head " + head + " vs budget (A < -2 drawn at -2)";
  f1.xlabel = "budget B (bits per key element)";
  f1.ylabel = "A = 1 - err(M*) / min(err(Q*), err(E*))";
  f1.series = {sd, so, ss, {"A = 0", Rgb{120, 120, 120}, Style::Dashed, {-100, 100}, {0, 0}, 1}};
  f1.xmin = 0, f1.xmax = budgets.back() * 1.05;
  pad_range(ylo, yhi, 0.08);
  f1.ymin = ylo, f1.ymax = yhi;

  Series ph{"A per head (decode queries; obs when S = 0)", palette(0), Style::Points, {}, {}, 9};
  Series psel{"selected head", palette(3), Style::Points, {}, {}, 12};
  std::vector<HoverPoint> hv2;
  double y2lo = -0.2, y2hi = 1;
  std::vector<double> as;
  // The per-head figure and the numbers for the heads done so far (`heads_done` of all).
  auto result = [&](int heads_done) {
    const bool so_far = heads_done < m.n_heads();
    Figure f2;
    f2.title = "Interior advantage per head at B = " + format_label(s.budget) + " (A < -2 drawn at -2)";
    if (so_far) f2.title += " - " + std::to_string(heads_done) + " of " + std::to_string(m.n_heads()) + " heads so far";
    f2.xlabel = "head index l * " + std::to_string(m.n_kv_heads) + " + h";
    f2.ylabel = "interior advantage A";
    f2.series = {ph, psel, {"A = 0", Rgb{120, 120, 120}, Style::Dashed, {-100, 1e6}, {0, 0}, 1}};
    f2.xmin = -0.8, f2.xmax = m.n_heads() - 0.2;
    double lo = y2lo, hi = y2hi;
    pad_range(lo, hi, 0.08);
    f2.ymin = lo, f2.ymax = hi;
    ViewResult r;
    r.figures = {f1, f2};
    r.hover = {hv1, hv2};
    std::vector<double> sorted = as;
    std::sort(sorted.begin(), sorted.end());
    std::ostringstream info;
    if (so_far) info << "computing: " << heads_done << " of " << m.n_heads() << " heads so far (the view fills in head by head)\n";
    info << "Live, on " << source_->description() << " (no scenario tables" << (dir.empty() ? "" : " in " + dir) << ").\n"
         << "Per head: Q*, E*, M* solved exactly on the surrogate, materialised, recomputed.\n"
         << "median A over heads at B = " << format_label(s.budget) << ": "
         << format_label(sorted.empty() ? kNaN : sorted[sorted.size() / 2], "%.4g") << ", heads with A > 0: "
         << std::count_if(sorted.begin(), sorted.end(), [](double a) { return a > 0; }) << " / " << sorted.size();
    r.info = info.str();
    return r;
  };
  if (partial) partial(result(0));  // the selected head's curve at once
  PartialPacer pace(partial_ms_);
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      tick("head L" + std::to_string(l) + ".H" + std::to_string(h));
      const Advantage r = advantage_(l, h, ladder, s.rate_kind, s.budget, cancel);
      const double A = std::isfinite(r.A_decode) ? r.A_decode : r.A_obs;
      const double x = l * m.n_kv_heads + h;
      if (std::isfinite(A)) {
        const double y = std::max(A, -2.0);
        ((l == s.layer && h == s.kv_head) ? psel : ph).x.push_back(x);
        ((l == s.layer && h == s.kv_head) ? psel : ph).y.push_back(y);
        y2lo = std::min(y2lo, y);
        as.push_back(A);
        hv2.push_back({x, y, "head L" + std::to_string(l) + ".H" + std::to_string(h) + "\nA = " + format_label(A, "%.4g") +
                                 "\nQ* " + r.options[0] + ", E* " + r.options[1] + ", M* " + r.options[2]});
      }
      const int heads_done = l * m.n_kv_heads + h + 1;
      if (partial && heads_done < m.n_heads() && pace.due()) partial(result(heads_done));
    }
  v = result(m.n_heads());
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(total, total);
  return v;
}

}  // namespace tierlab::explorer
