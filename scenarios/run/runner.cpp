#include "scenarios/run/runner.hpp"

#include <fcntl.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>

#include "model/llama2c/capture.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/base/error.hpp"
#include "model/base/phases.hpp"
#include "model/io/safetensors.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/scenario/analysis.hpp"
#include "scenarios/run/tables.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/run/estimate.hpp"
#include "scenarios/pipeline/parallel_heads.hpp"
#include "scenarios/run/progress.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

namespace fs = std::filesystem;

std::atomic<bool>& run_stop_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::atomic<int>& run_stop_signal() {
  static std::atomic<int> sig{0};
  return sig;
}

std::string run_stop_signal_name() {
  const int s = run_stop_signal().load();
  return s == SIGTERM ? "SIGTERM" : s == SIGINT ? "SIGINT" : s == 0 ? "a stop request" : "signal " + std::to_string(s);
}

namespace {

extern "C" void on_sigint(int sig) {
  run_stop_signal().store(sig);
  run_stop_flag().store(true);
}

}  // namespace

std::string cell_path(const std::string& out, const ScenarioCell& cell) { return out + "/cells/" + cell.id + ".json"; }

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

namespace {

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Every parameter of a synthetic trace (model/synthetic/synthetic.hpp synth_params_json), by name, with
// the ranges as [min, max] pairs and the head-kind mixture as one list (the cell identity's
// form since the first results: changing it would change every cell's hash).
nlohmann::json synth_json(const SynthParams& p) {
  nlohmann::json j = synth_params_json(p);
  auto take = [&j](const std::string& key) {
    nlohmann::json v = j.at(key);
    j.erase(key);
    return v;
  };
  j["mix"] = {take("mix_sink"), take("mix_local"), take("mix_retrieval"), take("mix_diffuse")};
  for (const char* range : {"logit_scale", "sink_mass", "local_mass", "span_mass"})
    j[range] = {take(std::string(range) + "_min"), take(std::string(range) + "_max")};
  return j;
}

const std::string& content_hash(ContentHashes& cache, const std::string& path, const std::string& what) {
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, file_content_hash(path, what)).first;
  return it->second;
}

}  // namespace

std::string file_content_hash(const std::string& path, const std::string& what) {
  const OpenRegularFile opened(path, what);
  const int fd = opened.fd();
  std::vector<unsigned char> buf(1 << 20);
  std::uint64_t h = 14695981039346656037ull, total = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw InputError("Cannot read " + what + " '" + path + "': " + std::strerror(errno) + ".");
    if (r == 0) break;
    h = fnv1a64(buf.data(), static_cast<std::size_t>(r), h);
    total += static_cast<std::uint64_t>(r);
  }
  return hex64(h) + "-" + std::to_string(total);
}

nlohmann::json cell_inputs(const Scenario& sc, const ScenarioCell& cell, ContentHashes& hashes) {
  nlohmann::json spec = {{"id", cell.id}, {"source", cell.source}};
  if (cell.source == "synthetic") {
    spec["synthetic"] = synth_json(cell.synth);
    spec["logit_scale"] = cell.logit_scale;
  } else if (cell.source == "model") {
    spec["checkpoint"] = content_hash(hashes, cell.checkpoint, "llama2.c checkpoint");
    spec["model"] = cell.model_name;
    spec["prompt_len"] = cell.prompt_len;
    spec["decode_steps"] = cell.decode_steps;
    spec["temperature"] = cell.temperature;
    spec["seed"] = cell.seed;
  } else {
    spec["trace"] = content_hash(hashes, cell.path, "trace");
  }
  nlohmann::json settings = sc.settings_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(sc.settings_json);
  return {{"format", kCellFormat}, {"settings", std::move(settings)}, {"cell", std::move(spec)}};
}

std::string cell_hash(const Scenario& sc, const ScenarioCell& cell, ContentHashes& hashes) {
  const std::string text = cell_inputs(sc, cell, hashes).dump();
  return hex64(fnv1a64(text.data(), text.size()));
}

CellFile read_cell_file(const std::string& path) {
  CellFile f;
  try {
    f.json = parse_json_checked(read_regular_file(path, "cell file"), "cell file '" + path + "'");
  } catch (const InputError& e) {
    f.json = nlohmann::json();
    f.damage = e.what();
    return f;
  }
  if (!f.json.is_object() || !f.json.contains("id") || !f.json["id"].is_string()) {
    f.damage = "cell file '" + path + "' is JSON but not a tierlab cell (no string 'id').";
    f.json = nlohmann::json();
  } else if (f.json.contains("cell_hash") && !f.json["cell_hash"].is_string()) {
    f.damage = "cell file '" + path + "' has a 'cell_hash' that is not a string.";
    f.json = nlohmann::json();
  } else if (f.json.contains("content_hash")) {
    // Written since issue 33: the hash of everything else in the file. Files of earlier
    // versions have none and are checked by their content only (validate_cell_file).
    const nlohmann::json& recorded = f.json["content_hash"];
    const std::string now = cell_content_hash(f.json);
    if (!recorded.is_string() || recorded.get<std::string>() != now) {
      f.damage = "cell file '" + path + "': field 'content_hash' is " + json_excerpt(recorded) +
                 ", but the file's content hashes to \"" + now + "\" (the file was edited or damaged after it was written).";
      f.json = nlohmann::json();
    }
  }  // a cell without a hash was written before cell hashes: stale, not damaged
  return f;
}

std::string cell_content_hash(const nlohmann::json& cell) {
  nlohmann::json payload = cell;
  if (payload.is_object()) payload.erase("content_hash");
  const std::string text = payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return hex64(fnv1a64(text.data(), text.size()));
}

