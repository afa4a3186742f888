// Smoothed vs raw scores: span truncation and recomputed error (smoothing_study.hpp).
#include "scenarios/analyses/smoothing.hpp"
#include "scenarios/pipeline/head.hpp"
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
#include <tuple>

#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

namespace {


std::string family_name(Family fam) { return std::string(1, family_letter(fam)); }

}  // namespace

void SmoothingStudyOptions::validate() const {
  ladder.validate();
  check_budget(budget, "smoothing budget");
  if (budget == 0)  // every token evicted: no answer can survive, and no truncation rate is defined
    throw InputError("smoothing budget = 0 bits per element; the study needs a budget > 0.");
  if (variants.empty()) throw InputError("smoothing study: no variant given (the first should be the raw scores, kernel 1).");
  for (const auto& v : variants) v.validate();
  if (families.empty()) throw InputError("smoothing study: no family given (M and/or E).");
  for (Family fam : families)
    if (fam == Family::Quantize)
      throw InputError("smoothing study: family Q evicts nothing, so it has no span truncation; use M and/or E.");
}

std::string variant_name(const SmoothingOptions& v) {
  if (v.kernel == 1) return "raw";
  return std::string(to_string(v.pool)) + std::to_string(v.kernel);
}

int spans_split(const std::vector<Span>& spans, const std::vector<std::uint8_t>& tiers) {
  const auto T = static_cast<std::int64_t>(tiers.size());
  int split = 0;
  for (const Span& s : spans) {
    if (s.begin < 0 || s.end > T || s.begin >= s.end)
      throw InputError("span [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                       ") is empty or outside the allocation's " + std::to_string(T) + " tokens.");
    const std::uint8_t first = tiers[static_cast<std::size_t>(s.begin)];
    for (std::int32_t t = s.begin + 1; t < s.end; ++t)
      if (tiers[static_cast<std::size_t>(t)] != first) {
        ++split;
        break;
      }
  }
  return split;
}

SmoothingHead smoothing_head(const HeadData& head, const SmoothingStudyOptions& opt, Recomputer& backend) {
  opt.validate();
  SmoothingHead out;
  out.layer = head.layer;
  out.kv_head = head.kv_head;
  out.n_spans = static_cast<int>(head.spans.size());
  const SurrogateCosts sc = surrogate_costs(head, opt.rope, observation_queries(head), opt.ladder);
  const std::vector<double> rates = ladder_rates(head, opt.rope, opt.ladder, opt.rate_kind);
  std::vector<MatrixRMd> pooled;
  for (const SmoothingOptions& v : opt.variants) pooled.push_back(smooth_costs(sc.cost, v));

  // Distinct allocations are materialised and recomputed once (kernel 1 of avg and max, or
  // two kernels that pick the same tokens, share their numbers).
  std::map<std::string, std::size_t> seen;  // key: the tiers as bytes
  std::vector<MaterializedKeys> mats;
  std::vector<std::size_t> mat_of;  // per outcome (feasible ones), index into mats
  for (Family fam : opt.families) {
    const FamilyChoice choice = fam == Family::Mixed ? FamilyChoice::Mixed : FamilyChoice::Evict;
    for (std::size_t vi = 0; vi < opt.variants.size(); ++vi) {
      SmoothingOutcome o;
      o.family = fam;
      o.variant = static_cast<int>(vi);
      o.obs = o.decode = ErrorMetrics{kNaN, kNaN, kNaN, kNaN};
      o.surrogate = o.surrogate_rel = o.evicted_fraction = kNaN;
      const HeadSolution r = solve_head(pooled[vi], sc.weights.a, rates, opt.ladder, opt.budget, choice);
      if (r.feasible) {
        o.feasible = true;
        o.tiers = r.tiers;
        double cost = 0;
        int evicted = 0;
        for (std::size_t t = 0; t < o.tiers.size(); ++t) {
          cost += sc.cost(o.tiers[t], static_cast<Eigen::Index>(t));
          evicted += o.tiers[t] == 0 ? 1 : 0;
        }
        o.surrogate = cost;
        o.surrogate_rel = sc.output_norm2 > 0 ? cost / sc.output_norm2 : kNaN;
        o.evicted_fraction = o.tiers.empty() ? kNaN : static_cast<double>(evicted) / static_cast<double>(o.tiers.size());
        if (!head.spans.empty()) {
          o.spans = span_truncation(head.spans, o.tiers);
          o.split = spans_split(head.spans, o.tiers);
        }
        const std::string key(o.tiers.begin(), o.tiers.end());
        auto it = seen.find(key);
        if (it == seen.end()) {
          it = seen.emplace(key, mats.size()).first;
          mats.push_back(materialize(head, opt.rope, opt.ladder, o.tiers));
        }
        mat_of.push_back(it->second);
      }
      out.outcomes.push_back(std::move(o));
    }
  }
  if (mats.empty()) return out;

  // Observation queries: one batch, one variant and one selection per distinct allocation.
  const std::vector<ErrorMetrics> obs = evaluate_obs_queries(head, mats, backend);
  const bool has_decode = head.decode_keys.rows() > 0 && head.decode_queries.rows() > 0;
  std::vector<ErrorMetrics> dec(mats.size(), ErrorMetrics{kNaN, kNaN, kNaN, kNaN});
  if (has_decode) dec = evaluate_decode_steps(head, mats, backend);  // one batch: the head prepared once
  std::size_t next = 0;
  for (SmoothingOutcome& o : out.outcomes) {
    if (!o.feasible) continue;
    const std::size_t k = mat_of[next++];
    o.obs = obs.at(k);
    o.decode = dec[k];
  }
  return out;
}

