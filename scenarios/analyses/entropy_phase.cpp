// The phase map over attention entropy x budget (entropy_phase.hpp).
#include "scenarios/analyses/entropy_phase.hpp"
#include <filesystem>

#include "scenarios/figures/tables_io.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "model/base/error.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

namespace {


// First x where y crosses `level` along increasing x (linear interpolation); NaN if none.
double crossing(const std::vector<std::pair<double, double>>& xy, double level) {
  for (std::size_t i = 0; i + 1 < xy.size(); ++i) {
    const auto [x0, y0] = xy[i];
    const auto [x1, y1] = xy[i + 1];
    if (!std::isfinite(y0) || !std::isfinite(y1)) continue;
    if (y0 == level) return x0;
    if ((y0 - level) * (y1 - level) < 0) return x0 + (level - y0) * (x1 - x0) / (y1 - y0);
    if (y1 == level && i + 2 == xy.size()) return x1;
  }
  return kNaN;
}

}  // namespace

double mean_attention_entropy(const MatrixRM& keys, const CausalQueries& qs) {
  const MatrixRM& queries = qs.queries();
  const Eigen::Index n = queries.rows();
  Eigen::Index T = keys.rows();
  if (T == 0 || n == 0) return kNaN;
  if (keys.cols() != queries.cols())
    throw InputError("attention entropy: keys have " + std::to_string(keys.cols()) + " columns and queries " +
                     std::to_string(queries.cols()) + "; they must match.");
  const MatrixRMd k = keys.cast<double>(), q = queries.cast<double>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(keys.cols()));
  double total = 0;
  Eigen::VectorXd s(T);
  for (Eigen::Index r = 0; r < n; ++r) {
    T = qs.visible.at(static_cast<std::size_t>(r));  // the causal mask: tokens 0..T-1
    s.head(T).noalias() = k.topRows(T) * q.row(r).transpose();
    s.head(T) *= scale;
    const double mx = s.head(T).maxCoeff();
    double z = 0, zs = 0;
    for (Eigen::Index t = 0; t < T; ++t) {
      const double e = std::exp(s[t] - mx);
      z += e;
      zs += e * (s[t] - mx);
    }
    // H = -sum p ln p with p = e / z, ln p = (s - mx) - ln z:  H = ln z - zs / z.
    total += std::log(z) - zs / z;
  }
  return total / static_cast<double>(n);
}

nlohmann::json head_entropies(const TraceReader& trace) {
  const TraceMeta& m = trace.meta();
  nlohmann::json out = nlohmann::json::array();
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      const HeadData head = trace.head(l, h);
      out.push_back(finite_or_null(mean_attention_entropy(head.keys, observation_queries(head))));
    }
  return out;
}

