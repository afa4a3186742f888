// A variance decomposition of a verdict over baselines, compression timing and prompts
// (variance.hpp).
#include "scenarios/analyses/variance.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/text.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "scenarios/methods/methods_spec.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

namespace {

const char* const kTimings[] = {"prefill", "deferred"};
const char* const kFactors[] = {"prompts", "baselines", "timing", "interactions"};

std::shared_ptr<const Analysis> read_variance_section(const YAML::Node& root, const YamlReader& c, const Scenario& s) {
  const YAML::Node v = root["variance"];
  if (!v) return nullptr;
  if (!v.IsMap()) c.fail(v, "key 'variance' must be a mapping with the keys allocator, baselines, defer.");
  c.keys(v, "variance", {"allocator", "baselines", "defer"});
  if (s.methods.empty()) c.fail(v, "key 'variance' compares the scenario's 'methods'; give the key 'methods'.");
  std::set<std::string> labels;
  for (const MethodSpec& m : s.methods) labels.insert(m.label);
  auto known = [&](const YAML::Node& n, const std::string& key) {
    const std::string label = c.str(n, key);
    if (!labels.count(label)) {
      std::string all;
      for (const auto& l : labels) all += std::string(all.empty() ? "" : ", ") + "'" + l + "'";
      c.fail(n, "key '" + key + "' is '" + label + "', not a label of the scenario's methods (" + all + ").");
    }
    return label;
  };
  VarianceSpec spec;
  if (!v["allocator"]) c.fail(v, "key 'variance.allocator' is missing: the label of the method whose verdict is decomposed.");
  spec.allocator = known(v["allocator"], "variance.allocator");
  const YAML::Node b = v["baselines"];
  if (!b || !b.IsMap() || b.size() < 2)
    c.fail(b ? b : v, "key 'variance.baselines' must map at least two set names to lists of method labels.");
  for (const auto& kv : b) {
    const std::string name = kv.first.as<std::string>();
    std::vector<std::string> set;
    for (const auto& x : c.list(kv.second, "variance.baselines." + name)) {
      const std::string l = known(x, "variance.baselines." + name);
      if (l == spec.allocator) c.fail(x, "key 'variance.baselines." + name + "' holds the allocator '" + l + "' itself.");
      set.push_back(l);
    }
    if (set.empty()) c.fail(kv.second, "key 'variance.baselines." + name + "' is empty.");
    spec.baselines[name] = set;
  }
  if (v["defer"]) spec.defer = static_cast<int>(c.integer(v["defer"], "variance.defer", 1, 1 << 20));
  return std::make_shared<VarianceAnalysis>(spec);
}

std::vector<NamedFigure> no_figures_variance(const std::string&) { return {}; }

// The head with its observation window replaced by the queries of decode steps 1..k: a
// compression decided k steps after prefill, over the prompt tokens (each of those queries sees
// the whole prompt; the appended tokens are not compressed).
HeadData deferred(const HeadData& h, int k) {
  const DecodeQueries dq = decode_query_set(h);
  HeadData d = h;
  d.obs_queries.resize(static_cast<Eigen::Index>(dq.g) * k, h.decode_queries.cols());
  for (int j = 0; j < dq.g; ++j)
    for (int s = 1; s <= k; ++s) d.obs_queries.row(static_cast<Eigen::Index>(j) * k + (s - 1)) = dq.query(j, s);
  d.obs_first_position = static_cast<int>(h.keys.rows()) - 1;
  return d;
}

// Shares of the total sum of squares of v[p][s][t] (a full P x Bs x Tm design) taken by each
// factor's main effect, the rest as interactions; cells `rows` (indices into v, with repeats).
std::array<double, 4> shares(const std::vector<std::vector<std::vector<double>>>& v, const std::vector<std::size_t>& rows) {
  const std::size_t P = rows.size(), Bs = v.front().size(), Tm = v.front().front().size();
  double grand = 0;
  for (std::size_t p : rows)
    for (const auto& s : v[p])
      for (double x : s) grand += x;
  grand /= static_cast<double>(P * Bs * Tm);
  double sp = 0, ss = 0, st = 0, tot = 0;
  for (std::size_t p : rows) {
    double m = 0;
    for (const auto& s : v[p])
      for (double x : s) m += x, tot += (x - grand) * (x - grand);
    m /= static_cast<double>(Bs * Tm);
    sp += static_cast<double>(Bs * Tm) * (m - grand) * (m - grand);
  }
  for (std::size_t b = 0; b < Bs; ++b) {
    double m = 0;
    for (std::size_t p : rows)
      for (double x : v[p][b]) m += x;
    m /= static_cast<double>(P * Tm);
    ss += static_cast<double>(P * Tm) * (m - grand) * (m - grand);
  }
  for (std::size_t t = 0; t < Tm; ++t) {
    double m = 0;
    for (std::size_t p : rows)
      for (std::size_t b = 0; b < Bs; ++b) m += v[p][b][t];
    m /= static_cast<double>(P * Bs);
    st += static_cast<double>(P * Bs) * (m - grand) * (m - grand);
  }
  if (!(tot > 0)) return {kNaN, kNaN, kNaN, kNaN};
  return {sp / tot, ss / tot, st / tot, std::max(0.0, tot - sp - ss - st) / tot};
}

}  // namespace

void VarianceAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  const TraceMeta& meta = ctx.trace.meta();
  const Scenario& sc = ctx.scenario;
  const int S = meta.decode_steps;
  const int k = spec_.defer > 0 ? spec_.defer : S / 2;
  if (S < 2 || k >= S)
    throw InputError(sc.file + ": variance defers the compression by " + std::to_string(k) +
                     " decode steps and evaluates the steps after them; cell '" + ctx.cell.id + "' has " +
                     std::to_string(S) + " decode steps (need more than the deferral, and at least 2).");
  std::vector<std::vector<HeadData>> heads(static_cast<std::size_t>(meta.n_layers)), later = heads;
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      heads[static_cast<std::size_t>(l)].push_back(ctx.trace.head(l, h));
      later[static_cast<std::size_t>(l)].push_back(deferred(heads[static_cast<std::size_t>(l)].back(), k));
    }
  MethodContext mc;
  mc.rope = meta.rope;
  mc.group_size = meta.group_size;
  mc.rate_kind = sc.rate_kind;
  std::set<std::string> used = {spec_.allocator};
  for (const auto& [name, set] : spec_.baselines) used.insert(set.begin(), set.end());
  nlohmann::json methods = nlohmann::json::array();
  const Progress progress = ctx.step("variance");
  int done = 0;
  for (const MethodSpec& m : sc.methods) {
    if (!used.count(m.label)) continue;
    ctx.check_stop();
    const ModelCompressor compress = make_model_compressor(m, mc);
    nlohmann::json j = {{"label", m.label}};
    for (int t = 0; t < 2; ++t) {
      const auto compressed = compress(t == 0 ? heads : later);
      double err = 0, bits = 0;
      for (int l = 0; l < meta.n_layers; ++l)
        for (int h = 0; h < meta.n_kv_heads; ++h) {
          const HeadData& head = heads[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
          const CompressedHead& c = compressed[static_cast<std::size_t>(l)][static_cast<std::size_t>(h)];
          double e = 0;
          for (int s = k + 1; s <= S; ++s) e += evaluate_decode_step(head, c.keys, c.kept, s, ctx.backend).rel_error;
          err += e / (S - k);
          bits += rate_of(c.rate, sc.rate_kind);
        }
      j[std::string("err_") + kTimings[t]] = finite_or_null(err / meta.n_heads());
      j[std::string("rate_") + kTimings[t]] = bits / meta.n_heads();
    }
    methods.push_back(j);
    if (progress) progress(++done, static_cast<int>(used.size()));
  }
  cell["variance"] = {{"defer", k}, {"decode_steps", S}, {"methods", methods}};
}

