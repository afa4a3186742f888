// Distortion-model mismatch (mismatch.hpp).
#include "scenarios/analyses/mismatch.hpp"
#include <filesystem>

#include "scenarios/figures/tables_io.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/base/text.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

namespace {


// mean_t mean_q (q.(k^_t - k_t))^2 / d, in double.
double mean_logit_noise(const MatrixRM& keys, const MatrixRM& approx, const CausalQueries& qs) {
  const MatrixRMd dK = approx.cast<double>() - keys.cast<double>();
  const MatrixRMd Q = qs.queries().cast<double>();
  const MatrixRMd e = Q * dK.transpose();  // nq x T
  const double d = static_cast<double>(keys.cols());
  // n_t = mean over the queries that see t of e^2 / d (surrogate.hpp), then the mean over t.
  double total = 0;
  for (Eigen::Index t = 0; t < e.cols(); ++t) {
    double sum = 0, seen = 0;
    for (Eigen::Index r = 0; r < e.rows(); ++r)
      if (t < qs.visible[static_cast<std::size_t>(r)]) sum += e(r, t) * e(r, t), seen += 1;
    total += seen > 0 ? sum / (seen * d) : 0.0;
  }
  return e.cols() > 0 ? total / static_cast<double>(e.cols()) : 0.0;
}

// Relative output error of dense quantized keys (every token kept) on the observation queries.
double obs_error(const HeadData& head, const MatrixRM& approx, Recomputer& backend) {
  const std::vector<std::uint8_t> all_kept(static_cast<std::size_t>(head.keys.rows()), 1);
  return evaluate_obs_queries(head, approx, all_kept, backend).rel_error;
}

struct HeadMeasure {
  int layer = 0, kv_head = 0;
  double weight = 0;  // w_h = sum_t a_t / mean_q ||o_q||^2
  // per quantizer, per bit width
  std::vector<std::vector<double>> noise, surrogate, error, code_bits, total_bits;
  std::vector<NoiseFit> fit;
  std::vector<bool> fit_ok;
};

}  // namespace

std::vector<int> allocate_bits_exact(const std::vector<std::vector<double>>& cost, const std::vector<int>& bits,
                                     int total_bits) {
  const std::size_t H = cost.size(), K = bits.size();
  if (H == 0) return {};
  for (const int b : bits)
    if (b < 0) throw InputError("allocate_bits_exact: bit widths must be non-negative");
  if (total_bits < 0) return {};
  const double inf = std::numeric_limits<double>::infinity();
  const std::size_t U = static_cast<std::size_t>(total_bits) + 1;
  // best[h][u]: least cost of heads h..H-1 using at most u bits; choice[h][u] its width index.
  std::vector<std::vector<double>> best(H + 1, std::vector<double>(U, 0.0));
  std::vector<std::vector<int>> choice(H, std::vector<int>(U, -1));
  for (std::size_t h = H; h-- > 0;) {
    for (std::size_t u = 0; u < U; ++u) {
      double v = inf;
      int c = -1;
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t b = static_cast<std::size_t>(bits[k]);
        if (b > u || !std::isfinite(best[h + 1][u - b]) || !std::isfinite(cost[h][k])) continue;
        const double x = cost[h][k] + best[h + 1][u - b];
        // Strictly better; among equals keep the fewer bits (k in increasing-bit order keeps the first).
        if (x < v) v = x, c = static_cast<int>(k);
      }
      best[h][u] = v;
      choice[h][u] = c;
    }
  }
  if (!std::isfinite(best[0][U - 1])) return {};
  // Least total bits among the optima: the smallest u with best[0][u] == best[0][U-1].
  std::size_t u = U - 1;
  while (u > 0 && best[0][u - 1] == best[0][U - 1]) --u;
  std::vector<int> out;
  for (std::size_t h = 0; h < H; ++h) {
    const int k = choice[h][u];
    out.push_back(bits[static_cast<std::size_t>(k)]);
    u -= static_cast<std::size_t>(bits[static_cast<std::size_t>(k)]);
  }
  return out;
}

