#include "scenarios/scenario/scenario.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/io/paths.hpp"
#include "model/io/safetensors.hpp"
#include "model/base/text.hpp"
#include "model/io/trace.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "solvers/scorers.hpp"

namespace tierlab {

namespace {

// The synthetic parameters a scenario may set (overrides) or sweep (sweep), in one list.
const std::vector<std::string>& synthetic_override_keys() {
  static const std::vector<std::string> keys = {
      "n_layers", "n_kv_heads", "group_size", "head_dim", "prompt_len", "obs_window", "decode_steps", "mix_sink",
      "mix_local", "mix_retrieval", "mix_diffuse", "logit_scale_min", "logit_scale_max", "outlier_channels",
      "outlier_strength", "outlier_token_rate", "query_outlier_strength", "spans_per_head", "span_len", "query_drift",
      "query_drift_reversion", "rope_theta"};
  return keys;
}

// Synthetic parameter overrides: name -> setter with its range.
void apply_override(const YamlReader& c, SynthParams& p, const std::string& k, const YAML::Node& v) {
  const std::string key = "synthetic.overrides." + k;
  auto i = [&](int& f, long long lo, long long hi) { f = static_cast<int>(c.integer(v, key, lo, hi)); };
  auto d = [&](double& f, double lo, double hi) { f = c.num(v, key, lo, hi); };
  if (k == "n_layers") i(p.n_layers, 1, 256);
  else if (k == "n_kv_heads") i(p.n_kv_heads, 1, 256);
  else if (k == "group_size") i(p.group_size, 1, 64);
  else if (k == "head_dim") i(p.head_dim, 8, 1024);
  else if (k == "prompt_len") i(p.prompt_len, 2, 1 << 20);
  else if (k == "obs_window") i(p.obs_window, 1, 4096);
  else if (k == "decode_steps") i(p.decode_steps, 0, 4096);
  else if (k == "mix_sink") d(p.mix_sink, 0, 1e6);
  else if (k == "mix_local") d(p.mix_local, 0, 1e6);
  else if (k == "mix_retrieval") d(p.mix_retrieval, 0, 1e6);
  else if (k == "mix_diffuse") d(p.mix_diffuse, 0, 1e6);
  else if (k == "logit_scale_min") d(p.logit_scale_min, 1e-3, 1e3);
  else if (k == "logit_scale_max") d(p.logit_scale_max, 1e-3, 1e3);
  else if (k == "outlier_channels") i(p.outlier_channels, 0, 1024);
  else if (k == "outlier_strength") d(p.outlier_strength, 0, 1e4);
  else if (k == "spans_per_head") i(p.spans_per_head, 0, 1024);
  else if (k == "span_len") i(p.span_len, 1, 4096);
  else if (k == "query_drift") d(p.query_drift, 0, 10);
  else if (k == "query_drift_reversion") d(p.query_drift_reversion, 0, 0.999);
  else if (k == "outlier_token_rate") d(p.outlier_token_rate, 0, 1);
  else if (k == "query_outlier_strength") d(p.query_outlier_strength, 0, 1e4);
  else if (k == "rope_theta") d(p.rope_theta, 1, 1e9);
  else
    c.fail(v, "unknown key '" + k + "' in synthetic.overrides; the valid keys are " + join(synthetic_override_keys()) + ".");
}

// traces.synthetic: presets x seeds x context_lengths x logit_scales.
void parse_synthetic_cells(const YamlReader& c, const YAML::Node& syn, int decode_steps, std::set<std::string>& ids,
                           Scenario& s) {
  c.keys(syn, "traces.synthetic", {"presets", "seeds", "context_lengths", "logit_scales", "overrides", "sweep"});
  if (!syn["presets"]) c.fail(syn, "traces.synthetic needs the key 'presets' (one of " + [] {
    std::string l;
    for (const auto& n : synth_preset_names()) l += (l.empty() ? "" : ", ") + n;
    return l;
  }() + ").");
  std::vector<SynthParams> presets;
  for (const auto& p : c.list(syn["presets"], "traces.synthetic.presets"))
    presets.push_back(c.wrap(p, "traces.synthetic.presets", [&] { return synth_preset(c.str(p, "presets")); }));
  std::vector<std::uint64_t> seeds{0};
  if (syn["seeds"]) {
    seeds.clear();
    for (const auto& x : c.list(syn["seeds"], "traces.synthetic.seeds"))
      seeds.push_back(static_cast<std::uint64_t>(c.integer(x, "traces.synthetic.seeds", 0, 1LL << 53)));
  }
  std::vector<int> lengths{-1};
  if (syn["context_lengths"]) {
    lengths.clear();
    for (const auto& x : c.list(syn["context_lengths"], "traces.synthetic.context_lengths"))
      lengths.push_back(static_cast<int>(c.integer(x, "traces.synthetic.context_lengths", 16, 1 << 20)));
  }
  std::vector<double> scales{0};
  if (syn["logit_scales"]) {
    scales.clear();
    for (const auto& x : c.list(syn["logit_scales"], "traces.synthetic.logit_scales"))
      scales.push_back(c.num(x, "traces.synthetic.logit_scales", 0.01, 100));
    s.sweeps_logit_scales = true;
  }
  // sweep: {parameter: [values]}: one generator parameter varied within each preset (a
  // dose-response), one cell per value; the cell id ends in "-<parameter><value>".
  std::string sweep_key;
  std::vector<YAML::Node> sweep_values{YAML::Node()};
  if (const YAML::Node sw = syn["sweep"]) {
    if (!sw.IsMap() || sw.size() != 1)
      c.fail(sw, "traces.synthetic.sweep must be a mapping of ONE parameter to a list of values, e.g. "
                 "{outlier_token_rate: [0, 0.002, 0.01]}.");
    sweep_key = sw.begin()->first.as<std::string>();
    const auto& keys = synthetic_override_keys();
    if (std::find(keys.begin(), keys.end(), sweep_key) == keys.end())
      c.fail(sw.begin()->first, "unknown key '" + sweep_key + "' in traces.synthetic.sweep; the valid keys are " + join(keys) + ".");
    sweep_values = c.list(sw.begin()->second, "traces.synthetic.sweep." + sweep_key);
    if (sweep_values.empty()) c.fail(sw, "traces.synthetic.sweep." + sweep_key + " gives no value.");
  }
  for (SynthParams& p : presets) {
    if (const YAML::Node ov = syn["overrides"]) {
      if (!ov.IsMap()) c.fail(ov, "traces.synthetic.overrides must be a mapping of parameter: value.");
      for (const auto& kv : ov) apply_override(c, p, kv.first.as<std::string>(), kv.second);
    }
    if (decode_steps > 0) p.decode_steps = decode_steps;
    for (const YAML::Node& sv : sweep_values)
    for (const std::uint64_t seed : seeds)
      for (const int T : lengths)
        for (const double ls : scales) {
          ScenarioCell cell;
          cell.source = "synthetic";
          cell.synth = p;
          if (!sweep_key.empty()) {
            apply_override(c, cell.synth, sweep_key, sv);
            cell.sweep_key = sweep_key;
            cell.sweep_value = c.num(sv, "traces.synthetic.sweep." + sweep_key, -1e300, 1e300);
          }
          cell.synth.seed = seed;
          if (T > 0) cell.synth.prompt_len = T;
          if (cell.synth.obs_window > cell.synth.prompt_len) cell.synth.obs_window = cell.synth.prompt_len;
          if (ls > 0) cell.synth.logit_scale_min = cell.synth.logit_scale_max = ls, cell.logit_scale = ls;
          c.wrap(syn, "traces.synthetic", [&] { cell.synth.validate(); return 0; });
          cell.id = p.preset + "-s" + std::to_string(seed) + "-T" + std::to_string(cell.synth.prompt_len);
          if (ls > 0) cell.id += "-ls" + format_number(ls);
          if (!sweep_key.empty()) cell.id += "-" + sweep_key + format_number(cell.sweep_value);
          if (!ids.insert(cell.id).second) c.fail(syn, "traces.synthetic gives the cell '" + cell.id + "' twice (repeated value in a list).");
          s.cells.push_back(cell);
        }
  }
}

// "a, b and c" of the places a path was looked for.
std::string join_paths(const std::vector<std::string>& v) {
  std::vector<std::string> uniq;
  for (const std::string& x : v)
    if (std::find(uniq.begin(), uniq.end(), x) == uniq.end()) uniq.push_back(x);
  std::string s;
  for (std::size_t i = 0; i < uniq.size(); ++i) s += (i == 0 ? "" : i + 1 == uniq.size() ? " and " : ", ") + ("'" + uniq[i] + "'");
  return s;
}

// traces.model: a llama2.c checkpoint captured per seed and context length.
void parse_model_cells(const YamlReader& c, const YAML::Node& mod, const std::filesystem::path& base, int decode_steps,
                       std::set<std::string>& ids, Scenario& s) {
  c.keys(mod, "traces.model", {"checkpoint", "seeds", "context_lengths", "temperature", "decode_steps"});
  if (!mod["checkpoint"]) c.fail(mod, "traces.model needs the key 'checkpoint' (a llama2.c .bin file, e.g. data/stories260K/stories260K.bin).");
  const std::filesystem::path given = c.str(mod["checkpoint"], "traces.model.checkpoint");
  std::vector<std::string> tried;
  const std::filesystem::path ck = resolve_shipped(given, base, &tried);  // model/io/paths.hpp
  if (ck.empty())
    c.fail(mod["checkpoint"], "key 'traces.model.checkpoint': the checkpoint '" + given.string() +
                                  "' does not exist (looked for " + join_paths(tried) + ").");
  std::vector<std::uint64_t> seeds{0};
  if (mod["seeds"]) {
    seeds.clear();
    for (const auto& x : c.list(mod["seeds"], "traces.model.seeds"))
      seeds.push_back(static_cast<std::uint64_t>(c.integer(x, "traces.model.seeds", 0, 1LL << 53)));
  }
  if (!mod["context_lengths"]) c.fail(mod, "traces.model needs the key 'context_lengths' (prompt lengths T).");
  std::vector<int> lengths;
  for (const auto& x : c.list(mod["context_lengths"], "traces.model.context_lengths"))
    lengths.push_back(static_cast<int>(c.integer(x, "traces.model.context_lengths", 8, 1 << 20)));
  double temperature = 0.8;
  if (mod["temperature"]) temperature = c.num(mod["temperature"], "traces.model.temperature", 0, 10);
  int steps = decode_steps > 0 ? decode_steps : 16;
  if (mod["decode_steps"]) steps = static_cast<int>(c.integer(mod["decode_steps"], "traces.model.decode_steps", 1, 4096));
  const std::string mname = ck.stem().string();
  for (const std::uint64_t seed : seeds)
    for (const int T : lengths) {
      ScenarioCell cell;
      cell.source = "model";
      cell.checkpoint = ck.string();
      cell.model_name = mname;
      cell.prompt_len = T;
      cell.decode_steps = steps;
      cell.temperature = temperature;
      cell.seed = seed;
      cell.id = mname + "-s" + std::to_string(seed) + "-T" + std::to_string(T);
      if (!ids.insert(cell.id).second) c.fail(mod, "traces.model gives the cell '" + cell.id + "' twice (repeated value in a list).");
      s.cells.push_back(cell);
    }
}

// traces.files: captured trace files.
void parse_file_cells(const YamlReader& c, const YAML::Node& files, const std::filesystem::path& base,
                      std::set<std::string>& ids, Scenario& s) {
  for (const auto& f : c.list(files, "traces.files")) {
    ScenarioCell cell;
    cell.source = "file";
    const std::filesystem::path given = c.str(f, "traces.files");
    std::vector<std::string> tried;
    // Relative to the scenario file first (then as given, then under the shipped data/).
    std::filesystem::path p = given.is_relative() ? resolve_shipped(base / given, {}, &tried) : std::filesystem::path();
    if (p.empty()) p = resolve_shipped(given, base, &tried);
    if (p.empty())
      c.fail(f, "key 'traces.files': the trace '" + given.string() + "' does not exist (looked for " + join_paths(tried) + ").");
    cell.path = p.string();
    cell.id = "file-" + p.stem().string();
    if (!ids.insert(cell.id).second) c.fail(f, "traces.files gives the cell '" + cell.id + "' twice.");
    s.cells.push_back(cell);
  }
}

// `figures:` {style, width, height, font_size, format, dpi}: the style first, then each field
// over it (scenarios/figures/figure.hpp FigureStyle).
FigureStyle parse_figure_style(const YamlReader& c, const YAML::Node& f) {
  if (!f.IsMap()) c.fail(f, "key 'figures' must be a mapping of style, width, height, font_size, format and dpi.");
  const std::vector<std::string> keys = {"style", "width", "height", "font_size", "format", "dpi"};
  for (const auto& kv : f) {
    const std::string k = kv.first.as<std::string>();
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      c.fail(kv.first, "unknown key '" + k + "' in figures; the valid keys are " + join(keys) + ".");
  }
  FigureStyle st;
  if (f["style"]) st = c.wrap(f["style"], "figures.style", [&] { return FigureStyle::preset(c.str(f["style"], "figures.style"), "figures.style"); });
  if (f["width"]) st.width_pt = c.wrap(f["width"], "figures.width", [&] { return parse_length_pt(c.str(f["width"], "figures.width"), "figures.width"); });
  if (f["height"]) st.height_pt = c.wrap(f["height"], "figures.height", [&] { return parse_length_pt(c.str(f["height"], "figures.height"), "figures.height"); });
  if (f["font_size"]) st.font_pt = c.num(f["font_size"], "figures.font_size", 4, 48);
  if (f["dpi"]) st.dpi = static_cast<int>(c.integer(f["dpi"], "figures.dpi", 50, 1200));
  if (const YAML::Node fm = f["format"]) {
    std::string given;
    if (fm.IsSequence())
      for (const auto& x : c.list(fm, "figures.format")) given += (given.empty() ? "" : ",") + c.str(x, "figures.format");
    else
      given = c.str(fm, "figures.format");
    st.formats = c.wrap(fm, "figures.format", [&] { return parse_formats(given, "figures.format"); });
  }
  c.wrap(f, "figures", [&] {
    st.validate("figures");
    return 0;
  });
  return st;
}

}  // namespace

Scenario parse_checked_scenario(const YamlReader& c, const YAML::Node& root, const std::string& file_name);

namespace {

// A scenario file is UTF-8 text (YAML 1.2): the first invalid byte is an error naming its
// line and column.
void check_utf8(const std::string& text, const std::string& file_name) {
  const std::size_t at = invalid_utf8_at(text);
  if (at == std::string::npos) return;
  const std::size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
  const std::size_t column = line_start == std::string::npos || at == 0 ? at + 1 : at - line_start;
  const std::size_t line = 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(text[at]));
  throw InputError(file_name + ":" + std::to_string(line) + ": byte " + hex + " at column " + std::to_string(column) +
                   " is not valid UTF-8 (a scenario file is UTF-8 text).");
}

// Method parameters that depend on a trace's shape, checked against every cell before any
// work starts (the SnapKV family's window of observation queries), so that a scenario that
// validates does not fail at a cell an hour later.
int cell_obs_window(const ScenarioCell& cell) {
  if (cell.source == "synthetic") return cell.synth.obs_window;
  if (cell.source == "model") return std::min(32, cell.prompt_len);  // the capture's default W = min(32, T)
  return TraceReader(cell.path).meta().obs_window;                    // the file's header only
}

void check_methods_against_cells(const Scenario& s) {
  for (const MethodSpec& m : s.methods) {
    if (m.kind != MethodSpec::Kind::Scorer) continue;
    const ScorerConfig cfg = make_scorer(m.name, m.params);
    if (cfg.window <= 0) continue;  // 0: every observation query
    for (const ScenarioCell& cell : s.cells) {
      const int W = cell_obs_window(cell);
      if (cfg.window > W)
        throw InputError(m.where + ": method '" + m.label + "' (scorer " + m.name + "): parameter window = " +
                         std::to_string(cfg.window) + " exceeds the W = " + std::to_string(W) +
                         " observation queries of cell '" + cell.id + "'; give window <= " + std::to_string(W) +
                         " in its params, or 0 for all of them.");
    }
  }
}

}  // namespace

