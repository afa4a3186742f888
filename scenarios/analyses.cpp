#include "scenarios/analyses.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "scenarios/atomic_file.hpp"
#include "scenarios/entropy_phase.hpp"
#include "scenarios/mismatch.hpp"
#include "scenarios/proxy.hpp"
#include "scenarios/smoothing_study.hpp"
#include "scenarios/table_numbers.hpp"

namespace tierlab {

namespace {

// Fewer cells than this: no rank correlation across cells is reported in summary.md (the
// tables keep rho and its interval).
constexpr std::size_t kMinCellsForRho = 5;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 2) return kNaN;
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx), syy += (y[i] - my) * (y[i] - my);
  if (sxx <= 0 || syy <= 0) return kNaN;
  return sxy / std::sqrt(sxx * syy);
}

// The median over a cell's heads of A at one budget (NaN when no head has A defined).
double cell_median(const nlohmann::json& budget) {
  std::vector<double> v;
  for (const auto& h : budget["heads"])
    if (const double a = double_or_nan(h, "A"); std::isfinite(a)) v.push_back(a);
  return quantile_or_nan(v, 0.5);
}

}  // namespace

std::vector<double> mid_ranks(const std::vector<double>& x) {
  std::vector<std::size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    const double rank = 0.5 * (static_cast<double>(i) + static_cast<double>(j)) + 1.0;
    for (std::size_t k = i; k <= j; ++k) r[idx[k]] = rank;
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return pearson(mid_ranks(x), mid_ranks(y));
}

Interval bootstrap_spearman(const std::vector<double>& x, const std::vector<double>& y, int resamples, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = x.size();
  std::vector<double> rhos;
  if (n >= 2) {
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    std::vector<double> bx(n), by(n);
    for (int r = 0; r < resamples; ++r) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t k = pick(rng);
        bx[i] = x[k], by[i] = y[k];
      }
      const double rho = spearman(bx, by);
      if (std::isfinite(rho)) rhos.push_back(rho);
    }
  }
  Interval iv;
  iv.used = static_cast<int>(rhos.size());
  iv.lo = quantile_or_nan(rhos, 0.025);
  iv.hi = quantile_or_nan(rhos, 0.975);
  return iv;
}