nlohmann::json mismatch_cell(const Scenario&, const MismatchSpec& spec, const TraceReader& trace, Recomputer& backend,
                             const std::atomic<bool>* stop) {
  const TraceMeta& meta = trace.meta();
  const std::size_t Qn = spec.quantizers.size(), Kn = spec.bits.size();
  // The quantizers, one per (quantizer, bit width).
  std::vector<std::vector<std::unique_ptr<KeyQuantizer>>> qs(Qn);
  for (std::size_t q = 0; q < Qn; ++q)
    for (const int b : spec.bits) {
      MethodParams p = spec.quantizers[q].params;
      p["bits"] = std::to_string(b);
      qs[q].push_back(make_key_quantizer(spec.quantizers[q].name, p));
    }
  std::vector<HeadMeasure> heads;
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      throw_if_cancelled(stop);
      const HeadData head = trace.head(l, h);
      HeadMeasure m;
      m.layer = l, m.kv_head = h;
      const std::vector<std::uint8_t> all(static_cast<std::size_t>(head.keys.rows()), 1);
      double on2 = 0;
      surrogate_abs_cost(head.keys, head.values, observation_queries(head), head.keys, all, &on2);
      const TokenWeights w = token_weights(head.keys, head.values, observation_queries(head));
      m.weight = on2 > 0 ? w.a.sum() / on2 : 0.0;
      for (std::size_t q = 0; q < Qn; ++q) {
        std::vector<double> nz, su, er, cb, tb;
        for (std::size_t k = 0; k < Kn; ++k) {
          QuantizedHeadKeys qk;
          try {
            qk = qs[q][k]->quantize(head, meta.rope);
          } catch (const InputError& e) {
            throw InputError(spec.quantizers[q].where + ": quantizer '" + spec.quantizers[q].label + "' at " +
                             std::to_string(spec.bits[k]) + " bits: " + e.what());
          }
          const Rate r = qk.rate();
          nz.push_back(mean_logit_noise(head.keys, qk.keys, observation_queries(head)));
          su.push_back(on2 > 0 ? surrogate_abs_cost(head.keys, head.values, observation_queries(head), qk.keys, all, nullptr) / on2 : 0.0);
          er.push_back(meta.decode_steps > 0 ? evaluate_decode_steps(head, qk.keys, all, backend).rel_error
                                             : obs_error(head, qk.keys, backend));
          cb.push_back(r.code_bits), tb.push_back(r.total_bits);
        }
        std::vector<double> bx(spec.bits.begin(), spec.bits.end());
        NoiseFit fit;
        bool ok = true;
        try {
          fit = fit_noise(bx, nz);
        } catch (const InputError&) {
          ok = false;  // noise 0 at some width: no model for this head
        }
        m.noise.push_back(nz), m.surrogate.push_back(su), m.error.push_back(er);
        m.code_bits.push_back(cb), m.total_bits.push_back(tb);
        m.fit.push_back(fit), m.fit_ok.push_back(ok && fit.beta > 0 && std::isfinite(fit.alpha));
      }
      heads.push_back(std::move(m));
    }

  nlohmann::json jh = nlohmann::json::array();
  for (const HeadMeasure& m : heads) {
    nlohmann::json per = nlohmann::json::object();
    for (std::size_t q = 0; q < Qn; ++q)
      per[spec.quantizers[q].label] = {{"alpha", finite_or_null(m.fit_ok[q] ? m.fit[q].alpha : kNaN)},
                                       {"beta", finite_or_null(m.fit_ok[q] ? m.fit[q].beta : kNaN)},
                                       {"residual", finite_or_null(m.fit_ok[q] ? m.fit[q].residual : kNaN)},
                                       {"noise", m.noise[q]},
                                       {"surrogate", m.surrogate[q]},
                                       {"error", m.error[q]},
                                       {"code_bits", m.code_bits[q]},
                                       {"total_bits", m.total_bits[q]}};
    jh.push_back({{"layer", m.layer}, {"kv_head", m.kv_head}, {"weight", m.weight}, {"quantizers", per}});
  }

  // Allocations.
  const std::size_t H = heads.size();
  auto index_of_bits = [&](int b) {
    for (std::size_t k = 0; k < Kn; ++k)
      if (spec.bits[k] == b) return k;
    return Kn;
  };
  auto evaluate = [&](const std::vector<int>& b, std::size_t y, nlohmann::json row) {
    double err = 0, sur = 0, pred = 0, bits = 0;
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t k = index_of_bits(b[h]);
      err += heads[h].error[y][k], sur += heads[h].surrogate[y][k], bits += b[h];
      pred += heads[h].fit_ok[y] ? heads[h].weight * heads[h].fit[y](b[h]) : kNaN;
    }
    row["actual"] = spec.quantizers[y].label;
    row["bits"] = b;
    row["mean_bits"] = bits / static_cast<double>(H);
    row["err"] = finite_or_null(err / static_cast<double>(H));
    row["surrogate"] = finite_or_null(sur / static_cast<double>(H));
    row["predicted"] = finite_or_null(pred / static_cast<double>(H));
    return row;
  };
  nlohmann::json allocs = nlohmann::json::array();
  for (const double B : spec.budgets) {
    const int total = static_cast<int>(std::floor(B * static_cast<double>(H) + 1e-9));
    // One allocation per model X (Y-independent), evaluated under every actual Y.
    for (std::size_t x = 0; x < Qn; ++x) {
      std::vector<std::vector<double>> cost(H, std::vector<double>(Kn));
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t k = 0; k < Kn; ++k)
          cost[h][k] = heads[h].fit_ok[x] ? heads[h].weight * heads[h].fit[x](spec.bits[k])
                                          : std::numeric_limits<double>::infinity();
      const std::vector<int> b = allocate_bits_exact(cost, spec.bits, total);
      if (b.empty()) continue;
      for (std::size_t y = 0; y < Qn; ++y) allocs.push_back(evaluate(b, y, {{"budget", B}, {"model", spec.quantizers[x].label}}));
    }
    for (std::size_t y = 0; y < Qn; ++y) {
      allocs.push_back(evaluate(std::vector<int>(H, static_cast<int>(B)), y, {{"budget", B}, {"model", "uniform"}}));
      std::vector<std::vector<double>> cost(H, std::vector<double>(Kn));
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t k = 0; k < Kn; ++k) cost[h][k] = heads[h].surrogate[y][k];
      const std::vector<int> b = allocate_bits_exact(cost, spec.bits, total);
      if (!b.empty()) allocs.push_back(evaluate(b, y, {{"budget", B}, {"model", "measured"}}));
    }
  }
  std::vector<std::string> labels;
  for (const auto& q : spec.quantizers) labels.push_back(q.label);
  return {{"bits", spec.bits}, {"quantizers", labels}, {"heads", jh}, {"allocations", allocs}};
}

