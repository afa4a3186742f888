// Figures of the mismatch and proxy analyses (figures_methods.hpp).
#include "scenarios/figures/figures_methods.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "scenarios/figures/figure.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/table_numbers.hpp"

namespace tierlab {

namespace {

Rgb faded(Rgb c, int alpha) {
  c.a = alpha;
  return c;
}

// Ticks 1..n labelled with the quantizers' names (a categorical x axis).
std::vector<Tick> category_ticks(const std::vector<std::string>& names) {
  std::vector<Tick> ticks;
  for (std::size_t i = 0; i < names.size(); ++i) ticks.push_back({static_cast<double>(i + 1), names[i]});
  return ticks;
}

void log_range(double lo, double hi, double& a, double& b) {
  if (!(lo > 0) || !std::isfinite(hi)) lo = 1e-6, hi = 1;
  if (hi <= lo) hi = lo * 10;
  a = lo / 2, b = hi * 2;
}

std::vector<std::string> mismatch_figures(const std::string& dir) {
  std::vector<std::string> files;
  const nlohmann::json beta = read_table_json(dir + "/tables/mismatch_beta.json");
  std::vector<std::string> names;
  for (const auto& r : beta["rows"]) names.push_back(r["quantizer"].get<std::string>());
  {
    Figure f;
    f.title = "Fitted noise model n_h(b) = alpha beta^(-b): beta per head and quantizer";
    f.xlabel = "key quantizer";
    f.xticks = category_ticks(names);
    f.ylabel = "beta (noise divided per added bit)";
    double lo = 4, hi = 4;
    int i = 0;
    for (const auto& r : beta["rows"]) {
      ++i;
      const Rgb c = palette(i - 1);
      Series pts{"", faded(c, 110), Style::Points, {}, {}, 5};
      const std::vector<double> bs = r["betas"].get<std::vector<double>>();
      for (std::size_t k = 0; k < bs.size(); ++k) {
        // Deterministic spread inside the slot, so that equal betas stay visible.
        const double dx = bs.size() > 1 ? -0.18 + 0.36 * static_cast<double>(k) / static_cast<double>(bs.size() - 1) : 0.0;
        pts.x.push_back(i + dx), pts.y.push_back(bs[k]);
        lo = std::min(lo, bs[k]), hi = std::max(hi, bs[k]);
      }
      const double med = double_or_nan(r, "beta_median"), q25 = double_or_nan(r, "beta_q25"),
                   q75 = double_or_nan(r, "beta_q75");
      f.series.push_back(pts);
      if (std::isfinite(q25) && std::isfinite(q75))
        f.series.push_back({"", c, Style::Line, {double(i), double(i)}, {q25, q75}, 4});
      if (std::isfinite(med))
        f.series.push_back({r["quantizer"].get<std::string>() + ": median " + format_label(med, "%.2f") + ", IQR [" +
                                format_label(q25, "%.2f") + ", " + format_label(q75, "%.2f") + "]",
                            c, Style::Squares, {double(i)}, {med}, 13});
    }
    f.series.push_back({"beta = 4 (6 dB per bit)", Rgb{120, 120, 120}, Style::Dashed, {0, double(names.size()) + 1}, {4, 4}, 1});
    f.xmin = 0.4, f.xmax = static_cast<double>(names.size()) + 0.6;
    const double pad = std::max(0.2, 0.08 * (hi - lo));
    f.ymin = std::max(0.0, lo - pad), f.ymax = hi + pad;
    for (auto& x : render_figure(f, dir + "/figures/mismatch_beta")) files.push_back(x);
  }
  const nlohmann::json mm = read_table_json(dir + "/tables/mismatch.json");
  for (const auto& Bj : mm["budgets"]) {
    const double B = Bj.get<double>();
    std::vector<std::string> models = names;
    models.push_back("measured");
    Figure f;
    f.title = "Allocating with another quantizer's noise model, B = " + format_label(B, "%g") +
              " bits per element";
    f.xlabel = "actual key quantizer (the one that quantizes)";
    f.xticks = category_ticks(names);
    f.ylabel = "recomputed error / error of uniform B bits";
    double lo = 1, hi = 1;
    Series matched{"matched model (model = actual)", Rgb{60, 60, 60, 255}, Style::Squares, {}, {}, 15};
    std::vector<Series> per_model;
    for (std::size_t j = 0; j < models.size(); ++j)
      per_model.push_back({models[j] == "measured" ? std::string("measured surrogate of the actual quantizer (no fit)")
                                                   : "noise model of " + models[j],
                           models[j] == "measured" ? Rgb{110, 110, 110} : palette(static_cast<int>(j)),
                           Style::Points, {}, {}, 9});
    for (const auto& r : mm["rows"]) {
      if (double_or_nan(r, "budget") != B || r["model"] == "uniform") continue;
      const double y = double_or_nan(r, "ratio_to_uniform");
      if (!(y > 0)) continue;
      const auto yi = std::find(names.begin(), names.end(), r["actual"].get<std::string>()) - names.begin();
      const auto mj = std::find(models.begin(), models.end(), r["model"].get<std::string>()) - models.begin();
      if (mj >= static_cast<long>(models.size())) continue;
      const double x = static_cast<double>(yi) + 1 + 0.5 * ((static_cast<double>(mj) + 0.5) / static_cast<double>(models.size()) - 0.5);
      per_model[static_cast<std::size_t>(mj)].x.push_back(x), per_model[static_cast<std::size_t>(mj)].y.push_back(y);
      if (r["matched"].get<bool>()) matched.x.push_back(x), matched.y.push_back(y);
      lo = std::min(lo, y), hi = std::max(hi, y);
    }
    f.series.push_back(matched);
    for (auto& s : per_model) f.series.push_back(s);
    f.series.push_back({"uniform B bits (= 1)", Rgb{120, 120, 120}, Style::Dashed, {0, double(names.size()) + 1}, {1, 1}, 1});
    f.xmin = 0.4, f.xmax = static_cast<double>(names.size()) + 0.6;
    f.ymin = std::max(0.0, lo - 0.08 * (hi - lo)), f.ymax = hi + 0.05 * (hi - lo);
    char base[64];
    std::snprintf(base, sizeof base, "/figures/mismatch_error_B%g", B);
    for (auto& x : render_figure(f, dir + base)) files.push_back(x);
  }
  return files;
}

std::vector<std::string> proxy_figures(const std::string& dir) {
  std::vector<std::string> files;
  const nlohmann::json p = read_table_json(dir + "/tables/proxy.json");
  std::map<std::string, double> rho;
  for (const auto& c : p["correlations"])
    rho[c["x"].get<std::string>() + "/" + c["y"].get<std::string>()] = double_or_nan(c, "spearman");
  const double n = static_cast<double>(p["methods"].size());
  {
    Figure f;
    f.title = "Method ranks: surrogate vs recomputed error (rho " + format_label(rho["surrogate/error"], "%.2f") + ")";
    if (rho.count("surrogate/kl")) f.title += " and replay KL (rho " + format_label(rho["surrogate/kl"], "%.2f") + ")";
    f.xlabel = "rank by the surrogate's predicted error (1 = best)";
    f.ylabel = "rank by the end metric (1 = best)";
    Series e{"rank by recomputed output error", palette(0), Style::Points, {}, {}, 10};
    Series k{"rank by replay mean KL (model)", palette(1), Style::Squares, {}, {}, 8};
    for (const auto& m : p["methods"]) {
      const double x = double_or_nan(m, "rank_surrogate");
      if (std::isfinite(double_or_nan(m, "rank_error")))
        e.x.push_back(x), e.y.push_back(double_or_nan(m, "rank_error"));
      if (std::isfinite(double_or_nan(m, "rank_kl"))) k.x.push_back(x), k.y.push_back(double_or_nan(m, "rank_kl"));
    }
    f.series = {{"same rank (y = x)", Rgb{120, 120, 120}, Style::Dashed, {0, n + 1}, {0, n + 1}, 1}, e};
    if (!k.x.empty()) f.series.push_back(k);
    f.xmin = 0, f.xmax = n + 1, f.ymin = 0, f.ymax = n + 1;
    for (auto& x : render_figure(f, dir + "/figures/proxy_ranks")) files.push_back(x);
  }
  {
    Figure f;
    f.title = "Surrogate prediction vs recomputed error, one point per method";
    f.xlabel = "surrogate predicted relative error (observation queries, log)";
    f.ylabel = "recomputed relative output error (log)";
    f.xlog = false;
    std::map<std::string, Series> by;
    double lo = INFINITY, hi = 0;
    for (const auto& m : p["methods"]) {
      const double x = double_or_nan(m, "surrogate"), y = double_or_nan(m, "error");
      if (!(x > 0) || !(y > 0)) continue;
      Series& s = by[m["kind"].get<std::string>()];
      // log10 on x (the shared x log axis ticks powers of 2), log y axis.
      s.x.push_back(std::log10(x)), s.y.push_back(y);
      lo = std::min({lo, x, y}), hi = std::max({hi, x, y});
    }
    double a = 0, b = 1;
    log_range(lo, hi, a, b);
    int i = 0;
    const std::map<std::string, std::string> kind_names = {{"family", "family optimum (M*, Q*, E*)"},
                                                           {"quantizer", "key quantizer"},
                                                           {"scorer", "eviction scorer"},
                                                           {"seed", "seed allocator"},
                                                           {"policy", "uniform policy"}};
    for (auto& [kind, s] : by) {
      s.name = kind_names.count(kind) ? kind_names.at(kind) : kind;
      s.color = palette(i++);
      s.size = 10;
      f.series.push_back(s);
    }
    // x holds log10 of the prediction (the figure's log axes tick in powers of 2): decade
    // ticks labelled with the error itself.
    f.xlabel = "surrogate predicted relative error (observation queries, log)";
    for (int k = static_cast<int>(std::floor(std::log10(a))); k <= static_cast<int>(std::ceil(std::log10(b))); ++k)
      f.xticks.push_back({static_cast<double>(k), format_label(std::pow(10.0, k), "%g")});
    f.series.push_back({"y = x", Rgb{120, 120, 120}, Style::Dashed, {std::log10(a), std::log10(b)}, {a, b}, 1});
    f.ylog = true;
    f.xmin = std::log10(a), f.xmax = std::log10(b), f.ymin = a, f.ymax = b;
    for (auto& x : render_figure(f, dir + "/figures/proxy_error")) files.push_back(x);
  }
  return files;
}

}  // namespace

std::vector<std::string> render_method_figures(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (fs::exists(dir + "/tables/mismatch_beta.json"))
    for (auto& x : mismatch_figures(dir)) files.push_back(x);
  if (fs::exists(dir + "/tables/proxy.json"))
    for (auto& x : proxy_figures(dir)) files.push_back(x);
  return files;
}

}  // namespace tierlab