Scenario parse_scenario(const std::string& text, const std::string& file_name) {
  const YamlReader c{file_name};
  YAML::Node root;
  if (text.size() > kMaxScenarioBytes)
    throw InputError(file_name + ": the scenario is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                     std::to_string(kMaxScenarioBytes) + " bytes.");
  check_utf8(text, file_name);
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {  // ParserException, DeepRecursion (yaml-cpp's own depth guard)
    throw InputError(file_name + ":" + std::to_string(e.mark.line + 1) + ": not valid YAML (" + e.msg + ").");
  }
  if (!root.IsMap()) throw InputError(file_name + ":1: a scenario file must be a mapping of keys.");
  c.check_tree(root);
  try {
    return parse_checked_scenario(c, root, file_name);
  } catch (const YAML::Exception& e) {  // a conversion the typed readers did not foresee
    throw InputError(file_name + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg + ".");
  }
}

namespace {

// A YAML tree (checked: bounded depth, scalar keys, no duplicates) as canonical JSON.
nlohmann::json canonical_json(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();  // std::map: keys sorted
    for (const auto& kv : n) o[kv.first.Scalar()] = canonical_json(kv.second);
    return o;
  }
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : n) a.push_back(canonical_json(x));
    return a;
  }
  if (n.IsScalar()) return n.Scalar();  // UTF-8: YamlReader::check_tree
  return nullptr;
}

}  // namespace

