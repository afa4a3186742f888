// What the interior analysis's verdicts depend on (interior_verdict.hpp).
#include "scenarios/analyses/interior_verdict.hpp"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <map>
#include <random>
#include <sstream>

#include "scenarios/analyses/stats.hpp"
#include "scenarios/pipeline/head.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

namespace {

const double kInf = std::numeric_limits<double>::infinity();

std::string cluster_of(const nlohmann::json& c) {
  return c.value("preset", std::string()) + "/s" + std::to_string(c.value("seed", std::uint64_t{0}));
}

}  // namespace

std::string model_group_of(const nlohmann::json& c) {
  std::string g = c.value("preset", std::string());
  if (c.contains("sweep_key") && c["sweep_key"].is_string() && c.contains("sweep_value") && c["sweep_value"].is_number())
    g += " " + c["sweep_key"].get<std::string>() + "=" + format_or_nan(c["sweep_value"].get<double>(), "%g");
  else if (c.contains("logit_scale") && c["logit_scale"].is_number())
    g += " logit_scale=" + format_or_nan(c["logit_scale"].get<double>(), "%g");
  return g;
}

bool model_group_less(const std::string& a, const std::string& b) {
  // "preset key=value": by preset and key as text, then by the value as a number.
  const std::size_t ea = a.rfind('='), eb = b.rfind('=');
  if (ea == std::string::npos || eb == std::string::npos || a.compare(0, ea, b, 0, eb) != 0) return a < b;
  char* end = nullptr;
  const double va = std::strtod(a.c_str() + ea + 1, &end), vb = std::strtod(b.c_str() + eb + 1, &end);
  return va < vb;
}

namespace {

// The q-quantile by nearest rank (infinities allowed), NaN when empty.
double nearest_rank(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(std::clamp(std::ceil(q * static_cast<double>(v.size())) - 1.0, 0.0,
                                                     static_cast<double>(v.size() - 1)));
  return v[k];
}

}  // namespace

std::string QFeasibility::reason(const std::string& ladder, double B, const std::string& rate_kind) const {
  if (feasible()) return "";
  std::string s = "Q is infeasible at B = " + format_or_nan(B) + " " + rate_kind + " bits (";
  if (heads_infeasible > 0)
    s += std::to_string(heads_infeasible) + " of " + std::to_string(heads) + " heads";
  if (heads_infeasible > 0 && cells_model_infeasible > 0) s += "; ";
  if (cells_model_infeasible > 0)
    s += "the model-wide Q of " + std::to_string(cells_model_infeasible) + " of " + std::to_string(cells) + " cells";
  s += ": every finite tier of ladder " + ladder +
       ", metadata counted, measures more than B), so A there compares M with E only; no verdict on "
       "\"the interior beats both endpoints\" at this budget";
  return s;
}

QFeasibility q_feasibility(const std::vector<nlohmann::json>& cells, std::size_t bi) {
  QFeasibility q;
  for (const auto& c : cells) {
    const auto& b = c["budgets"][bi];
    ++q.cells;
    if (b.contains("model") && b["model"].contains("Q") && !b["model"]["Q"].value("feasible", false))
      ++q.cells_model_infeasible;
    for (const auto& h : b["heads"]) {
      ++q.heads;
      // total_Q is the measured rate of a feasible Q; null (NaN) when Q has no allocation.
      if (!std::isfinite(double_or_nan(h, "total_Q"))) ++q.heads_infeasible;
    }
  }
  return q;
}

double summed_error_ratio(const nlohmann::json& budget) {
  double se = 0, sm = 0;
  for (const auto& h : budget["heads"]) {
    const double e = double_or_nan(h, "err_E"), m = double_or_nan(h, "err_M");
    if (!std::isfinite(e) || !std::isfinite(m)) return kNaN;
    se += e, sm += m;
  }
  return sm > 0 ? se / sm : kNaN;
}