nlohmann::json smoothing_cell(const Scenario& sc, const SmoothingSpec& s, const TraceReader& trace, Recomputer& backend,
                              const std::atomic<bool>* stop) {
  SmoothingStudyOptions opt;
  opt.ladder = sc.ladder;
  opt.rope = trace.meta().rope;
  opt.rate_kind = sc.rate_kind;
  opt.families = s.families;
  opt.variants = {SmoothingOptions{PoolKind::Avg, 1, s.padding}};
  for (PoolKind pool : s.pooling)
    for (int k : s.kernels)
      if (k > 1) opt.variants.push_back(SmoothingOptions{pool, k, s.padding});
  nlohmann::json variants = nlohmann::json::array(), families = nlohmann::json::array();
  for (const auto& v : opt.variants)
    variants.push_back({{"name", variant_name(v)}, {"pool", v.kernel == 1 ? "none" : std::string(to_string(v.pool))},
                        {"kernel", v.kernel}});
  for (Family fam : opt.families) families.push_back(family_name(fam));
  const TraceMeta& m = trace.meta();
  nlohmann::json heads = nlohmann::json::array();
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      const HeadData head = trace.head(l, h);
      nlohmann::json outs = nlohmann::json::array();
      for (const double B : s.budgets) {
        throw_if_cancelled(stop);
        opt.budget = B;
        const SmoothingHead r = smoothing_head(head, opt, backend);
        for (const SmoothingOutcome& o : r.outcomes)
          outs.push_back({{"budget", B},
                          {"family", family_name(o.family)},
                          {"variant", variants[static_cast<std::size_t>(o.variant)]["name"]},
                          {"feasible", o.feasible},
                          {"truncated", o.spans.truncated},
                          {"fully_evicted", o.spans.fully_evicted},
                          {"split", o.split},
                          {"evicted_fraction", finite_or_null(o.evicted_fraction)},
                          {"surrogate", finite_or_null(o.surrogate)},
                          {"surrogate_rel", finite_or_null(o.surrogate_rel)},
                          {"err_obs", finite_or_null(o.obs.rel_error)},
                          {"err_decode", finite_or_null(o.decode.rel_error)}});
      }
      heads.push_back({{"layer", l}, {"kv_head", h}, {"spans", static_cast<int>(head.spans.size())}, {"outcomes", outs}});
    }
  return {{"budgets", s.budgets},
          {"padding", std::string(to_string(s.padding))},
          {"variants", variants},
          {"families", families},
          {"heads", heads}};
}

