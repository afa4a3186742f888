// Which key error predicts attention damage (score_error.hpp).
#include "scenarios/analyses/score_error.hpp"

#include <cmath>
#include <map>
#include <random>
#include <sstream>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "scenarios/analyses/stats.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

namespace {

// Mean over the rows of Q of KL(softmax(q K^T / sqrt d) || softmax(q K2^T / sqrt d)), in double.
double attention_kl(const MatrixRM& Q, const MatrixRM& K, const MatrixRM& K2) {
  const Eigen::MatrixXd q = Q.cast<double>(), k = K.cast<double>(), k2 = K2.cast<double>();
  const double scale = 1.0 / std::sqrt(static_cast<double>(K.cols()));
  const Eigen::MatrixXd L = (q * k.transpose()) * scale, L2 = (q * k2.transpose()) * scale;
  double sum = 0;
  for (Eigen::Index r = 0; r < L.rows(); ++r) {
    const Eigen::RowVectorXd a = L.row(r).array() - L.row(r).maxCoeff(), b = L2.row(r).array() - L2.row(r).maxCoeff();
    const double za = std::log(a.array().exp().sum()), zb = std::log(b.array().exp().sum());
    const Eigen::RowVectorXd la = a.array() - za, lb = b.array() - zb;  // log p, log p^
    sum += (la.array().exp() * (la - lb).array()).sum();
  }
  return L.rows() > 0 ? sum / static_cast<double>(L.rows()) : std::numeric_limits<double>::quiet_NaN();
}

std::shared_ptr<const Analysis> read_score_error_section(const YAML::Node& root, const YamlReader& c, const Scenario&) {
  const YAML::Node node = root["score_error"];
  if (!node) return nullptr;
  if (!node.IsMap()) c.fail(node, "key 'score_error' must be a mapping (it may be empty: 'score_error: {}').");
  c.keys(node, "score_error", {"quantizers", "bits"});
  ScoreErrorSpec spec;
  if (node["quantizers"]) {
    spec.quantizers.clear();
    for (const auto& q : c.list(node["quantizers"], "score_error.quantizers")) {
      const std::string name = c.str(q, "score_error.quantizers");
      try {
        make_key_quantizer(name, {});
      } catch (const InputError& e) {
        c.fail(q, "key 'score_error.quantizers': " + std::string(e.what()));
      }
      spec.quantizers.push_back(name);
    }
  }
  if (node["bits"]) {
    spec.bits.clear();
    for (const auto& b : c.list(node["bits"], "score_error.bits"))
      spec.bits.push_back(static_cast<int>(c.integer(b, "score_error.bits", 1, 8)));
  }
  return std::make_shared<ScoreErrorAnalysis>(spec);
}

std::vector<NamedFigure> no_figures_score_error(const std::string&) { return {}; }

}  // namespace

void ScoreErrorAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& j) const {
  const TraceMeta& m = ctx.trace.meta();
  if (m.decode_steps <= 0)
    throw InputError(ctx.scenario.file + ": score_error needs decode queries; cell '" + ctx.cell.id + "' has none.");
  nlohmann::json rows = nlohmann::json::array();
  const Progress progress = ctx.step("score error");
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      ctx.check_stop();
      const HeadData head = ctx.trace.head(l, h);
      const double key_energy = head.keys.cast<double>().squaredNorm();
      for (const std::string& name : spec.quantizers)
        for (int b : spec.bits) {
          const std::unique_ptr<KeyQuantizer> q = make_key_quantizer(name, {{"bits", std::to_string(b)}});
          const MatrixRM dq = q->quantize(head, m.rope).keys;
          rows.push_back({{"layer", l},
                          {"kv_head", h},
                          {"quantizer", name},
                          {"bits", b},
                          {"key_mse", (dq - head.keys).cast<double>().squaredNorm() / key_energy},
                          {"score_error", score_space_error(head.decode_queries, head.keys, dq)},
                          {"attention_kl", attention_kl(head.decode_queries, head.keys, dq)}});
        }
      if (progress) progress(l * m.n_kv_heads + h + 1, m.n_heads());
    }
  j["score_error"] = rows;
}