double stop_of(const std::vector<double>& budgets, const std::vector<double>& medians) {
  double stop = kNaN;
  for (std::size_t k = budgets.size(); k-- > 0;) {
    if (std::isfinite(medians[k]) && medians[k] <= 0) stop = budgets[k];
    else break;
  }
  return stop;
}

std::vector<StopBudget> stop_budgets(const Scenario& sc, const std::vector<nlohmann::json>& cells) {
  // Budget order ascending (the file's order need not be).
  std::vector<std::size_t> order(sc.budgets.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sc.budgets[a] < sc.budgets[b]; });
  std::vector<double> sorted_budgets;
  for (std::size_t i : order) sorted_budgets.push_back(sc.budgets[i]);
  // preset -> cluster -> per (ascending) budget: the heads' A values.
  std::map<std::string, std::map<std::string, std::vector<std::vector<double>>>> by;
  for (const auto& c : cells) {
    auto& per_budget = by[model_group_of(c)][cluster_of(c)];
    per_budget.resize(order.size());
    for (std::size_t k = 0; k < order.size(); ++k)
      for (const auto& h : c["budgets"][order[k]]["heads"])
        if (const double a = double_or_nan(h, "A"); std::isfinite(a)) per_budget[k].push_back(a);
  }
  std::vector<StopBudget> out;
  for (const auto& [preset, clusters] : by) {
    std::vector<const std::vector<std::vector<double>>*> cl;
    for (const auto& [name, v] : clusters) cl.push_back(&v);
    auto stop_from = [&](const std::vector<std::size_t>& pick) {
      std::vector<double> med(order.size());
      for (std::size_t k = 0; k < order.size(); ++k) {
        std::vector<double> v;
        for (std::size_t i : pick) v.insert(v.end(), (*cl[i])[k].begin(), (*cl[i])[k].end());
        med[k] = quantile_or_nan(v, 0.5);
      }
      return stop_of(sorted_budgets, med);
    };
    StopBudget s;
    s.preset = preset;
    s.clusters = static_cast<int>(cl.size());
    std::vector<std::size_t> all(cl.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    s.stop = stop_from(all);
    std::mt19937_64 rng(sc.seed);
    std::uniform_int_distribution<std::size_t> draw(0, cl.size() - 1);
    std::vector<double> stops;
    int none = 0;
    for (int r = 0; r < sc.bootstrap; ++r) {
      std::vector<std::size_t> pick(cl.size());
      for (auto& p : pick) p = draw(rng);
      const double st = stop_from(pick);
      if (!std::isfinite(st)) ++none;
      stops.push_back(std::isfinite(st) ? st : kInf);
    }
    s.lo = nearest_rank(stops, 0.025);
    s.hi = nearest_rank(stops, 0.975);
    s.share_no_stop = stops.empty() ? kNaN : static_cast<double>(none) / static_cast<double>(stops.size());
    out.push_back(s);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const StopBudget& a, const StopBudget& b) { return model_group_less(a.preset, b.preset); });
  return out;
}

std::string seed_group_of(const nlohmann::json& c) {
  std::string g = c.value("preset", std::string()) + "/T" + std::to_string(c.value("prompt_len", 0));
  if (c.contains("sweep_key")) g += "/" + c["sweep_key"].get<std::string>() + format_or_nan(double_or_nan(c, "sweep_value"));
  if (const double ls = double_or_nan(c, "logit_scale"); std::isfinite(ls)) g += "/ls" + format_or_nan(ls);
  return g;
}

SeedLevelRho seed_level_rho(const std::vector<double>& xs, const std::vector<double>& ys,
                            const std::vector<std::string>& labels) {
  SeedLevelRho r;
  const std::vector<double> rx = mid_ranks(xs), ry = mid_ranks(ys);
  std::map<std::string, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < xs.size(); ++i) groups[labels[i]].push_back(i);
  std::vector<double> ex, ey;
  for (const auto& [name, idx] : groups) {
    if (idx.size() < 2) continue;  // a lone cell has no residual
    ++r.groups;
    double mx = 0, my = 0;
    for (std::size_t i : idx) mx += rx[i], my += ry[i];
    mx /= static_cast<double>(idx.size()), my /= static_cast<double>(idx.size());
    for (std::size_t i : idx) ex.push_back(rx[i] - mx), ey.push_back(ry[i] - my);
  }
  r.cells = ex.size();
  r.rho = pearson(ex, ey);
  return r;
}