Scenario parse_checked_scenario(const YamlReader& c, const YAML::Node& root, const std::string& file_name) {
  std::vector<std::string> allowed = {"name",    "description", "traces", "ladder", "rate_kind", "budgets",
                                       "primary_budget", "queries", "decode_steps", "backend", "seed",
                                       "bootstrap", "methods", "primary_aggregation", "error_floor", "figures"};
  for (const AnalysisType& t : analysis_types()) allowed.insert(allowed.end(), t.yaml_keys.begin(), t.yaml_keys.end());
  for (const auto& kv : root) {
    const std::string k = kv.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end())
      c.fail(kv.first, "unknown key '" + k + "' in the scenario; the valid keys are " + join(allowed) + ".");
  }
  Scenario s;
  s.file = file_name;
  {
    nlohmann::json settings = canonical_json(root);
    for (const char* k : {"name", "description", "traces", "figures", "claim"}) settings.erase(k);  // figures: drawing only; claim: the ledger's words (analyses/claims.hpp)
    s.settings_json = settings.dump();
  }
  const std::filesystem::path base = std::filesystem::path(file_name).parent_path();
  if (!root["name"]) throw InputError(file_name + ":1: the key 'name' is missing.");
  s.name = c.str(root["name"], "name");
  for (char ch : s.name)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_'))
      c.fail(root["name"], "key 'name' is '" + s.name + "'; use letters, digits, '-' and '_' only.");
  if (root["description"]) s.description = c.str(root["description"], "description");
  if (root["ladder"]) s.ladder = c.wrap(root["ladder"], "ladder", [&] { return RateLadder::parse(c.str(root["ladder"], "ladder")); });
  if (root["rate_kind"])
    s.rate_kind = c.wrap(root["rate_kind"], "rate_kind", [&] { return parse_rate_kind(c.str(root["rate_kind"], "rate_kind")); });
  if (root["queries"])
    s.queries = c.wrap(root["queries"], "queries", [&] { return parse_query_set(c.str(root["queries"], "queries")); });
  if (root["backend"])
    s.backend = c.wrap(root["backend"], "backend", [&] { return parse_backend(c.str(root["backend"], "backend")); });
  if (root["seed"]) s.seed = static_cast<std::uint64_t>(c.integer(root["seed"], "seed", 0, 1LL << 53));
  if (const YAML::Node f = root["figures"]) s.figure_style = parse_figure_style(c, f);
  if (root["bootstrap"]) s.bootstrap = static_cast<int>(c.integer(root["bootstrap"], "bootstrap", 100, 100000));
  if (root["budgets"]) {
    s.budgets.clear();
    for (const auto& b : c.list(root["budgets"], "budgets")) {
      const double v = c.num(b, "budgets", 0.01, kMaxBudget);
      // A budget given twice would give every table its rows twice.
      if (std::find(s.budgets.begin(), s.budgets.end(), v) != s.budgets.end())
        c.fail(b, "key 'budgets' lists " + format_number(v) + " twice; give each budget once.");
      s.budgets.push_back(v);
    }
  }
  s.primary_budget = s.budgets.front();
  if (root["primary_budget"]) {
    s.primary_budget = c.num(root["primary_budget"], "primary_budget", 0.01, kMaxBudget);
    bool found = false;
    std::string choices;
    for (double b : s.budgets) found = found || b == s.primary_budget, choices += (choices.empty() ? "" : ", ") + format_number(b);
    if (!found) c.fail(root["primary_budget"], "key 'primary_budget' is " + format_number(s.primary_budget) + "; it must be one of the budgets " + choices + ".");
  }
  if (root["primary_aggregation"]) {
    s.primary_aggregation = c.str(root["primary_aggregation"], "primary_aggregation");
    const std::vector<std::string> ok = {"routed", "median", "sum", "wins", "clipped_mean"};
    if (std::find(ok.begin(), ok.end(), s.primary_aggregation) == ok.end())
      c.fail(root["primary_aggregation"], "key 'primary_aggregation' is '" + s.primary_aggregation +
                                              "'; choose routed, median, sum, wins or clipped_mean.");
  }
  if (root["error_floor"]) s.error_floor = c.num(root["error_floor"], "error_floor", 0.0, 1.0);
  int decode_steps = -1;
  if (root["decode_steps"]) decode_steps = static_cast<int>(c.integer(root["decode_steps"], "decode_steps", 1, 4096));

  const YAML::Node traces = root["traces"];
  if (!traces) throw InputError(file_name + ":1: the key 'traces' is missing (give 'synthetic' and/or 'files').");
  c.keys(traces, "traces", {"synthetic", "model", "files"});
  std::set<std::string> ids;
  if (const YAML::Node syn = traces["synthetic"]) parse_synthetic_cells(c, syn, decode_steps, ids, s);
  // traces.model: one checkpoint's mapping, or a list of them (several models in one study:
  // each model x prompt seed is a cluster of the bootstrap).
  if (const YAML::Node mod = traces["model"]) {
    if (mod.IsSequence()) {
      if (mod.size() == 0) c.fail(mod, "traces.model is an empty list; give one mapping per checkpoint.");
      for (const auto& m : mod) parse_model_cells(c, m, base, decode_steps, ids, s);
    } else {
      parse_model_cells(c, mod, base, decode_steps, ids, s);
    }
  }
  if (const YAML::Node files = traces["files"]) parse_file_cells(c, files, base, ids, s);
  if (s.cells.empty()) c.fail(traces, "traces gives no cell.");
  if (const YAML::Node m = root["methods"]) s.methods = parse_method_specs(m, file_name, "methods", s.ladder);
  check_methods_against_cells(s);
  for (const AnalysisType& t : analysis_types())
    if (auto a = t.parse(root, c, s)) s.analyses.push_back(std::move(a));
  if (!s.methods.empty() &&
      std::none_of(s.analyses.begin(), s.analyses.end(), [](const auto& a) { return a->uses_methods(); }))
    c.fail(root["methods"], "key 'methods' is given but no analysis uses it; add the key 'proxy' (proxy vs end task).");
  return s;
}

Scenario load_scenario(const std::string& path) {
  return parse_scenario(read_regular_file(path, "scenario file", kMaxScenarioBytes), path);
}

}  // namespace tierlab
