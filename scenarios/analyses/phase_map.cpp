// The dominance phase map over logit scale x budget (phase_map.hpp).
#include "scenarios/analyses/phase_map.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>

#include "scenarios/figures/tables_io.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"

namespace tierlab {

namespace {


std::shared_ptr<const Analysis> read_phase_map_section(const YAML::Node&, const YamlReader&, const Scenario& s) {
  if (!s.sweeps_logit_scales) return nullptr;
  return std::make_shared<PhaseMapAnalysis>();
}

std::vector<NamedFigure> figures_phase_map(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<NamedFigure> out;
  if (!fs::exists(dir + "/tables/phase.json")) return out;
  const nlohmann::json ph = read_table_json(dir + "/tables/phase.json");
  out.push_back({std::string("phase_map"), phase_map_figure(ph)});
  return out;
}

}  // namespace

Figure phase_map_figure(const nlohmann::json& ph) {
  const nlohmann::json rows = ph.value("rows", nlohmann::json::array());
  bool xlog = !rows.empty();
  for (const auto& r : rows) xlog = xlog && double_or_nan(r, "logit_scale") > 0;
  Figure f;
  f.title = "Dominance phase map: winning family by exact recomputation";
  f.xlabel = std::string("logit scale (multiplier of query norms") + (xlog ? ", log)" : ")");
  f.ylabel = "budget B (bits per key element)";
  const PhaseCells cells = phase_cells(rows, "logit_scale", xlog);
  f.xlog = xlog;
  f.series = cells.present();
  f.labels = cells.e_share;
  f.note = "Colour: the family that wins the most heads of the cell (ties grey); text: the share of heads won by "
           "eviction. Solid line: where E starts winning, recomputed; dashed: the surrogate's boundary.";
  double xlo = cells.xlo, xhi = cells.xhi, ylo = cells.ylo, yhi = cells.yhi;
  if (!std::isfinite(xlo)) xlo = xlog ? 0.5 : 0, xhi = xlog ? 2 : 1, ylo = 0, yhi = 1;
  const Series rb = recomputed_phase_boundary(rows, "logit_scale", xlog);
  if (!rb.x.empty()) f.series.push_back(rb);
  const double bnd = double_or_nan(ph, "boundary_logit_scale");
  if (std::isfinite(bnd))
    f.series.push_back({"surrogate boundary: median R_h(2) = 1 (logit scale " + format_label(bnd, "%.3g") + ")",
                        Rgb{0, 0, 0}, Style::Dashed, {bnd, bnd}, {ylo, yhi}, 1});
  f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
  return f;
}

std::string PhaseMapAnalysis::write_tables(const Scenario& /*sc*/, const std::vector<nlohmann::json>& cells,
                                           const std::string& dir) const {
  nlohmann::json phase;
  CsvWriter pc({"logit_scale", "budget", "winner", "share_Q", "share_E", "share_M", "mean_A", "R2_median"});
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
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::pair<double, double>> r2med;  // scale, median R2
  for (const auto& [ls, v] : r2_by_scale) r2med.push_back({ls, quantile_or_nan(v, 0.5)});
  for (const auto& [key, w] : cellwins) {
    const int tot = w[0] + w[1] + w[2];
    const std::string win = plurality_winner(w[0], w[1], w[2]);  // "tie" as the figures draw it
    double r2 = kNaN;
    for (const auto& [s, m] : r2med)
      if (s == key.first) r2 = m;
    const auto& m = meanA[key];
    const double ma = m.second ? m.first / m.second : kNaN;
    pc.row() << format_or_nan(key.first) << format_or_nan(key.second) << (tot ? win : "")
             << format_or_nan(tot ? double(w[0]) / tot : kNaN) << format_or_nan(tot ? double(w[1]) / tot : kNaN)
             << format_or_nan(tot ? double(w[2]) / tot : kNaN) << format_or_nan(ma) << format_or_nan(r2);
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
  write_file_atomically(dir + "/phase.csv", pc.text());
  write_file_atomically(dir + "/phase.json", phase.dump(1) + "\n");
  std::ostringstream s;
  s << "\n## Dominance phase map (logit scale x budget)\n\nWinner by exact recomputation (the family that wins the most heads; tie when two win as many), shares of heads won:\n\n";
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
  return s.str();
}

AnalysisType PhaseMapAnalysis::type() {
  return {"phase_map", "winning family per (logit scale, budget); the surrogate boundary median R_h(2) = 1", {},
          read_phase_map_section, figures_phase_map};
}

}  // namespace tierlab
