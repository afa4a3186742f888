// The water-filling picture of one head (waterfill.hpp).
#include "scenarios/analyses/waterfill.hpp"

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
#include "model/base/error.hpp"
#include "model/surrogate.hpp"
#include "solvers/waterfill.hpp"

namespace tierlab {

namespace {

std::shared_ptr<const Analysis> read_waterfill_section(const YAML::Node& root, const YamlReader& c, const Scenario& s) {
  const YAML::Node wf = root["waterfill"];
  if (!wf) return nullptr;
  WaterfillSpec spec;
  c.keys(wf, "waterfill", {"cell", "layer", "kv_head", "budget"});
  spec.cell = s.cells.front().id;
  if (wf["cell"]) {
    spec.cell = c.str(wf["cell"], "waterfill.cell");
    std::string choices;
    bool found = false;
    for (const auto& cell : s.cells) found = found || cell.id == spec.cell, choices += (choices.empty() ? "" : ", ") + cell.id;
    if (!found) c.fail(wf["cell"], "key 'waterfill.cell' is '" + spec.cell + "', not a cell of this scenario; the cells are " + choices + ".");
  }
  if (wf["layer"]) spec.layer = static_cast<int>(c.integer(wf["layer"], "waterfill.layer", 0, 1023));
  if (wf["kv_head"]) spec.kv_head = static_cast<int>(c.integer(wf["kv_head"], "waterfill.kv_head", 0, 1023));
  if (wf["budget"]) spec.budget = c.num(wf["budget"], "waterfill.budget", 0.01, 16.0);
  return std::make_shared<WaterfillAnalysis>(spec);
}

std::vector<NamedFigure> figures_waterfill(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<NamedFigure> out;
  if (!fs::exists(dir + "/tables/waterfill.json")) return out;
  const nlohmann::json w = read_table_json(dir + "/tables/waterfill.json");
  const double theta = double_or_nan(w, "theta"), B = double_or_nan(w, "budget");
  const std::string head = w.at("cell").get<std::string>() + " L" + std::to_string(w.at("layer").get<int>()) + ".H" +
                           std::to_string(w.at("kv_head").get<int>());
  Series g{"g_t(0) = a_t alpha ln(beta): marginal return per bit at 0 bits", palette(0), Style::Points, {}, {}, 5};
  Series bits{"continuous bits b_t = log_beta(g_t(0) / theta)", palette(0), Style::Line, {}, {}, 4};
  double glo = INFINITY, ghi = 0, bhi = 0;
  const double n = static_cast<double>(w.at("rows").size());
  for (const auto& r : w.at("rows")) {
    const double x = double_or_nan(r, "rank"), g0 = double_or_nan(r, "g0"), b = double_or_nan(r, "bits");
    if (g0 > 0) g.x.push_back(x), g.y.push_back(g0), glo = std::min(glo, g0), ghi = std::max(ghi, g0);
    bits.x.push_back(x), bits.y.push_back(b), bhi = std::max(bhi, b);
  }
  Figure f1;
  f1.title = "Reverse water-filling, " + head + ": water level theta = " + format_label(theta, "%.3g");
  f1.xlabel = "token rank by weight a_t (1 = heaviest)";
  f1.ylabel = "marginal return per bit at 0 bits, g_t(0) (log)";
  if (theta > 0) glo = std::min(glo, theta), ghi = std::max(ghi, theta);
  f1.ylog = glo > 0 && ghi > glo;
  f1.ymin = f1.ylog ? glo / 3 : 0, f1.ymax = f1.ylog ? ghi * 3 : 1;
  f1.xmin = 0, f1.xmax = n + 1;
  f1.series = {g};
  if (theta > 0) f1.series.push_back({"water level theta (continuous: g_t(0) < theta gets 0 bits)", palette(3), Style::Dashed, {0, n + 1}, {theta, theta}, 1});
  out.push_back({std::string("waterfill_level"), f1});
  Figure f2;
  f2.title = "Bits per token after water-filling, " + head + ", B = " + format_label(B) + " bits per element";
  f2.xlabel = "token rank by weight a_t (1 = heaviest)";
  f2.ylabel = "bits per key element of the token";
  f2.series = {bits, {"budget B (mean bits)", palette(3), Style::Dashed, {0, n + 1}, {B, B}, 1}};
  f2.xmin = 0, f2.xmax = n + 1, f2.ymin = 0, f2.ymax = std::max(bhi, B) * 1.1 + 0.1;
  out.push_back({std::string("waterfill_bits"), f2});
  return out;
}

}  // namespace

void WaterfillAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& j) const {
  const Scenario& sc = ctx.scenario;
  const ScenarioCell& cell = ctx.cell;
  const TraceMeta& m = ctx.trace.meta();
  if (spec.cell != cell.id) return;
  const WaterfillSpec& w = spec;
  if (w.layer >= m.n_layers || w.kv_head >= m.n_kv_heads)
    throw InputError(sc.file + ": waterfill head L" + std::to_string(w.layer) + ".H" + std::to_string(w.kv_head) +
                     " is outside cell '" + cell.id + "' (" + std::to_string(m.n_layers) + " layers x " +
                     std::to_string(m.n_kv_heads) + " KV heads).");
  const HeadData head = ctx.trace.head(w.layer, w.kv_head);
  const RopeParams& rope = ctx.trace.meta().rope;
  const SurrogateCosts costs = surrogate_costs(head, rope, observation_queries(head), sc.ladder);
  const HeadNoiseModel fit = fit_head_noise(costs, ladder_rates(head, rope, sc.ladder, sc.rate_kind));
  if (!fit.fitted)
    throw InputError(sc.file + ": waterfill head L" + std::to_string(w.layer) + ".H" + std::to_string(w.kv_head) +
                     " of cell '" + cell.id + "': its noise model n_h(b) = alpha beta^(-b) cannot be fitted (" +
                     fit.note + ").");
  WaterfillProblem p;
  p.weights.assign(costs.weights.a.data(), costs.weights.a.data() + costs.weights.a.size());
  p.models = {DistortionModel{fit.alpha, fit.beta}};
  p.budget = w.budget;
  p.max_bits = 16.0;
  const ContinuousWaterfill cw = waterfill_continuous(p);
  j["waterfill"] = {{"layer", w.layer}, {"kv_head", w.kv_head}, {"budget", w.budget}, {"alpha", fit.alpha},
                    {"beta", fit.beta}, {"fit_residual", fit.residual}, {"theta", cw.theta},
                    {"max_kkt_residual", cw.max_kkt_residual}, {"a", p.weights}, {"bits", cw.bits}};
}