std::string ScoreErrorAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                             const std::string& dir) const {
  CsvWriter csv({"cell", "layer", "kv_head", "quantizer", "bits", "key_mse", "score_error", "attention_kl"});
  std::vector<double> mse, score, kl;
  std::vector<int> bits_of;
  std::vector<std::string> head_of;
  for (const auto& c : cells) {
    if (!c.contains("score_error")) continue;
    for (const auto& r : c["score_error"]) {
      const std::string id = c["id"].get<std::string>();
      csv.row() << id << r["layer"].get<int>() << r["kv_head"].get<int>() << r["quantizer"].get<std::string>()
                << r["bits"].get<int>() << format_or_nan(double_or_nan(r, "key_mse")) << format_or_nan(double_or_nan(r, "score_error"))
                << format_or_nan(double_or_nan(r, "attention_kl"));
      mse.push_back(double_or_nan(r, "key_mse"));
      score.push_back(double_or_nan(r, "score_error"));
      kl.push_back(double_or_nan(r, "attention_kl"));
      bits_of.push_back(r["bits"].get<int>());
      head_of.push_back(id + "/L" + std::to_string(r["layer"].get<int>()) + ".H" + std::to_string(r["kv_head"].get<int>()));
    }
  }
  if (kl.empty()) return "";
  const double rho_score = spearman(score, kl), rho_mse = spearman(mse, kl);
  // Within one bit width (where the bit width does not rank the rows): the mean over bit widths
  // of rho(predictor, KL) over that width's (head, quantizer) rows.
  auto within = [&](const std::vector<std::size_t>& rows, const std::vector<double>& x) {
    std::map<int, std::pair<std::vector<double>, std::vector<double>>> by;
    for (std::size_t i : rows) by[bits_of[i]].first.push_back(x[i]), by[bits_of[i]].second.push_back(kl[i]);
    double sum = 0;
    int n = 0;
    for (const auto& [b, xy] : by)
      if (const double r = spearman(xy.first, xy.second); std::isfinite(r)) sum += r, ++n;
    return n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
  };
  std::vector<std::size_t> all_rows(kl.size());
  for (std::size_t i = 0; i < all_rows.size(); ++i) all_rows[i] = i;
  const double w_score = within(all_rows, score), w_mse = within(all_rows, mse);
  // Resample heads (each keeps its rows) for the difference's interval.
  std::map<std::string, std::vector<std::size_t>> rows_of;
  for (std::size_t i = 0; i < head_of.size(); ++i) rows_of[head_of[i]].push_back(i);
  std::vector<const std::vector<std::size_t>*> heads;
  for (const auto& [k, v] : rows_of) heads.push_back(&v);
  std::mt19937_64 rng(sc.seed);
  std::uniform_int_distribution<std::size_t> draw(0, heads.size() - 1);
  std::vector<double> diffs, wdiffs;
  for (int r = 0; r < sc.bootstrap; ++r) {
    std::vector<double> s2, m2, k2;
    std::vector<std::size_t> picked;
    for (std::size_t i = 0; i < heads.size(); ++i)
      for (std::size_t row : *heads[draw(rng)])
        s2.push_back(score[row]), m2.push_back(mse[row]), k2.push_back(kl[row]), picked.push_back(row);
    const double d = spearman(s2, k2) - spearman(m2, k2);
    if (std::isfinite(d)) diffs.push_back(d);
    const double wd = within(picked, score) - within(picked, mse);
    if (std::isfinite(wd)) wdiffs.push_back(wd);
  }
  const nlohmann::json out = {{"rows", kl.size()},
                              {"heads", heads.size()},
                              {"rho_score_kl", rho_score},
                              {"rho_mse_kl", rho_mse},
                              {"difference", rho_score - rho_mse},
                              {"ci_lo", quantile_or_nan(diffs, 0.025)},
                              {"ci_hi", quantile_or_nan(diffs, 0.975)},
                              {"resamples", diffs.size()},
                              {"within_bits_rho_score_kl", w_score},
                              {"within_bits_rho_mse_kl", w_mse},
                              {"within_bits_difference", w_score - w_mse},
                              {"within_bits_ci_lo", quantile_or_nan(wdiffs, 0.025)},
                              {"within_bits_ci_hi", quantile_or_nan(wdiffs, 0.975)},
                              {"quantizers", spec.quantizers},
                              {"bits", spec.bits}};
  write_file_atomically(dir + "/score_error.csv", csv.text());
  write_file_atomically(dir + "/score_error.json", out.dump(1) + "\n");
  std::ostringstream s;
  s << "\n## Which key error predicts attention damage\n\n"
    << "Over " << kl.size() << " (head, quantizer, bits) rows of " << heads.size()
    << " heads: Spearman with the attention KL of the score-space error " << format_or_nan(rho_score, "%.3f")
    << ", of the relative key MSE " << format_or_nan(rho_mse, "%.3f") << "; difference "
    << format_or_nan(rho_score - rho_mse, "%.3f") << " [" << format_or_nan(double_or_nan(out, "ci_lo"), "%.3f") << ", "
    << format_or_nan(double_or_nan(out, "ci_hi"), "%.3f") << "] (heads resampled). Within one bit width (mean over "
    << "bit widths): " << format_or_nan(w_score, "%.3f") << " vs " << format_or_nan(w_mse, "%.3f") << ", difference "
    << format_or_nan(w_score - w_mse, "%.3f") << " [" << format_or_nan(double_or_nan(out, "within_bits_ci_lo"), "%.3f") << ", "
    << format_or_nan(double_or_nan(out, "within_bits_ci_hi"), "%.3f") << "].\n";
  return s.str();
}

AnalysisType ScoreErrorAnalysis::type() {
  return {"score_error", "key MSE and score-space error as predictors of attention KL, per head and quantizer",
          {"score_error"}, read_score_error_section, no_figures_score_error};
}

}  // namespace tierlab