namespace {

// What a field of a cell must hold. Numbers are finite (JSON holds no NaN or infinity; the check
// guards the tables' arithmetic all the same) and within the field's range.
enum class Kind { Number, NumberOrNull, Count, Bool, String, Object, Array };

const char* kind_text(Kind k) {
  switch (k) {
    case Kind::Number: return "a number";
    case Kind::NumberOrNull: return "a number or null";
    case Kind::Count: return "a whole number >= 0";
    case Kind::Bool: return "true or false";
    case Kind::String: return "a string";
    case Kind::Object: return "an object";
    case Kind::Array: return "an array";
  }
  return "";
}

bool has_kind(const nlohmann::json& v, Kind k) {
  switch (k) {
    case Kind::Number: return v.is_number() && std::isfinite(v.get<double>());
    case Kind::NumberOrNull: return v.is_null() || (v.is_number() && std::isfinite(v.get<double>()));
    case Kind::Count: return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
    case Kind::Bool: return v.is_boolean();
    case Kind::String: return v.is_string();
    case Kind::Object: return v.is_object();
    case Kind::Array: return v.is_array();
  }
  return false;
}

constexpr double kUnbounded = std::numeric_limits<double>::infinity();
// Rates in bits per key element: 16 for the exact tier, codes plus metadata below it; a rate
// beyond this bound is no tier's.
constexpr double kMaxRateBits = 64;

struct Field {
  const char* key;
  Kind kind;
  bool required = true;
  double lo = -kUnbounded, hi = kUnbounded;  // a number's range, bounds included
};

// Every key of a cell that the runner or a table writer reads, with what it must hold: the
// keys compute_cell writes for every cell, then the interior analysis's (analyses/interior.cpp
// add_budgets; its tables, summary and verdict read each of them). A key the writer always
// writes is required: a missing one would read as NaN (printed in summary.md) or as a missing
// JSON key (undefined behaviour in nlohmann's const operator[]). Keys not listed are checked by
// the generic rule (no number given as a string) only.
const std::vector<Field> kCellFields = {
    {"id", Kind::String},       {"preset", Kind::String},  {"seed", Kind::Count},
    {"prompt_len", Kind::Count}, {"n_heads", Kind::Count},  {"logit_scale", Kind::NumberOrNull, true, 0},
    {"decode_steps", Kind::Count, false}, {"seconds", Kind::Number, false, 0}, {"backend", Kind::String, false},
    {"sweep_key", Kind::String, false},   {"sweep_value", Kind::Number, false}};
const std::vector<Field> kInteriorCellFields = {
    {"budgets", Kind::Array}, {"R2", Kind::Array}, {"R2_median", Kind::NumberOrNull, true, 0},
    {"dominated_share", Kind::NumberOrNull, true, 0, 1}};
// A = 1 - err(M) / min(err(Q), err(E)) and its aggregates are at most 1.
const std::vector<Field> kBudgetFields = {
    {"budget", Kind::Number},
    {"A", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_decode", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_obs", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_surrogate", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_median", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_sum", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_clipped_mean", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_routed", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"share_M_wins", Kind::NumberOrNull, true, 0, 1},
    {"share_below_floor", Kind::NumberOrNull, true, 0, 1},
    {"below_floor", Kind::Count},
    {"defined", Kind::Count},
    {"heads", Kind::Array},
    {"wins", Kind::Object},
    {"winner", Kind::String},
    {"rates", Kind::Object},
    {"model", Kind::Object}};
const std::vector<Field> kHeadFields = {
    {"layer", Kind::Count},
    {"kv_head", Kind::Count},
    {"A", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"A_surrogate", Kind::NumberOrNull, true, -kUnbounded, 1},
    {"err_Q", Kind::NumberOrNull, true, 0},
    {"err_E", Kind::NumberOrNull, true, 0},
    {"err_M", Kind::NumberOrNull, true, 0},
    {"code_Q", Kind::NumberOrNull, true, 0, kMaxRateBits},
    {"total_Q", Kind::NumberOrNull, true, 0, kMaxRateBits},
    {"code_E", Kind::NumberOrNull, true, 0, kMaxRateBits},
    {"total_E", Kind::NumberOrNull, true, 0, kMaxRateBits},
    {"code_M", Kind::NumberOrNull, true, 0, kMaxRateBits},
    {"total_M", Kind::NumberOrNull, true, 0, kMaxRateBits},
    {"repaired", Kind::String},
    {"below_floor", Kind::Bool},
    {"option_Q", Kind::String},
    {"winner", Kind::String},
    {"dominated_2bit", Kind::Bool},
    {"dense_surrogate", Kind::String, false},  // with the scenario's dense_routing
    {"dense_obs", Kind::String, false},
    {"err_dense_surrogate", Kind::NumberOrNull, false, 0},
    {"err_dense_obs", Kind::NumberOrNull, false, 0}};
// budgets[i].rates.{Q,E,M}: a family's mean measured rates over the heads where it is feasible.
const std::vector<Field> kFamilyRateFields = {{"code_bits", Kind::NumberOrNull, true, 0, kMaxRateBits},
                                              {"total_bits", Kind::NumberOrNull, true, 0, kMaxRateBits},
                                              {"heads", Kind::Count},
                                              {"repaired", Kind::Count}};
// budgets[i].model: the model-wide routed allocation and its endpoints.
const std::vector<Field> kModelFields = {{"A", Kind::NumberOrNull, true, -kUnbounded, 1},
                                         {"Q", Kind::Object},
                                         {"E", Kind::Object},
                                         {"routed", Kind::Object},
                                         {"routed_to", Kind::Object},
                                         {"routed_is_endpoint", Kind::String, false}};  // not in earlier cells
const std::vector<Field> kModelFamilyFields = {{"feasible", Kind::Bool}};
const std::vector<Field> kFeasibleModelFamilyFields = {{"feasible", Kind::Bool},
                                                       {"err", Kind::NumberOrNull, true, 0},
                                                       {"code_bits", Kind::Number, true, 0, kMaxRateBits},
                                                       {"total_bits", Kind::Number, true, 0, kMaxRateBits},
                                                       {"surrogate", Kind::NumberOrNull, false, 0},  // not in earlier cells
                                                       {"repaired", Kind::Bool}};
const std::vector<Field> kFamilyCountFields = {{"Q", Kind::Count}, {"E", Kind::Count}, {"M", Kind::Count}};

// A problem found in a cell: the field (a JSON path such as "budgets[2].heads[7].A") and why.
struct CellProblem : std::exception {
  std::string field, text;
  CellProblem(std::string f, std::string t) : field(std::move(f)), text(std::move(t)) {}
};

std::string path_of(const std::string& at, const std::string& key) { return at.empty() ? key : at + "." + key; }

std::string range_text(const Field& f) {
  if (f.lo > -kUnbounded && f.hi < kUnbounded) return "in [" + format_number(f.lo, 6) + ", " + format_number(f.hi, 6) + "]";
  if (f.lo > -kUnbounded) return ">= " + format_number(f.lo, 6);
  return "<= " + format_number(f.hi, 6);
}

void check_fields(const nlohmann::json& obj, const std::string& at, const std::vector<Field>& fields) {
  if (!obj.is_object()) throw CellProblem(at, "is " + json_excerpt(obj) + "; it must be an object");
  for (const Field& f : fields) {
    const std::string name = path_of(at, f.key);
    if (!obj.contains(f.key)) {
      if (f.required) throw CellProblem(name, "is missing");
      continue;
    }
    const nlohmann::json& v = obj[f.key];
    if (!has_kind(v, f.kind))
      throw CellProblem(name, "is " + json_excerpt(v) + "; it must be " + kind_text(f.kind));
    if (v.is_number() && !(v.get<double>() >= f.lo && v.get<double>() <= f.hi))
      throw CellProblem(name, "is " + json_excerpt(v) + "; it must be " + range_text(f));
  }
}

// obj[key] as a count (checked by check_fields before).
std::uint64_t count_of(const nlohmann::json& obj, const char* key) { return obj[key].get<std::uint64_t>(); }

// A count of heads that cannot exceed the cell's heads.
void check_at_most(const std::string& field, std::uint64_t n, std::uint64_t n_heads, const char* what) {
  if (n > n_heads)
    throw CellProblem(field, "counts " + std::to_string(n) + " " + what + "; the cell has n_heads = " + std::to_string(n_heads));
}

// "Q", "E", "M" or "" (no family decided).
void check_winner(const nlohmann::json& obj, const std::string& at) {
  const std::string w = obj["winner"].get<std::string>();
  if (!(w.empty() || w == "Q" || w == "E" || w == "M"))
    throw CellProblem(path_of(at, "winner"), "is " + json_excerpt(obj["winner"]) + R"(; it must be "Q", "E", "M" or "")");
}

// The cell's identity beyond its id: what compute_cell writes for this scenario cell.
void check_identity(const ScenarioCell& cell, const nlohmann::json& j) {
  const std::string preset = cell.source == "synthetic" ? cell.synth.preset
                             : cell.source == "model"   ? cell.model_name
                                                        : std::string("file");
  if (j["preset"].get<std::string>() != preset)
    throw CellProblem("preset", "is " + json_excerpt(j["preset"]) + ", not the cell's \"" + preset + "\"");
  const std::uint64_t seed = cell.source == "model" ? cell.seed : cell.synth.seed;
  if (count_of(j, "seed") != seed) throw CellProblem("seed", "is " + json_excerpt(j["seed"]) + ", not the cell's " + std::to_string(seed));
  const int prompt_len = cell.source == "synthetic" ? cell.synth.prompt_len : cell.source == "model" ? cell.prompt_len : -1;
  if (prompt_len >= 0 && count_of(j, "prompt_len") != static_cast<std::uint64_t>(prompt_len))
    throw CellProblem("prompt_len", "is " + json_excerpt(j["prompt_len"]) + ", not the cell's " + std::to_string(prompt_len));
  const nlohmann::json& ls = j["logit_scale"];
  if (cell.logit_scale > 0 ? !(ls.is_number() && ls.get<double>() == cell.logit_scale) : !ls.is_null())
    throw CellProblem("logit_scale", "is " + json_excerpt(ls) + ", not the cell's " +
                                         (cell.logit_scale > 0 ? format_number(cell.logit_scale, 17) : std::string("null (no sweep)")));
  if (cell.sweep_key.empty()) {
    for (const char* k : {"sweep_key", "sweep_value"})
      if (j.contains(k)) throw CellProblem(k, "is " + json_excerpt(j[k]) + ", but the scenario sweeps no parameter");
  } else {
    if (!j.contains("sweep_key") || j["sweep_key"].get<std::string>() != cell.sweep_key)
      throw CellProblem("sweep_key", "is " + (j.contains("sweep_key") ? json_excerpt(j["sweep_key"]) : std::string("missing")) +
                                         ", not the cell's \"" + cell.sweep_key + "\"");
    if (!j.contains("sweep_value") || j["sweep_value"].get<double>() != cell.sweep_value)
      throw CellProblem("sweep_value", "is " + (j.contains("sweep_value") ? json_excerpt(j["sweep_value"]) : std::string("missing")) +
                                           ", not the cell's " + format_number(cell.sweep_value, 17));
  }
}

// A string that reads wholly as a number ("0.5", "nan", "1e3"): a number given as a string.
bool looks_like_number(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// Every value of the cell: no number written as a string (the tables would read it as a number).
void check_no_string_numbers(const nlohmann::json& v, const std::string& at) {
  // Text by definition, whatever it reads as: file names, and hashes in hex ("1653829e07198737"
  // reads as a number in exponent form).
  const std::string leaf = at.substr(at.find_last_of('.') == std::string::npos ? 0 : at.find_last_of('.') + 1);
  if (leaf == "trace" || leaf == "checkpoint" || leaf == "path" ||
      (leaf.size() >= 4 && leaf.compare(leaf.size() - 4, 4, "hash") == 0))
    return;
  if (v.is_string()) {
    if (looks_like_number(v.get<std::string>()))
      throw CellProblem(at, "is " + json_excerpt(v) + ", a number given as a string; it must be a JSON number");
  } else if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) check_no_string_numbers(it.value(), at.empty() ? it.key() : at + "." + it.key());
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) check_no_string_numbers(v[i], at + "[" + std::to_string(i) + "]");
  }
}