std::string WaterfillAnalysis::write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                                            const std::string& dir) const {
  nlohmann::json wf;
  for (const auto& c : cells)
    if (c.contains("waterfill")) {
      const auto& w = c["waterfill"];
      const std::vector<double> a = w["a"].get<std::vector<double>>(), bits = w["bits"].get<std::vector<double>>();
      const double alpha = w["alpha"].get<double>(), beta = w["beta"].get<double>(), theta = w["theta"].get<double>();
      std::vector<std::size_t> idx(a.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return a[x] > a[y]; });
      CsvWriter wc({"rank", "token", "a", "g0", "bits"});
      int zero = 0;
      double maxb = 0;
      nlohmann::json rows = nlohmann::json::array();
      for (std::size_t r = 0; r < idx.size(); ++r) {
        const std::size_t t = idx[r];
        const double g0 = a[t] * alpha * std::log(beta);  // marginal return per bit at 0 bits
        wc.row() << r + 1 << t << format_or_nan(a[t]) << format_or_nan(g0) << format_or_nan(bits[t]);
        rows.push_back({{"rank", r + 1}, {"token", t}, {"a", a[t]}, {"g0", g0}, {"bits", bits[t]}});
        zero += bits[t] <= 0 ? 1 : 0;
        maxb = std::max(maxb, bits[t]);
      }
      write_file_atomically(dir + "/waterfill.csv", wc.text());
      wf = {{"cell", c["id"]}, {"layer", w["layer"]}, {"kv_head", w["kv_head"]}, {"budget", w["budget"]},
            {"alpha", alpha}, {"beta", beta}, {"theta", theta}, {"tokens", a.size()}, {"zero_bit_tokens", zero},
            {"max_bits", maxb}, {"rows", rows}};
      write_file_atomically(dir + "/waterfill.json", wf.dump(1) + "\n");
      break;
    }

  if (wf.is_null()) return "";
  std::ostringstream s;
  s << "\n## Water-filling picture (cell " << wf["cell"].get<std::string>() << ", head L" << wf["layer"] << ".H"
    << wf["kv_head"] << ", B = " << format_or_nan(wf["budget"].get<double>()) << " bits per token)\n\n"
    << "Fitted noise model n_h(b) = " << format_or_nan(wf["alpha"].get<double>(), "%.4g") << " * "
    << format_or_nan(wf["beta"].get<double>(), "%.4g")
    << "^(-b); water level theta = " << format_or_nan(wf["theta"].get<double>(), "%.4g") << "; "
    << wf["zero_bit_tokens"] << " of " << wf["tokens"]
    << " tokens get 0 bits (evicted: their marginal return w_t alpha ln(beta) is below theta); the "
    << "heaviest token gets " << format_or_nan(wf["max_bits"].get<double>(), "%.2f") << " bits.\n";
  return s.str();
}

AnalysisType WaterfillAnalysis::type() {
  return {"waterfill", "reverse water-filling of one head: token weights, water level theta, bits per token",
          {"waterfill"}, read_waterfill_section, figures_waterfill};
}

}  // namespace tierlab
