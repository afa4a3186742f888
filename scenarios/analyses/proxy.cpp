// Proxy vs end task (proxy.hpp).
#include "scenarios/analyses/proxy.hpp"
#include <filesystem>

#include "scenarios/figures/tables_io.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "scenarios/analyses/stats.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/replay.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

namespace {


// The metrics compared, in table order: name, description, the value of a method (smaller = better).
struct Metric {
  const char* name;
  const char* what;
  double (*value)(const ProxyMethodResult&);
  bool needs_replay;
};
const std::vector<Metric>& metrics() {
  static const std::vector<Metric> m = {
      {"surrogate", "surrogate predicted relative error", [](const ProxyMethodResult& r) { return r.surrogate; }, false},
      {"error", "recomputed relative output error", [](const ProxyMethodResult& r) { return r.error; }, false},
      {"kl", "replay mean KL", [](const ProxyMethodResult& r) { return r.mean_kl; }, true},
      {"disagreement", "replay 1 - agreement", [](const ProxyMethodResult& r) { return 1.0 - r.agreement; }, true}};
  return m;
}

}  // namespace

double kendall_tau_b(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 2 || y.size() != n) return kNaN;
  double C = 0, D = 0, tx = 0, ty = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      const double dx = x[i] - x[j], dy = y[i] - y[j];
      if (dx == 0) tx += 1;
      if (dy == 0) ty += 1;
      if (dx == 0 || dy == 0) continue;
      if ((dx > 0) == (dy > 0)) C += 1;
      else D += 1;
    }
  const double n0 = 0.5 * static_cast<double>(n) * static_cast<double>(n - 1);
  const double den = std::sqrt((n0 - tx) * (n0 - ty));
  return den > 0 ? (C - D) / den : kNaN;
}

nlohmann::json proxy_cell(const Scenario& sc, const ProxySpec& spec, const ScenarioCell& cell, const TraceReader& trace, Recomputer& backend,
                          const std::atomic<bool>* stop) {
  const TraceMeta& meta = trace.meta();
  std::vector<std::vector<HeadData>> heads(static_cast<std::size_t>(meta.n_layers));
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) heads[static_cast<std::size_t>(l)].push_back(trace.head(l, h));
  MethodContext ctx;
  ctx.rope = meta.rope;
  ctx.group_size = meta.group_size;
  ctx.rate_kind = sc.rate_kind;
  std::unique_ptr<Llama2cModel> model;
  ReplayOptions ro;
  if (cell.source == "model") {
    model = std::make_unique<Llama2cModel>(cell.checkpoint);
    ro.prompt.generate = cell.prompt_len;
    ro.prompt.temperature = static_cast<float>(cell.temperature);
    ro.prompt.seed = cell.seed;
    ro.decode_steps = cell.decode_steps;
    ro.obs_window = meta.obs_window;
    ro.mode = parse_replay_mode(spec.mode);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const MethodSpec& m : sc.methods) {
    throw_if_cancelled(stop);
    const ModelCompressor compress = make_model_compressor(m, ctx);
    const MethodMeasure mm = measure_compressed(heads, compress(heads), [&](const HeadData& hd, const CompressedHead& c) {
      return meta.decode_steps > 0 ? evaluate_decode_steps(hd, c.keys, c.kept, backend)
                                   : evaluate_obs_queries(hd, c.keys, c.kept, backend);
    });
    nlohmann::json j = {{"label", m.label},
                        {"kind", to_string(m.kind)},
                        {"code_bits", mm.rate.code_bits},
                        {"total_bits", mm.rate.total_bits},
                        {"evicted", mm.evicted},
                        {"surrogate", finite_or_null(mm.surrogate)},
                        {"error", finite_or_null(mm.error)},
                        {"replayed", false}};
    if (model) {
      const ReplayResult r = replay(*model, ro, KeyCompression::from_compressor(compress, m.label));
      j["replayed"] = true;
      j["agreement"] = r.agreement;
      j["mean_kl"] = finite_or_null(r.mean_kl);
      j["ppl_compressed"] = finite_or_null(r.ppl_compressed);
      j["ppl_full"] = finite_or_null(r.ppl_full);
      j["first_divergence"] = r.first_divergence;
      j["replay_key_bits"] = r.key_rate.code_bits;
    }
    out.push_back(j);
  }
  return {{"mode", spec.mode}, {"methods", out}};
}