std::string budget_text(double b) {
  std::ostringstream s;
  s.precision(17);
  s << b;
  return s.str();
}

void check_cell(const Scenario& sc, const ScenarioCell& cell, const nlohmann::json& j) {
  check_fields(j, "", kCellFields);
  if (j["id"].get<std::string>() != cell.id)
    throw CellProblem("id", "is " + json_excerpt(j["id"]) + ", not the file's name \"" + cell.id + "\"");
  check_no_string_numbers(j, "");
  check_identity(cell, j);
  const bool interior = std::any_of(sc.analyses.begin(), sc.analyses.end(),
                                    [](const auto& a) { return a && a->name() == "interior"; });
  if (!interior) return;
  check_fields(j, "", kInteriorCellFields);
  const nlohmann::json& budgets = j["budgets"];
  const std::uint64_t n_heads = count_of(j, "n_heads");
  if (budgets.size() != sc.budgets.size())
    throw CellProblem("budgets", "has " + std::to_string(budgets.size()) + " entries; the scenario has " +
                                     std::to_string(sc.budgets.size()) + " budgets");
  const nlohmann::json& r2 = j["R2"];
  if (!r2.empty() && r2.size() != n_heads)
    throw CellProblem("R2", "has " + std::to_string(r2.size()) + " entries; the cell has n_heads = " + std::to_string(n_heads) +
                                " (or none, without a 2-bit tier)");
  for (std::size_t h = 0; h < r2.size(); ++h)
    if (!has_kind(r2[h], Kind::NumberOrNull) || (r2[h].is_number() && r2[h].get<double>() < 0))
      throw CellProblem("R2[" + std::to_string(h) + "]", "is " + json_excerpt(r2[h]) + "; it must be a number >= 0 or null");
  for (std::size_t bi = 0; bi < budgets.size(); ++bi) {
    const std::string at = "budgets[" + std::to_string(bi) + "]";
    const nlohmann::json& b = budgets[bi];
    check_fields(b, at, kBudgetFields);
    const double B = b["budget"].get<double>(), want = sc.budgets[bi];
    if (!(std::abs(B - want) <= 1e-12 * std::max(1.0, std::abs(want))))
      throw CellProblem(at + ".budget", "is " + json_excerpt(b["budget"]) + "; the scenario's budget " +
                                            std::to_string(bi + 1) + " is " + budget_text(want) +
                                            " (the budgets must be the scenario's, in its order)");
    const nlohmann::json& heads = b["heads"];
    if (heads.size() != n_heads)
      throw CellProblem(at + ".heads", "has " + std::to_string(heads.size()) + " heads; the cell has n_heads = " +
                                           std::to_string(n_heads));
    for (std::size_t h = 0; h < heads.size(); ++h) {
      const std::string ah = at + ".heads[" + std::to_string(h) + "]";
      check_fields(heads[h], ah, kHeadFields);
      check_winner(heads[h], ah);
      // The heads in (layer, kv_head) order, each once, the same heads at every budget.
      const auto key = [&](const nlohmann::json& x) { return std::pair{count_of(x, "layer"), count_of(x, "kv_head")}; };
      if (h > 0 && !(key(heads[h - 1]) < key(heads[h])))
        throw CellProblem(ah, "is head (" + std::to_string(key(heads[h]).first) + ", " + std::to_string(key(heads[h]).second) +
                                  ") after (" + std::to_string(key(heads[h - 1]).first) + ", " +
                                  std::to_string(key(heads[h - 1]).second) + "); the heads must be in (layer, kv_head) order, each once");
      if (bi > 0 && key(heads[h]) != key(budgets[0]["heads"][h]))
        throw CellProblem(ah, "is head (" + std::to_string(key(heads[h]).first) + ", " + std::to_string(key(heads[h]).second) +
                                  "), not budgets[0]'s head " + std::to_string(h) + "; every budget holds the same heads");
    }
    check_winner(b, at);
    check_fields(b["wins"], at + ".wins", kFamilyCountFields);
    check_at_most(at + ".wins", count_of(b["wins"], "Q") + count_of(b["wins"], "E") + count_of(b["wins"], "M"), n_heads, "heads won");
    check_at_most(at + ".defined", count_of(b, "defined"), n_heads, "heads");
    check_at_most(at + ".below_floor", count_of(b, "below_floor"), n_heads, "heads");
    for (const char* fam : {"Q", "E", "M"}) {
      const std::string ar = at + ".rates." + fam;
      if (!b["rates"].contains(fam)) throw CellProblem(ar, "is missing");
      const nlohmann::json& r = b["rates"][fam];
      check_fields(r, ar, kFamilyRateFields);
      check_at_most(ar + ".heads", count_of(r, "heads"), n_heads, "heads");
      check_at_most(ar + ".repaired", count_of(r, "repaired"), count_of(r, "heads"), "heads (of its heads)");
      if (count_of(r, "heads") > 0)
        for (const char* k : {"code_bits", "total_bits"})
          if (r[k].is_null()) throw CellProblem(ar + "." + k, "is null, but the family is feasible at " + std::to_string(count_of(r, "heads")) + " heads");
    }
    const nlohmann::json& md = b["model"];
    check_fields(md, at + ".model", kModelFields);
    for (const char* fam : {"Q", "E", "routed"}) {
      const std::string am = at + ".model." + fam;
      check_fields(md[fam], am, kModelFamilyFields);
      if (md[fam]["feasible"].get<bool>()) check_fields(md[fam], am, kFeasibleModelFamilyFields);
    }
    check_fields(md["routed_to"], at + ".model.routed_to", kFamilyCountFields);
    check_at_most(at + ".model.routed_to",
                  count_of(md["routed_to"], "Q") + count_of(md["routed_to"], "E") + count_of(md["routed_to"], "M"), n_heads,
                  "heads routed");
  }
}

}  // namespace