void write_analyses(const Scenario& sc, const std::vector<nlohmann::json>& cells, const std::string& out) {
  namespace fs = std::filesystem;
  const std::string dir = out + "/tables";
  fs::create_directories(dir);
  const char* qname = sc.queries == QuerySet::Decode ? "decode" : "obs";

  // ---- cells.csv / heads.csv
  std::ostringstream cc, hc;
  cc << "cell,preset,seed,prompt_len,logit_scale,budget,dominated_share,R2_median,A_median,A,A_obs,A_decode,A_surrogate,"
        "heads_defined,wins_Q,wins_E,wins_M,winner\n";
  hc << "cell,preset,prompt_len,logit_scale,budget,layer,kv_head,A,A_surrogate,err_Q,err_E,err_M,winner,dominated_2bit,R2\n";
  nlohmann::json cells_json = nlohmann::json::array();
  for (const auto& c : cells) {
    for (const auto& b : c["budgets"]) {
      const auto& w = b["wins"];
      cc << c["id"].get<std::string>() << ',' << c["preset"].get<std::string>() << ',' << c["seed"].get<std::uint64_t>()
         << ',' << c["prompt_len"].get<int>() << ',' << format_or_nan(double_or_nan(c, "logit_scale")) << ','
         << format_or_nan(b["budget"].get<double>()) << ',' << format_or_nan(double_or_nan(c, "dominated_share")) << ','
         << format_or_nan(double_or_nan(c, "R2_median")) << ',' << format_or_nan(cell_median(b)) << ','
         << format_or_nan(double_or_nan(b, "A")) << ',' << format_or_nan(double_or_nan(b, "A_obs")) << ','
         << format_or_nan(double_or_nan(b, "A_decode")) << ',' << format_or_nan(double_or_nan(b, "A_surrogate")) << ','
         << b["defined"].get<int>() << ',' << w["Q"].get<int>() << ',' << w["E"].get<int>() << ',' << w["M"].get<int>()
         << ',' << b["winner"].get<std::string>() << '\n';
      cells_json.push_back({{"cell", c["id"]}, {"preset", c["preset"]}, {"seed", c["seed"]}, {"prompt_len", c["prompt_len"]},
                            {"logit_scale", c["logit_scale"]}, {"budget", b["budget"]},
                            {"dominated_share", c["dominated_share"]}, {"R2_median", c["R2_median"]},
                            {"A_median", finite_or_null(cell_median(b))}, {"A", b["A"]},
                            {"A_obs", b["A_obs"]}, {"A_decode", b["A_decode"]}, {"A_surrogate", b["A_surrogate"]},
                            {"heads_defined", b["defined"]}, {"wins", w}, {"winner", b["winner"]}});
      std::size_t hi = 0;
      for (const auto& h : b["heads"]) {
        const double R2 = hi < c["R2"].size() && !c["R2"][hi].is_null() ? c["R2"][hi].get<double>() : kNaN;
        hc << c["id"].get<std::string>() << ',' << c["preset"].get<std::string>() << ',' << c["prompt_len"].get<int>()
           << ',' << format_or_nan(double_or_nan(c, "logit_scale")) << ',' << format_or_nan(b["budget"].get<double>())
           << ',' << h["layer"].get<int>() << ',' << h["kv_head"].get<int>() << ','
           << format_or_nan(double_or_nan(h, "A")) << ',' << format_or_nan(double_or_nan(h, "A_surrogate")) << ','
           << format_or_nan(double_or_nan(h, "err_Q")) << ',' << format_or_nan(double_or_nan(h, "err_E")) << ','
           << format_or_nan(double_or_nan(h, "err_M")) << ',' << h["winner"].get<std::string>() << ','
           << (h["dominated_2bit"].get<bool>() ? 1 : 0) << ',' << format_or_nan(R2) << '\n';
        ++hi;
      }
    }
  }
  write_file_atomically(dir + "/cells.csv", cc.str());
  write_file_atomically(dir + "/heads.csv", hc.str());
  write_file_atomically(dir + "/cells.json", cells_json.dump(1) + "\n");

  // ---- A vs budget (per head)
  std::ostringstream bc;
  bc << "budget,mean_A_cells,mean_A_heads,median_A_heads,share_heads_positive,heads_defined,wins_Q,wins_E,wins_M\n";
  nlohmann::json budgets = nlohmann::json::array();
  std::vector<double> mean_by_budget;
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) {
    double sc_sum = 0, h_sum = 0;
    std::vector<double> hv;
    int sc_n = 0, h_n = 0, pos = 0, wq = 0, we = 0, wm = 0;
    for (const auto& c : cells) {
      const auto& b = c["budgets"][bi];
      if (const double a = double_or_nan(b, "A"); std::isfinite(a)) sc_sum += a, ++sc_n;
      for (const auto& h : b["heads"])
        if (const double a = double_or_nan(h, "A"); std::isfinite(a))
          h_sum += a, ++h_n, pos += a > 0 ? 1 : 0, hv.push_back(a);
      wq += b["wins"]["Q"].get<int>(), we += b["wins"]["E"].get<int>(), wm += b["wins"]["M"].get<int>();
    }
    const double mc = sc_n ? sc_sum / sc_n : kNaN, mh = h_n ? h_sum / h_n : kNaN, sp = h_n ? double(pos) / h_n : kNaN;
    const double med = quantile_or_nan(hv, 0.5);
    mean_by_budget.push_back(med);
    bc << format_or_nan(sc.budgets[bi]) << ',' << format_or_nan(mc) << ',' << format_or_nan(mh) << ','
       << format_or_nan(med) << ',' << format_or_nan(sp) << ',' << h_n << ',' << wq << ',' << we << ',' << wm << '\n';
    budgets.push_back({{"budget", sc.budgets[bi]},
                       {"mean_A_cells", finite_or_null(mc)},
                       {"mean_A_heads", finite_or_null(mh)},
                       {"median_A_heads", finite_or_null(med)},
                       {"share_heads_positive", finite_or_null(sp)},
                       {"heads_defined", h_n},
                       {"wins", {{"Q", wq}, {"E", we}, {"M", wm}}}});
  }
  write_file_atomically(dir + "/budgets.csv", bc.str());
  // The interior stops paying at the smallest budget from which the median A over heads <= 0
  // for every larger one (the median: A is unbounded below, a few heads dominate a mean).
  std::vector<std::size_t> order(sc.budgets.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sc.budgets[a] < sc.budgets[b]; });
  double stop_budget = kNaN;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (std::isfinite(mean_by_budget[*it]) && mean_by_budget[*it] <= 0) stop_budget = sc.budgets[*it];
    else break;
  }

  // ---- (a) rho across cells at the primary budget
  std::size_t pb = 0;
  for (std::size_t i = 0; i < sc.budgets.size(); ++i)
    if (sc.budgets[i] == sc.primary_budget) pb = i;
  std::vector<double> xs, ys;
  std::vector<std::string> models;
  nlohmann::json points = nlohmann::json::array();
  for (const auto& c : cells) {
    const double x = double_or_nan(c, "dominated_share"), y = cell_median(c["budgets"][pb]);
    points.push_back({{"cell", c["id"]}, {"preset", c["preset"]}, {"prompt_len", c["prompt_len"]},
                      {"dominated_share", finite_or_null(x)}, {"A", finite_or_null(y)}});
    if (std::isfinite(x) && std::isfinite(y)) xs.push_back(x), ys.push_back(y), models.push_back(c["preset"]);
  }
  const double rho = spearman(xs, ys);
  const Interval iv = bootstrap_spearman(xs, ys, sc.bootstrap, sc.seed);
  // Controlling for the model: ranks minus each model's mean rank, then Pearson.
  double rho_within = kNaN;
  {
    const std::set<std::string> distinct(models.begin(), models.end());
    if (distinct.size() > 1) {
      const auto rx = mid_ranks(xs), ry = mid_ranks(ys);
      std::map<std::string, std::pair<double, double>> sum;
      std::map<std::string, int> cnt;
      for (std::size_t i = 0; i < rx.size(); ++i) sum[models[i]].first += rx[i], sum[models[i]].second += ry[i], ++cnt[models[i]];
      std::vector<double> ex, ey;
      for (std::size_t i = 0; i < rx.size(); ++i)
        ex.push_back(rx[i] - sum[models[i]].first / cnt[models[i]]), ey.push_back(ry[i] - sum[models[i]].second / cnt[models[i]]);
      rho_within = pearson(ex, ey);
    }
  }
  // Per context length T: mean A at the primary budget and share of heads won by eviction.
  std::map<int, std::array<double, 4>> byT;  // -, -, E wins, heads
  std::map<int, std::vector<double>> medT;    // cell medians of A
  for (const auto& c : cells) {
    auto& t = byT[c["prompt_len"].get<int>()];
    const auto& b = c["budgets"][pb];
    if (const double a = cell_median(b); std::isfinite(a)) medT[c["prompt_len"].get<int>()].push_back(a);
    t[2] += b["wins"]["E"].get<int>();
    t[3] += static_cast<double>(b["heads"].size());
  }
  nlohmann::json perT = nlohmann::json::array();
  for (const auto& [T, t] : byT)
    perT.push_back({{"prompt_len", T},
                    {"median_A", finite_or_null(quantile_or_nan(medT[T], 0.5))},
                    {"share_E_wins", finite_or_null(t[3] ? t[2] / t[3] : kNaN)}});
  nlohmann::json interior = {{"scenario", sc.name},
                             {"queries", qname},
                             {"primary_budget", sc.primary_budget},
                             {"n_cells", xs.size()},
                             {"rho", finite_or_null(rho)},
                             {"ci_lo", finite_or_null(iv.lo)},
                             {"ci_hi", finite_or_null(iv.hi)},
                             {"resamples", sc.bootstrap},
                             {"resamples_used", iv.used},
                             {"seed", sc.seed},
                             {"rho_within_model", finite_or_null(rho_within)},
                             {"stop_budget", finite_or_null(stop_budget)},
                             {"budgets", budgets},
                             {"per_context_length", perT},
                             {"points", points}};

  // ---- (b) phase map
  nlohmann::json phase;
  std::ostringstream pc;
  if (sc.phase_map) {
    std::map<std::pair<double, double>, std::array<int, 4>> cellwins;  // Q E M, total A defined
    std::map<double, std::vector<double>> r2_by_scale;
    std::map<std::pair<double, double>, std::pair<double, int>> meanA;
    for (const auto& c : cells) {
      const double ls = double_or_nan(c, "logit_scale");
      if (!std::isfinite(ls)) continue;
      for (const auto& r : c["R2"])
        if (!r.is_null()) r2_by_scale[ls].push_back(r.get<double>());
      for (const auto& b : c["budgets"]) {
        auto& w = cellwins[{ls, b["budget"].get<double>()}];
        w[0] += b["wins"]["Q"].get<int>(), w[1] += b["wins"]["E"].get<int>(), w[2] += b["wins"]["M"].get<int>();
        auto& m = meanA[{ls, b["budget"].get<double>()}];
        if (const double a = double_or_nan(b, "A"); std::isfinite(a)) m.first += a, m.second += 1;
      }
    }
    pc << "logit_scale,budget,winner,share_Q,share_E,share_M,mean_A,R2_median\n";
    nlohmann::json rows = nlohmann::json::array();
    std::vector<std::pair<double, double>> r2med;  // scale, median R2
    for (const auto& [ls, v] : r2_by_scale) r2med.push_back({ls, quantile_or_nan(v, 0.5)});
    for (const auto& [key, w] : cellwins) {
      const int tot = w[0] + w[1] + w[2];
      std::string win = "Q";
      int best = w[0];
      if (w[1] > best) win = "E", best = w[1];
      if (w[2] > best) win = "M", best = w[2];
      double r2 = kNaN;
      for (const auto& [s, m] : r2med)
        if (s == key.first) r2 = m;
      const auto& m = meanA[key];
      const double ma = m.second ? m.first / m.second : kNaN;
      pc << format_or_nan(key.first) << ',' << format_or_nan(key.second) << ',' << (tot ? win : "") << ','
         << format_or_nan(tot ? double(w[0]) / tot : kNaN) << ',' << format_or_nan(tot ? double(w[1]) / tot : kNaN)
         << ',' << format_or_nan(tot ? double(w[2]) / tot : kNaN) << ',' << format_or_nan(ma) << ','
         << format_or_nan(r2) << '\n';
      rows.push_back({{"logit_scale", key.first},
                      {"budget", key.second},
                      {"winner", tot ? win : ""},
                      {"share_Q", finite_or_null(tot ? double(w[0]) / tot : kNaN)},
                      {"share_E", finite_or_null(tot ? double(w[1]) / tot : kNaN)},
                      {"share_M", finite_or_null(tot ? double(w[2]) / tot : kNaN)},
                      {"mean_A", finite_or_null(ma)},
                      {"R2_median", finite_or_null(r2)}});
    }
    // Surrogate boundary: where the median R_h(2) crosses 1 along the logit scale.
    double boundary = kNaN;
    for (std::size_t i = 0; i + 1 < r2med.size(); ++i) {
      const auto [s0, r0] = r2med[i];
      const auto [s1, r1] = r2med[i + 1];
      if (std::isfinite(r0) && std::isfinite(r1) && (r0 - 1) * (r1 - 1) <= 0 && r0 != r1) {
        boundary = s0 + (1 - r0) * (s1 - s0) / (r1 - r0);
        break;
      }
    }
    nlohmann::json med = nlohmann::json::array();
    for (const auto& [s, m] : r2med) med.push_back({{"logit_scale", s}, {"R2_median", finite_or_null(m)}});
    phase = {{"rows", rows}, {"R2_median_by_scale", med}, {"boundary_logit_scale", finite_or_null(boundary)}};
    write_file_atomically(dir + "/phase.csv", pc.str());
    write_file_atomically(dir + "/phase.json", phase.dump(1) + "\n");
  }
  write_file_atomically(dir + "/interior.json", interior.dump(1) + "\n");

  // ---- (d) water-filling picture of one head
  nlohmann::json wf;
  for (const auto& c : cells)
    if (c.contains("waterfill")) {
      const auto& w = c["waterfill"];
      const std::vector<double> a = w["a"].get<std::vector<double>>(), bits = w["bits"].get<std::vector<double>>();
      const double alpha = w["alpha"].get<double>(), beta = w["beta"].get<double>(), theta = w["theta"].get<double>();
      std::vector<std::size_t> idx(a.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return a[x] > a[y]; });
      std::ostringstream wc;
      wc << "rank,token,a,g0,bits\n";
      int zero = 0;
      double maxb = 0;
      nlohmann::json rows = nlohmann::json::array();
      for (std::size_t r = 0; r < idx.size(); ++r) {
        const std::size_t t = idx[r];
        const double g0 = a[t] * alpha * std::log(beta);  // marginal return per bit at 0 bits
        wc << r + 1 << ',' << t << ',' << format_or_nan(a[t]) << ',' << format_or_nan(g0) << ','
           << format_or_nan(bits[t]) << '\n';
        rows.push_back({{"rank", r + 1}, {"token", t}, {"a", a[t]}, {"g0", g0}, {"bits", bits[t]}});
        zero += bits[t] <= 0 ? 1 : 0;
        maxb = std::max(maxb, bits[t]);
      }
      write_file_atomically(dir + "/waterfill.csv", wc.str());
      wf = {{"cell", c["id"]}, {"layer", w["layer"]}, {"kv_head", w["kv_head"]}, {"budget", w["budget"]},
            {"alpha", alpha}, {"beta", beta}, {"theta", theta}, {"tokens", a.size()}, {"zero_bit_tokens", zero},
            {"max_bits", maxb}, {"rows", rows}};
      write_file_atomically(dir + "/waterfill.json", wf.dump(1) + "\n");
      break;
    }

  // ---- (e) allocation staleness over decode steps (MODEL.md section 7)
  nlohmann::json stale;
  if (sc.staleness.enabled) {
    std::ostringstream hc, pc;
    hc << "cell,layer,kv_head,step,err_stale,err_fresh,ratio,jaccard,agreement,family_obs,family,same_family\n";
    pc << "step,heads,median_ratio,mean_ratio,median_jaccard,mean_jaccard,median_agreement,mean_agreement,share_same_family\n";
    struct Acc {
      std::vector<double> ratio, jaccard, agreement;
      int heads = 0, same = 0;
    };
    std::map<int, Acc> by_step;
    for (const auto& c : cells) {
      if (!c.contains("staleness")) continue;
      for (const auto& h : c["staleness"]["heads"])
        for (const auto& st : h["steps"]) {
          const int step = st["step"].get<int>();
          const double r = double_or_nan(st, "ratio"), jac = double_or_nan(st, "jaccard"),
                       ag = double_or_nan(st, "agreement");
          const bool same = st["same_family"].get<bool>();
          hc << c["id"].get<std::string>() << ',' << h["layer"] << ',' << h["kv_head"] << ',' << step << ','
             << format_or_nan(double_or_nan(st, "err_stale")) << ',' << format_or_nan(double_or_nan(st, "err_fresh"))
             << ',' << format_or_nan(r) << ',' << format_or_nan(jac) << ',' << format_or_nan(ag) << ','
             << h["family_obs"].get<std::string>() << ',' << st["family"].get<std::string>() << ',' << (same ? 1 : 0)
             << '\n';
          Acc& a = by_step[step];
          if (std::isfinite(r)) a.ratio.push_back(r);
          if (std::isfinite(jac)) a.jaccard.push_back(jac);
          if (std::isfinite(ag)) a.agreement.push_back(ag);
          ++a.heads;
          a.same += same ? 1 : 0;
        }
    }
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& [step, a] : by_step) {
      const double share = a.heads ? static_cast<double>(a.same) / a.heads : kNaN;
      const nlohmann::json r = {{"step", step},
                                {"heads", a.heads},
                                {"median_ratio", finite_or_null(quantile_or_nan(a.ratio, 0.5))},
                                {"mean_ratio", finite_or_null(mean_or_nan(a.ratio))},
                                {"median_jaccard", finite_or_null(quantile_or_nan(a.jaccard, 0.5))},
                                {"mean_jaccard", finite_or_null(mean_or_nan(a.jaccard))},
                                {"median_agreement", finite_or_null(quantile_or_nan(a.agreement, 0.5))},
                                {"mean_agreement", finite_or_null(mean_or_nan(a.agreement))},
                                {"share_same_family", finite_or_null(share)}};
      pc << step << ',' << a.heads << ',' << format_or_nan(double_or_nan(r, "median_ratio")) << ','
         << format_or_nan(double_or_nan(r, "mean_ratio")) << ',' << format_or_nan(double_or_nan(r, "median_jaccard"))
         << ',' << format_or_nan(double_or_nan(r, "mean_jaccard")) << ','
         << format_or_nan(double_or_nan(r, "median_agreement")) << ','
         << format_or_nan(double_or_nan(r, "mean_agreement")) << ',' << format_or_nan(share) << '\n';
      rows.push_back(r);
    }
    stale = {{"budget", sc.staleness.budget}, {"rows", rows}};
    write_file_atomically(dir + "/staleness_heads.csv", hc.str());
    write_file_atomically(dir + "/staleness.csv", pc.str());
    write_file_atomically(dir + "/staleness.json", stale.dump(1) + "\n");
  }

  // ---- summary.md
  std::ostringstream s;
  s << "# " << sc.name << "\n\n";
  if (!sc.description.empty()) s << sc.description << "\n\n";
  s << "Scenario `" << sc.file << "`: " << cells.size() << " cells, budgets";
  for (double b : sc.budgets) s << ' ' << format_or_nan(b);
  s << " bits per key element (" << (sc.rate_kind == RateKind::Code ? "code" : "total") << "), ladder `"
    << sc.ladder.name() << "`, verdict on the " << qname << " queries; backend "
    << (cells.empty() ? "" : cells.front()["backend"].get<std::string>()) << ".\n\n";
  s << "A = 1 - err(M*) / min(err(Q*), err(E*)) (exact recomputation; A > 0: mixing tiers beats both endpoints). "
       "A is unbounded below (a head where an endpoint is almost exact gives A << 0), so a cell is summarised by the "
       "median of A over its heads; the means are in the tables.\n\n";
  s << "## Interior advantage vs dominated share (B = " << format_or_nan(sc.primary_budget) << ")\n\n";
  if (xs.size() < kMinCellsForRho) {
    // A scenario built for another analysis (staleness, mismatch, ...): a rank correlation
    // over a handful of cells says nothing, so none is reported.
    s << "- " << xs.size() << " cells with a defined A and dominated share: too few for a rank correlation across cells (at least "
      << kMinCellsForRho << "; the headline relation is tested by the scenarios with many cells). Per-cell values: `tables/cells.csv`.\n";
  } else {
  s << "- Spearman rho(dominated share, median A over the cell's heads) over " << xs.size()
    << " cells = " << format_or_nan(rho, "%.3f") << ", 95% bootstrap interval [" << format_or_nan(iv.lo, "%.3f") << ", "
    << format_or_nan(iv.hi, "%.3f") << "] (" << iv.used << " of " << sc.bootstrap << " resamples, seed " << sc.seed
    << ").\n";
  if (std::isfinite(rho_within))
    s << "- Controlling for the model (per-preset residual ranks): rho = " << format_or_nan(rho_within, "%.3f")
      << ".\n";
  std::string verdict;
  if (!std::isfinite(rho) || xs.size() < 3) verdict = "is undetermined (too few cells with a defined A and share, or constant values)";
  else if (iv.hi < 0) verdict = "holds: cells with more dominated heads gain less from the interior (interval below 0)";
  else if (iv.lo > 0) verdict = "is reversed: the interval lies above 0";
  else verdict = "is not established: the interval contains 0";
  s << "- The headline relation of MODEL.md section 5 (the dominated share orders the interior advantage: Spearman rho strongly negative; the reference paper reports -0.978 over 25 cells) " << verdict << ".\n";
  if (xs.size() < 12) s << "- Note: fewer than 12 cells; the interval is wide.\n";
  }
  s << "\n## Per-head advantage vs budget\n\n| B | median A (heads) | mean A (heads) | heads with A > 0 | wins Q / E / M |\n|---|---|---|---|---|\n";
  for (const auto& b : budgets)
    s << "| " << format_or_nan(b["budget"].get<double>()) << " | "
      << format_or_nan(double_or_nan(b, "median_A_heads"), "%.4f") << " | "
      << format_or_nan(double_or_nan(b, "mean_A_heads"), "%.4g") << " | "
      << format_or_nan(100 * double_or_nan(b, "share_heads_positive"), "%.1f") << "% | " << b["wins"]["Q"] << " / "
      << b["wins"]["E"] << " / " << b["wins"]["M"] << " |\n";
  if (std::isfinite(stop_budget))
    s << "\nThe interior stops paying (median A over heads <= 0 from there up) at B = " << format_or_nan(stop_budget)
      << ".\n";
  else s << "\nThe interior pays (median A over heads > 0) at the largest budget swept; no stop budget within the sweep.\n";
  if (byT.size() > 1) {
    s << "\n## Context length (B = " << format_or_nan(sc.primary_budget)
      << ")\n\n| T | median over cells of the cell's median A | share of heads won by eviction |\n|---|---|---|\n";
    for (const auto& t : perT)
      s << "| " << t["prompt_len"] << " | " << format_or_nan(double_or_nan(t, "median_A"), "%.4f") << " | "
        << format_or_nan(100 * double_or_nan(t, "share_E_wins"), "%.1f") << "% |\n";
    const double e0 = double_or_nan(perT.front(), "share_E_wins"), e1 = double_or_nan(perT.back(), "share_E_wins");
    s << "\nFrom T = " << perT.front()["prompt_len"] << " to T = " << perT.back()["prompt_len"]
      << " the share of heads won by eviction goes " << format_or_nan(100 * e0, "%.1f") << "% -> "
      << format_or_nan(100 * e1, "%.1f") << "% ("
      << (e1 > e0   ? "toward eviction"
          : e1 < e0 ? "away from eviction"
                    : "unchanged")
      << ").\n";
  }
  if (sc.phase_map) {
    s << "\n## Dominance phase map (logit scale x budget)\n\nWinner by exact recomputation (most heads), share of heads won by M:\n\n";
    s << "| logit scale | B | winner | Q | E | M | median R(2) |\n|---|---|---|---|---|---|---|\n";
    for (const auto& r : phase["rows"])
      s << "| " << format_or_nan(r["logit_scale"].get<double>()) << " | " << format_or_nan(r["budget"].get<double>())
        << " | " << r["winner"].get<std::string>() << " | " << format_or_nan(double_or_nan(r, "share_Q"), "%.2f")
        << " | " << format_or_nan(double_or_nan(r, "share_E"), "%.2f") << " | "
        << format_or_nan(double_or_nan(r, "share_M"), "%.2f") << " | "
        << format_or_nan(double_or_nan(r, "R2_median"), "%.3f") << " |\n";
    const double bnd = double_or_nan(phase, "boundary_logit_scale");
    if (std::isfinite(bnd))
      s << "\nThe surrogate's boundary (median R_h(2) = 1) lies at logit scale " << format_or_nan(bnd, "%.3f") << ".\n";
    else s << "\nThe median R_h(2) does not cross 1 within the swept logit scales (no surrogate boundary in range).\n";
  }
  if (!wf.is_null()) {
    s << "\n## Water-filling picture (cell " << wf["cell"].get<std::string>() << ", head L" << wf["layer"] << ".H"
      << wf["kv_head"] << ", B = " << format_or_nan(wf["budget"].get<double>()) << " bits per token)\n\n"
      << "Fitted noise model n_h(b) = " << format_or_nan(wf["alpha"].get<double>(), "%.4g") << " * "
      << format_or_nan(wf["beta"].get<double>(), "%.4g")
      << "^(-b); water level theta = " << format_or_nan(wf["theta"].get<double>(), "%.4g") << "; "
      << wf["zero_bit_tokens"] << " of " << wf["tokens"]
      << " tokens get 0 bits (evicted: their marginal return w_t alpha ln(beta) is below theta); the "
      << "heaviest token gets " << format_or_nan(wf["max_bits"].get<double>(), "%.2f") << " bits.\n";
  }
  if (!stale.is_null() && !stale["rows"].empty()) {
    const auto& rows = stale["rows"];
    s << "\n## Allocation staleness over decode steps (B = " << format_or_nan(sc.staleness.budget) << ")\n\n"
      << "Per head, M* decided once from the observation queries (stale) vs M* solved for the g queries of decode step s "
         "(fresh), both recomputed exactly on step s's queries over T + s tokens. Ratio = err_stale / err_fresh; Jaccard of "
         "the evicted sets; tier agreement = share of prompt tokens with the same tier; same family = the best of Q*, E*, M* "
         "by the surrogate equals the observation window's.\n\n"
      << "| step s | heads | median ratio | mean ratio | median Jaccard | median tier agreement | same family |\n|---|---|---|---|---|---|---|\n";
    for (const auto& r : rows)
      s << "| " << r["step"] << " | " << r["heads"] << " | " << format_or_nan(double_or_nan(r, "median_ratio"), "%.3f")
        << " | " << format_or_nan(double_or_nan(r, "mean_ratio"), "%.3f") << " | "
        << format_or_nan(double_or_nan(r, "median_jaccard"), "%.3f") << " | "
        << format_or_nan(double_or_nan(r, "median_agreement"), "%.3f") << " | "
        << format_or_nan(100 * double_or_nan(r, "share_same_family"), "%.1f") << "% |\n";
    const auto& r0 = rows.front();
    const auto& r1 = rows.back();
    s << "\nFrom step " << r0["step"] << " to step " << r1["step"] << " the median error ratio goes "
      << format_or_nan(double_or_nan(r0, "median_ratio"), "%.3f") << " -> "
      << format_or_nan(double_or_nan(r1, "median_ratio"), "%.3f") << ", the median tier agreement "
      << format_or_nan(double_or_nan(r0, "median_agreement"), "%.3f") << " -> "
      << format_or_nan(double_or_nan(r1, "median_agreement"), "%.3f")
      << ", and the share of heads keeping their best family "
      << format_or_nan(100 * double_or_nan(r0, "share_same_family"), "%.1f") << "% -> "
      << format_or_nan(100 * double_or_nan(r1, "share_same_family"), "%.1f") << "%.\n";
  }
  s << write_entropy_phase_tables(sc, cells, dir);  // "" unless sc.entropy_phase (scenarios/entropy_phase.hpp)
  s << write_smoothing_tables(sc, cells, dir);      // "" unless the smoothing key (scenarios/smoothing_study.hpp)
  s << write_mismatch_tables(sc, cells, dir);       // "" unless the mismatch key (scenarios/mismatch.hpp)
  s << write_proxy_tables(sc, cells, dir);          // "" unless the proxy key (scenarios/proxy.hpp)
  s << "\nTables: `tables/` (CSV and JSON). Figures: `figures/` (PNG, SVG, PDF); re-render with `tierlab figure " << out << "`.\n";
  write_file_atomically(out + "/summary.md", s.str());
}

}  // namespace tierlab