std::vector<ContextTrend> context_trends(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                         std::size_t bi) {
  (void)sc;
  // preset -> T -> (E wins, heads, ratios)
  struct Acc {
    double e = 0, heads = 0;
    std::vector<double> ratio;
  };
  std::map<std::string, std::map<int, Acc>> by;
  for (const auto& c : cells) {
    const int T = c["prompt_len"].get<int>();
    const auto& b = c["budgets"][bi];
    const double ratio = summed_error_ratio(b);
    const std::string keys[2] = {model_group_of(c), std::string("(pooled)")};
    for (const std::string& key : keys) {
      Acc& a = by[key][T];
      a.e += b["wins"]["E"].get<int>();
      a.heads += static_cast<double>(b["heads"].size());
      if (std::isfinite(ratio)) a.ratio.push_back(ratio);
    }
  }
  std::vector<ContextTrend> out;
  for (const auto& [preset, byT] : by) {
    if (byT.size() < 2) continue;
    if (preset == "(pooled)" && by.size() == 2) continue;  // one preset: the pooled row repeats it
    ContextTrend t;
    t.preset = preset;
    const Acc& a0 = byT.begin()->second;
    const Acc& a1 = byT.rbegin()->second;
    t.T0 = byT.begin()->first, t.T1 = byT.rbegin()->first;
    t.e_share0 = a0.heads > 0 ? a0.e / a0.heads : kNaN;
    t.e_share1 = a1.heads > 0 ? a1.e / a1.heads : kNaN;
    t.ratio0 = quantile_or_nan(a0.ratio, 0.5), t.ratio1 = quantile_or_nan(a1.ratio, 0.5);
    const int discrete = t.e_share1 > t.e_share0 ? 1 : t.e_share1 < t.e_share0 ? -1 : 0;
    const int continuous = t.ratio1 < t.ratio0 ? 1 : t.ratio1 > t.ratio0 ? -1 : 0;  // E closing on M: toward
    if (discrete == 1 && continuous == 1) t.direction = "toward eviction";
    else if (discrete == -1 && continuous == -1) t.direction = "away from eviction";
    else if (discrete == 0 && continuous != 0)
      t.direction = std::string("no clear direction (no head changes winner; err(E*)/err(M*) moves ") +
                    (continuous == 1 ? "toward" : "away from") + " eviction)";
    else t.direction = "no clear direction (the discrete and continuous measures disagree)";
    out.push_back(t);
  }
  std::stable_sort(out.begin(), out.end(), [](const ContextTrend& a, const ContextTrend& b) {
    return model_group_less(a.preset, b.preset);
  });
  return out;
}