nlohmann::json proxy_correlations(const std::vector<ProxyMethodResult>& ms, int resamples, std::uint64_t seed) {
  bool all_replayed = !ms.empty();
  for (const auto& m : ms) all_replayed = all_replayed && m.replayed;
  nlohmann::json out = nlohmann::json::array();
  const auto& mt = metrics();
  for (std::size_t a = 0; a < mt.size(); ++a)
    for (std::size_t b = a + 1; b < mt.size(); ++b) {
      if ((mt[a].needs_replay || mt[b].needs_replay) && !all_replayed) continue;
      if (std::string(mt[a].name) == "kl" && std::string(mt[b].name) == "disagreement") continue;
      std::vector<double> x, y;
      for (const auto& m : ms) {
        const double vx = mt[a].value(m), vy = mt[b].value(m);
        if (std::isfinite(vx) && std::isfinite(vy)) x.push_back(vx), y.push_back(vy);
      }
      const Interval iv = bootstrap_spearman(x, y, resamples, seed);
      out.push_back({{"x", mt[a].name},
                     {"y", mt[b].name},
                     {"methods", x.size()},
                     {"spearman", finite_or_null(spearman(x, y))},
                     {"ci_lo", finite_or_null(iv.lo)},
                     {"ci_hi", finite_or_null(iv.hi)},
                     {"resamples_used", iv.used},
                     {"kendall", finite_or_null(kendall_tau_b(x, y))}});
    }
  return out;
}