std::string validate_cell_file(const Scenario& sc, const ScenarioCell& cell, const std::string& path,
                               const nlohmann::json& j) {
  try {
    check_cell(sc, cell, j);
  } catch (const CellProblem& p) {
    return "cell file '" + path + "': field '" + p.field + "' " + p.text + ".";
  }
  return "";
}

nlohmann::json compute_cell(const Scenario& sc, const ScenarioCell& cell, Recomputer& backend,
                            const std::string& work_dir, const std::atomic<bool>* stop,
                            const std::function<void(const std::string&, int, int)>& on_step) {
  const auto t0 = std::chrono::steady_clock::now();
  reset_phase_totals();  // this cell's phases (its thread's, with those of heads run side by side merged in)
  std::string trace_path = cell.path;
  bool temporary = false;
  if (cell.source == "synthetic") {
    // Heads generated in memory when the analyses read them (synthetic_trace): no file. The
    // run's stop flag is checked between heads, as before between the heads of the file.
  } else if (cell.source == "model") {
    make_directories(work_dir);
    trace_path = work_dir + "/" + cell.id + ".safetensors";
    const Llama2cModel model(cell.checkpoint);
    if (cell.prompt_len + cell.decode_steps > model.config().seq_len)
      throw InputError(sc.file + ": cell '" + cell.id + "': context length " + std::to_string(cell.prompt_len) +
                       " plus " + std::to_string(cell.decode_steps) + " decode steps exceeds the model's seq_len " +
                       std::to_string(model.config().seq_len) + ".");
    CaptureOptions co;
    co.prompt.generate = cell.prompt_len;
    co.prompt.temperature = static_cast<float>(cell.temperature);
    co.prompt.seed = cell.seed;
    co.decode_steps = cell.decode_steps;
    write_trace(trace_path, capture(model, co));
    temporary = true;
  }
  struct Cleanup {
    std::string path;
    bool on;
    ~Cleanup() {
      std::error_code ec;
      if (on) fs::remove(path, ec);
    }
  } cleanup{trace_path, temporary};
  const TraceReader trace = cell.source == "synthetic" ? synthetic_trace(cell.synth, "synthetic cell " + cell.id)
                                                       : TraceReader(trace_path);
  const TraceMeta& m = trace.meta();
  if (sc.queries == QuerySet::Decode && m.decode_steps == 0)
    throw InputError(sc.file + ": cell '" + cell.id + "' has no decode steps; use 'queries: obs' for this trace.");

  nlohmann::json j = {{"id", cell.id},
                      {"cell_format", kCellFormat},
                      {"source", cell.source},
                      {"trace", cell.source == "file" ? trace_path : std::string()},
                      {"preset", cell.source == "synthetic" ? cell.synth.preset
                                 : cell.source == "model"   ? cell.model_name
                                                            : std::string("file")},
                      {"seed", cell.source == "model" ? cell.seed : cell.synth.seed},
                      {"prompt_len", m.prompt_len},
                      {"decode_steps", m.decode_steps},
                      {"logit_scale", finite_or_null(cell.logit_scale > 0 ? cell.logit_scale : std::nan(""))},
                      {"n_heads", m.n_heads()},
                      {"ladder", sc.ladder.name()},
                      {"queries", std::string(to_string(sc.queries))},
                      {"backend", backend.name()}};
  if (!cell.sweep_key.empty()) j["sweep_key"] = cell.sweep_key, j["sweep_value"] = cell.sweep_value;

  CellContext ctx{sc, cell, trace, backend, stop, on_step};
  for (const auto& a : sc.analyses) {
    ctx.check_stop();
    ctx.step(a->name());
    a->compute_cell(ctx, j);
  }
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Where the cell's time went (model/base/phases.hpp; docs/performance.md): per phase its
  // seconds, floating-point operations of the dense products and bytes; the rest of the
  // cell's seconds is everything else (materialising allocations, measuring rates, I/O).
  const PhaseTotals& pt = phase_totals();
  nlohmann::json phases = nlohmann::json::object();
  for (int k = 0; k < kPhases; ++k) {
    const auto i = static_cast<std::size_t>(k);
    if (pt.seconds[i] > 0 || pt.flops[i] > 0 || pt.bytes[i] > 0)  // the tables are written after the cells
      phases[std::string(to_string(static_cast<Phase>(k)))] = {
          {"seconds", pt.seconds[i]}, {"flops", pt.flops[i]}, {"bytes", pt.bytes[i]}};
  }
  phases["threads"] = pt.threads;  // > 1: heads ran side by side, the seconds sum their busy time
  j["phases"] = phases;
  return j;
}