std::string VarianceAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                           const std::string& dir) const {
  std::vector<std::string> sets;
  for (const auto& [name, set] : spec_.baselines) sets.push_back(name);
  CsvWriter csv({"cell", "baselines", "timing", "err_allocator", "err_best_baseline", "best_baseline", "verdict"});
  std::vector<std::vector<std::vector<double>>> v;  // cell -> set -> timing
  std::vector<std::string> ids;
  int dropped = 0, defer = 0, steps = 0;
  for (const auto& c : cells) {
    if (!c.contains("variance")) continue;
    const nlohmann::json& x = c.at("variance");
    defer = x.at("defer").get<int>(), steps = x.at("decode_steps").get<int>();
    std::map<std::string, std::array<double, 2>> err;
    for (const auto& m : x.at("methods")) err[m.at("label").get<std::string>()] = {double_or_nan(m, "err_prefill"), double_or_nan(m, "err_deferred")};
    std::vector<std::vector<double>> cv(sets.size(), std::vector<double>(2, kNaN));
    bool ok = true;
    for (std::size_t b = 0; b < sets.size(); ++b)
      for (int t = 0; t < 2; ++t) {
        double best = INFINITY;
        std::string who;
        for (const auto& l : spec_.baselines.at(sets[b]))
          if (err.count(l) && err[l][t] < best) best = err[l][t], who = l;
        const double a = err.count(spec_.allocator) ? err[spec_.allocator][t] : kNaN;
        const double verdict = a > 0 && best > 0 && std::isfinite(best) ? std::log(a / best) : kNaN;
        cv[b][t] = verdict;
        ok = ok && std::isfinite(verdict);
        CsvWriter& row = csv.row();
        row << c.at("id").get<std::string>() << sets[b] << kTimings[t] << format_or_nan(a) << format_or_nan(best) << who
            << format_or_nan(verdict);
      }
    if (!ok) {
      ++dropped;
      continue;
    }
    v.push_back(cv);
    ids.push_back(c.at("id").get<std::string>());
  }
  if (ids.empty() && dropped == 0) return "";
  write_file_atomically(dir + "/variance.csv", csv.text());
  nlohmann::json t = {{"allocator", spec_.allocator}, {"baseline_sets", sets}, {"defer", defer}, {"decode_steps", steps},
                      {"cells", ids.size()}, {"cells_dropped", dropped}};
  std::ostringstream s;
  s << "\n## What moves the verdict: baselines, compression timing, prompts\n\n";
  if (ids.size() < 2) {
    t["factors"] = nlohmann::json::array();
    write_file_atomically(dir + "/variance.json", t.dump(1) + "\n");
    s << "Fewer than 2 cells with every verdict defined (" << dropped << " dropped): no decomposition.\n";
    return s.str();
  }
  std::vector<std::size_t> all(ids.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::array<double, 4> point = shares(v, all);
  std::mt19937_64 rng(sc.seed * 6151 + 29);
  std::uniform_int_distribution<std::size_t> pick(0, ids.size() - 1);
  std::array<std::vector<double>, 4> boot;
  std::vector<double> d_base, d_time;
  for (int r = 0; r < sc.bootstrap; ++r) {
    std::vector<std::size_t> rows(ids.size());
    for (auto& x : rows) x = pick(rng);
    const auto sh = shares(v, rows);
    if (!std::isfinite(sh[0])) continue;
    for (int f = 0; f < 4; ++f) boot[static_cast<std::size_t>(f)].push_back(sh[static_cast<std::size_t>(f)]);
    d_base.push_back(sh[1] - sh[0]), d_time.push_back(sh[2] - sh[0]);
  }
  auto ci = [](std::vector<double> x) {
    return std::array<double, 2>{quantile_or_nan(x, 0.025), quantile_or_nan(std::move(x), 0.975)};
  };
  nlohmann::json factors = nlohmann::json::array();
  for (int f = 0; f < 4; ++f) {
    const auto c = ci(boot[static_cast<std::size_t>(f)]);
    factors.push_back({{"factor", kFactors[f]}, {"share", finite_or_null(point[static_cast<std::size_t>(f)])},
                       {"lo", finite_or_null(c[0])}, {"hi", finite_or_null(c[1])}});
  }
  const auto cb = ci(d_base), ct = ci(d_time);
  t["factors"] = factors;
  t["baselines_minus_prompts"] = {{"value", finite_or_null(point[1] - point[0])}, {"lo", finite_or_null(cb[0])}, {"hi", finite_or_null(cb[1])}};
  t["timing_minus_prompts"] = {{"value", finite_or_null(point[2] - point[0])}, {"lo", finite_or_null(ct[0])}, {"hi", finite_or_null(ct[1])}};
  // Mean verdict per set and timing (the direction each factor moves it).
  nlohmann::json means = nlohmann::json::array();
  for (std::size_t b = 0; b < sets.size(); ++b)
    for (int tm = 0; tm < 2; ++tm) {
      double m = 0, wins = 0;
      for (const auto& cv : v) m += cv[b][static_cast<std::size_t>(tm)], wins += cv[b][static_cast<std::size_t>(tm)] < 0;
      means.push_back({{"baselines", sets[b]}, {"timing", kTimings[tm]}, {"mean_verdict", m / static_cast<double>(v.size())},
                       {"allocator_wins", wins / static_cast<double>(v.size())}});
    }
  t["means"] = means;
  write_file_atomically(dir + "/variance.json", t.dump(1) + "\n");
  s << "Verdict v = ln(err(" << spec_.allocator << ") / err(best baseline of the set)), on decode steps " << defer + 1
    << ".." << steps << ", per cell, baseline set and timing (prefill: decided from the observation window; deferred: "
    << defer << " decode steps later, from their queries; same memory). " << ids.size() << " cells";
  if (dropped > 0) s << " (" << dropped << " dropped: a verdict undefined)";
  s << ", baseline sets";
  for (const auto& n : sets) s << " `" << n << "`";
  s << ". Share of the verdict's variance by factor (main effects), 95% interval from resampling cells:\n\n"
    << "| factor | share |\n|---|---|\n";
  for (const auto& f : factors)
    s << "| " << f.at("factor").get<std::string>() << " | " << format_label(double_or_nan(f, "share"), "%.2f") << " ["
      << format_label(double_or_nan(f, "lo"), "%.2f") << ", " << format_label(double_or_nan(f, "hi"), "%.2f") << "] |\n";
  s << "\n| baselines | timing | mean v | allocator wins |\n|---|---|---|---|\n";
  for (const auto& m : means)
    s << "| " << m.at("baselines").get<std::string>() << " | " << m.at("timing").get<std::string>() << " | "
      << format_label(m.at("mean_verdict").get<double>(), "%.3f") << " | "
      << format_label(100 * m.at("allocator_wins").get<double>(), "%.0f") << "% |\n";
  auto said = [&](const char* what, double d, const std::array<double, 2>& c) {
    std::ostringstream o;
    o << what << " - prompts = " << format_label(d, "%.2f") << " [" << format_label(c[0], "%.2f") << ", "
      << format_label(c[1], "%.2f") << "]: "
      << (c[0] > 0 ? "moves the verdict more than prompt sampling"
                   : c[1] < 0 ? "moves it less than prompt sampling" : "not told apart from prompt sampling");
    return o.str();
  };
  s << "\n" << said("baselines", point[1] - point[0], cb) << "; " << said("timing", point[2] - point[0], ct) << ".\n";
  return s.str();
}

AnalysisType VarianceAnalysis::type() {
  return {"variance", "how much of a verdict's variance the baseline set, the compression timing and the prompts each explain",
          {"variance"}, read_variance_section, no_figures_variance};
}

}  // namespace tierlab