std::string dense_routing_section(const Scenario& sc, const std::vector<nlohmann::json>& cells, std::string* csv) {
  std::ostringstream s;
  CsvWriter c({"budget", "router", "choice", "heads", "share", "median_A_dense"});
  bool any = false;
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) {
    for (const char* router : {"surrogate", "obs"}) {
      const std::string key = std::string("dense_") + router, err_key = std::string("err_dense_") + router;
      std::map<std::string, int> count;
      std::vector<double> A;
      int heads = 0;
      for (const auto& cell : cells)
        for (const auto& h : cell["budgets"][bi]["heads"]) {
          if (!h.contains(key)) continue;
          ++heads;
          const std::string choice = h[key].get<std::string>();
          ++count[choice.empty() ? "(none feasible)" : choice];
          const double a = interior_advantage_of(double_or_nan(h, err_key.c_str()), double_or_nan(h, "err_Q"),
                                                 double_or_nan(h, "err_E"), sc.error_floor);
          if (std::isfinite(a)) A.push_back(a);
        }
      if (heads == 0) continue;
      if (!any) {
        s << "\n## Routing as the reference paper routes\n\nPer KV head at its budget, the router chooses the interior M* or a "
             "dense quantizer outside the ladder (at its largest bits whose dense rate, metadata counted, fits B): by the "
             "surrogate objective, or by the recomputed error on the observation queries. A_dense = 1 - err(routed) / "
             "min(err(Q*), err(E*)) on the " << to_string(sc.queries) << " queries (median over heads). Today's routed over "
             "Q/E/M equals M by construction (M's tiers contain Q's and E's).\n\n| B | router | heads to each choice | "
             "median A_dense |\n|---|---|---|---|\n";
        any = true;
      }
      std::string shares;
      for (const auto& [choice, n] : count) {
        shares += (shares.empty() ? "" : ", ") + choice + " " + format_or_nan(100.0 * n / heads, "%.1f") + "%";
        c.row() << format_or_nan(sc.budgets[bi]) << router << choice << n << format_or_nan(static_cast<double>(n) / heads)
                << format_or_nan(quantile_or_nan(A, 0.5));
      }
      s << "| " << format_or_nan(sc.budgets[bi]) << " | " << (std::string(router) == "obs" ? "recomputed obs error" : "surrogate")
        << " | " << shares << " | " << format_or_nan(quantile_or_nan(A, 0.5), "%.4f") << " |\n";
    }
  }
  if (csv) *csv = any ? c.text() : std::string();
  return s.str();
}

std::string dose_response_section(const Scenario& sc, const std::vector<nlohmann::json>& cells, std::size_t primary,
                                  const std::function<double(const nlohmann::json&)>& of, const std::string& of_label) {
  std::string key;
  std::map<std::string, std::map<double, std::pair<std::vector<double>, std::vector<double>>>> by;  // preset -> value
  std::map<std::string, std::vector<double>> v_all, d_all, a_all;
  for (const auto& c : cells) {
    // traces.synthetic.sweep, or the logit_scales sweep (one logit scale per cell).
    const bool swept = c.contains("sweep_key"), scaled = sc.sweeps_logit_scales && std::isfinite(double_or_nan(c, "logit_scale"));
    if (!swept && !scaled) continue;
    key = swept ? c["sweep_key"].get<std::string>() : std::string("logit_scale");
    const double v = swept ? double_or_nan(c, "sweep_value") : double_or_nan(c, "logit_scale");
    const double d = double_or_nan(c, "dominated_share");
    const double a = of(c["budgets"][primary]);
    const std::string preset = c.value("preset", std::string());
    auto& e = by[preset][v];
    if (std::isfinite(d)) e.first.push_back(d);
    if (std::isfinite(a)) e.second.push_back(a);
    if (std::isfinite(d) && std::isfinite(a)) v_all[preset].push_back(v), d_all[preset].push_back(d), a_all[preset].push_back(a);
  }
  if (by.empty()) return "";
  std::ostringstream s;
  s << "\n## Dose-response: " << key << " varied within a preset (B = " << format_or_nan(sc.primary_budget)
    << ")\n\nArchitecture held fixed, one generator parameter moved: does it move the dominated share, and A with it?\n\n"
       "| preset | " << key << " | cells | median dominated share | median " << of_label << " |\n|---|---|---|---|---|\n";
  for (const auto& [preset, values] : by)
    for (const auto& [v, e] : values)
      s << "| " << preset << " | " << format_or_nan(v) << " | " << std::max(e.first.size(), e.second.size()) << " | "
        << format_or_nan(quantile_or_nan(e.first, 0.5), "%.3f", "not defined") << " | "
        << format_or_nan(quantile_or_nan(e.second, 0.5), "%.4f", "not defined") << " |\n";
  s << '\n';
  // A rank correlation is not defined when one of its variables is the same in every cell.
  constexpr const char* kConstant = "not defined (one variable is the same in every cell)";
  for (const auto& [preset, v] : v_all)
    s << "- " << preset << ": Spearman rho(" << key << ", dominated share) = "
      << format_or_nan(spearman(v, d_all[preset]), "%.3f", kConstant)
      << ", rho(" << key << ", A) = " << format_or_nan(spearman(v, a_all[preset]), "%.3f", kConstant)
      << ", rho(dominated share, A) = " << format_or_nan(spearman(d_all[preset], a_all[preset]), "%.3f", kConstant)
      << " over " << v.size() << " cells.\n";
  return s.str();
}