namespace {

// Per (family, budget, variant): sums over the cells' heads.
struct SmoothingAcc {
  int spans = 0, truncated = 0, fully = 0, split = 0, heads = 0, span_heads = 0;
  std::vector<double> err, err_span_heads, ratio, sur_ratio, evicted;
  int better = 0, worse = 0, compared = 0;
};
using SmoothingKey = std::tuple<std::string, double, std::string>;

// smoothing_heads.csv (cell x head x budget x family x variant) and the sums per row.
std::map<SmoothingKey, SmoothingAcc> smoothing_heads_table(const std::vector<nlohmann::json>& cells, const char* err_key,
                                                           const std::string& tables_dir) {
  std::map<SmoothingKey, SmoothingAcc> acc;
  CsvWriter hc({"cell", "layer", "kv_head", "spans", "budget", "family", "variant", "feasible", "truncated",
                "fully_evicted", "split", "evicted_fraction", "surrogate", "surrogate_rel", "err_obs", "err_decode",
                "err_ratio_to_raw"});
  for (const auto& c : cells) {
    if (!c.contains("smoothing")) continue;
    for (const auto& h : c["smoothing"]["heads"]) {
      const int spans = h["spans"].get<int>();
      std::map<std::pair<std::string, double>, std::pair<double, double>> raw;  // (family, B) -> (err, surrogate)
      for (const auto& o : h["outcomes"])
        if (o["variant"] == "raw")
          raw[{o["family"].get<std::string>(), o["budget"].get<double>()}] = {double_or_nan(o, err_key),
                                                                              double_or_nan(o, "surrogate")};
      for (const auto& o : h["outcomes"]) {
        const std::string fam = o["family"].get<std::string>(), var = o["variant"].get<std::string>();
        const double B = o["budget"].get<double>();
        const auto rit = raw.find({fam, B});
        const double e = double_or_nan(o, err_key), er = rit != raw.end() ? rit->second.first : kNaN;
        const double ratio = std::isfinite(e) && std::isfinite(er) && er > 0 ? e / er : kNaN;
        hc.row() << c["id"].get<std::string>() << h["layer"].get<int>() << h["kv_head"].get<int>() << spans
                 << format_or_nan(B) << fam << var << o["feasible"].get<bool>() << o["truncated"].get<int>()
                 << o["fully_evicted"].get<int>() << o["split"].get<int>()
                 << format_or_nan(double_or_nan(o, "evicted_fraction")) << format_or_nan(double_or_nan(o, "surrogate"))
                 << format_or_nan(double_or_nan(o, "surrogate_rel")) << format_or_nan(double_or_nan(o, "err_obs"))
                 << format_or_nan(double_or_nan(o, "err_decode")) << format_or_nan(ratio);
        if (!o["feasible"].get<bool>()) continue;
        SmoothingAcc& a = acc[{fam, B, var}];
        ++a.heads;
        a.spans += spans;
        a.truncated += o["truncated"].get<int>();
        a.fully += o["fully_evicted"].get<int>();
        a.split += o["split"].get<int>();
        if (std::isfinite(double_or_nan(o, "evicted_fraction")))
          a.evicted.push_back(double_or_nan(o, "evicted_fraction"));
        if (std::isfinite(e)) {
          a.err.push_back(e);
          if (spans > 0) a.err_span_heads.push_back(e);
        }
        a.span_heads += spans > 0 ? 1 : 0;
        if (std::isfinite(ratio)) a.ratio.push_back(ratio);
        const double sr = rit != raw.end() ? rit->second.second : kNaN, so = double_or_nan(o, "surrogate");
        if (std::isfinite(so) && std::isfinite(sr) && sr > 0) a.sur_ratio.push_back(so / sr);
        if (std::isfinite(e) && std::isfinite(er)) {
          ++a.compared;
          const double tol = 1e-9 * std::max(std::fabs(e), std::fabs(er));
          a.better += e < er - tol ? 1 : 0;
          a.worse += e > er + tol ? 1 : 0;
        }
      }
    }
  }
  write_file_atomically(tables_dir + "/smoothing_heads.csv", hc.text());

  return acc;
}

// smoothing.csv/.json: one row per family x budget x variant.
nlohmann::json smoothing_rows_table(const Scenario& sc, const nlohmann::json& spec, const std::vector<double>& budgets,
                                    const std::map<SmoothingKey, SmoothingAcc>& acc, const std::string& qname,
                                    const std::string& tables_dir) {
  CsvWriter tc({"family", "budget", "variant", "pool", "kernel", "heads", "span_heads", "spans", "truncated",
                "fully_evicted", "split", "truncation_rate", "split_rate", "mean_evicted_fraction", "mean_err",
                "median_err", "mean_err_span_heads", "median_err_ratio_to_raw", "mean_err_ratio_to_raw",
                "median_surrogate_ratio_to_raw", "share_better_than_raw", "share_worse_than_raw"});
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& fam : spec["families"])
    for (const double B : budgets)
      for (const auto& v : spec["variants"]) {
        const std::string fn = fam.get<std::string>(), vn = v["name"].get<std::string>();
        const auto it = acc.find({fn, B, vn});
        if (it == acc.end()) continue;
        const SmoothingAcc& a = it->second;
        const double trunc = a.spans ? static_cast<double>(a.truncated) / a.spans : kNaN;
        const double split = a.spans ? static_cast<double>(a.split) / a.spans : kNaN;
        const double better = a.compared ? static_cast<double>(a.better) / a.compared : kNaN;
        const double worse = a.compared ? static_cast<double>(a.worse) / a.compared : kNaN;
        rows.push_back({{"family", fn},
                        {"budget", B},
                        {"variant", vn},
                        {"pool", v["pool"]},
                        {"kernel", v["kernel"]},
                        {"heads", a.heads},
                        {"span_heads", a.span_heads},
                        {"spans", a.spans},
                        {"truncated", a.truncated},
                        {"fully_evicted", a.fully},
                        {"split", a.split},
                        {"truncation_rate", finite_or_null(trunc)},
                        {"split_rate", finite_or_null(split)},
                        {"mean_evicted_fraction", finite_or_null(mean_or_nan(a.evicted))},
                        {"mean_err", finite_or_null(mean_or_nan(a.err))},
                        {"median_err", finite_or_null(median_or_nan(a.err))},
                        {"mean_err_span_heads", finite_or_null(mean_or_nan(a.err_span_heads))},
                        {"median_err_ratio_to_raw", finite_or_null(median_or_nan(a.ratio))},
                        {"mean_err_ratio_to_raw", finite_or_null(mean_or_nan(a.ratio))},
                        {"median_surrogate_ratio_to_raw", finite_or_null(median_or_nan(a.sur_ratio))},
                        {"share_better_than_raw", finite_or_null(better)},
                        {"share_worse_than_raw", finite_or_null(worse)}});
        tc.row() << fn << format_or_nan(B) << vn << v["pool"].get<std::string>() << v["kernel"].get<int>() << a.heads
                 << a.span_heads << a.spans << a.truncated << a.fully << a.split << format_or_nan(trunc)
                 << format_or_nan(split) << format_or_nan(mean_or_nan(a.evicted)) << format_or_nan(mean_or_nan(a.err))
                 << format_or_nan(median_or_nan(a.err)) << format_or_nan(mean_or_nan(a.err_span_heads))
                 << format_or_nan(median_or_nan(a.ratio)) << format_or_nan(mean_or_nan(a.ratio))
                 << format_or_nan(median_or_nan(a.sur_ratio)) << format_or_nan(better) << format_or_nan(worse);
      }
  const nlohmann::json table = {{"budgets", budgets},
                                {"rate_kind", sc.rate_kind == RateKind::Code ? "code" : "total"},
                                {"padding", spec["padding"]},
                                {"queries", qname},
                                {"ladder", sc.ladder.name()},
                                {"rows", rows}};
  write_file_atomically(tables_dir + "/smoothing.csv", tc.text());
  write_file_atomically(tables_dir + "/smoothing.json", table.dump(1) + "\n");