std::string run_work_dir(const std::string& out) { return out + "/traces/" + process_tag(); }

double estimated_cell_cost(const Scenario& sc, const ScenarioCell& cell) {
  // heads x queries x keys x head dim: the recomputation's work for one budget (the same
  // number of budgets for every cell of a scenario). 0 when the trace cannot be read here.
  const auto cost = [&](double heads, double group, double keys, double obs, double decode, double dim) {
    const double queries = std::max(1.0, sc.queries == QuerySet::Obs ? obs : decode);
    return heads * group * keys * queries * dim;
  };
  if (cell.source == "synthetic") {
    const SynthParams& p = cell.synth;
    return cost(double(p.n_layers) * p.n_kv_heads, p.group_size, p.prompt_len, p.obs_window, p.decode_steps, p.head_dim);
  }
  if (cell.source == "model") {
    std::int32_t h[7] = {};
    std::ifstream in(cell.checkpoint, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(h), sizeof h)) return 0;
    const double n_heads = std::max(1, h[3]), n_kv = std::max(1, std::abs(h[4])), dim = std::max(1, h[0]);
    return cost(double(std::max(1, h[2])) * n_kv, n_heads / n_kv, cell.prompt_len, cell.prompt_len, cell.decode_steps,
                dim / n_heads);
  }
  try {
    const TraceMeta m = TraceReader(cell.path).meta();
    return cost(m.n_heads(), m.group_size, m.prompt_len, m.obs_window, m.decode_steps, m.head_dim);
  } catch (const std::exception&) {
    return 0;
  }
}

