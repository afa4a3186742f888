// What each engine granularity captures of the per-token optimum's gain (granularity.hpp).
#include "scenarios/analyses/granularity.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/text.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "scenarios/pipeline/budget_repair.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "solvers/granularity.hpp"

namespace tierlab {

namespace {

constexpr long long kMaxInlineTokens = 1 << 16;  // head-tokens of a per-token form written into the cell

std::vector<double> budgets_of(const GranularitySpec& s, const Scenario& sc) { return s.budgets.empty() ? sc.budgets : s.budgets; }

std::vector<Granularity> restrictions_of(const GranularitySpec& s) {
  if (s.restrictions.empty()) return all_granularities();
  std::vector<Granularity> out;
  for (const auto& r : s.restrictions) out.push_back(parse_granularity(r));
  // uniform and token define the share: always computed.
  for (Granularity g : {Granularity::Uniform, Granularity::Token})
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  std::vector<Granularity> ordered;
  for (Granularity g : all_granularities())
    if (std::find(out.begin(), out.end(), g) != out.end()) ordered.push_back(g);
  return ordered;
}

// Token ranges [start, end) where pred(t) holds, as [[start, end], ...].
template <class Pred>
nlohmann::json ranges(int T, Pred pred) {
  nlohmann::json out = nlohmann::json::array();
  for (int t = 0; t < T;) {
    if (!pred(t)) {
      ++t;
      continue;
    }
    int e = t;
    while (e < T && pred(e)) ++e;
    out.push_back({t, e});
    t = e;
  }
  return out;
}

// The allocation in an engine's terms (docs/trace-format.md, "Granularity allocations").
nlohmann::json engine_form(const GranularAllocation& a, const GranularityProblem& p, const RateLadder& ladder) {
  auto name = [&](int j) { return ladder.tiers[static_cast<std::size_t>(j)].name(); };
  const int T = p.tokens(), kv = p.n_kv_heads;
  auto tier = [&](int head, int t) { return static_cast<int>(a.tiers[static_cast<std::size_t>(head)][static_cast<std::size_t>(t)]); };
  // Per layer, per KV head: of_head(head index), the form every per-head restriction uses.
  auto by_layer_and_head = [&](const auto& of_head) {
    nlohmann::json layers = nlohmann::json::array();
    for (int l = 0; l < p.n_layers; ++l) {
      nlohmann::json row = nlohmann::json::array();
      for (int h = 0; h < kv; ++h) row.push_back(of_head(l * kv + h));
      layers.push_back(row);
    }
    return layers;
  };
  auto bands_of = [&](int head) {
    const char* band[] = {"sink", "middle", "recent"};
    nlohmann::json b = nlohmann::json::object();
    for (int t = 0; t < T; ++t) b[band[position_band(t, T, p.sink, p.recent)]] = name(tier(head, t));
    return b;
  };
  auto schedule_of = [&](int head) {
    std::vector<std::string> s(static_cast<std::size_t>(p.age_steps), "");
    for (int t = 0; t < T; ++t) s[static_cast<std::size_t>(age_band(t, T, p.age_steps))] = name(tier(head, t));
    return nlohmann::json(s);  // newest band first
  };
  auto ranges_of = [&](int head) {  // the token ranges of each tier but evict
    nlohmann::json by = nlohmann::json::object();
    for (int jt = 1; jt < static_cast<int>(p.rates.size()); ++jt) {
      nlohmann::json r = ranges(T, [&](int t) { return tier(head, t) == jt; });
      if (!r.empty()) by[name(jt)] = r;
    }
    return by;
  };
  nlohmann::json j;
  switch (a.granularity) {
    case Granularity::Uniform: j["tier"] = name(tier(0, 0)); break;
    case Granularity::Layer:
      j["layers"] = nlohmann::json::array();
      for (int l = 0; l < p.n_layers; ++l) j["layers"].push_back(name(tier(l * kv, 0)));
      break;
    case Granularity::Head: j["heads"] = by_layer_and_head([&](int head) { return name(tier(head, 0)); }); break;
    case Granularity::Bands: j["sink"] = p.sink, j["recent"] = p.recent, j["bands"] = bands_of(0); break;
    case Granularity::BandsHead: j["sink"] = p.sink, j["recent"] = p.recent, j["heads"] = by_layer_and_head(bands_of); break;
    case Granularity::Age: j["age_steps"] = p.age_steps, j["schedule"] = schedule_of(0); break;
    case Granularity::AgeHead: j["age_steps"] = p.age_steps, j["heads"] = by_layer_and_head(schedule_of); break;
    case Granularity::EvictShared:
    case Granularity::EvictHead:
    case Granularity::EvictLayer:
    case Granularity::TokenHead:
    case Granularity::Token: j["heads"] = by_layer_and_head(ranges_of); break;
  }
  return j;
}

std::shared_ptr<const Analysis> read_granularity_section(const YAML::Node& root, const YamlReader& c, const Scenario&) {
  const YAML::Node g = root["granularity"];
  if (!g) return nullptr;
  if (!g.IsMap()) c.fail(g, "key 'granularity' must be a mapping with the keys budgets, sink, recent, age_steps, restrictions ({} for the defaults).");
  c.keys(g, "granularity", {"budgets", "sink", "recent", "age_steps", "restrictions"});
  GranularitySpec s;
  if (g["budgets"])
    for (const auto& x : c.list(g["budgets"], "granularity.budgets")) s.budgets.push_back(c.num(x, "granularity.budgets", 0.01, 16.0));
  if (g["sink"]) s.sink = static_cast<int>(c.integer(g["sink"], "granularity.sink", 0, 1 << 20));
  if (g["recent"]) s.recent = static_cast<int>(c.integer(g["recent"], "granularity.recent", 0, 1 << 20));
  if (g["age_steps"]) s.age_steps = static_cast<int>(c.integer(g["age_steps"], "granularity.age_steps", 1, 8));
  if (g["restrictions"])
    for (const auto& x : c.list(g["restrictions"], "granularity.restrictions")) {
      const std::string v = c.str(x, "granularity.restrictions");
      c.wrap(x, "granularity.restrictions", [&] { return parse_granularity(v); });
      s.restrictions.push_back(v);
    }
  return std::make_shared<GranularityAnalysis>(s);
}

// ---- tables ---------------------------------------------------------------------------

struct HeadErrors {
  std::string cluster;                        // "cell/layer"
  std::map<std::string, double> err;          // restriction -> recomputed error of this head
};

struct Pooled {
  double share = kNaN, lo = kNaN, hi = kNaN, err = kNaN, surrogate_share = kNaN;
};

// Shares of every restriction over the heads `hs` (indices into `all`), the errors pooled.
std::map<std::string, double> shares_of(const std::vector<HeadErrors>& all, const std::vector<std::size_t>& hs,
                                        const std::vector<std::string>& names, std::map<std::string, double>* errs) {
  std::map<std::string, double> mean;
  for (const auto& n : names) {
    double s = 0;
    std::size_t k = 0;
    for (std::size_t i : hs) {
      const auto it = all[i].err.find(n);
      if (it != all[i].err.end() && std::isfinite(it->second)) s += it->second, ++k;
    }
    mean[n] = k == hs.size() && k > 0 ? s / static_cast<double>(k) : kNaN;
  }
  if (errs) *errs = mean;
  std::map<std::string, double> share;
  const double u = mean["uniform"], m = mean["token"];
  for (const auto& n : names) share[n] = std::isfinite(u) && std::isfinite(m) && u - m > 0 ? (u - mean[n]) / (u - m) : kNaN;
  return share;
}

// From an allocation's engine form (cells written before heads_evicted_whole): whether some
// head keeps no token -- a layer or head at "evict", a head whose every band or age band is
// "evict", or a head with no token range.
bool evicts_a_head_whole(const nlohmann::json& form) {
  auto all_evict = [](const nlohmann::json& x) {
    if (x.is_string()) return x.get<std::string>() == "evict";
    if (x.is_object() || x.is_array()) {
      for (const auto& v : x)
        if (!v.is_string() || v.get<std::string>() != "evict") return false;
      return true;  // an empty set of ranges: nothing kept
    }
    return false;
  };
  if (form.contains("layers"))
    for (const auto& l : form.at("layers"))
      if (all_evict(l)) return true;
  if (form.contains("heads"))
    for (const auto& layer : form.at("heads"))
      for (const auto& h : layer)
        if (all_evict(h)) return true;
  return false;
}

std::vector<NamedFigure> figures_granularity(const std::string& dir) {
  std::vector<NamedFigure> out;
  if (!std::filesystem::exists(dir + "/tables/granularity.json")) return out;
  const nlohmann::json t = read_table_json(dir + "/tables/granularity.json");
  std::map<std::string, std::map<std::string, Series>> by;  // preset -> restriction -> series
  std::map<std::string, std::map<double, bool>> defined;  // preset -> budget -> some share defined
  for (const auto& r : t.at("rows")) {
    const std::string preset = r.at("preset").get<std::string>(), g = r.at("restriction").get<std::string>();
    defined[preset][double_or_nan(r, "budget")] |= std::isfinite(double_or_nan(r, "share"));
    const double y = double_or_nan(r, "share"), x = double_or_nan(r, "budget");
    Series& s = by[preset][g];
    if (std::isfinite(x) && std::isfinite(y)) s.x.push_back(x), s.y.push_back(y);
  }
  for (auto& [preset, series] : by) {
    Figure f;
    f.title = "Share of M*'s gain over uniform captured, " + preset;
    f.xlabel = "budget B, " + t.at("rate_kind").get<std::string>() + " bits per key element";
    f.ylabel = "captured share (recomputed, " + t.at("queries").get<std::string>() + " queries)";
    f.note = "share = (err(uniform) - err(restriction)) / (err(uniform) - err(M*)); M* (per-token mixed, heads "
             "trading budget) is 1 by definition, the best uniform quantizer 0.";
    // One colour per axis family, solid for the engine-wide form and dashed for the per-head
    // one; shares below kFloor (worse than uniform by more than M*'s gain) drawn at kFloor.
    struct Look {
      const char* name;
      int colour;  // palette index; -1 grey, -2 black
      Style style;
    };
    const Look looks[] = {{"layer", 0, Style::Line},        {"head", 0, Style::Dashed},       {"bands", 1, Style::Line},
                          {"bands_head", 1, Style::Dashed},  {"age", 2, Style::Line},          {"age_head", 2, Style::Dashed},
                          {"evict_shared", 3, Style::Line},  {"evict_layer", 3, Style::Dashed}, {"evict_head", 4, Style::Dashed},
                          {"token_head", -1, Style::Dashed}, {"token", -2, Style::Line}};
    constexpr double kFloor = -1.0;
    double xlo = INFINITY, xhi = -INFINITY, hi = 1;
    int clipped = 0;
    for (const Look& look : looks) {
      auto it = series.find(look.name);
      if (it == series.end() || it->second.x.empty()) continue;
      Series s = it->second;
      s.name = std::string(look.name) == "token" ? "token (M*)" : look.name;
      s.style = look.style;
      s.color = look.colour == -2 ? Rgb{0, 0, 0} : look.colour == -1 ? Rgb{120, 120, 120} : palette(look.colour);
      s.size = 6;
      for (double& v : s.y)
        if (v < kFloor) v = kFloor, ++clipped;
      for (double v : s.y) hi = std::max(hi, v);
      for (double v : s.x) xlo = std::min(xlo, v), xhi = std::max(xhi, v);
      f.series.push_back(s);
    }
    std::string undefined;
    for (const auto& [B, any] : defined[preset])
      if (!any && std::isfinite(B)) undefined += std::string(undefined.empty() ? "" : ", ") + format_label(B, "%g");
    if (!undefined.empty())
      f.note += " No share at B = " + undefined + " (no uniform tier fits, or M* does not beat uniform once recomputed).";
    if (clipped > 0)
      f.note += " " + std::to_string(clipped) + " point" + (clipped > 1 ? "s" : "") +
                " below -1 (worse than uniform by more than M*'s gain) drawn at -1; the table has the values.";
    f.legend_columns = 3;
    f.xmin = xlo, f.xmax = xhi;
    pad_range(f.xmin, f.xmax, 0.05);
    f.ymin = kFloor, f.ymax = hi;
    pad_range(f.ymin, f.ymax, 0.04);
    out.push_back({"granularity_" + preset, f});
  }
  return out;
}

}  // namespace

void GranularityAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& cell) const {
  const TraceMeta& m = ctx.trace.meta();
  const Scenario& sc = ctx.scenario;
  const std::vector<Granularity> gs = restrictions_of(spec_);
  const bool decode = m.decode_steps > 0;
  std::vector<MatrixRMd> costs;
  std::vector<double> rates;
  const Progress costs_progress = ctx.step("granularity costs");
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      ctx.check_stop();
      const HeadData head = ctx.trace.head(l, h);
      costs.push_back(surrogate_costs(head, m.rope, observation_queries(head), sc.ladder).cost);
      const std::vector<double> r = ladder_rates(head, m.rope, sc.ladder, sc.rate_kind);
      if (rates.empty()) rates = r;
      if (r != rates)
        throw InputError(sc.file + ": granularity needs one rate per tier for every head; ladder '" + sc.ladder.name() +
                         "' has head-dependent rates (cell '" + ctx.cell.id + "', head " + std::to_string(l) + "." + std::to_string(h) + ").");
      if (costs_progress) costs_progress(static_cast<int>(costs.size()), m.n_heads());
    }
  GranularityProblem p;
  p.rates = rates;
  for (const MatrixRMd& c : costs) p.costs.push_back(&c);
  p.n_layers = m.n_layers, p.n_kv_heads = m.n_kv_heads;
  p.sink = spec_.sink, p.recent = spec_.recent, p.age_steps = spec_.age_steps;
  const bool needs_head = ladder_needs_head(sc.ladder);
  nlohmann::json out = {{"queries", decode ? "decode" : "observation"}, {"rate_kind", std::string(to_string(sc.rate_kind))},
                        {"n_layers", m.n_layers}, {"n_kv_heads", m.n_kv_heads}, {"sink", spec_.sink},
                        {"recent", spec_.recent}, {"age_steps", spec_.age_steps}, {"ladder", sc.ladder.name()},
                        {"budgets", nlohmann::json::array()}};
  // The mean measured rate over the heads (the closed form; the heads' data only for tiers
  // whose rate depends on it).
  auto measured_rate = [&](const GranularAllocation& a) {
    double sum = 0;
    for (int l = 0, i = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h, ++i) {
        const std::vector<std::uint8_t>& tiers = a.tiers[static_cast<std::size_t>(i)];
        sum += rate_of(needs_head ? allocation_rate(ctx.trace.head(l, h), m.rope, sc.ladder, tiers)
                                  : allocation_rate(m.prompt_len, m.head_dim, sc.ladder, tiers),
                       sc.rate_kind);
      }
    return sum / m.n_heads();
  };
  const std::vector<double> budgets = budgets_of(spec_, sc);
  const Progress progress = ctx.step("granularity");
  int done = 0;
  for (double B : budgets) {
    p.budget = B;
    nlohmann::json rows = nlohmann::json::array();
    std::vector<std::pair<std::string, std::pair<GranularAllocation, double>>> kept;  // earlier rows meeting B
    for (Granularity g : gs) {
      ctx.check_stop();
      // At equal memory (docs/model.md section 6): the nominal optimum's tier-local partial
      // groups can measure over B; then re-solved at B' < B, keeping the least objective of
      // every allocation tried whose measured mean rate meets B (budget_repair.hpp).
      struct Tried {
        GranularAllocation a;
        double measured = kNaN;
      };
      const RepairedSolution<Tried> rep = repair_to_measured_budget<Tried>(
          B,
          [&](double b) {
            p.budget = b;
            Tried t{solve_granularity(p, g)};
            if (t.a.feasible()) t.measured = measured_rate(t.a);
            return t;
          },
          [](const Tried& t) { return t.a.feasible(); }, [](const Tried& t) { return t.measured; },
          [](const Tried& t) { return t.a.objective; });
      p.budget = B;
      nlohmann::json row = {{"restriction", std::string(to_string(g))}};
      if (!rep.best) {
        row["status"] = "infeasible";
        row["message"] = rep.first_infeasible ? "no " + std::string(to_string(g)) + " allocation fits B = " + format_number(B)
                                              : "no allocation tried measures within B = " + format_number(B) + " (equal-memory repair)";
        rows.push_back(row);
        continue;
      }
      GranularAllocation a = rep.best->a;
      double measured = rep.best->measured;
      // Nested at equal memory: every restriction's allocation that meets B is an allocation of
      // token (M*), so M* takes the least objective of them all (solved last; after the repair
      // the nominal optimum at a smaller B' can lose to one of them).
      if (g == Granularity::Token)
        for (const auto& [name, other] : kept)
          if (other.first.objective < a.objective) a = other.first, measured = other.second, row["taken_from"] = name;
      row["status"] = std::string(to_string(a.status));
      row["repaired"] = rep.repaired;
      row["solved_budget"] = rep.solved_budget;
      int whole = 0;  // heads with every token evicted (a layer or head evicted whole)
      for (const auto& h : a.tiers) whole += std::all_of(h.begin(), h.end(), [](std::uint8_t j) { return j == 0; });
      row["heads_evicted_whole"] = whole;
      row["objective"] = a.objective;
      row["rate_nominal"] = a.rate;
      row["rate_measured"] = measured;
      // Per-token forms (keep masks, token tiers) inline only up to kMaxInlineTokens head-tokens:
      // a paper-scale cell's would be hundreds of MB of JSON in the cell file.
      const bool per_token = a.granularity == Granularity::EvictShared || a.granularity == Granularity::EvictHead ||
                             a.granularity == Granularity::EvictLayer || a.granularity == Granularity::TokenHead ||
                             a.granularity == Granularity::Token;
      const long long head_tokens = static_cast<long long>(m.n_heads()) * m.prompt_len;
      if (per_token && head_tokens > kMaxInlineTokens)
        row["allocation"] = {{"omitted", "a per-token allocation of " + std::to_string(head_tokens) + " head-tokens (more than " +
                                             std::to_string(kMaxInlineTokens) + " are not written inline)"}};
      else
        row["allocation"] = engine_form(a, p, sc.ladder);
      rows.push_back(row);
      kept.emplace_back(std::string(to_string(g)), std::make_pair(std::move(a), measured));
      if (progress) progress(++done, static_cast<int>(budgets.size() * gs.size()));
    }
    // Every feasible restriction's allocation recomputed head by head, one batch per head (its
    // exact attention prepared once for all of them).
    std::vector<std::size_t> feasible_rows;
    for (std::size_t r = 0; r < rows.size(); ++r)
      if (rows[r].contains("objective")) feasible_rows.push_back(r);
    std::vector<nlohmann::json> errs(feasible_rows.size(), nlohmann::json::array());
    for (int l = 0, i = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h, ++i) {
        ctx.check_stop();
        const HeadData head = ctx.trace.head(l, h);
        std::vector<MaterializedKeys> mats;
        for (std::size_t k = 0; k < feasible_rows.size(); ++k)
          mats.push_back(materialize(head, m.rope, sc.ladder, kept[k].second.first.tiers[static_cast<std::size_t>(i)]));
        const std::vector<ErrorMetrics> e =
            decode ? evaluate_decode_steps(head, mats, ctx.backend) : evaluate_obs_queries(head, mats, ctx.backend);
        for (std::size_t k = 0; k < feasible_rows.size(); ++k) errs[k].push_back(finite_or_null(e.at(k).rel_error));
      }
    for (std::size_t k = 0; k < feasible_rows.size(); ++k) rows[feasible_rows[k]]["err_heads"] = errs[k];
    out["budgets"].push_back({{"budget", B}, {"rows", rows}});
  }
  cell["granularity"] = out;
}