  return rows;
}

// The summary.md section: one table per family, then one finding per family and budget.
std::string smoothing_summary(const nlohmann::json& spec, const std::vector<double>& budgets, const nlohmann::json& rows,
                              const std::string& qname) {
  // ---- summary.md section: one table per family (rows: scores; per budget: truncated
  // spans and the error), then one finding per family and budget.
  std::ostringstream s;
  s << "\n## Smoothed scores: span truncation and error\n\n"
    << "Per head and budget, each family's surrogate optimum decided from the raw costs and from costs pooled over a "
       "centred window of k tokens ("
    << spec["padding"].get<std::string>() << " padding), recomputed exactly on the " << qname
    << " queries. A span is truncated when some but not all of its tokens are evicted (docs/model.md section 9). Per "
       "cell: truncated spans / spans (rate), the mean over heads of the relative error, and the median over heads of "
       "err(smoothed) / err(raw).\n";
  auto row_of = [&](const std::string& fam, double B, const std::string& var) -> const nlohmann::json* {
    for (const auto& r : rows)
      if (r["family"] == fam && r["budget"].get<double>() == B && r["variant"] == var) return &r;
    return nullptr;
  };
  for (const auto& fam : spec["families"]) {
    const std::string fn = fam.get<std::string>();
    s << "\n" << (fn == "M" ? "M* (mixed tiers)" : "E* (evict only)") << ":\n\n| scores |";
    for (double B : budgets) s << " B = " << format_or_nan(B) << ": truncated | mean err | err ratio |";
    s << "\n|---|";
    for (std::size_t i = 0; i < budgets.size(); ++i) s << "---|---|---|";
    s << "\n";
    for (const auto& v : spec["variants"]) {
      const std::string vn = v["name"].get<std::string>();
      s << "| " << vn << " |";
      for (double B : budgets) {
        const nlohmann::json* r = row_of(fn, B, vn);
        if (r == nullptr) {
          s << " - | - | - |";
          continue;
        }
        // No spans: no truncation rate ("no spans" instead of 0/0 = NaN).
        const double rate = double_or_nan(*r, "truncation_rate");
        s << ' ' << (*r)["truncated"] << "/" << (*r)["spans"] << " ("
          << (std::isfinite(rate) ? format_or_nan(100 * rate, "%.1f") + "%" : std::string("no spans")) << ") | "
          << format_or_nan(double_or_nan(*r, "mean_err"), "%.4g", "not defined") << " | "
          << format_or_nan(double_or_nan(*r, "median_err_ratio_to_raw"), "%.2f", "not defined") << " |";
      }
      s << "\n";
    }
  }
  s << "\n";
  int pairs = 0, lower_trunc = 0, higher_err = 0, variants_n = 0;
  for (const auto& r : rows) {
    if (r["variant"] == "raw") continue;
    const nlohmann::json* raw = row_of(r["family"].get<std::string>(), r["budget"].get<double>(), "raw");
    if (raw == nullptr || (*raw)["spans"].get<int>() == 0) continue;
    ++variants_n;
    lower_trunc += double_or_nan(r, "truncation_rate") < double_or_nan(*raw, "truncation_rate") ? 1 : 0;
    higher_err += double_or_nan(r, "mean_err") > double_or_nan(*raw, "mean_err") ? 1 : 0;
  }
  for (const auto& fam : spec["families"])
    for (const double B : budgets) pairs += row_of(fam.get<std::string>(), B, "raw") != nullptr ? 1 : 0;
  if (variants_n > 0)
    s << "Over " << pairs << " (family, budget) pairs and " << variants_n << " smoothed allocations, smoothing lowers the "
      << "span truncation rate in " << lower_trunc << " and raises the mean " << qname << " error in " << higher_err
      << " (" << format_or_nan(100.0 * higher_err / variants_n, "%.0f") << "%).\n\n";
  for (const auto& fam : spec["families"])
    for (const double B : budgets) {
      const std::string fn = fam.get<std::string>();
      const nlohmann::json* raw = row_of(fn, B, "raw");
      if (raw == nullptr) continue;
      if ((*raw)["spans"].get<int>() == 0) {
        s << "- " << fn << "*, B = " << format_or_nan(B)
          << ": no head of these cells has recorded spans; the truncation rate is undefined.\n";
        continue;
      }
      const nlohmann::json* best = nullptr;
      for (const auto& r : rows)
        if (r["family"] == fam && r["budget"].get<double>() == B && r["variant"] != "raw" &&
            std::isfinite(double_or_nan(r, "truncation_rate")) &&
            (best == nullptr || double_or_nan(r, "truncation_rate") < double_or_nan(*best, "truncation_rate")))
          best = &r;
      const double tr = double_or_nan(*raw, "truncation_rate");
      s << "- " << fn << "*, B = " << format_or_nan(B) << ": raw scores truncate " << (*raw)["truncated"] << " of "
        << (*raw)["spans"] << " spans (" << format_or_nan(100 * tr, "%.1f") << "%), mean " << qname << " error "
        << format_or_nan(double_or_nan(*raw, "mean_err"), "%.4g") << ".";
      if (best != nullptr) {
        const double tb = double_or_nan(*best, "truncation_rate"),
                     ratio = double_or_nan(*best, "median_err_ratio_to_raw");
        s << " The least-truncating smoothing, " << (*best)["variant"].get<std::string>() << ": "
          << (*best)["truncated"] << " of " << (*best)["spans"] << " (" << format_or_nan(100 * tb, "%.1f")
          << "%), mean error " << format_or_nan(double_or_nan(*best, "mean_err"), "%.4g") << " (on the "
          << (*best)["span_heads"] << " heads with spans "
          << format_or_nan(double_or_nan(*raw, "mean_err_span_heads"), "%.4g") << " -> "
          << format_or_nan(double_or_nan(*best, "mean_err_span_heads"), "%.4g")
          << "), median per-head error ratio to raw " << format_or_nan(ratio, "%.2f") << " ("
          << format_or_nan(100 * double_or_nan(*best, "share_worse_than_raw"), "%.0f") << "% of heads worse). ";
        if (tb < tr && std::isfinite(ratio) && ratio <= 1.0)
          s << "Smoothing keeps more spans whole at no cost in error.";
        else if (tb < tr)
          s << "Smoothing keeps more spans whole but costs error (the raw allocation is the optimum of the true costs).";
        else if (tb == tr)
          s << "Smoothing does not change the truncation rate.";
        else
          s << "Every smoothing truncates more spans than the raw scores here.";
      }
      s << "\n";
    }
  return s.str();
}

}  // namespace