std::vector<std::size_t> largest_first(const Scenario& sc, std::vector<std::size_t> cells) {
  std::vector<double> cost(sc.cells.size(), 0.0);
  for (const std::size_t i : cells) cost[i] = estimated_cell_cost(sc, sc.cells[i]);
  std::stable_sort(cells.begin(), cells.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  return cells;
}

std::vector<int> shard_assignment(const Scenario& sc, int shards) {
  if (shards < 1) throw InputError("run: the number of shards is " + std::to_string(shards) + "; it must be at least 1.");
  std::vector<std::size_t> all(sc.cells.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<int> shard(sc.cells.size(), 0);
  std::vector<double> load(static_cast<std::size_t>(shards), 0.0);
  std::vector<int> count(static_cast<std::size_t>(shards), 0);
  for (const std::size_t i : largest_first(sc, all)) {
    // The shard with the least estimated work so far (then the fewest cells, then the lowest index).
    const double c = estimated_cell_cost(sc, sc.cells[i]);
    int best = 0;
    for (int s = 1; s < shards; ++s)
      if (load[s] < load[best] || (load[s] == load[best] && count[s] < count[best])) best = s;
    shard[i] = best;
    load[best] += c;
    ++count[best];
  }
  return shard;
}

Shard parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  const auto bad = [&](const std::string& why) {
    return InputError("run: --shard is '" + text + "'; " + why + " (I/N: shard I of N, 1 <= I <= N, e.g. 2/8).");
  };
  if (slash == std::string::npos) throw bad("it has no '/'");
  Shard s;
  const auto num = [&](std::string_view part, int& v) {
    const auto r = std::from_chars(part.data(), part.data() + part.size(), v);
    return r.ec == std::errc() && r.ptr == part.data() + part.size() && !part.empty();
  };
  const std::string_view t(text);
  if (!num(t.substr(0, slash), s.index) || !num(t.substr(slash + 1), s.count)) throw bad("I and N must be whole numbers");
  if (s.count < 1 || s.count > 100000) throw bad("N must be in [1, 100000]");
  if (s.index < 1 || s.index > s.count) throw bad("I must be in [1, N]");
  return s;
}

void write_cell_file(const std::string& out, const ScenarioCell& cell, nlohmann::json j, const std::string& hash) {
  j["cell_hash"] = hash;
  j.erase("content_hash");
  j["content_hash"] = cell_content_hash(j);
  write_file_atomically(cell_path(out, cell), j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::vector<std::string> unfinished_cells(const Scenario& sc, const std::string& out,
                                          const std::map<std::string, std::string>& hashes) {
  std::vector<std::string> missing;
  for (const auto& c : sc.cells) {
    const std::string path = cell_path(out, c);
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      missing.push_back(c.id);
      continue;
    }
    const CellFile f = read_cell_file(path);
    if (!f.damage.empty() || f.json.value("cell_hash", std::string()) != hashes.at(c.id) ||
        !validate_cell_file(sc, c, path, f.json).empty())
      missing.push_back(c.id);
  }
  return missing;
}

namespace {

// path + suffix + n for the first n >= 1 that names nothing yet.
std::string free_aside_name(const std::string& path, const std::string& suffix) {
  for (int n = 1;; ++n) {
    const std::string name = path + suffix + std::to_string(n);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(name, ec)) || n >= 100000) return name;
  }
}

}  // namespace

RunPlan plan_run(const Scenario& sc, const RunOptions& opt, const std::vector<std::size_t>* only) {
  if (opt.out.empty()) throw InputError("run: the output folder (--out) is empty.");
  RunPlan plan;
  RunResult& res = plan.result;
  res.cells_total = static_cast<int>(sc.cells.size());
  // Temporary files of killed runs first (before this run writes any of its own).
  const auto removed = remove_stale_temporaries(opt.out);
  res.temporaries_removed = static_cast<int>(removed.size());
  if (!removed.empty())
    run_note(opt, "removed " + std::to_string(removed.size()) + " temporary file" + (removed.size() == 1 ? "" : "s") +
                      " of killed runs under '" + opt.out + "' (first: '" + removed.front() + "').");
  make_directories(opt.out + "/cells");
  if (!sc.file.empty() && fs::exists(sc.file))
    write_file_atomically(opt.out + "/scenario.yaml", read_regular_file(sc.file, "scenario file", kMaxScenarioBytes));

  // Which cells are finished for these inputs: the hash of each cell's inputs against its file.
  ContentHashes content_hashes;
  for (const auto& c : sc.cells) plan.hashes[c.id] = cell_hash(sc, c, content_hashes);
  std::vector<std::size_t> considered;
  if (only) {
    considered = *only;
  } else {
    for (std::size_t i = 0; i < sc.cells.size(); ++i) considered.push_back(i);
  }
  std::vector<std::size_t> pending;
  for (const std::size_t i : considered) {
    const ScenarioCell& c = sc.cells[i];
    const std::string path = cell_path(opt.out, c);
    bool finished = false;
    if (!opt.force && fs::exists(path)) {
      const CellFile f = read_cell_file(path);
      if (!f.damage.empty()) {
        std::error_code ec;
        fs::rename(path, path + ".damaged", ec);
        ++res.cells_damaged;
        run_note(opt, f.damage + " " +
                          (ec ? "It could not be moved aside (" + ec.message() + "); recomputing cell '" + c.id + "'."
                              : "Moved aside to '" + path + ".damaged'; recomputing cell '" + c.id + "'."));
      } else if (!f.json.contains("cell_hash") || f.json["cell_hash"] != plan.hashes[c.id]) {
        ++res.cells_stale;
        run_note(opt, "cell '" + c.id + "' in '" + path + "' was computed for other inputs (cell hash " +
                          (f.json.contains("cell_hash") ? f.json["cell_hash"].get<std::string>() : std::string("none")) +
                          ", now " + plan.hashes[c.id] +
                          ": the scenario's settings or the cell's trace changed); recomputing it.");
      } else if (const std::string invalid = validate_cell_file(sc, c, path, f.json); !invalid.empty()) {
        // Parsed, for these inputs, but not what the scenario's cell holds: never used.
        const std::string aside = free_aside_name(path, ".invalid-");
        std::error_code ec;
        fs::rename(path, aside, ec);
        ++res.cells_damaged;
        run_note(opt, invalid + " " +
                          (ec ? "It could not be moved aside (" + ec.message() + "); recomputing cell '" + c.id + "'."
                              : "Moved aside to '" + aside + "'; recomputing cell '" + c.id + "'."));
      } else {
        finished = true;
      }
    }
    if (finished) {
      ++res.cells_skipped;
      if (opt.on_cell) opt.on_cell(c.id, false);
    } else {
      pending.push_back(i);
    }
  }
  plan.pending = largest_first(sc, std::move(pending));  // cells differ widely in cost
  return plan;
}