std::string paper_comparison(double lo, double hi, double paper) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return "not comparable (no interval)";
  const bool contains = lo <= paper && paper <= hi;
  const std::string p = format_or_nan(paper, "%.3f");
  if (hi < 0) {
    if (contains) return "sign and size reproduced (the paper's " + p + " lies in the interval)";
    return "sign reproduced, size not (the paper's " + p + " lies outside the interval)";
  }
  if (lo > 0) return "sign reversed (the interval lies above 0; the paper reports " + p + ")";
  return std::string("sign not established (the interval contains 0; the paper's ") + p +
         (contains ? " lies in it)" : " lies outside it)");
}

RhoStanding rho_standing(const RhoEvidence& e) {
  if (e.cells < kMinCellsForRho) return RhoStanding::TooFewCells;
  if (e.clusters < kMinClustersForRho) return RhoStanding::TooFewClusters;
  return RhoStanding::Interval;
}

std::string rho_verdict(const RhoEvidence& e) {
  if (rho_standing(e) != RhoStanding::Interval) return "";
  if (!e.withheld.empty()) return "is withheld: " + e.withheld;
  if (e.share_constant)
    return "cannot be tested here: the dominated share is " + format_or_nan(e.share, "%.3g") +
           " in every cell (no head's 2-bit tier is dominated, or every one is), so it orders nothing";
  if (!std::isfinite(e.rho)) return "is undetermined (too few cells with a defined A and share, or constant values)";
  if (e.hi < 0)
    return "holds in sign: cells with more dominated heads gain less from the interior (interval below 0); " +
           paper_comparison(e.lo, e.hi);
  if (e.lo > 0) return "is reversed: " + paper_comparison(e.lo, e.hi);
  return "is not established: " + paper_comparison(e.lo, e.hi);
}

std::string rho_statement(const RhoEvidence& e) {
  const std::string n = std::to_string(e.cells) + (e.cells == 1 ? " cell" : " cells");
  switch (rho_standing(e)) {
    case RhoStanding::TooFewCells:
      return n + " with a defined A and dominated share: too few for a rank correlation across cells (at least " +
             std::to_string(kMinCellsForRho) + "), so no rho, no interval and no verdict.";
    case RhoStanding::TooFewClusters:
      return "Spearman rho = " + format_or_nan(e.rho, "%.2f") + " over " + n + " from " + std::to_string(e.clusters) +
             " independent model draws (at least " + std::to_string(kMinClustersForRho) +
             " are needed): no interval and no verdict.";
    case RhoStanding::Interval: break;
  }
  const std::string counts = n + " in " + std::to_string(e.clusters) + " clusters";
  if (e.share_constant || !std::isfinite(e.rho) || !std::isfinite(e.lo) || !std::isfinite(e.hi))
    return counts + ": no rho (not defined). The headline relation " + rho_verdict(e) + ".";
  return "Spearman rho = " + format_or_nan(e.rho, "%.2f") + ", 95% cluster-bootstrap interval [" +
         format_or_nan(e.lo, "%.2f") + ", " + format_or_nan(e.hi, "%.2f") + "], " + counts +
         ". The headline relation " + rho_verdict(e) + ".";
}

}  // namespace tierlab