namespace {

// The summary.md section: beta per quantizer, then per budget the model x actual error table.
std::string mismatch_summary(const MismatchSpec& spec, const std::vector<std::string>& labels,
                             const std::vector<std::string>& models, const nlohmann::json& beta_rows,
                             const std::function<double(double, const std::string&, const std::string&)>& mean_err) {
  std::ostringstream s;
  s << "\n## Distortion-model mismatch\n\n"
    << "Per head and quantizer, the mean logit noise n_h(b) = mean_t mean_q (q.(k^_t - k_t))^2 / d on the observation "
       "queries at b = ";
  for (std::size_t i = 0; i < spec.bits.size(); ++i) s << (i ? ", " : "") << spec.bits[i];
  s << " bits, fitted as alpha beta^(-b) (least squares on log n).\n\n"
    << "| quantizer | heads | median beta | IQR of beta | median fit residual (RMS of log n) |\n|---|---|---|---|---|\n";
  // A number not defined is "n/a" in a table and a sentence below it says why (never "nan").
  const auto num = [](double v, const char* fmt) { return format_or_nan(v, fmt, "n/a"); };
  const std::string why_no_fit =
      "its measured logit noise is 0 (or not finite) at the bit widths measured, so there is nothing to fit: no key "
      "was quantized (KIVI keeps the last T mod R keys of a T-token context in full precision, R = 128 by default, so a "
      "context shorter than its residual window leaves every key exact)";
  std::vector<std::string> unfitted;
  for (const auto& r : beta_rows) {
    s << "| " << r["quantizer"].get<std::string>() << " | " << r["heads"] << " | "
      << num(double_or_nan(r, "beta_median"), "%.3f") << " | [" << num(double_or_nan(r, "beta_q25"), "%.3f") << ", "
      << num(double_or_nan(r, "beta_q75"), "%.3f") << "] | " << num(double_or_nan(r, "fit_residual_median"), "%.3f")
      << " |\n";
    if (!std::isfinite(double_or_nan(r, "beta_median"))) unfitted.push_back(r["quantizer"].get<std::string>());
  }
  for (const auto& q : unfitted) s << "\n" << q << ": beta not defined, because " << why_no_fit << ".\n";
  s << "\n(beta = 4 is the textbook 6 dB per bit: each bit divides the noise by 4.)\n";
  for (const double B : spec.budgets) {
    s << "\nAt B = " << format_or_nan(B)
      << " bits per head (mean), per-head bits chosen exactly with the model of the row's quantizer "
      << "(min sum_h w_h alpha_h beta_h^(-b_h)), applied to the column's quantizer; recomputed error (decode queries) "
         "relative to uniform B-bit quantization with the column's quantizer (< 1: better than uniform); "
         "`measured` minimises the column quantizer's measured surrogate directly:\n\n| model \\ actual |";
    for (const auto& y : labels) s << ' ' << y << " |";
    s << "\n|---|";
    for (std::size_t i = 0; i < labels.size(); ++i) s << "---|";
    s << '\n';
    bool undefined_cell = false;
    for (const auto& m : models) {
      if (m == "uniform") continue;
      s << "| " << m << " |";
      for (const auto& y : labels) {
        const double e = mean_err(B, m, y), u = mean_err(B, "uniform", y);
        const double ratio = u > 0 ? e / u : std::nan("");
        undefined_cell = undefined_cell || !std::isfinite(ratio);
        s << ' ' << num(ratio, "%.3f") << (m == y ? " (matched)" : "") << " |";
      }
      s << '\n';
    }
    if (undefined_cell)
      s << "\nn/a: not defined, because the column's uniform error is 0 or the row's model could not be fitted "
           "(below).\n\n";
    int undefined = 0;
    for (const auto& y : labels) {
      const double u = mean_err(B, "uniform", y), mat = mean_err(B, y, y);
      if (!(u > 0) || !std::isfinite(u) || !std::isfinite(mat)) {
        ++undefined;
        s << "- " << y << ", B = " << format_or_nan(B) << ": not defined, because ";
        if (u == 0)
          s << "uniform " << format_or_nan(B) << "-bit quantization with " << y
            << " has recomputed error 0 on these cells: no key was quantized (KIVI keeps the last T mod R keys of a "
               "T-token context in full precision, R = 128 by default; a context shorter than that window leaves every "
               "key exact), so there is no error to allocate or compare.\n";
        else if (!std::isfinite(u))
          s << "no uniform " << format_or_nan(B) << "-bit allocation with " << y << " was computed.\n";
        else
          s << "no allocation was made with " << y << "'s model: " << why_no_fit << ".\n";
        continue;
      }
      double worst = -1;
      std::string wx;
      for (const auto& x : labels) {
        if (x == y) continue;
        const double e = mean_err(B, x, y);
        if (std::isfinite(e) && mat > 0 && e / mat > worst) worst = e / mat, wx = x;
      }
      s << "- " << y << ", B = " << format_or_nan(B) << ": uniform error " << format_or_nan(u, "%.4g")
        << ", matched allocation " << format_or_nan(mat, "%.4g") << " (" << format_or_nan(mat / u, "%.3f")
        << " x uniform)";
      if (!wx.empty())
        s << "; the worst mismatched model is " << wx << "'s: " << format_or_nan(mean_err(B, wx, y), "%.4g") << " ("
          << format_or_nan(worst, "%.3f") << " x matched, " << format_or_nan(mean_err(B, wx, y) / u, "%.3f")
          << " x uniform)";
      s << ".\n";
    }
    int beats = 0, best = 0;
    for (const auto& y : labels) {
      const double u = mean_err(B, "uniform", y), mat = mean_err(B, y, y);
      double least = INFINITY;
      for (const auto& x : labels)
        if (const double e = mean_err(B, x, y); std::isfinite(e)) least = std::min(least, e);
      beats += mat < u ? 1 : 0;
      best += mat <= least ? 1 : 0;
    }
    s << "- At B = " << format_or_nan(B) << " the matched model beats uniform for " << beats << " of " << labels.size()
      << " quantizers and gives the least recomputed error of the " << labels.size() << " models for " << best << " of "
      << labels.size();
    if (undefined > 0) s << " (not defined for " << undefined << ", above)";
    s << " (the fitted models optimise the local surrogate, not the recomputed error).\n";
  }
  return s.str();
}

}  // namespace