std::string write_smoothing_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                   const std::string& tables_dir) {
  const nlohmann::json* first = nullptr;
  for (const auto& c : cells)
    if (c.contains("smoothing")) {
      first = &c;
      break;
    }
  if (first == nullptr) return "";
  const nlohmann::json& spec = (*first)["smoothing"];
  const std::vector<double> budgets = spec["budgets"].get<std::vector<double>>();
  const bool decode = sc.queries == QuerySet::Decode;
  const char* err_key = decode ? "err_decode" : "err_obs";
  const std::string qname(to_string(sc.queries));

  const auto acc = smoothing_heads_table(cells, err_key, tables_dir);
  const nlohmann::json rows = smoothing_rows_table(sc, spec, budgets, acc, qname, tables_dir);
  return smoothing_summary(spec, budgets, rows, qname);
}

// ---- the analysis (scenarios/scenario/analysis.hpp) ----------------------------------------------------

namespace {

const char* family_words(const std::string& f) { return f == "M" ? "M* (mixed)" : f == "E" ? "E* (evict only)" : "?"; }

// Lines of `key` vs kernel k for one family: one per (budget, pooling), colour by budget,
// solid for avg and dashed for max pooling; the raw row (kernel 1) starts every line.
// normalize: each line divided by its raw value (so every line starts at 1).
std::vector<Series> curves(const nlohmann::json& table, const std::string& family, const char* key, double scale,
                           bool normalize, double& ylo, double& yhi, double& kmax) {
  std::vector<double> budgets;
  std::vector<std::string> pools;
  for (const auto& r : table.at("rows")) {
    if (r.at("family") != family) continue;
    const double B = r.at("budget").get<double>();
    const std::string pool = r.at("pool").get<std::string>();
    if (std::find(budgets.begin(), budgets.end(), B) == budgets.end()) budgets.push_back(B);
    if (pool != "none" && std::find(pools.begin(), pools.end(), pool) == pools.end()) pools.push_back(pool);
  }
  std::vector<Series> out;
  for (std::size_t bi = 0; bi < budgets.size(); ++bi)
    for (const auto& pool : pools) {
      Series s;
      // Legend: one entry per budget (the avg line); the max lines share one grey entry.
      s.name = pool == "avg" || std::find(pools.begin(), pools.end(), "avg") == pools.end()
                   ? "B = " + format_label(budgets[bi]) + " bits per element"
                   : "";
      s.color = palette(static_cast<int>(bi));
      s.style = pool == "avg" ? Style::Line : Style::Dashed;
      double raw = 1.0;
      for (const auto& r : table.at("rows"))
        if (normalize && r.at("family") == family && r.at("budget").get<double>() == budgets[bi] && r.at("kernel").get<int>() == 1)
          raw = double_or_nan(r, key);
      if (!(raw > 0)) continue;
      for (const auto& r : table.at("rows")) {
        if (r.at("family") != family || r.at("budget").get<double>() != budgets[bi]) continue;
        const std::string p = r.at("pool").get<std::string>();
        if (p != "none" && p != pool) continue;
        const double y = double_or_nan(r, key) * scale / raw;
        if (!std::isfinite(y)) continue;
        s.x.push_back(r.at("kernel").get<int>()), s.y.push_back(y);
      }
      for (double y : s.y) ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      for (double x : s.x) kmax = std::max(kmax, x);
      if (!s.x.empty()) out.push_back(std::move(s));
    }
  if (pools.size() > 1)  // a legend-only entry (no points) for the line styles
    out.push_back({"dashed: max pooling (solid: avg)", Rgb{90, 90, 90}, Style::Dashed, {}, {}, 1});
  return out;
}


std::shared_ptr<const Analysis> read_smoothing_section(const YAML::Node& root, const YamlReader& c, const Scenario&) {
  const YAML::Node sm = root["smoothing"];
  if (!sm) return nullptr;
  SmoothingSpec spec;
  if (!sm.IsMap()) c.fail(sm, "key 'smoothing' must be a mapping with the keys kernels, pooling, padding, budgets, families.");
  c.keys(sm, "smoothing", {"kernels", "pooling", "padding", "budgets", "families"});
  if (sm["kernels"]) {
    spec.kernels.clear();
    for (const auto& x : c.list(sm["kernels"], "smoothing.kernels")) {
      const int k = static_cast<int>(c.integer(x, "smoothing.kernels", 1, 63));
      if (k % 2 == 0) c.fail(x, "key 'smoothing.kernels' is " + std::to_string(k) + "; the window is centred, so a kernel must be odd (1, 3, 5, ..., 63).");
      spec.kernels.push_back(k);
    }
  }
  if (sm["pooling"]) {
    spec.pooling.clear();
    for (const auto& x : c.list(sm["pooling"], "smoothing.pooling"))
      spec.pooling.push_back(c.wrap(x, "smoothing.pooling", [&] { return parse_pool_kind(c.str(x, "smoothing.pooling")); }));
  }
  if (sm["padding"])
    spec.padding = c.wrap(sm["padding"], "smoothing.padding", [&] { return parse_padding(c.str(sm["padding"], "smoothing.padding")); });
  if (sm["budgets"]) {
    spec.budgets.clear();
    for (const auto& x : c.list(sm["budgets"], "smoothing.budgets")) spec.budgets.push_back(c.num(x, "smoothing.budgets", 0.01, 16.0));
  }
  if (sm["families"]) {
    spec.families.clear();
    for (const auto& x : c.list(sm["families"], "smoothing.families")) {
      const std::string v = c.str(x, "smoothing.families");
      if (v == "M") spec.families.push_back(Family::Mixed);
      else if (v == "E") spec.families.push_back(Family::Evict);
      else c.fail(x, "key 'smoothing.families' is '" + v + "'; the choices are M (mixed tiers), E (evict only).");
    }
  }
  return std::make_shared<SmoothingAnalysis>(spec);
}

std::vector<NamedFigure> figures_smoothing(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<NamedFigure> out;
  if (fs::exists(dir + "/tables/smoothing.json")) {
    const nlohmann::json t = read_table_json(dir + "/tables/smoothing.json");
    const std::string pad = t.value("padding", std::string("reflect")), q = t.value("queries", std::string("decode"));
    std::vector<std::string> families;
    for (const auto& r : t.at("rows"))
      if (std::find(families.begin(), families.end(), r.at("family").get<std::string>()) == families.end())
        families.push_back(r.at("family").get<std::string>());
    for (const std::string& fam : families) {
      int spans = 0;
      for (const auto& r : t.at("rows"))
        if (r.at("family") == fam && r.at("kernel").get<int>() == 1) spans = std::max(spans, r.at("spans").get<int>());
      const std::string xlabel = "pooling kernel k (tokens, " + pad + " padding; k = 1: raw scores)";
      {
        double ylo = 0, yhi = 0, kmax = 1;
        Figure f;
        f.series = curves(t, fam, "truncation_rate", 100.0, false, ylo, yhi, kmax);
        f.title = "Span truncation of " + std::string(family_words(fam)) + " vs smoothing kernel (" +
                  std::to_string(spans) + " spans)";
        f.xlabel = xlabel;
        f.ylabel = "span truncation rate (% of spans partly evicted)";
        f.xmin = 0.5, f.xmax = kmax + 0.5;
        f.ymax = std::min(std::max(yhi * 1.08, 1.0), 100.0);
        f.ymin = -0.03 * f.ymax;  // a rate of 0 stays visible above the axis
        out.push_back({std::string("smoothing_truncation_") + fam, f});
      }
      {
        double ylo = 1, yhi = 1, kmax = 1;
        Figure f;
        f.series = curves(t, fam, "mean_err", 1.0, true, ylo, yhi, kmax);
        f.title = "Recomputed error of " + std::string(family_words(fam)) + " with smoothed vs raw scores";
        f.xlabel = xlabel;
        f.ylabel = "mean error (smoothed) / mean error (raw), " + q + " queries";
        f.xmin = 0.5, f.xmax = kmax + 0.5;
        const double pad_y = std::max((yhi - ylo) * 0.08, 0.02);
        f.ymin = std::max(0.0, ylo - pad_y), f.ymax = yhi + pad_y;
        f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {f.xmin, f.xmax}, {1, 1}, 1});
        out.push_back({std::string("smoothing_error_") + fam, f});
      }
    }
  }
  return out;
}

}  // namespace

void SmoothingAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  cell["smoothing"] = smoothing_cell(ctx.scenario, spec, ctx.trace, ctx.backend, ctx.stop);
}

std::string SmoothingAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                            const std::string& dir) const {
  return write_smoothing_tables(sc, cells, dir);
}

AnalysisType SmoothingAnalysis::type() {
  return {"smoothing", "each family's optimum from raw vs pooled (smoothed) costs: span truncation, recomputed error",
          {"smoothing"}, read_smoothing_section, figures_smoothing};
}

}  // namespace tierlab
