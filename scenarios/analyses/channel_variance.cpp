// Per-channel key variance before and after the Walsh-Hadamard rotation (channel_variance.hpp).
#include "scenarios/analyses/channel_variance.hpp"

#include <cmath>
#include <random>
#include <sstream>

#include <Eigen/Eigenvalues>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

namespace {

struct Spread {
  double par = 0, cv = 0;  // peak-to-average ratio, coefficient of variation
};

Spread spread_of(const Eigen::VectorXd& var) {
  const double mean = var.mean();
  Spread s;
  if (!(mean > 0)) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  s.par = var.maxCoeff() / mean;
  s.cv = std::sqrt((var.array() - mean).square().mean()) / mean;
  return s;
}

// Variances of the columns of X (each centred).
Eigen::VectorXd column_variances(const Eigen::MatrixXd& X) {
  const Eigen::RowVectorXd mean = X.colwise().mean();
  return (X.rowwise() - mean).array().square().colwise().mean().transpose();
}

// X D H_d, row by row (D random signs from `seed`, H_d the orthonormal Walsh-Hadamard).
Eigen::MatrixXd rotate(const Eigen::MatrixXd& X, std::uint64_t seed) {
  const int d = static_cast<int>(X.cols());
  std::mt19937_64 rng(seed);
  std::vector<float> sign(static_cast<std::size_t>(d));
  for (float& s : sign) s = (rng() & 1) ? 1.0f : -1.0f;
  Eigen::MatrixXd out(X.rows(), X.cols());
  std::vector<float> row(static_cast<std::size_t>(d));
  for (Eigen::Index t = 0; t < X.rows(); ++t) {
    for (int c = 0; c < d; ++c) row[static_cast<std::size_t>(c)] = static_cast<float>(X(t, c)) * sign[static_cast<std::size_t>(c)];
    walsh_hadamard(row.data(), d);
    for (int c = 0; c < d; ++c) out(t, c) = row[static_cast<std::size_t>(c)];
  }
  return out;
}

std::shared_ptr<const Analysis> read_channel_variance_section(const YAML::Node& root, const YamlReader& c, const Scenario&) {
  const YAML::Node node = root["channel_variance"];
  if (!node) return nullptr;
  if (!node.IsMap() || node.size() != 0)
    c.fail(node, "key 'channel_variance' takes no settings; write 'channel_variance: {}'.");
  return std::make_shared<ChannelVarianceAnalysis>();
}

std::vector<NamedFigure> no_figures_channel_variance(const std::string&) { return {}; }

const char* const kMeasures[] = {"keys_par_before", "keys_par_after", "keys_cv_before", "keys_cv_after",
                                 "latent_par_before", "latent_par_after", "latent_cv_before", "latent_cv_after"};

}  // namespace

void ChannelVarianceAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& j) const {
  const TraceMeta& m = ctx.trace.meta();
  if (!is_power_of_two(m.head_dim))
    throw InputError(ctx.scenario.file + ": channel_variance needs a head dimension that is a power of 2 (the "
                     "Walsh-Hadamard rotation); cell '" + ctx.cell.id + "' has d = " + std::to_string(m.head_dim) + ".");
  nlohmann::json heads = nlohmann::json::array();
  const Progress progress = ctx.step("channel variance");
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      ctx.check_stop();
      const HeadData head = ctx.trace.head(l, h);
      const Eigen::MatrixXd K = head.keys.cast<double>();
      const std::uint64_t seed = ctx.scenario.seed * 1000003ULL + static_cast<std::uint64_t>(l * m.n_kv_heads + h);
      const Spread kb = spread_of(column_variances(K)), ka = spread_of(column_variances(rotate(K, seed)));
      const Eigen::MatrixXd Kc = K.rowwise() - K.colwise().mean();
      const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig((Kc.transpose() * Kc) / static_cast<double>(K.rows()));
      const Eigen::MatrixXd Z = Kc * eig.eigenvectors();
      const Spread lb = spread_of(column_variances(Z)), la = spread_of(column_variances(rotate(Z, seed)));
      heads.push_back({{"layer", l}, {"kv_head", h}, {"keys_par_before", kb.par}, {"keys_par_after", ka.par},
                       {"keys_cv_before", kb.cv}, {"keys_cv_after", ka.cv}, {"latent_par_before", lb.par},
                       {"latent_par_after", la.par}, {"latent_cv_before", lb.cv}, {"latent_cv_after", la.cv}});
      if (progress) progress(l * m.n_kv_heads + h + 1, m.n_heads());
    }
  j["channel_variance"] = {{"head_dim", m.head_dim}, {"heads", heads}};
}

std::string ChannelVarianceAnalysis::write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                                                  const std::string& dir) const {
  std::vector<std::string> header = {"cell", "layer", "kv_head"};
  for (const char* k : kMeasures) header.push_back(k);
  CsvWriter csv(header);
  std::map<std::string, std::vector<double>> all;
  int n = 0;
  for (const auto& c : cells) {
    if (!c.contains("channel_variance")) continue;
    for (const auto& h : c["channel_variance"]["heads"]) {
      CsvWriter& row = csv.row();
      row << c["id"].get<std::string>() << h["layer"].get<int>() << h["kv_head"].get<int>();
      for (const char* k : kMeasures) {
        const double v = double_or_nan(h, k);
        row << format_or_nan(v);
        if (std::isfinite(v)) all[k].push_back(v);
      }
      ++n;
    }
  }
  if (n == 0) return "";
  nlohmann::json summary = {{"heads", n}};
  for (const char* k : kMeasures)
    summary[k] = {{"median", quantile_or_nan(all[k], 0.5)}, {"q1", quantile_or_nan(all[k], 0.25)},
                  {"q3", quantile_or_nan(all[k], 0.75)}};
  write_file_atomically(dir + "/channel_variance.csv", csv.text());
  write_file_atomically(dir + "/channel_variance.json", summary.dump(1) + "\n");
  auto med = [&](const char* k) { return format_or_nan(summary[k]["median"].get<double>(), "%.3g"); };
  std::ostringstream s;
  s << "\n## Per-channel key variance and the Walsh-Hadamard rotation\n\n"
    << "Over " << n << " KV heads, the median peak-to-average ratio of the channel variances (1 = equal): keys "
    << med("keys_par_before") << " before, " << med("keys_par_after") << " after the random-sign Hadamard rotation; "
    << "full-rank SVD latent " << med("latent_par_before") << " before, " << med("latent_par_after") << " after.\n";
  return s.str();
}

AnalysisType ChannelVarianceAnalysis::type() {
  return {"channel_variance", "per-channel key variance before and after the Walsh-Hadamard rotation",
          {"channel_variance"}, read_channel_variance_section, no_figures_channel_variance};
}

}  // namespace tierlab