std::string write_mismatch_tables(const Scenario&, const MismatchSpec& spec, const std::vector<nlohmann::json>& cells,
                                  const std::string& dir) {
  std::vector<std::string> labels;
  for (const auto& q : spec.quantizers) labels.push_back(q.label);

  // ---- beta per quantizer (all heads of all cells) and per-head fits
  std::vector<std::string> fits_header = {"cell", "layer", "kv_head", "quantizer", "alpha", "beta", "residual", "weight"};
  for (int b : spec.bits) fits_header.push_back("noise_b" + std::to_string(b));
  for (int b : spec.bits) fits_header.push_back("err_b" + std::to_string(b));
  CsvWriter fc(fits_header);
  std::map<std::string, std::vector<double>> betas, alphas, residuals;
  for (const auto& c : cells) {
    if (!c.contains("mismatch")) continue;
    for (const auto& h : c["mismatch"]["heads"])
      for (const auto& label : labels) {
        const auto& q = h["quantizers"][label];
        const double beta = double_or_nan(q, "beta"), alpha = double_or_nan(q, "alpha"),
                     res = double_or_nan(q, "residual");
        if (std::isfinite(beta)) betas[label].push_back(beta), alphas[label].push_back(alpha), residuals[label].push_back(res);
        fc.row() << c["id"].get<std::string>() << h["layer"].get<int>() << h["kv_head"].get<int>() << label
                 << format_or_nan(alpha) << format_or_nan(beta) << format_or_nan(res)
                 << format_or_nan(double_or_nan(h, "weight"));
        // One column per bit width of the scenario: a value the cell lacks is not defined (nan).
        for (const char* key : {"noise", "error"}) {
          const nlohmann::json v = q.is_object() && q.contains(key) ? q[key] : nlohmann::json();
          for (std::size_t i = 0; i < spec.bits.size(); ++i)
            fc << format_or_nan(v.is_array() && i < v.size() && v[i].is_number() ? v[i].get<double>() : kNaN);
        }
      }
  }
  CsvWriter bc({"quantizer", "heads", "beta_median", "beta_q25", "beta_q75", "alpha_median", "fit_residual_median"});
  nlohmann::json beta_rows = nlohmann::json::array();
  for (const auto& label : labels) {
    const auto& v = betas[label];
    const double med = quantile_or_nan(v, 0.5), q25 = quantile_or_nan(v, 0.25), q75 = quantile_or_nan(v, 0.75);
    const double am = quantile_or_nan(alphas[label], 0.5), rm = quantile_or_nan(residuals[label], 0.5);
    bc.row() << label << v.size() << format_or_nan(med) << format_or_nan(q25) << format_or_nan(q75) << format_or_nan(am)
             << format_or_nan(rm);
    beta_rows.push_back({{"quantizer", label},
                         {"heads", v.size()},
                         {"beta_median", finite_or_null(med)},
                         {"beta_q25", finite_or_null(q25)},
                         {"beta_q75", finite_or_null(q75)},
                         {"alpha_median", finite_or_null(am)},
                         {"fit_residual_median", finite_or_null(rm)},
                         {"betas", v}});
  }
  write_file_atomically(dir + "/mismatch_fits.csv", fc.text());
  write_file_atomically(dir + "/mismatch_beta.csv", bc.text());
  write_file_atomically(dir + "/mismatch_beta.json", nlohmann::json({{"bits", spec.bits}, {"rows", beta_rows}}).dump(1) + "\n");

  // ---- allocations: mean over cells per (budget, model, actual)
  struct Acc {
    double err = 0, sur = 0, pred = 0, bits = 0;
    int n = 0;
  };
  std::map<std::tuple<double, std::string, std::string>, Acc> acc;
  for (const auto& c : cells) {
    if (!c.contains("mismatch")) continue;
    for (const auto& a : c["mismatch"]["allocations"]) {
      Acc& x = acc[{a["budget"].get<double>(), a["model"].get<std::string>(), a["actual"].get<std::string>()}];
      x.err += double_or_nan(a, "err"), x.sur += double_or_nan(a, "surrogate");
      x.pred += double_or_nan(a, "predicted"), x.bits += double_or_nan(a, "mean_bits");
      ++x.n;
    }
  }
  std::vector<std::string> models = labels;
  models.push_back("measured");
  models.push_back("uniform");
  auto mean_err = [&](double B, const std::string& m, const std::string& y) {
    auto it = acc.find({B, m, y});
    return it == acc.end() || it->second.n == 0 ? kNaN : it->second.err / it->second.n;
  };
  CsvWriter mc({"budget", "actual", "model", "matched", "err", "ratio_to_uniform", "ratio_to_matched", "surrogate",
                "predicted_by_actual_model", "mean_bits", "cells"});
  nlohmann::json rows = nlohmann::json::array();
  for (const double B : spec.budgets)
    for (const auto& y : labels)
      for (const auto& m : models) {
        auto it = acc.find({B, m, y});
        if (it == acc.end() || it->second.n == 0) continue;
        const Acc& a = it->second;
        const double err = a.err / a.n, uni = mean_err(B, "uniform", y), mat = mean_err(B, y, y);
        const double ru = uni > 0 ? err / uni : kNaN, rm = mat > 0 ? err / mat : kNaN;
        mc.row() << format_or_nan(B) << y << m << (m == y) << format_or_nan(err) << format_or_nan(ru) << format_or_nan(rm)
                 << format_or_nan(a.sur / a.n) << format_or_nan(a.pred / a.n) << format_or_nan(a.bits / a.n) << a.n;
        rows.push_back({{"budget", B},
                        {"actual", y},
                        {"model", m},
                        {"matched", m == y},
                        {"err", finite_or_null(err)},
                        {"ratio_to_uniform", finite_or_null(ru)},
                        {"ratio_to_matched", finite_or_null(rm)},
                        {"surrogate", finite_or_null(a.sur / a.n)},
                        {"predicted_by_actual_model", finite_or_null(a.pred / a.n)},
                        {"mean_bits", a.bits / a.n},
                        {"cells", a.n}});
      }
  write_file_atomically(dir + "/mismatch.csv", mc.text());
  write_file_atomically(dir + "/mismatch.json",
                        nlohmann::json({{"budgets", spec.budgets}, {"quantizers", labels}, {"rows", rows}}).dump(1) + "\n");

  return mismatch_summary(spec, labels, models, beta_rows, mean_err);
}