std::vector<int> equal_count_bins(const std::vector<double>& x, int bins) {
  std::vector<std::size_t> idx(x.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<int> out(x.size(), 0);
  const std::size_t n = x.size(), nb = static_cast<std::size_t>(std::max(bins, 1));
  for (std::size_t r = 0; r < n; ++r) out[idx[r]] = static_cast<int>(r * nb / n);
  return out;
}

namespace {

// The summary.md section: the bins x budgets table and the two boundaries.
std::string entropy_phase_summary(std::size_t n_heads, double lo, double hi, int nb, const nlohmann::json& rows,
                                  const std::vector<double>& budgets, double boundary, const nlohmann::json& recomputed) {
  std::ostringstream s;
  s << "\n## Dominance phase map (attention entropy x budget)\n\n"
    << n_heads << " heads binned by their mean attention entropy H on the observation queries ("
    << format_or_nan(lo, "%.2f") << " to " << format_or_nan(hi, "%.2f") << " nats) into " << nb
    << " bins of equal head counts. "
    << "Winner by exact recomputation (most heads in the bin), with the shares of heads won by E and M:\n\n"
    << "| H range (nats) | median H | heads |";
  for (double B : budgets) s << " B = " << format_or_nan(B) << " |";
  s << " median R(2) |\n|---|---|---|";
  for (std::size_t k = 0; k < budgets.size(); ++k) s << "---|";
  s << "---|\n";
  for (std::size_t i = 0; i < rows.size(); i += budgets.size()) {
    const auto& r = rows[i];
    s << "| " << format_or_nan(double_or_nan(r, "entropy_lo"), "%.2f") << "-"
      << format_or_nan(double_or_nan(r, "entropy_hi"), "%.2f") << " | "
      << format_or_nan(double_or_nan(r, "entropy_median"), "%.2f") << " | " << r["heads"] << " |";
    for (std::size_t k = 0; k < budgets.size(); ++k) {
      const auto& rk = rows[i + k];
      s << ' ' << rk["winner"].get<std::string>() << " (E " << format_or_nan(100 * double_or_nan(rk, "share_E"), "%.0f")
        << "%, M " << format_or_nan(100 * double_or_nan(rk, "share_M"), "%.0f") << "%) |";
    }
    s << ' ' << format_or_nan(double_or_nan(r, "R2_median"), "%.3f") << " |\n";
  }
  if (std::isfinite(boundary))
    s << "\nThe surrogate's boundary (median R_h(2) = 1) lies at H = " << format_or_nan(boundary, "%.2f")
      << " nats: sharper heads (lower entropy) have their 2-bit tier dominated.";
  else
    s << "\nThe bins' median R_h(2) does not cross 1 within the measured entropies (no surrogate boundary in range).";
  s << " By exact recomputation, the share of heads won by eviction crosses 1/2 at";
  bool any = false;
  for (const auto& r : recomputed) {
    const double e = double_or_nan(r, "entropy");
    if (!std::isfinite(e)) continue;
    s << (any ? "," : "") << " H = " << format_or_nan(e, "%.2f") << " (B = " << format_or_nan(r["budget"].get<double>())
      << ")";
    any = true;
  }
  if (!any) s << " no entropy within range at any budget";
  s << ".\n";
  return s.str();
}

}  // namespace

std::string write_entropy_phase_tables(const Scenario&, int bins, const std::vector<nlohmann::json>& cells,
                                       const std::string& tables_dir) {
  struct HeadRow {
    std::string cell;
    int layer, kv_head;
    double H, R2;
    std::vector<std::string> winner;  // per budget
  };
  std::vector<HeadRow> heads;
  std::vector<double> budgets;
  for (const auto& c : cells) {
    if (!c.contains("entropy")) continue;
    const auto& H = c["entropy"];
    if (budgets.empty())
      for (const auto& b : c["budgets"]) budgets.push_back(b["budget"].get<double>());
    for (std::size_t i = 0; i < H.size(); ++i) {
      if (H[i].is_null()) continue;
      HeadRow r;
      r.cell = c["id"].get<std::string>();
      r.H = H[i].get<double>();
      r.R2 = i < c["R2"].size() && !c["R2"][i].is_null() ? c["R2"][i].get<double>() : kNaN;
      r.layer = r.kv_head = 0;
      for (const auto& b : c["budgets"]) {
        const auto& hs = b["heads"];
        if (i < hs.size()) {
          r.layer = hs[i]["layer"].get<int>(), r.kv_head = hs[i]["kv_head"].get<int>();
          r.winner.push_back(hs[i]["winner"].get<std::string>());
        } else {
          r.winner.push_back("");
        }
      }
      heads.push_back(std::move(r));
    }
  }
  if (heads.empty()) return "";
  double lo = heads.front().H, hi = heads.front().H;
  for (const auto& h : heads) lo = std::min(lo, h.H), hi = std::max(hi, h.H);
  const int nb = std::min<int>(bins, static_cast<int>(heads.size()));
  std::vector<int> bin_of;
  {
    std::vector<double> hv;
    for (const auto& h : heads) hv.push_back(h.H);
    bin_of = equal_count_bins(hv, nb);
  }

  CsvWriter hc({"cell", "layer", "kv_head", "entropy", "bin", "R2", "budget", "winner"});
  for (std::size_t i = 0; i < heads.size(); ++i)
    for (std::size_t b = 0; b < budgets.size(); ++b)
      hc.row() << heads[i].cell << heads[i].layer << heads[i].kv_head << format_or_nan(heads[i].H) << bin_of[i]
               << format_or_nan(heads[i].R2) << format_or_nan(budgets[b]) << heads[i].winner[b];
  write_file_atomically(tables_dir + "/phase_entropy_heads.csv", hc.text());

  // Per bin: entropies and R2 of its heads; per (bin, budget): family wins.
  std::map<int, std::vector<double>> bin_H, bin_R2;
  std::map<std::pair<int, std::size_t>, std::array<int, 3>> wins;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const HeadRow& h = heads[i];
    const int b = bin_of[i];
    bin_H[b].push_back(h.H);
    if (std::isfinite(h.R2)) bin_R2[b].push_back(h.R2);
    for (std::size_t k = 0; k < budgets.size(); ++k) {
      auto& w = wins[{b, k}];
      w[0] += h.winner[k] == "Q", w[1] += h.winner[k] == "E", w[2] += h.winner[k] == "M";
    }
  }
  CsvWriter pc({"bin", "entropy_lo", "entropy_hi", "entropy_median", "entropy_mean", "heads", "budget", "winner", "share_Q",
                "share_E", "share_M", "R2_median"});
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::pair<double, double>> r2_curve;                         // (mean H, median R2) per bin
  std::vector<std::vector<std::pair<double, double>>> e_curve(budgets.size());  // (mean H, share E) per budget
  for (const auto& [b, hv] : bin_H) {
    double mh = 0;
    for (double x : hv) mh += x;
    mh /= static_cast<double>(hv.size());
    const double md = median_or_nan(hv);
    const double r2 = bin_R2.count(b) ? median_or_nan(bin_R2[b]) : kNaN;
    r2_curve.push_back({md, r2});
    const double elo = *std::min_element(hv.begin(), hv.end()), ehi = *std::max_element(hv.begin(), hv.end());
    for (std::size_t k = 0; k < budgets.size(); ++k) {
      const auto& w = wins[{b, k}];
      const int tot = w[0] + w[1] + w[2];
      const std::string win = plurality_winner(w[0], w[1], w[2]);  // "tie" when two win as many heads
      auto share = [&](int i) { return tot ? static_cast<double>(w[static_cast<std::size_t>(i)]) / tot : kNaN; };
      e_curve[k].push_back({md, share(1)});
      pc.row() << b << format_or_nan(elo) << format_or_nan(ehi) << format_or_nan(md) << format_or_nan(mh) << hv.size()
               << format_or_nan(budgets[k]) << win << format_or_nan(share(0)) << format_or_nan(share(1))
               << format_or_nan(share(2)) << format_or_nan(r2);
      rows.push_back({{"bin", b},
                      {"entropy_lo", elo},
                      {"entropy_hi", ehi},
                      {"entropy_median", md},
                      {"entropy_mean", mh},
                      {"heads", hv.size()},
                      {"budget", budgets[k]},
                      {"winner", win},
                      {"share_Q", finite_or_null(share(0))},
                      {"share_E", finite_or_null(share(1))},
                      {"share_M", finite_or_null(share(2))},
                      {"R2_median", finite_or_null(r2)}});
    }
  }
  const double boundary = crossing(r2_curve, 1.0);
  nlohmann::json recomputed = nlohmann::json::array();
  for (std::size_t k = 0; k < budgets.size(); ++k)
    recomputed.push_back({{"budget", budgets[k]}, {"entropy", finite_or_null(crossing(e_curve[k], 0.5))}});
  nlohmann::json r2j = nlohmann::json::array();
  for (const auto& [x, y] : r2_curve) r2j.push_back({{"entropy_median", x}, {"R2_median", finite_or_null(y)}});
  const nlohmann::json table = {{"bins", nb},
                                {"entropy_min", lo},
                                {"entropy_max", hi},
                                {"heads", heads.size()},
                                {"query_set", "obs"},
                                {"rows", rows},
                                {"R2_median_by_bin", r2j},
                                {"boundary_entropy", finite_or_null(boundary)},
                                {"recomputed_boundary_E", recomputed}};
  write_file_atomically(tables_dir + "/phase_entropy.csv", pc.text());
  write_file_atomically(tables_dir + "/phase_entropy.json", table.dump(1) + "\n");

  return entropy_phase_summary(heads.size(), lo, hi, nb, rows, budgets, boundary, recomputed);
}