void run_note(const RunOptions& opt, const std::string& text) {
  if (opt.on_note) {
    opt.on_note(text);
  } else {
    std::fprintf(stderr, "tierlab: %s\n", text.c_str());
  }
}

std::unique_ptr<Recomputer> make_run_backend(const Scenario& sc, const RunOptions& opt) {
  if (opt.backend_factory) return opt.backend_factory();
  std::string note;
  auto be = make_recomputer(opt.backend ? *opt.backend : sc.backend, &note);
  if (!be) throw InputError("backend unavailable: " + note);
  return be;
}

void remove_work_dir(const std::string& work_dir) {
  std::error_code ec;
  fs::remove_all(work_dir, ec);
  fs::remove(fs::path(work_dir).parent_path(), ec);  // traces/, only when empty
}

namespace {

// Computes the cells `todo` (indices into sc.cells) on opt.jobs threads, each with its own
// backend; writes each cell file as it finishes. Counts into res; the first error is kept.
void compute_locally(const Scenario& sc, const RunOptions& opt, const std::map<std::string, std::string>& hashes,
                     const std::vector<std::size_t>& todo, RunResult& res, int already, int total,
                     std::exception_ptr& first_error, std::string& first_error_context) {
  std::atomic<bool>& stop = run_stop_flag();
  std::mutex mu;
  std::atomic<std::size_t> next{0};
  int done = 0;
  const std::string work_dir = run_work_dir(opt.out);
  TerminalProgress bar("run " + sc.name);
  if (opt.progress) bar.update(already, total);
  const int n = std::min<int>(opt.jobs, std::max<int>(1, static_cast<int>(todo.size())));
  // Each of n jobs runs at most cores / n heads side by side (parallel_heads.hpp; at least 1),
  // so that n jobs hold about as many heads at once as there are cores, not n x cores. Their
  // OpenMP threads are left as they are: a product Eigen splits over threads sums in an order
  // that depends on their number, and the tables must not depend on n.
  const int job_heads = n > 1 ? std::max(1, omp_get_max_threads() / n) : 0;
  auto worker = [&]() {
    limit_head_threads(job_heads);
    // The stop flag reaches the inner loops of this thread's cells too (the surrogate's chunks,
    // the CPU backend's tiles: model/base/cancel.hpp), not only the steps between them.
    const CancelScope cancel_scope(&stop);
    std::unique_ptr<Recomputer> be;
    try {
      be = make_run_backend(sc, opt);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first_error) first_error = std::current_exception(), first_error_context = "run";
      stop.store(true);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      res.backend = be->description();
    }
    while (!stop.load()) {
      const std::size_t i = next.fetch_add(1);
      if (i >= todo.size()) break;
      const ScenarioCell& cell = sc.cells[todo[i]];
      try {
        const auto on_step = [&](const std::string& step, int d, int t) {
          if (!opt.progress) return;
          std::lock_guard<std::mutex> lock(mu);
          bar.detail("cell " + cell.id + ": " + step + (t > 0 ? " " + std::to_string(d) + "/" + std::to_string(t) : ""),
                     cell.id + step);
          bar.update(already + done, total);
        };
        write_cell_file(opt.out, cell, compute_cell(sc, cell, *be, work_dir, &stop, on_step), hashes.at(cell.id));
        std::lock_guard<std::mutex> lock(mu);
        ++res.cells_computed, ++done;
        if (opt.on_cell) opt.on_cell(cell.id, true);
        if (opt.progress) bar.update(already + done, total);
      } catch (const Cancelled&) {
        break;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first_error) first_error = std::current_exception(), first_error_context = "cell '" + cell.id + "'";
        stop.store(true);
      }
    }
  };
  if (n == 1) {
    worker();
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }
  bar.finish();
  remove_work_dir(work_dir);
}

}  // namespace

namespace {

// DIR/.lock held for a run (runner.hpp): exclusive for a whole run, shared for a shard. Waits
// while another run holds it, polling every 100 ms so that the calling thread's cancel flag
// stops the wait (interrupted(); model/base/cancel.hpp: Ctrl-C in a Python call). No signal handler
// is installed for the wait: `tierlab run` interrupted while it waits simply ends (it holds
// nothing yet), and a handler installed here could outlive a concurrent run's. A folder whose
// file system has no locks (flock: ENOLCK, EOPNOTSUPP) is run without one, with a note.
// Closing the descriptor (the destructor, or the process's end, killed or not) releases the
// lock: a killed run never leaves the folder locked.
class RunFolderLock {
 public:
  RunFolderLock(const RunOptions& opt, bool shared) {
    make_directories(opt.out);
    const std::string path = opt.out + "/.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd_ < 0) throw InputError("run: cannot open the lock file '" + path + "': " + std::strerror(errno) + ".");
    const int op = (shared ? LOCK_SH : LOCK_EX) | LOCK_NB;
    if (::flock(fd_, op) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        run_note(opt, "cannot lock '" + path + "' (" + std::strerror(errno) +
                          "): running without the lock; another run into '" + opt.out + "' may compute the same cells.");
        return;
      }
      run_note(opt, "waiting for the run of process " + holder() + " into '" + opt.out + "' (it holds '" + path +
                        "'); this run goes on when it ends and skips the cells it finished.");
      const std::atomic<bool>* cancel = current_cancel_flag();
      for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (cancel_requested(cancel)) {
          interrupted_ = true;
          return;
        }
        if (::flock(fd_, op) == 0) break;
        if (errno != EWOULDBLOCK && errno != EINTR)
          throw InputError("run: cannot lock '" + path + "': " + std::strerror(errno) + ".");
      }
    }
    // The holder's tag, for the message of the next run that waits.
    const std::string tag = process_tag() + "\n";
    if (::ftruncate(fd_, 0) == 0) {
      const ssize_t written = ::pwrite(fd_, tag.data(), tag.size(), 0);
      (void)written;  // only the message of a waiting run depends on it
    }
  }
  ~RunFolderLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;
  bool interrupted() const { return interrupted_; }

 private:
  // "<pid>@<host>" of the run holding the lock, as it wrote it ("unknown" before it has).
  std::string holder() const {
    char buf[300] = {};
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    std::string s = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '@' || c == '.' || c == '-' || c == '_';
    });
    return plain ? s : std::string("(unknown)");
  }

  int fd_ = -1;
  bool interrupted_ = false;
};

}  // namespace