std::string write_proxy_tables(const Scenario& sc, const ProxySpec& spec, const std::vector<nlohmann::json>& cells,
                               const std::string& dir) {
  // Per cell x method, then the mean over cells per method (in the scenario's order).
  CsvWriter cc({"cell", "method", "kind", "code_bits", "total_bits", "evicted", "surrogate", "error", "agreement", "mean_kl",
                "ppl_compressed"});
  std::map<std::string, std::vector<const nlohmann::json*>> by;
  for (const auto& c : cells) {
    if (!c.contains("proxy")) continue;
    for (const auto& m : c["proxy"]["methods"]) {
      by[m["label"].get<std::string>()].push_back(&m);
      cc.row() << c["id"].get<std::string>() << m["label"].get<std::string>() << m["kind"].get<std::string>()
               << format_or_nan(double_or_nan(m, "code_bits")) << format_or_nan(double_or_nan(m, "total_bits"))
               << format_or_nan(double_or_nan(m, "evicted")) << format_or_nan(double_or_nan(m, "surrogate"))
               << format_or_nan(double_or_nan(m, "error")) << format_or_nan(double_or_nan(m, "agreement"))
               << format_or_nan(double_or_nan(m, "mean_kl")) << format_or_nan(double_or_nan(m, "ppl_compressed"));
    }
  }
  std::vector<ProxyMethodResult> ms;
  for (const MethodSpec& spec : sc.methods) {
    const auto& v = by[spec.label];
    ProxyMethodResult r;
    r.label = spec.label;
    r.kind = to_string(spec.kind);
    if (v.empty()) continue;
    r.replayed = true;
    for (const nlohmann::json* m : v) {
      r.code_bits += double_or_nan(*m, "code_bits"), r.total_bits += double_or_nan(*m, "total_bits");
      r.evicted += double_or_nan(*m, "evicted");
      r.surrogate += double_or_nan(*m, "surrogate"), r.error += double_or_nan(*m, "error");
      r.replayed = r.replayed && (*m)["replayed"].get<bool>();
      if (r.replayed) {
        r.agreement += double_or_nan(*m, "agreement"), r.mean_kl += double_or_nan(*m, "mean_kl");
        r.ppl_compressed += double_or_nan(*m, "ppl_compressed");
      }
    }
    const double n = static_cast<double>(v.size());
    r.code_bits /= n, r.total_bits /= n, r.evicted /= n, r.surrogate /= n, r.error /= n;
    if (r.replayed) r.agreement /= n, r.mean_kl /= n, r.ppl_compressed /= n;
    else r.agreement = r.mean_kl = r.ppl_compressed = kNaN;
    ms.push_back(r);
  }
  const nlohmann::json corr = proxy_correlations(ms, sc.bootstrap, sc.seed);
  // Ranks (1 = best; mid-ranks for ties).
  std::map<std::string, std::vector<double>> ranks;
  for (const auto& m : metrics()) {
    std::vector<double> v;
    for (const auto& r : ms) v.push_back(m.value(r));
    bool ok = true;
    for (double x : v) ok = ok && std::isfinite(x);
    if (ok) ranks[m.name] = mid_ranks(v);
  }
  auto rank = [&](const char* k, std::size_t i) { return ranks.count(k) ? ranks[k][i] : kNaN; };
  CsvWriter pc({"method", "kind", "code_bits", "total_bits", "evicted", "surrogate", "error", "agreement", "mean_kl",
                "ppl_compressed", "rank_surrogate", "rank_error", "rank_kl", "rank_agreement"});
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < ms.size(); ++i) {
    const auto& r = ms[i];
    pc.row() << r.label << r.kind << format_or_nan(r.code_bits) << format_or_nan(r.total_bits) << format_or_nan(r.evicted)
             << format_or_nan(r.surrogate) << format_or_nan(r.error) << format_or_nan(r.agreement)
             << format_or_nan(r.mean_kl) << format_or_nan(r.ppl_compressed) << format_or_nan(rank("surrogate", i))
             << format_or_nan(rank("error", i)) << format_or_nan(rank("kl", i)) << format_or_nan(rank("disagreement", i));
    rows.push_back({{"method", r.label},
                    {"kind", r.kind},
                    {"code_bits", r.code_bits},
                    {"total_bits", r.total_bits},
                    {"evicted", r.evicted},
                    {"surrogate", finite_or_null(r.surrogate)},
                    {"error", finite_or_null(r.error)},
                    {"agreement", finite_or_null(r.agreement)},
                    {"mean_kl", finite_or_null(r.mean_kl)},
                    {"ppl_compressed", finite_or_null(r.ppl_compressed)},
                    {"rank_surrogate", finite_or_null(rank("surrogate", i))},
                    {"rank_error", finite_or_null(rank("error", i))},
                    {"rank_kl", finite_or_null(rank("kl", i))},
                    {"rank_agreement", finite_or_null(rank("disagreement", i))}});
  }
  int n_cells = 0;
  for (const auto& c : cells) n_cells += c.contains("proxy") ? 1 : 0;
  const nlohmann::json pj = {{"mode", spec.mode}, {"cells", n_cells}, {"resamples", sc.bootstrap}, {"seed", sc.seed},
                             {"methods", rows}, {"correlations", corr}};
  write_file_atomically(dir + "/proxy_cells.csv", cc.text());
  write_file_atomically(dir + "/proxy.csv", pc.text());
  write_file_atomically(dir + "/proxy.json", pj.dump(1) + "\n");

  // ---- summary section
  std::ostringstream s;
  const bool replayed = ranks.count("kl") > 0;
  s << "\n## Proxy vs end task\n\n" << ms.size() << " methods over " << n_cells
    << " cells (means over cells): surrogate = predicted relative error (observation queries), error = recomputed relative "
       "output error (decode queries)";
  if (replayed) s << ", agreement and mean KL from the " << spec.mode << " replay on the model";
  s << ". Ranks: 1 = best.\n\n| method | code bits | total bits | evicted | surrogate | error |"
    << (replayed ? " agreement | mean KL (nats) |" : "") << " rank S | rank E |" << (replayed ? " rank KL | rank agr. |" : "")
    << "\n|---|---|---|---|---|---|" << (replayed ? "---|---|" : "") << "---|---|" << (replayed ? "---|---|" : "") << "\n";
  std::vector<std::size_t> order(ms.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ms[a].error < ms[b].error; });
  for (const std::size_t i : order) {
    const auto& r = ms[i];
    s << "| " << r.label << " | " << format_or_nan(r.code_bits, "%.2f") << " | " << format_or_nan(r.total_bits, "%.2f")
      << " | " << format_or_nan(100 * r.evicted, "%.0f") << "% | " << format_or_nan(r.surrogate, "%.3g") << " | "
      << format_or_nan(r.error, "%.3g") << " |";
    if (replayed) s << ' ' << format_or_nan(r.agreement, "%.3f") << " | " << format_or_nan(r.mean_kl, "%.3g") << " |";
    s << ' ' << format_or_nan(rank("surrogate", i), "%g") << " | " << format_or_nan(rank("error", i), "%g") << " |";
    if (replayed)
      s << ' ' << format_or_nan(rank("kl", i), "%g") << " | " << format_or_nan(rank("disagreement", i), "%g") << " |";
    s << '\n';
  }
  s << "\nRank correlations over the methods (Spearman rho with its 95% bootstrap interval over methods, " << sc.bootstrap
    << " resamples, seed " << sc.seed << "; Kendall tau-b):\n\n";
  for (const auto& c : corr)
    s << "- " << c["x"].get<std::string>() << " vs " << c["y"].get<std::string>()
      << ": rho = " << format_or_nan(double_or_nan(c, "spearman"), "%.3f") << " ["
      << format_or_nan(double_or_nan(c, "ci_lo"), "%.3f") << ", " << format_or_nan(double_or_nan(c, "ci_hi"), "%.3f")
      << "], tau_b = " << format_or_nan(double_or_nan(c, "kendall"), "%.3f") << " (" << c["methods"] << " methods).\n";
  if (ranks.count("surrogate") && ranks.count("error")) {
    // The methods the surrogate misplaces most (|rank S - rank E|, largest first, ties in table order).
    std::vector<std::size_t> by_gap(ms.size());
    for (std::size_t i = 0; i < by_gap.size(); ++i) by_gap[i] = i;
    auto gap = [&](std::size_t i) { return std::fabs(ranks["surrogate"][i] - ranks["error"][i]); };
    std::stable_sort(by_gap.begin(), by_gap.end(), [&](std::size_t a, std::size_t b) { return gap(a) > gap(b); });
    s << "\nLargest rank displacements, surrogate vs recomputed error:";
    for (std::size_t k = 0; k < std::min<std::size_t>(3, by_gap.size()); ++k) {
      const std::size_t i = by_gap[k];
      s << (k ? ";" : "") << ' ' << ms[i].label << " (rank " << format_or_nan(ranks["surrogate"][i], "%g")
        << " by the surrogate, " << format_or_nan(ranks["error"][i], "%g") << " by the error; "
        << format_or_nan(100 * ms[i].evicted, "%.0f") << "% evicted)";
    }
    s << ".\n";
  }
  for (const auto& c : corr)
    if (c["x"] == "surrogate" && c["y"] == "error") {
      const double lo = double_or_nan(c, "ci_lo");
      s << "\nThe surrogate " << (lo > 0 ? "orders the methods as the recomputed error does (interval above 0)"
                                         : "does not reliably order the methods as the recomputed error does (interval reaches 0)")
        << ".\n";
    }
  return s.str();
}