// ---- the analysis (scenarios/scenario/analysis.hpp) ----------------------------------------------------

namespace {

std::shared_ptr<const Analysis> read_entropy_phase_section(const YAML::Node& root, const YamlReader& c, const Scenario& s) {
  if (!root["entropy_bins"]) return s.sweeps_logit_scales ? std::make_shared<EntropyPhaseAnalysis>(8) : nullptr;
  return std::make_shared<EntropyPhaseAnalysis>(static_cast<int>(c.integer(root["entropy_bins"], "entropy_bins", 2, 40)));
}

std::vector<NamedFigure> figures_entropy_phase(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<NamedFigure> out;
  if (fs::exists(dir + "/tables/phase_entropy.json")) {
    const nlohmann::json ph = read_table_json(dir + "/tables/phase_entropy.json");
    Figure f;
    f.title = "Phase map over attention entropy: winning family by exact recomputation";
    bool xlog = !ph.at("rows").empty();
    for (const auto& r : ph.at("rows")) xlog = xlog && double_or_nan(r, "entropy_median") > 0;
    // Entropies crowd near 0 (sharp heads): a log axis when every bin's median is > 0.
    const PhaseCells cells = phase_cells(ph.at("rows"), "entropy_median", xlog);
    if (std::isfinite(cells.xlo)) {
      f.xlog = xlog;
      f.xlabel = std::string("median attention entropy of the bin's heads (nats, observation queries") +
                 (f.xlog ? ", log)" : ")");
      f.ylabel = "budget B (bits per key element)";
      f.xmin = cells.xlo, f.xmax = cells.xhi, f.ymin = cells.ylo, f.ymax = cells.yhi;
      f.series = cells.present();
      f.labels = cells.e_share;
      f.note = "Colour: the family that wins the most heads of the bin (ties grey); text: the share of heads won by "
               "eviction. Solid line: where E wins half the heads, recomputed; dashed: the surrogate's boundary.";
      // The recomputed boundary: per budget, the entropy where E's share of heads crosses 1/2.
      Series rb{"recomputed boundary: E wins half the heads (per budget)", Rgb{40, 40, 40}, Style::Line, {}, {}, 6};
      for (const auto& r : ph.value("recomputed_boundary_E", nlohmann::json::array()))
        if (const double x = double_or_nan(r, "entropy"); std::isfinite(x) && (!f.xlog || x > 0))
          rb.x.push_back(x), rb.y.push_back(double_or_nan(r, "budget"));
      if (!rb.x.empty()) f.series.push_back(rb);
      const double bnd = double_or_nan(ph, "boundary_entropy");
      if (std::isfinite(bnd) && (!f.xlog || bnd > 0))
        f.series.push_back({"surrogate boundary: median R_h(2) = 1 (H = " + format_label(bnd, "%.2f") + " nats)",
                            Rgb{0, 0, 0}, Style::Dashed, {bnd, bnd}, {f.ymin, f.ymax}, 1});
      else
        f.note += " No surrogate boundary: the median R_h(2) < 1 in every bin.";
      out.push_back({std::string("phase_map_entropy"), f});
    }
  }
  return out;
}

}  // namespace

void EntropyPhaseAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  cell["entropy"] = head_entropies(ctx.trace);
}

std::string EntropyPhaseAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                               const std::string& dir) const {
  return write_entropy_phase_tables(sc, bins, cells, dir);
}

AnalysisType EntropyPhaseAnalysis::type() {
  return {"entropy_phase", "winning family per (attention-entropy bin, budget); surrogate and recomputed boundaries",
          {"entropy_bins"}, read_entropy_phase_section, figures_entropy_phase};
}

}  // namespace tierlab