SigintScope::SigintScope() : previous_int_(std::signal(SIGINT, on_sigint)), previous_term_(std::signal(SIGTERM, on_sigint)) {
  run_stop_flag().store(false);
  run_stop_signal().store(0);
}
SigintScope::~SigintScope() {
  std::signal(SIGINT, previous_int_);
  std::signal(SIGTERM, previous_term_);
}

void write_run_tables(const Scenario& sc, const std::string& out, const std::map<std::string, std::string>& hashes) {
  const PhaseScope phase(Phase::Tables);
  std::vector<nlohmann::json> cells;
  for (const auto& c : sc.cells) {
    CellFile f = read_cell_file(cell_path(out, c));
    if (!f.damage.empty()) throw InputError(f.damage + " Rerun to recompute it.");
    if (f.json.value("cell_hash", std::string()) != hashes.at(c.id))
      throw InputError("cell file '" + cell_path(out, c) + "' changed during the run (another run into '" + out +
                       "'?); rerun to recompute it.");
    if (const std::string invalid = validate_cell_file(sc, c, cell_path(out, c), f.json); !invalid.empty())
      throw InputError(invalid + " Rerun to move it aside and recompute it.");
    cells.push_back(std::move(f.json));
  }
  // Traces left by cells of killed runs of earlier versions (traces/<cell id>.safetensors).
  std::error_code ec;
  for (const auto& c : sc.cells) fs::remove(out + "/traces/" + c.id + ".safetensors", ec);
  fs::remove(out + "/traces", ec);
  write_analyses(sc, cells, out);
}

void check_run_size(const Scenario& sc, const RunOptions& opt, const std::vector<std::size_t>* only) {
  std::vector<std::size_t> pending;
  for (std::size_t i = 0; i < sc.cells.size(); ++i) {
    if (only && std::find(only->begin(), only->end(), i) == only->end()) continue;
    std::error_code ec;
    if (opt.force || !fs::exists(cell_path(opt.out, sc.cells[i]), ec)) pending.push_back(i);
  }
  if (pending.empty()) return;
  const RunEstimate e = estimate_run(sc, pending, opt.jobs);
  const std::string line = "estimate for " + sc.name + ": " + e.describe(opt.jobs) + ".";
  if (opt.on_estimate)
    opt.on_estimate(line);
  else
    std::fprintf(stderr, "tierlab: %s\n", line.c_str());
  if (opt.force_size) return;
  const std::string fault = size_fault(e, size_limits(opt.out, opt.max_memory, opt.max_disk), opt.jobs);
  if (!fault.empty()) throw InputError("scenario '" + sc.file + "': " + fault);
}

RunResult run_scenario(const Scenario& sc, const RunOptions& opt) {
  if (opt.jobs < 1 || opt.jobs > 64) throw InputError("run: --jobs is " + std::to_string(opt.jobs) + "; it must be in [1, 64].");
  if (opt.shard.count < 1 || opt.shard.index < 1 || opt.shard.index > opt.shard.count)
    throw InputError("run: the shard is " + std::to_string(opt.shard.index) + "/" + std::to_string(opt.shard.count) +
                     "; it must be I/N with 1 <= I <= N.");
  const bool sharded = opt.shard.count > 1;
  std::vector<std::size_t> mine;
  if (sharded) {
    const std::vector<int> shard = shard_assignment(sc, opt.shard.count);
    for (std::size_t i = 0; i < sc.cells.size(); ++i)
      if (shard[i] == opt.shard.index - 1) mine.push_back(i);
  }
  // The size of the work, before any of it (estimate.hpp): printed, and refused beyond the
  // machine or the stated limits unless opt.force_size.
  if (!opt.size_checked) check_run_size(sc, opt, sharded ? &mine : nullptr);
  // One run into a folder at a time (shards side by side): a second run waits here, then plans
  // and finds the cells the first one finished.
  const RunFolderLock folder_lock(opt, /*shared=*/sharded);
  if (folder_lock.interrupted()) {
    RunResult stopped;
    stopped.cells_total = static_cast<int>(sc.cells.size());
    stopped.interrupted = true;
    return stopped;
  }
  RunPlan plan = plan_run(sc, opt, sharded ? &mine : nullptr);
  RunResult res = plan.result;
  res.shard_cells = sharded ? static_cast<int>(mine.size()) : res.cells_total;

  SigintScope sigint;
  std::exception_ptr first_error;
  std::string first_error_context;
  compute_locally(sc, opt, plan.hashes, plan.pending, res, res.cells_skipped, res.shard_cells, first_error,
                  first_error_context);
  if (first_error) rethrow_with_context(first_error, first_error_context);  // keeps the error's category
  if (run_stop_flag().load()) {
    res.interrupted = true;
    return res;
  }
  if (sharded) {
    res.missing = unfinished_cells(sc, opt.out, plan.hashes);
    if (!res.missing.empty() && opt.complete_missing) {
      // The cells other shards have not finished (yet): computed here as well.
      std::vector<std::size_t> rest;
      for (std::size_t i = 0; i < sc.cells.size(); ++i)
        if (std::find(res.missing.begin(), res.missing.end(), sc.cells[i].id) != res.missing.end()) rest.push_back(i);
      rest = largest_first(sc, std::move(rest));
      compute_locally(sc, opt, plan.hashes, rest, res, 0, static_cast<int>(rest.size()), first_error, first_error_context);
      if (first_error) rethrow_with_context(first_error, first_error_context);
      if (run_stop_flag().load()) {
        res.interrupted = true;
        return res;
      }
      res.missing = unfinished_cells(sc, opt.out, plan.hashes);
    }
    if (!res.missing.empty()) return res;  // another shard writes the tables
  }
  write_run_tables(sc, opt.out, plan.hashes);
  res.tables_written = true;
  return res;
}

}  // namespace tierlab