// ---- the analysis (scenarios/scenario/analysis.hpp) ----------------------------------------------------

namespace {

std::shared_ptr<const Analysis> read_proxy_section(const YAML::Node& root, const YamlReader& c, const Scenario& s) {
  const YAML::Node px = root["proxy"];
  if (!px) return nullptr;
  ProxySpec spec;
  if (!px.IsNull()) {
    c.keys(px, "proxy", {"mode"});
    if (px["mode"]) {
      spec.mode = c.str(px["mode"], "proxy.mode");
      if (spec.mode != "teacher-forced" && spec.mode != "free-running")
        c.fail(px["mode"], "key 'proxy.mode' is '" + spec.mode + "'; the choices are teacher-forced, free-running.");
    }
  }
  if (s.methods.empty()) c.fail(px, "key 'proxy' ranks the scenario's 'methods'; give the key 'methods' (a list of method entries).");
  return std::make_shared<ProxyAnalysis>(spec);
}

std::vector<NamedFigure> figures_proxy(const std::string& dir) {
  if (!std::filesystem::exists(dir + "/tables/proxy.json")) return {};
  std::vector<NamedFigure> out;
  const nlohmann::json p = read_table_json(dir + "/tables/proxy.json");
  std::map<std::string, double> rho;
  for (const auto& c : p.at("correlations"))
    rho[c.at("x").get<std::string>() + "/" + c.at("y").get<std::string>()] = double_or_nan(c, "spearman");
  const double n = static_cast<double>(p.at("methods").size());
  {
    Figure f;
    f.title = "Method ranks: surrogate vs recomputed error (rho " + format_label(rho["surrogate/error"], "%.2f") + ")";
    if (rho.count("surrogate/kl")) f.title += " and replay KL (rho " + format_label(rho["surrogate/kl"], "%.2f") + ")";
    f.xlabel = "rank by the surrogate's predicted error (1 = best)";
    f.ylabel = "rank by the end metric (1 = best)";
    Series e{"rank by recomputed output error", palette(0), Style::Points, {}, {}, 10};
    Series k{"rank by replay mean KL (model)", palette(1), Style::Squares, {}, {}, 8};
    for (const auto& m : p.at("methods")) {
      const double x = double_or_nan(m, "rank_surrogate");
      if (std::isfinite(double_or_nan(m, "rank_error"))) {
        e.x.push_back(x), e.y.push_back(double_or_nan(m, "rank_error"));
        f.labels.push_back({x, double_or_nan(m, "rank_error"), m.value("method", std::string())});  // which method
      }
      if (std::isfinite(double_or_nan(m, "rank_kl"))) k.x.push_back(x), k.y.push_back(double_or_nan(m, "rank_kl"));
    }
    f.series = {{"same rank (y = x)", Rgb{120, 120, 120}, Style::Dashed, {0, n + 1}, {0, n + 1}, 1}, e};
    if (!k.x.empty()) f.series.push_back(k);
    f.xmin = 0, f.xmax = n + 1, f.ymin = 0, f.ymax = n + 1;
    out.push_back({std::string("proxy_ranks"), f});
  }
  {
    Figure f;
    f.title = "Surrogate prediction vs recomputed error, one point per method";
    f.xlabel = "surrogate predicted relative error (observation queries, log)";
    f.ylabel = "recomputed relative output error (log)";
    std::map<std::string, Series> by;
    double lo = INFINITY, hi = 0;
    int unplotted = 0;
    for (const auto& m : p.at("methods")) {
      const double x = double_or_nan(m, "surrogate"), y = double_or_nan(m, "error");
      if (!(x > 0) || !(y > 0)) {
        ++unplotted;
        continue;
      }
      Series& s = by[m.at("kind").get<std::string>()];
      s.x.push_back(x), s.y.push_back(y);
      f.labels.push_back({x, y, m.value("method", std::string())});  // which method
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
    f.series.push_back({"y = x (the prediction exact)", Rgb{120, 120, 120}, Style::Dashed, {a, b}, {a, b}, 1});
    f.xlog = true, f.xlog_base = 10, f.ylog = true;
    f.xmin = a, f.xmax = b, f.ymin = a, f.ymax = b;
    if (unplotted > 0)
      f.note = std::to_string(unplotted) + " method" + (unplotted == 1 ? "" : "s") +
               " with a zero or undefined error or prediction cannot be placed on log axes (tables/proxy.csv has every method).";
    out.push_back({std::string("proxy_error"), f});
  }
  return out;
}


}  // namespace

void ProxyAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  cell["proxy"] = proxy_cell(ctx.scenario, spec, ctx.cell, ctx.trace, ctx.backend, ctx.stop);
}

std::string ProxyAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                        const std::string& dir) const {
  return write_proxy_tables(sc, spec, cells, dir);
}

AnalysisType ProxyAnalysis::type() {
  return {"proxy", "the scenario's methods ranked by attention-output error vs by end-task metrics (replay)",
          {"proxy"}, read_proxy_section, figures_proxy};
}

}  // namespace tierlab