// ---- the analysis (scenarios/scenario/analysis.hpp) ----------------------------------------------------

namespace {

std::shared_ptr<const Analysis> read_mismatch_section(const YAML::Node& root, const YamlReader& c, const Scenario& s) {
  const YAML::Node mm = root["mismatch"];
  if (!mm) return nullptr;
  MismatchSpec spec;
  c.keys(mm, "mismatch", {"quantizers", "bits", "budgets"});
  if (!mm["quantizers"]) c.fail(mm, "key 'mismatch' needs 'quantizers' (e.g. [kivi, token, quarot, turboquant, kvquant]).");
  spec.quantizers = parse_method_specs(mm["quantizers"], c.file(), "mismatch.quantizers", s.ladder, true);
  if (mm["bits"]) {
    spec.bits.clear();
    for (const auto& x : c.list(mm["bits"], "mismatch.bits")) {
      const double v = c.num(x, "mismatch.bits", 1, 8);
      if (v != std::floor(v)) c.fail(x, "key 'mismatch.bits' must be integers, not " + x.as<std::string>() + ".");
      if (!spec.bits.empty() && v <= spec.bits.back())
        c.fail(x, "key 'mismatch.bits' must be increasing; " + x.as<std::string>() + " follows " +
                      std::to_string(spec.bits.back()) + ".");
      spec.bits.push_back(static_cast<int>(v));
    }
    if (spec.bits.size() < 2) c.fail(mm["bits"], "key 'mismatch.bits' needs at least two bit widths (the fit of n(b) = alpha beta^(-b)).");
  }
  for (const MethodSpec& q : spec.quantizers)
    for (const int b : spec.bits) {
      MethodParams p = q.params;
      p["bits"] = std::to_string(b);
      try {
        make_key_quantizer(q.name, p);
      } catch (const InputError& err) {
        throw InputError(q.where + ": key 'mismatch.quantizers', quantizer '" + q.label + "' at " + std::to_string(b) +
                         " bits: " + err.what());
      }
    }
  std::string choices;
  for (int b : spec.bits) choices += (choices.empty() ? "" : ", ") + std::to_string(b);
  if (mm["budgets"]) {
    spec.budgets.clear();
    for (const auto& x : c.list(mm["budgets"], "mismatch.budgets")) spec.budgets.push_back(c.num(x, "mismatch.budgets", 1, 8));
  }
  for (std::size_t i = 0; i < spec.budgets.size(); ++i) {
    bool ok = false;
    for (int b : spec.bits) ok = ok || b == spec.budgets[i];
    if (!ok)
      c.fail(mm["budgets"] ? mm["budgets"] : mm,
             "key 'mismatch.budgets' has " + format_number(spec.budgets[i]) +
                 "; each budget must be one of mismatch.bits (" + choices + "), so that the uniform allocation exists.");
  }
  return std::make_shared<MismatchAnalysis>(spec);
}

std::vector<NamedFigure> figures_mismatch(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/tables/mismatch_beta.json")) return {};
  std::vector<NamedFigure> out;
  const nlohmann::json beta = read_table_json(dir + "/tables/mismatch_beta.json");
  std::vector<std::string> names;
  for (const auto& r : beta.at("rows")) names.push_back(r.at("quantizer").get<std::string>());
  {
    Figure f;
    f.title = "Fitted noise model n_h(b) = alpha beta^(-b): beta per head and quantizer";
    f.xlabel = "key quantizer";
    f.xticks = category_ticks(names);
    f.ylabel = "beta (noise divided per added bit)";
    double lo = 4, hi = 4;
    int i = 0;
    for (const auto& r : beta.at("rows")) {
      ++i;
      const Rgb c = palette(i - 1);
      Series pts{"", faded(c, 110), Style::Points, {}, {}, 5};
      const std::vector<double> bs = r.at("betas").get<std::vector<double>>();
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
        f.series.push_back({r.at("quantizer").get<std::string>() + ": median " + format_label(med, "%.2f") + ", IQR [" +
                                format_label(q25, "%.2f") + ", " + format_label(q75, "%.2f") + "]",
                            c, Style::Squares, {double(i)}, {med}, 13});
    }
    f.series.push_back({"beta = 4 (6 dB per bit)", Rgb{120, 120, 120}, Style::Dashed, {0, double(names.size()) + 1}, {4, 4}, 1});
    f.xmin = 0.4, f.xmax = static_cast<double>(names.size()) + 0.6;
    const double pad = std::max(0.2, 0.08 * (hi - lo));
    f.ymin = std::max(0.0, lo - pad), f.ymax = hi + pad;
    out.push_back({std::string("mismatch_beta"), f});
  }
  const nlohmann::json mm = read_table_json(dir + "/tables/mismatch.json");
  for (const auto& Bj : mm.at("budgets")) {
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
    for (const auto& r : mm.at("rows")) {
      if (double_or_nan(r, "budget") != B || r.at("model") == "uniform") continue;
      const double y = double_or_nan(r, "ratio_to_uniform");
      if (!(y > 0)) continue;
      const auto yi = std::find(names.begin(), names.end(), r.at("actual").get<std::string>()) - names.begin();
      const auto mj = std::find(models.begin(), models.end(), r.at("model").get<std::string>()) - models.begin();
      if (mj >= static_cast<long>(models.size())) continue;
      const double x = static_cast<double>(yi) + 1 + 0.5 * ((static_cast<double>(mj) + 0.5) / static_cast<double>(models.size()) - 0.5);
      per_model[static_cast<std::size_t>(mj)].x.push_back(x), per_model[static_cast<std::size_t>(mj)].y.push_back(y);
      if (r.at("matched").get<bool>()) matched.x.push_back(x), matched.y.push_back(y);
      lo = std::min(lo, y), hi = std::max(hi, y);
    }
    f.series.push_back(matched);
    for (auto& s : per_model) f.series.push_back(s);
    f.series.push_back({"uniform B bits (= 1)", Rgb{120, 120, 120}, Style::Dashed, {0, double(names.size()) + 1}, {1, 1}, 1});
    f.xmin = 0.4, f.xmax = static_cast<double>(names.size()) + 0.6;
    f.ymin = std::max(0.0, lo - 0.08 * (hi - lo)), f.ymax = hi + 0.05 * (hi - lo);
    char base[64];
    std::snprintf(base, sizeof base, "mismatch_error_B%g", B);
    out.push_back({base, f});
  }
  return out;
}


}  // namespace

void MismatchAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  cell["mismatch"] = mismatch_cell(ctx.scenario, spec, ctx.trace, ctx.backend, ctx.stop);
}

std::string MismatchAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                           const std::string& dir) const {
  return write_mismatch_tables(sc, spec, cells, dir);
}

AnalysisType MismatchAnalysis::type() {
  return {"mismatch", "per-head bit allocation with one quantizer's noise model, evaluated with another's",
          {"mismatch"}, read_mismatch_section, figures_mismatch};
}

}  // namespace tierlab