std::string GranularityAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                              const std::string& dir) const {
  CsvWriter csv({"cell", "preset", "budget", "restriction", "status", "objective", "rate_nominal", "rate_measured",
                 "err", "share", "surrogate_share"});
  // preset -> budget -> heads' errors; and the surrogate shares per cell
  std::map<std::string, std::map<double, std::vector<HeadErrors>>> pooled;
  std::map<std::string, std::map<double, std::map<std::string, std::vector<double>>>> surrogate;  // per cell values
  std::vector<std::string> names;
  std::map<std::string, int> unrepaired;  // "preset, restriction at B = b" -> cells where no repair step met B
  std::set<std::string> evicted_whole;     // "preset|B|restriction" whose allocation evicts some head whole
  std::string rate_kind, queries;
  nlohmann::json allocations = nlohmann::json::object();
  for (const auto& c : cells) {
    if (!c.contains("granularity")) continue;
    const nlohmann::json& g = c.at("granularity");
    const std::string id = c.at("id").get<std::string>(), preset = c.at("preset").get<std::string>();
    rate_kind = g.at("rate_kind").get<std::string>(), queries = g.at("queries").get<std::string>();
    const int L = g.at("n_layers").get<int>(), kv = g.at("n_kv_heads").get<int>();
    for (const auto& b : g.at("budgets")) {
      const double B = b.at("budget").get<double>();
      std::vector<HeadErrors> heads(static_cast<std::size_t>(L * kv));
      for (int i = 0; i < L * kv; ++i) heads[static_cast<std::size_t>(i)].cluster = id + "/" + std::to_string(i / kv);
      std::map<std::string, double> obj, err;
      for (const auto& r : b.at("rows")) {
        const std::string n = r.at("restriction").get<std::string>();
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
        if (r.at("status").get<std::string>() == "infeasible" && r.contains("message") &&
            r.at("message").get<std::string>().find("equal-memory repair") != std::string::npos)
          unrepaired[preset + ", " + n + " at B = " + format_label(B, "%g")] += 1;
        obj[n] = double_or_nan(r, "objective");
        std::vector<double> e;
        if (r.contains("err_heads"))
          for (const auto& x : r.at("err_heads")) e.push_back(x.is_number() ? x.get<double>() : kNaN);
        for (std::size_t i = 0; i < e.size() && i < heads.size(); ++i) heads[i].err[n] = e[i];
        err[n] = e.size() == heads.size() ? mean_or_nan(e) : kNaN;
        if (r.contains("allocation")) allocations[id][format_label(B, "%g")][n] = r.at("allocation");
        if ((r.contains("heads_evicted_whole") && r.at("heads_evicted_whole").get<int>() > 0) ||
            (!r.contains("heads_evicted_whole") && r.contains("allocation") && evicts_a_head_whole(r.at("allocation"))))
          evicted_whole.insert(preset + "|" + format_label(B, "%g") + "|" + n);
      }
      const double du = err["uniform"] - err["token"], su = obj["uniform"] - obj["token"];
      for (const auto& r : b.at("rows")) {
        const std::string n = r.at("restriction").get<std::string>();
        const double share = du > 0 ? (err["uniform"] - err[n]) / du : kNaN;
        const double sshare = su > 0 ? (obj["uniform"] - obj[n]) / su : kNaN;
        surrogate[preset][B][n].push_back(sshare);
        CsvWriter& row = csv.row();
        row << id << preset << format_or_nan(B) << n << r.at("status").get<std::string>() << format_or_nan(obj[n])
            << format_or_nan(double_or_nan(r, "rate_nominal")) << format_or_nan(double_or_nan(r, "rate_measured"))
            << format_or_nan(err[n]) << format_or_nan(share) << format_or_nan(sshare);
      }
      for (auto& h : heads) pooled[preset][B].push_back(std::move(h));
    }
  }
  if (pooled.empty()) return "";
  // Pooled shares with a cluster bootstrap over (cell, layer).
  nlohmann::json rows = nlohmann::json::array();
  std::ostringstream s;
  s << "\n## What each engine granularity captures\n\n"
    << "Each restriction is the exact surrogate optimum under what an engine can express (docs/model.md section 9), at "
       "one model-wide budget of "
    << rate_kind << " bits per key element, at equal memory (an allocation whose tier-local groups measure over B is "
       "re-solved at a smaller B'); its error is recomputed on the " << queries
    << " queries. Share = the fraction of M*'s gain over the best uniform quantizer that the restriction captures "
       "((err_uniform - err) / (err_uniform - err_M*), heads pooled per preset, 95% cluster-bootstrap interval over "
       "(cell, layer)). M* (`token`) is 1 by definition; `token_head` is the per-token optimum with every head at B "
       "(no trading across heads).\n";
  std::mt19937_64 rng(sc.seed * 7919 + 17);
  for (auto& [preset, by_budget] : pooled) {
    s << "\n**" << preset << "**\n\n| restriction |";
    for (auto& [B, hs] : by_budget) s << " B = " << format_label(B, "%g") << " |";
    s << "\n|---|";
    for (std::size_t i = 0; i < by_budget.size(); ++i) s << "---|";
    s << "\n";
    std::map<double, std::map<std::string, Pooled>> res;
    for (auto& [B, hs] : by_budget) {
      std::vector<std::size_t> idx(hs.size());
      for (std::size_t i = 0; i < hs.size(); ++i) idx[i] = i;
      std::map<std::string, double> errs;
      const std::map<std::string, double> point = shares_of(hs, idx, names, &errs);
      std::map<std::string, std::vector<std::size_t>> clusters;
      for (std::size_t i = 0; i < hs.size(); ++i) clusters[hs[i].cluster].push_back(i);
      std::vector<const std::vector<std::size_t>*> cl;
      for (auto& [k, v] : clusters) cl.push_back(&v);
      std::map<std::string, std::vector<double>> boot;
      std::uniform_int_distribution<std::size_t> pick(0, cl.size() - 1);
      for (int r = 0; r < sc.bootstrap && cl.size() >= 2; ++r) {
        std::vector<std::size_t> sample;
        for (std::size_t k = 0; k < cl.size(); ++k) {
          const auto* c = cl[pick(rng)];
          sample.insert(sample.end(), c->begin(), c->end());
        }
        for (const auto& [n, v] : shares_of(hs, sample, names, nullptr))
          if (std::isfinite(v)) boot[n].push_back(v);
      }
      for (const auto& n : names) {
        Pooled p;
        p.share = point.at(n), p.err = errs.at(n);
        auto& bv = boot[n];
        if (std::isfinite(p.share) && bv.size() >= static_cast<std::size_t>(sc.bootstrap) * 9 / 10) {
          p.lo = quantile_or_nan(bv, 0.025), p.hi = quantile_or_nan(bv, 0.975);
        }
        p.surrogate_share = median_or_nan(surrogate[preset][B][n]);
        res[B][n] = p;
        rows.push_back({{"preset", preset}, {"budget", B}, {"restriction", n}, {"engine", is_engine_axis(parse_granularity(n))},
                        {"err", finite_or_null(p.err)}, {"share", finite_or_null(p.share)}, {"share_lo", finite_or_null(p.lo)},
                        {"share_hi", finite_or_null(p.hi)}, {"surrogate_share_median", finite_or_null(p.surrogate_share)},
                        {"heads", hs.size()}, {"clusters", cl.size()}});
      }
    }
    for (const auto& n : names) {
      if (n == "uniform") continue;
      s << "| " << (n == "token" ? "token (M*)" : n) << " |";
      for (auto& [B, m] : res) {
        const Pooled& p = m[n];
        s << " " << format_label(p.share, "%.2f");
        if (std::isfinite(p.lo)) s << " [" << format_label(p.lo, "%.2f") << ", " << format_label(p.hi, "%.2f") << "]";
        s << " |";
      }
      s << "\n";
    }
    s << "\n";
    for (auto& [B, m] : res) {
      const Pooled& u = m["uniform"];
      const Pooled& t = m["token"];
      s << "- B = " << format_label(B, "%g") << ": ";
      if (!std::isfinite(u.err)) {
        s << "no uniform quantizer of the ladder fits this budget: no share is defined.\n";
        continue;
      }
      if (!std::isfinite(t.share)) {
        s << "M* does not beat the best uniform quantizer on the recomputed error (" << format_label(t.err)
          << " vs " << format_label(u.err) << "): no share is defined.\n";
        continue;
      }
      std::string best;
      double bs = -INFINITY;
      for (const auto& n : names)
        if (is_engine_axis(parse_granularity(n)) && n != "uniform" && std::isfinite(m[n].share) && m[n].share > bs)
          bs = m[n].share, best = n;
      s << "error " << format_label(u.err) << " uniform, " << format_label(t.err) << " M*; ";
      if (best.empty() || !(bs > 0)) {
        s << "no engine axis beats the uniform quantizer (best share " << format_label(bs, "%.2f")
          << "): the per-token interior holds all of the gain.\n";
        continue;
      }
      s << "the engine axis that captures most is **" << best << "** (" << format_label(bs, "%.2f");
      if (std::isfinite(m[best].lo)) s << " [" << format_label(m[best].lo, "%.2f") << ", " << format_label(m[best].hi, "%.2f") << "]";
      s << ")";
      std::string close;  // the axes whose interval reaches the best one's: not told apart
      for (const auto& n : names)
        if (n != best && n != "uniform" && is_engine_axis(parse_granularity(n)) && std::isfinite(m[n].hi) &&
            std::isfinite(m[best].lo) && m[n].hi >= m[best].lo)
          close += std::string(close.empty() ? "" : ", ") + n + " " + format_label(m[n].share, "%.2f");
      if (!close.empty()) s << ", not told apart from " << close << " (intervals overlap)";
      if (bs >= 1)
        s << "; the per-token interior adds nothing beyond it here.\n";
      else
        s << "; the per-token interior adds the remaining " << format_label(1 - bs, "%.2f") << " of the gain.\n";
    }
  }
  if (!unrepaired.empty()) {
    s << "\nNo allocation met the measured budget (the equal-memory repair's steps all measured over B), so the share "
         "is n/a for: ";
    bool first = true;
    for (const auto& [what, n] : unrepaired)
      s << (first ? "" : "; ") << what << " (" << n << (n == 1 ? " cell" : " cells") << ")", first = false;
    s << ".\n";
  }
  // Under the surrogate every restriction captures at most M*'s gain (exact solves, nested sets).
  double worst = -INFINITY;
  for (const auto& r : rows) worst = std::max(worst, double_or_nan(r, "surrogate_share_median"));
  s << "\nUnder the surrogate no restriction exceeds M* (largest median surrogate share "
    << format_label(worst, "%.3f") << "; M*'s is 1 by construction).";
  int negative = 0, negative_surrogate_positive = 0, negative_whole = 0;
  for (const auto& r : rows)
    if (double_or_nan(r, "share") < 0) {
      ++negative;
      if (double_or_nan(r, "surrogate_share_median") > 0) ++negative_surrogate_positive;
      if (evicted_whole.count(r.at("preset").get<std::string>() + "|" + format_label(double_or_nan(r, "budget"), "%g") + "|" +
                              r.at("restriction").get<std::string>()))
        ++negative_whole;
    }
  if (negative > 0)
    s << " " << negative << " of " << rows.size() << " shares are negative: the restriction's allocation, optimal under "
      << "the surrogate, is worse than the uniform quantizer once recomputed (" << negative_surrogate_positive
      << " of them with a positive median surrogate share); " << negative_whole << " of them evict some KV head whole "
      << "(a tier per layer or head that is eviction): the surrogate sums token-eviction costs as if independent, while a "
         "head with no token left loses its whole output.";
  s << "\n";
  nlohmann::json t = {{"rate_kind", rate_kind}, {"queries", queries}, {"rows", rows}};
  write_file_atomically(dir + "/granularity.csv", csv.text());
  write_file_atomically(dir + "/granularity.json", t.dump(1) + "\n");
  write_file_atomically(dir + "/granularity_allocations.json", allocations.dump(1) + "\n");
  return s.str();
}

AnalysisType GranularityAnalysis::type() {
  return {"granularity", "the share of the per-token optimum's gain each engine granularity (layer, head, bands, age, keep masks) captures",
          {"granularity"}, read_granularity_section, figures_granularity};
}

}  // namespace tierlab
