// tierlab-explorer's computation core (explorer_core.hpp).
#include "gui/explorer_core.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>
#include <omp.h>

#include "model/capture.hpp"
#include "model/dominance.hpp"
#include "model/error.hpp"
#include "model/llama2c.hpp"
#include "model/quantizer.hpp"
#include "model/tier_quantizer.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/head.hpp"
#include "scenarios/analyses/interior.hpp"
#include "scenarios/analyses/waterfill.hpp"
#include "scenarios/figures/figures.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/pipeline/staleness_head.hpp"
#include "solvers/smoothing.hpp"

namespace tierlab::explorer {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Runs the OpenMP work of its scope on the calling thread alone (restored on exit). The
// interactive update's work (tier-local quantization of one head, the g rows of one decode
// step) is a few ms; on a shared 2-core machine the barriers of parallel regions cost more
// than they save (bench_explorer: 28 ms serial against 89 ms with 2 threads while the
// other core compiled).
struct SerialOmp {
  int saved = omp_get_max_threads();
  SerialOmp() { omp_set_num_threads(1); }
  ~SerialOmp() { omp_set_num_threads(saved); }
  SerialOmp(const SerialOmp&) = delete;
  SerialOmp& operator=(const SerialOmp&) = delete;
};

void check(const std::atomic<bool>* cancel) { throw_if_cancelled(cancel); }


std::string lower_ext(const std::string& p) {
  std::string e = fs::path(p).extension().string();
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}



double val(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : kNaN;
}


// Colours: eviction grey, finite tiers from the palette (red is kept for levels), exact black.
Rgb tier_color(const RateLadder& ladder, int j) {
  if (j == 0) return Rgb{160, 160, 160};
  if (j == ladder.exact_index()) return Rgb{30, 30, 30};
  static const int order[] = {0, 2, 1, 4, 5};
  return palette(order[(j - 1) % 5]);
}

std::string tier_label(const Tier& t) {
  if (t.kind == QuantizerKind::Evict) return "evicted (0 bits)";
  if (t.kind == QuantizerKind::Exact) return "exact (16 bits)";
  return t.name() + " (" + std::to_string(t.bits) + " bits)";
}

// Ranks to draw (1-based positions of the sorted tokens): all when few, else log-spaced.
std::vector<int> plot_ranks(int n, int target = 700) {
  std::vector<int> r;
  if (n <= 2 * target) {
    r.resize(static_cast<std::size_t>(n));
    std::iota(r.begin(), r.end(), 1);
    return r;
  }
  const double step = std::log(static_cast<double>(n)) / target;
  int last = 0;
  for (int i = 0; i <= target; ++i) {
    int k = static_cast<int>(std::lround(std::exp(step * i)));
    k = std::clamp(k, 1, n);
    if (k > last) r.push_back(k), last = k;
  }
  if (r.back() != n) r.push_back(n);
  return r;
}

ErrorMetrics recompute_one(Recomputer& backend, const MatrixRM& queries, const MatrixRM& exact, const MatrixRM& values,
                           const MatrixRM& variant, const std::vector<std::uint8_t>& sel) {
  std::vector<HeadBatch> batches(1);
  batches[0].problem.queries = &queries;
  batches[0].problem.exact_keys = &exact;
  batches[0].problem.values = &values;
  batches[0].problem.variants = {&variant};
  batches[0].selections = {sel};
  return recompute(backend, batches).at(0).at(0);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Sources

std::string SourceSpec::describe() const {
  switch (kind) {
    case SourceKind::Trace: return "trace " + path;
    case SourceKind::Synthetic:
      return "synthetic preset " + (synth ? synth->preset : preset) +
             (synth ? ", T = " + std::to_string(synth->prompt_len)
                    : context_length > 0 ? ", T = " + std::to_string(context_length) : std::string()) +
             ", seed " + std::to_string(synth ? synth->seed : seed);
    case SourceKind::Model:
      return "model " + path + (context_length > 0 ? ", T = " + std::to_string(context_length) : std::string());
    case SourceKind::Scenario: return "scenario " + path;
  }
  return path;
}

SourceSpec parse_source(const std::string& arg) {
  SourceSpec s;
  const std::string ext = lower_ext(arg);
  const auto names = synth_preset_names();
  if (arg.rfind("preset:", 0) == 0) {
    s.kind = SourceKind::Synthetic;
    std::string rest = arg.substr(7);
    const auto colon = rest.find(':');
    s.preset = rest.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string t = rest.substr(colon + 1);
      char* end = nullptr;
      const long v = std::strtol(t.c_str(), &end, 10);
      if (t.empty() || *end != '\0' || v <= 0)
        throw InputError("explorer: the context length '" + t + "' in '" + arg + "' is not a positive integer.");
      s.context_length = static_cast<int>(v);
    }
    synth_preset(s.preset);  // InputError listing the presets
    return s;
  }
  if (std::find(names.begin(), names.end(), arg) != names.end() && !fs::exists(arg)) {
    s.kind = SourceKind::Synthetic;
    s.preset = arg;
    return s;
  }
  s.path = arg;
  if (fs::is_directory(arg)) {
    if (!fs::exists(fs::path(arg) / "scenario.yaml"))
      throw InputError("explorer: the folder '" + arg + "' is not a scenario run (it has no scenario.yaml).");
    s.kind = SourceKind::Scenario;
  } else if (ext == ".yaml" || ext == ".yml") {
    s.kind = SourceKind::Scenario;
  } else if (ext == ".bin") {
    s.kind = SourceKind::Model;
  } else {
    s.kind = SourceKind::Trace;
  }
  return s;
}

HeadData Source::head(int layer, int kv_head) const {
  if (layer < 0 || layer >= meta_.n_layers || kv_head < 0 || kv_head >= meta_.n_kv_heads)
    throw InputError("explorer: head L" + std::to_string(layer) + ".H" + std::to_string(kv_head) +
                     " is outside the trace (" + std::to_string(meta_.n_layers) + " layers x " +
                     std::to_string(meta_.n_kv_heads) + " KV heads).");
  if (reader_) return reader_->head(layer, kv_head);
  if (synth_) return synth_head(*synth_, layer, kv_head);
  return captured_.at(static_cast<std::size_t>(layer * meta_.n_kv_heads + kv_head));
}

bool Source::has_tables() const {
  return !run_dir_.empty() && fs::exists(fs::path(run_dir_) / "tables" / "interior.json");
}

namespace {

void open_model(const std::string& checkpoint, int prompt_len, int decode_steps, double temperature, std::uint64_t seed,
                TraceMeta& meta, std::vector<HeadData>& heads, const Progress& progress) {
  if (progress) progress(0.05, "loading " + checkpoint);
  const Llama2cModel model(checkpoint);
  const int seq = model.config().seq_len;
  if (prompt_len <= 0) prompt_len = std::min(256, seq - decode_steps);
  if (prompt_len + decode_steps > seq)
    throw InputError("explorer: context length " + std::to_string(prompt_len) + " plus " +
                     std::to_string(decode_steps) + " decode steps exceeds the model's seq_len " + std::to_string(seq) +
                     " (" + checkpoint + ").");
  CaptureOptions co;
  co.prompt.generate = prompt_len;
  co.prompt.temperature = static_cast<float>(temperature);
  co.prompt.seed = seed;
  co.decode_steps = decode_steps;
  if (progress) progress(0.2, "capturing " + std::to_string(prompt_len) + " + " + std::to_string(decode_steps) + " positions");
  CaptureResult r = capture(model, co);
  meta = std::move(r.meta);
  heads = std::move(r.heads);
}

}  // namespace

std::shared_ptr<Source> Source::open(const SourceSpec& spec, const Progress& progress, const std::atomic<bool>* cancel) {
  auto s = std::shared_ptr<Source>(new Source());
  s->spec_ = spec;
  check(cancel);
  switch (spec.kind) {
    case SourceKind::Trace: {
      if (!fs::exists(spec.path)) throw InputError("explorer: the trace file '" + spec.path + "' does not exist.");
      if (progress) progress(0.1, "reading " + spec.path);
      s->reader_ = std::make_unique<TraceReader>(spec.path);
      s->meta_ = s->reader_->meta();
      s->description_ = "trace " + fs::path(spec.path).filename().string();
      break;
    }
    case SourceKind::Synthetic: {
      SynthParams p = spec.synth ? *spec.synth : synth_preset(spec.preset);
      if (!spec.synth) {
        p.seed = spec.seed;
        if (spec.context_length > 0) {
          p.prompt_len = spec.context_length;
          p.obs_window = std::min(p.obs_window, std::max(1, spec.context_length / 4));
        }
      }
      p.validate();
      s->synth_ = p;
      s->meta_ = synth_meta(p);
      s->description_ = "synthetic " + p.preset + " (T = " + std::to_string(p.prompt_len) + ", seed " +
                        std::to_string(p.seed) + ")";
      break;
    }
    case SourceKind::Model: {
      if (!fs::exists(spec.path)) throw InputError("explorer: the checkpoint '" + spec.path + "' does not exist.");
      open_model(spec.path, spec.context_length, 16, 0.8, spec.seed, s->meta_, s->captured_, progress);
      s->description_ = fs::path(spec.path).stem().string() + " captured (T = " + std::to_string(s->meta_.prompt_len) +
                        ", S = " + std::to_string(s->meta_.decode_steps) + ")";
      break;
    }
    case SourceKind::Scenario: {
      std::string yaml = spec.path;
      if (fs::is_directory(spec.path)) {
        yaml = (fs::path(spec.path) / "scenario.yaml").string();
        s->run_dir_ = spec.path;
      }
      if (!fs::exists(yaml)) throw InputError("explorer: the scenario file '" + yaml + "' does not exist.");
      if (progress) progress(0.05, "reading " + yaml);
      s->scenario_ = load_scenario(yaml);
      const Scenario& sc = *s->scenario_;
      if (s->run_dir_.empty()) s->run_dir_ = spec.run_dir.empty() ? "out/" + sc.name : spec.run_dir;
      if (sc.cells.empty()) throw InputError("explorer: the scenario '" + yaml + "' has no cells.");
      const ScenarioCell* cell = &sc.cells.front();
      if (const WaterfillAnalysis* w = sc.find<WaterfillAnalysis>()) {
        for (const auto& c : sc.cells)
          if (c.id == w->spec.cell) cell = &c;
        s->initial_layer_ = w->spec.layer, s->initial_kv_head_ = w->spec.kv_head;
      }
      s->cell_id_ = cell->id;
      check(cancel);
      if (cell->source == "synthetic") {
        s->synth_ = cell->synth;
        s->meta_ = synth_meta(cell->synth);
      } else if (cell->source == "model") {
        open_model(cell->checkpoint, cell->prompt_len, cell->decode_steps, cell->temperature, cell->seed, s->meta_,
                   s->captured_, progress);
      } else {
        s->reader_ = std::make_unique<TraceReader>(cell->path);
        s->meta_ = s->reader_->meta();
      }
      s->description_ = "scenario " + sc.name + " (cell " + cell->id + ")";
      break;
    }
  }
  if (s->meta_.n_heads() <= 0) throw FormatError("explorer: '" + spec.describe() + "' has no heads.");
  if (progress) progress(1.0, "opened " + s->description_);
  return s;
}

bool run_source_scenario(const Source& src, const Progress& progress, const std::atomic<bool>* cancel) {
  if (!src.scenario()) throw InputError("explorer: the source is not a scenario; there is nothing to run.");
  const Scenario& sc = *src.scenario();
  RunOptions o;
  o.out = src.run_dir();
  o.jobs = 1;
  o.progress = false;
  int done = 0;
  const int total = static_cast<int>(sc.cells.size());
  o.on_cell = [&](const std::string& id, bool) {
    ++done;
    if (progress) progress(static_cast<double>(done) / std::max(1, total), "cell " + id + " done");
  };
  if (progress) progress(0.0, "running scenario " + sc.name + " (" + std::to_string(total) + " cells) into " + o.out);
  run_stop_flag() = cancel && cancel->load();
  // Cancelling stops the run at the runner's next check (between budgets of a cell).
  struct Watcher {
    std::atomic<bool> done{false};
    std::thread thread;
    ~Watcher() {
      done = true;
      if (thread.joinable()) thread.join();
    }
  } watcher;
  if (cancel)
    watcher.thread = std::thread([&watcher, cancel] {
      while (!watcher.done.load()) {
        if (cancel->load()) run_stop_flag() = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  const RunResult r = run_scenario(sc, o);
  if (r.interrupted) throw Cancelled();
  return r.tables_written;
}

// ---------------------------------------------------------------------------------------
// Engine caches

struct Engine::LadderEntry {
  RateLadder ladder;
  RateKind rate_kind = RateKind::Code;
  int layer = 0, kv_head = 0;
  int T = 0, d = 0;
  SurrogateCosts costs;
  std::vector<double> rates;    // per ladder tier, on the rate kind
  std::vector<int> order;       // tokens by decreasing a_t
  HeadNoiseModel fit;           // fit_head_noise (model/surrogate.hpp), the one convention
  DominanceReport dom;
  std::map<int, MatrixRMd> smoothed;  // kernel -> pooled costs
  // Water-filling: L_i = ln(g_i(0)) / ln(beta) of the tokens with a_t > 0, decreasing, and
  // their prefix sums P[k] = L_0 + ... + L_{k-1} (built on first use).
  std::vector<double> L, P;
};

namespace {

// Continuous reverse water-filling with one shared model (solvers/waterfill.hpp), in closed
// form on the sorted L: with the level l = ln(theta) / ln(beta), b_i = clamp(L_i - l, 0, 16)
// and f(l) = sum_i b_i = 16 n_sat + (P[n_act] - P[n_sat]) - l (n_act - n_sat), n_act =
// #{L_i > l}, n_sat = #{L_i >= l + 16}, decreasing in l; l solves f(l) = N B by bisection
// (each step O(log N)). theta = beta^l. When N B >= 16 * (tokens with a_t > 0) every weighted
// token saturates (theta = 0); when every a_t = 0 the bits are spread evenly (theta = 0).
struct WaterLevel {
  double theta = 0, level = 0;
  bool all_zero = false;
  double weighted = 0;
};

}  // namespace

static WaterLevel water_level_of(const std::vector<double>& L, const std::vector<double>& P, std::int64_t N, double B) {
  WaterLevel w;
  const std::int64_t n = static_cast<std::int64_t>(L.size());
  w.weighted = static_cast<double>(n);
  if (n == 0) {
    w.all_zero = true;
    return w;
  }
  const double target = static_cast<double>(N) * std::clamp(B, 0.0, 16.0);
  if (target >= 16.0 * n) return w;  // saturated
  auto count_gt = [&](double x) {  // #{L_i > x}, L decreasing
    return static_cast<std::int64_t>(std::upper_bound(L.begin(), L.end(), x, [](double v, double e) { return v > e; }) - L.begin());
  };
  auto count_ge = [&](double x) {
    return static_cast<std::int64_t>(std::lower_bound(L.begin(), L.end(), x, [](double e, double v) { return e > v; }) - L.begin());
  };
  auto f = [&](double l) {
    const std::int64_t act = count_gt(l), sat = count_ge(l + 16.0);
    return 16.0 * static_cast<double>(sat) + (P[static_cast<std::size_t>(act)] - P[static_cast<std::size_t>(sat)]) -
           l * static_cast<double>(act - sat);
  };
  double lo = L.back() - 17.0, hi = L.front() + 1.0;  // f(lo) = 16 n >= target > 0 = f(hi)
  for (int it = 0; it < 200 && hi - lo > 1e-13 * std::max(1.0, std::abs(lo) + std::abs(hi)); ++it) {
    const double mid = 0.5 * (lo + hi);
    (f(mid) > target ? lo : hi) = mid;
  }
  w.level = 0.5 * (lo + hi);
  return w;
}

static std::string settings_key(const Settings& s) {
  return std::to_string(s.layer) + "." + std::to_string(s.kv_head) + "|" + s.ladder + "|" +
         std::string(to_string(s.rate_kind)) + "|" + std::string(to_string(s.solver)) + "|" +
         std::string(to_string(s.family)) + "|" + std::to_string(s.smoothing) + "|" + format_label(s.budget, "%.17g");
}

struct Engine::Last {
  std::string key;
  std::vector<std::uint8_t> tiers;
  bool obs_done = false;
  ErrorMetrics obs;
};

// The water-filling view's head and ladder (one at a time): the allocation's keys as
// model/quantizer.hpp materialize gives them, built tier by tier so that a budget change
// quantizes again only the tiers whose token sets changed.
struct Engine::Work {
  std::string key;  // head index | ladder name
  std::shared_ptr<const HeadData> head;
  RateLadder ladder;
  int T = 0, d = 0;
  std::vector<std::vector<int>> tokens;  // per ladder tier: its tokens in position order (finite tiers)
  std::vector<MatrixRM> block;           // per ladder tier: their rows quantized as one block (TierQuantizer)
  std::vector<int> row_tier;             // per prompt token: the tier whose block row `keys` holds (0: the exact key)
  std::vector<std::uint8_t> tiers;       // the allocation held (empty: none yet)
  int step = 0;                          // s of the step buffers (0: none)
  // keys: T + step rows, the allocation's key of each prompt token (the exact key for
  // exact and for evicted tokens: an evicted token is not selected, so its row is unused)
  // then the step's decode keys (exact). exact, values: the T + step exact keys and values;
  // queries: step s's g queries.
  MatrixRM keys, exact, values, queries;
  bool step_done = false;  // step_err holds the allocation's error at `step`
  ErrorMetrics step_err;
};

namespace {

// The cache key of a head's data: "H<idx>".
std::string head_key(int idx) {
  std::string k(1, 'H');
  k += std::to_string(idx);
  return k;
}

bool finite_tier(const Tier& t) { return t.kind != QuantizerKind::Evict && t.kind != QuantizerKind::Exact; }

std::size_t bytes_of(const MatrixRM& m) { return static_cast<std::size_t>(m.size()) * sizeof(float); }
std::size_t bytes_of(const MatrixRMd& m) { return static_cast<std::size_t>(m.size()) * sizeof(double); }
std::size_t bytes_of(const VectorD& v) { return static_cast<std::size_t>(v.size()) * sizeof(double); }

std::size_t bytes_of(const HeadData& h) {
  return bytes_of(h.keys) + bytes_of(h.keys_pre_rope) + bytes_of(h.values) + bytes_of(h.obs_queries) +
         bytes_of(h.decode_queries) + bytes_of(h.decode_keys) + bytes_of(h.decode_values) + sizeof(HeadData);
}

// The head index of a cache key ("H<idx>" or "<l>.<h>|...").
int head_of_key(const std::string& key, int n_kv_heads) {
  if (!key.empty() && key[0] == 'H') return std::atoi(key.c_str() + 1);
  const auto dot = key.find('.');
  return std::atoi(key.c_str()) * n_kv_heads + std::atoi(key.c_str() + dot + 1);
}

}  // namespace

Engine::Engine(std::shared_ptr<const Source> src, Backend backend) : source_(std::move(src)) {
  std::string note;
  backend_ = make_recomputer(backend, &note);
  if (!backend_) throw InputError("explorer: backend unavailable: " + note);
  if (const char* mb = std::getenv("TIERLAB_EXPLORER_CACHE_MB")) {
    char* end = nullptr;
    const double v = std::strtod(mb, &end);
    if (end == mb || *end != '\0' || !(v >= 0))
      throw InputError(std::string("explorer: TIERLAB_EXPLORER_CACHE_MB = '") + mb + "' is not a number of megabytes.");
    cache_limit_ = static_cast<std::size_t>(v * 1024 * 1024);
  }
}

std::string Engine::backend_description() const { return backend_->description(); }

void Engine::clear_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  heads_.clear();
  ladders_.clear();
  used_.clear();
  work_.reset();
  last_.reset();
}

void Engine::set_cache_limit(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_limit_ = bytes;
  trim_();
}

namespace {

std::size_t entry_bytes(const SurrogateCosts& c, const std::map<int, MatrixRMd>& smoothed, std::size_t order,
                        std::size_t lp) {
  std::size_t b = bytes_of(c.cost) + bytes_of(c.noise) + bytes_of(c.weights.a) + bytes_of(c.weights.evict_cost) +
                  bytes_of(c.weights.attention) + order * sizeof(int) + lp * sizeof(double);
  for (const auto& [k, m] : smoothed) b += bytes_of(m);
  return b;
}

}  // namespace

std::size_t Engine::cache_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t b = 0;
  for (const auto& [k, h] : heads_) b += bytes_of(*h);
  for (const auto& [k, e] : ladders_) b += entry_bytes(e->costs, e->smoothed, e->order.size(), e->L.size() + e->P.size());
  if (work_) {
    b += bytes_of(work_->keys) + bytes_of(work_->exact) + bytes_of(work_->values) + bytes_of(work_->queries) +
         work_->row_tier.size() * sizeof(int);
    for (std::size_t j = 0; j < work_->block.size(); ++j)
      b += bytes_of(work_->block[j]) + work_->tokens[j].size() * sizeof(int);
    // The work entry's head data, when the cache no longer holds it.
    if (!heads_.count(std::atoi(work_->key.c_str()))) b += bytes_of(*work_->head);
  }
  return b;
}

int Engine::cached_heads() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(heads_.size());
}

void Engine::touch_(const std::string& key) { used_[key] = ++clock_; }

// Least recently used first: the heads' data, then the (head, ladder) entries, never those
// of the head touched last (in use).
void Engine::trim_() {
  const int nkv = source_->meta().n_kv_heads;
  std::string newest;
  std::uint64_t newest_t = 0;
  for (const auto& [k, t] : used_)
    if (t >= newest_t) newest = k, newest_t = t;
  const int keep = newest.empty() ? -1 : head_of_key(newest, nkv);
  std::size_t total = 0;
  std::vector<std::pair<std::uint64_t, std::string>> heads, entries;
  for (const auto& [idx, h] : heads_) {
    const std::string k = head_key(idx);
    total += bytes_of(*h);
    if (idx != keep) heads.push_back({used_[k], k});
  }
  for (const auto& [k, e] : ladders_) {
    total += entry_bytes(e->costs, e->smoothed, e->order.size(), e->L.size() + e->P.size());
    if (e->layer * nkv + e->kv_head != keep) entries.push_back({used_[k], k});
  }
  if (total <= cache_limit_) return;
  std::sort(heads.begin(), heads.end());
  std::sort(entries.begin(), entries.end());
  for (const auto& [t, k] : heads) {
    if (total <= cache_limit_) return;
    const int idx = std::atoi(k.c_str() + 1);
    total -= bytes_of(*heads_.at(idx));
    heads_.erase(idx);
    used_.erase(k);
  }
  for (const auto& [t, k] : entries) {
    if (total <= cache_limit_) return;
    const auto& e = ladders_.at(k);
    total -= entry_bytes(e->costs, e->smoothed, e->order.size(), e->L.size() + e->P.size());
    ladders_.erase(k);
    used_.erase(k);
  }
}

std::shared_ptr<const HeadData> Engine::head_(int l, int h) {
  const int idx = l * source_->meta().n_kv_heads + h;
  touch_(head_key(idx));
  auto it = heads_.find(idx);
  if (it != heads_.end()) return it->second;
  if (work_ && work_->key.rfind(std::to_string(idx) + "|", 0) == 0) return heads_[idx] = work_->head;
  auto p = std::make_shared<const HeadData>(source_->head(l, h));
  heads_[idx] = p;
  trim_();
  return p;
}

std::shared_ptr<Engine::LadderEntry> Engine::ladder_(int l, int h, const RateLadder& ladder, RateKind kind,
                                                     const std::atomic<bool>* cancel) {
  const std::string key = std::to_string(l) + "." + std::to_string(h) + "|" + ladder.name() + "|" +
                          std::string(to_string(kind));
  auto it = ladders_.find(key);
  if (it != ladders_.end()) {
    touch_(key);
    return it->second;
  }
  check(cancel);
  auto e = std::make_shared<LadderEntry>();
  e->ladder = ladder;
  e->rate_kind = kind;
  e->layer = l, e->kv_head = h;
  const std::shared_ptr<const HeadData> head = head_(l, h);
  check(cancel);
  const HeadData& hd = *head;
  e->T = static_cast<int>(hd.keys.rows());
  e->d = static_cast<int>(hd.keys.cols());
  const RopeParams& rope = source_->meta().rope;
  e->costs = surrogate_costs(hd, rope, hd.obs_queries, ladder);
  e->rates = ladder_rates(hd, rope, ladder, kind);
  const VectorD& a = e->costs.weights.a;
  e->order.resize(static_cast<std::size_t>(a.size()));
  std::iota(e->order.begin(), e->order.end(), 0);
  std::stable_sort(e->order.begin(), e->order.end(), [&](int x, int y) { return a[x] > a[y]; });
  e->fit = fit_head_noise(e->costs, e->rates);
  e->dom = tierlab::dominance(e->costs, kind);
  ladders_[key] = e;
  touch_(key);
  trim_();
  return e;
}

const MatrixRMd& Engine::smoothed_(LadderEntry& e, int kernel) {
  if (kernel <= 1) return e.costs.cost;
  auto it = e.smoothed.find(kernel);
  if (it != e.smoothed.end()) return it->second;
  SmoothingOptions so;
  so.kernel = kernel;
  so.validate();
  return e.smoothed[kernel] = smooth_costs(e.costs.cost, so);
}

int Engine::apply_(int l, int h, const RateLadder& ladder, const std::vector<std::uint8_t>& tiers) {
  const int idx = l * source_->meta().n_kv_heads + h;
  const std::string key = std::to_string(idx) + "|" + ladder.name();
  if (!work_ || work_->key != key) {
    work_.reset();  // one work entry at a time
    auto w = std::make_unique<Work>();
    w->key = key;
    w->head = head_(l, h);
    w->ladder = ladder;
    w->T = static_cast<int>(w->head->keys.rows());
    w->d = static_cast<int>(w->head->keys.cols());
    w->tokens.resize(static_cast<std::size_t>(ladder.size()));
    w->block.resize(static_cast<std::size_t>(ladder.size()));
    w->row_tier.assign(static_cast<std::size_t>(w->T), 0);
    w->keys = w->head->keys;
    work_ = std::move(w);
  }
  Work& w = *work_;
  if (!w.tiers.empty() && w.tiers == tiers) return 0;
  if (static_cast<int>(tiers.size()) != w.T)
    throw InputError("explorer: the allocation has " + std::to_string(tiers.size()) + " tiers but the head has " +
                     std::to_string(w.T) + " tokens.");
  const int n = ladder.size();
  std::vector<std::vector<int>> by(static_cast<std::size_t>(n));
  for (int t = 0; t < w.T; ++t) {
    const int j = tiers[static_cast<std::size_t>(t)];
    if (j >= n)
      throw InputError("explorer: token " + std::to_string(t) + " has tier index " + std::to_string(j) + " but ladder '" +
                       ladder.name() + "' has " + std::to_string(n) + " tiers.");
    by[static_cast<std::size_t>(j)].push_back(t);
  }
  // MODEL.md convention 9, as materialize: the tokens of a tier are quantized as one block
  // in position order. A tier whose token set is unchanged keeps its block.
  int requantized = 0;
  std::vector<bool> changed(static_cast<std::size_t>(n), false);
  for (int j = 0; j < n; ++j) {
    const Tier& tier = ladder.tiers[static_cast<std::size_t>(j)];
    auto& toks = w.tokens[static_cast<std::size_t>(j)];
    if (!finite_tier(tier) || by[static_cast<std::size_t>(j)] == toks) continue;
    toks = std::move(by[static_cast<std::size_t>(j)]);
    w.block[static_cast<std::size_t>(j)] =
        toks.empty() ? MatrixRM()
                     : make_tier_quantizer(tier)->quantize(TierInput::of_head(*w.head, source_->meta().rope), toks).dequant;
    changed[static_cast<std::size_t>(j)] = true;
    ++requantized;
  }
  // Rows of `keys`: a finite tier's block rows where they changed, the exact key elsewhere.
  for (int j = 0; j < n; ++j) {
    if (!finite_tier(ladder.tiers[static_cast<std::size_t>(j)])) continue;
    const auto& toks = w.tokens[static_cast<std::size_t>(j)];
    const MatrixRM& blk = w.block[static_cast<std::size_t>(j)];
    for (std::size_t i = 0; i < toks.size(); ++i) {
      const int t = toks[i];
      if (!changed[static_cast<std::size_t>(j)] && w.row_tier[static_cast<std::size_t>(t)] == j) continue;
      w.keys.row(t) = blk.row(static_cast<Eigen::Index>(i));
      w.row_tier[static_cast<std::size_t>(t)] = j;
    }
  }
  for (int t = 0; t < w.T; ++t)
    if (!finite_tier(ladder.tiers[tiers[static_cast<std::size_t>(t)]]) && w.row_tier[static_cast<std::size_t>(t)] != 0) {
      w.keys.row(t) = w.head->keys.row(t);
      w.row_tier[static_cast<std::size_t>(t)] = 0;
    }
  w.tiers = tiers;
  w.step_done = false;
  return requantized;
}

// The allocation's error at decode step s (1 <= s <= S): the step's g queries over the
// T + s tokens they see, the allocation's keys as one variant, the decode keys exact.
ErrorMetrics Engine::step_error_(int step) {
  Work& w = *work_;
  const HeadData& hd = *w.head;
  const int T = w.T, d = w.d;
  const int S = static_cast<int>(hd.decode_keys.rows());
  if (w.step != step) {
    w.exact.resize(T + step, d);
    w.exact.topRows(T) = hd.keys;
    w.exact.bottomRows(step) = hd.decode_keys.topRows(step);
    w.values.resize(T + step, d);
    w.values.topRows(T) = hd.values;
    w.values.bottomRows(step) = hd.decode_values.topRows(step);
    const int g = static_cast<int>(hd.decode_queries.rows()) / S;
    w.queries.resize(g, d);
    for (int j = 0; j < g; ++j) w.queries.row(j) = hd.decode_queries.row(j * S + step - 1);
    MatrixRM k(T + step, d);
    k.topRows(T) = w.keys.topRows(T);
    k.bottomRows(step) = hd.decode_keys.topRows(step);
    w.keys = std::move(k);
    w.step = step;
    w.step_done = false;
  }
  if (w.step_done) return w.step_err;
  Selection sel(static_cast<std::size_t>(T + step), 1);
  for (int t = 0; t < T; ++t) sel[static_cast<std::size_t>(t)] = w.tiers[static_cast<std::size_t>(t)] != 0;
  w.step_err = recompute_one(*backend_, w.queries, w.exact, w.values, w.keys, sel);
  w.step_done = true;
  return w.step_err;
}

// The allocation's error on the observation queries (its keys as one variant), in chunks
// of rows (multiples of 64, about 2^21 row-tokens each) with a cancel check between them. Every row sees
// the same tokens, so each metric is the mean of the chunks' metrics weighted by their rows
// (the logit error's denominator n_kept * rows included).
ErrorMetrics Engine::obs_error_(const std::atomic<bool>* cancel) {
  const Work& w = *work_;
  const HeadData& hd = *w.head;
  Selection sel(static_cast<std::size_t>(w.T));
  for (int t = 0; t < w.T; ++t) sel[static_cast<std::size_t>(t)] = w.tiers[static_cast<std::size_t>(t)] != 0;
  MatrixRM prompt;
  if (w.keys.rows() != w.T) prompt = w.keys.topRows(w.T);
  const MatrixRM& keys = w.keys.rows() == w.T ? w.keys : prompt;
  const int nq = static_cast<int>(hd.obs_queries.rows());
  // 64 rows (the CPU backend's row tile) per 32k tokens: ~0.1 s per chunk on 2 cores.
  const int chunk = 64 * std::max(1, (1 << 21) / (64 * std::max(1, w.T)));
  if (chunk >= nq) return recompute_one(*backend_, hd.obs_queries, hd.keys, hd.values, keys, sel);
  ErrorMetrics m;
  for (int r0 = 0; r0 < nq; r0 += chunk) {
    check(cancel);
    const int n = std::min(chunk, nq - r0);
    const MatrixRM q = hd.obs_queries.middleRows(r0, n);
    const ErrorMetrics c = recompute_one(*backend_, q, hd.keys, hd.values, keys, sel);
    const double f = static_cast<double>(n) / nq;
    m.rel_error += f * c.rel_error, m.abs_error += f * c.abs_error;
    m.attn_tv += f * c.attn_tv, m.logit_error += f * c.logit_error;
  }
  return m;
}

HeadSolution Engine::solve_(const LadderEntry& e, const MatrixRMd& cost, const Settings& s, FamilyChoice choice,
                            const RateLadder& ladder, std::string* option) {
  FamilyOptions fo;
  fo.solver = s.solver;
  // The head's noise model as `tierlab solve` fits it (fit_head_noise; the beta = 4 fallback
  // when the fit is impossible, e.fit.note says why).
  HeadSolution hr = solve_head(cost, e.costs.weights.a, e.rates, ladder, s.budget, choice, fo,
                               DistortionModel{e.fit.alpha, e.fit.beta});
  if (option) *option = hr.option;
  if (!hr.feasible) return hr;
  // The objective on the true costs (smoothing decides, the true costs score).
  double obj = 0;
  for (std::size_t t = 0; t < hr.tiers.size(); ++t) obj += e.costs.cost(hr.tiers[t], static_cast<Eigen::Index>(t));
  hr.objective = obj;
  return hr;
}

std::vector<std::uint8_t> Engine::allocate(const Settings& s, std::string* option) {
  std::lock_guard<std::mutex> lock(mu_);
  const RateLadder ladder = RateLadder::parse(s.ladder);
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, nullptr);
  return solve_(*e, smoothed_(*e, s.smoothing), s, s.family, ladder, option).tiers;
}

// ---------------------------------------------------------------------------------------
// (a) water-filling

ViewResult Engine::waterfill(const Settings& s, WaterfillNumbers* out, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, cancel);
  const std::shared_ptr<const HeadData> head_data = head_(s.layer, s.kv_head);
  const HeadData& hd = *head_data;
  const int T = static_cast<int>(hd.keys.rows());
  const VectorD& a = e->costs.weights.a;
  WaterfillNumbers num;
  check(cancel);

  // Continuous reverse water-filling on the head's noise model.
  std::vector<double> cbits;
  std::vector<double> g0(static_cast<std::size_t>(T), 0.0);
  if (e->fit.fitted) {
    num.alpha = e->fit.alpha;
    num.beta = e->fit.beta;
    const double k = e->fit.alpha * std::log(e->fit.beta);
    for (int t = 0; t < T; ++t) g0[static_cast<std::size_t>(t)] = a[t] * k;
    if (e->L.empty() && e->P.empty()) {
      const double lnb = std::log(e->fit.beta);
      for (int t : e->order)
        if (a[t] > 0) e->L.push_back(std::log(a[t] * k) / lnb);
      e->P.assign(e->L.size() + 1, 0.0);
      for (std::size_t i = 0; i < e->L.size(); ++i) e->P[i + 1] = e->P[i] + e->L[i];
    }
    WaterLevel wl = water_level_of(e->L, e->P, T, s.budget);
    if (!wl.all_zero && static_cast<double>(T) * std::min(s.budget, 16.0) < 16.0 * wl.weighted)
      wl.theta = std::exp(wl.level * std::log(e->fit.beta));
    num.theta = wl.theta;
    if (wl.theta > 0) {
      cbits.resize(static_cast<std::size_t>(T));
      const double lnb = std::log(e->fit.beta);
      for (int t = 0; t < T; ++t) {
        const double g = g0[static_cast<std::size_t>(t)];
        cbits[static_cast<std::size_t>(t)] = g > 0 ? std::clamp(std::log(g) / lnb - wl.level, 0.0, 16.0) : 0.0;
      }
    } else {
      for (int t = 0; t < T; ++t) cbits.push_back(a[t] > 0 || wl.all_zero ? std::min(s.budget * (wl.all_zero ? 1.0 : T / std::max(1.0, wl.weighted)), 16.0) : 0.0);
    }
  } else {
    num.theta = kNaN;
    for (int t = 0; t < T; ++t) g0[static_cast<std::size_t>(t)] = a[t];
  }
  check(cancel);

  // The discrete allocation, its keys and its error at step s, on this thread alone.
  std::optional<SerialOmp> serial;
  serial.emplace();
  auto ts = Clock::now();
  HeadSolution hr = solve_(*e, smoothed_(*e, s.smoothing), s, s.family, ladder, &num.option);
  num.solve_ms = ms_since(ts);
  num.tiers = hr.tiers;
  const bool feasible = !hr.tiers.empty();
  check(cancel);
  if (feasible) {
    // The allocation's keys as materialize gives them (tier-local groups, convention 9):
    // only the tiers whose token sets changed are quantized again.
    ts = Clock::now();
    num.rate = allocation_rate(hd, source_->meta().rope, ladder, hr.tiers);
    int ev = 0;
    for (auto k : hr.tiers) ev += k == 0 ? 1 : 0;
    num.evicted_fraction = T > 0 ? static_cast<double>(ev) / T : 0;
    num.surrogate_abs = hr.objective;
    num.surrogate_rel = e->costs.output_norm2 > 0 ? hr.objective / e->costs.output_norm2 : kNaN;
    num.tiers_quantized = apply_(s.layer, s.kv_head, ladder, hr.tiers);
    num.materialize_ms = ms_since(ts);
    check(cancel);
    ts = Clock::now();
    num.obs.rel_error = num.obs.abs_error = num.obs.attn_tv = num.obs.logit_error = kNaN;
    const int S = static_cast<int>(hd.decode_keys.rows());
    if (S > 0 && hd.decode_queries.rows() > 0) {
      const int step = std::clamp(s.decode_step, 1, S);
      num.step_used = step;
      num.step = step_error_(step);
    }
    serial.reset();  // the observation queries (g x W rows) use the threads
    if (s.recompute_obs) num.obs = obs_error_(cancel);
    num.recompute_ms = ms_since(ts);
    auto last = std::make_shared<Last>();
    last->key = settings_key(s);
    last->tiers = hr.tiers;
    last->obs_done = s.recompute_obs;
    last->obs = num.obs;
    last_ = std::move(last);
  }

  // Figures.
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  const std::vector<int> ranks = plot_ranks(T);
  std::vector<Series> by_tier(static_cast<std::size_t>(ladder.size()));
  std::vector<Series> bits_tier(static_cast<std::size_t>(ladder.size()));
  for (int j = 0; j < ladder.size(); ++j) {
    by_tier[j] = Series{tier_label(ladder.tiers[j]), tier_color(ladder, j), Style::Points, {}, {}, T > 3000 ? 4.0 : 6.0};
    bits_tier[j] = Series{"", tier_color(ladder, j), Style::Points, {}, {}, T > 3000 ? 4.0 : 6.0};
  }
  Series unsolved{"tokens (no feasible allocation)", Rgb{120, 120, 120}, Style::Points, {}, {}, 4};
  Series cont{"continuous b_t (reverse water-filling)", palette(3), Style::Dashed, {}, {}, 1};
  double gmax = 0, gmin = std::numeric_limits<double>::infinity();
  for (int t = 0; t < T; ++t)
    if (g0[static_cast<std::size_t>(t)] > 0) gmax = std::max(gmax, g0[static_cast<std::size_t>(t)]), gmin = std::min(gmin, g0[static_cast<std::size_t>(t)]);
  const double floor_g = gmax > 0 ? std::max(gmin, gmax * 1e-14) : 1e-30;
  std::vector<HoverPoint> hover_level, hover_bits;
  for (int r : ranks) {
    const int t = e->order[static_cast<std::size_t>(r - 1)];
    const double y = std::max(g0[static_cast<std::size_t>(t)], floor_g);
    const int tier = feasible ? hr.tiers[static_cast<std::size_t>(t)] : -1;
    Series& sl = tier >= 0 ? by_tier[static_cast<std::size_t>(tier)] : unsolved;
    sl.x.push_back(r), sl.y.push_back(y);
    const double tb = tier >= 0 ? ladder.tiers[static_cast<std::size_t>(tier)].bits : kNaN;
    if (tier >= 0) bits_tier[static_cast<std::size_t>(tier)].x.push_back(r), bits_tier[static_cast<std::size_t>(tier)].y.push_back(tb);
    const double cb = cbits.empty() ? kNaN : cbits[static_cast<std::size_t>(t)];
    if (!cbits.empty()) cont.x.push_back(r), cont.y.push_back(cb);
    std::string txt = "rank " + std::to_string(r) + ", token t = " + std::to_string(t) + "\na_t = " +
                      format_label(a[t], "%.4g") + ", g_t(0) = " + format_label(g0[static_cast<std::size_t>(t)], "%.4g") +
                      "\nc_t(0) = " + format_label(e->costs.weights.evict_cost[t], "%.4g") +
                      (tier >= 0 ? "\ntier " + ladder.tiers[static_cast<std::size_t>(tier)].name() : std::string()) +
                      (cbits.empty() ? std::string() : "\ncontinuous b_t = " + format_label(cb, "%.3f"));
    hover_level.push_back({static_cast<double>(r), y, txt});
    if (tier >= 0) hover_bits.push_back({static_cast<double>(r), tb, txt});
  }
  Figure lv;
  lv.title = "Reverse water-filling, " + head + ", B = " + format_label(s.budget) + " bits: water level theta = " +
             format_label(num.theta, "%.3g");
  lv.xlabel = "token rank by weight a_t (1 = heaviest, log)";
  lv.ylabel = e->fit.fitted ? "marginal return per bit at 0 bits, g_t(0) (log)" : "token weight a_t (log)";
  lv.xlog = true;
  lv.ylog = true;
  lv.xmin = 0.8, lv.xmax = T * 1.25;
  double ylo = floor_g, yhi = std::max(gmax, floor_g * 10);
  if (std::isfinite(num.theta) && num.theta > 0) ylo = std::min(ylo, num.theta), yhi = std::max(yhi, num.theta);
  lv.ymin = ylo / 3, lv.ymax = yhi * 3;
  for (int j = ladder.size() - 1; j >= 0; --j)
    if (!by_tier[static_cast<std::size_t>(j)].x.empty()) lv.series.push_back(by_tier[static_cast<std::size_t>(j)]);
  if (!unsolved.x.empty()) lv.series.push_back(unsolved);
  if (std::isfinite(num.theta) && num.theta > 0)
    lv.series.push_back({"water level theta (below: 0 bits)", palette(3), Style::Dashed, {lv.xmin, lv.xmax}, {num.theta, num.theta}, 1});

  Figure bf;
  bf.title = "Bits per token, " + head + " (" + (num.option.empty() ? std::string("infeasible") : num.option) + ", " +
             std::string(to_string(s.solver)) + (s.smoothing > 1 ? ", avg" + std::to_string(s.smoothing) : std::string()) + ")";
  bf.xlabel = "token rank by weight a_t (1 = heaviest, log)";
  bf.ylabel = "bits per key element";
  bf.xlog = true;
  bf.xmin = lv.xmin, bf.xmax = lv.xmax;
  bf.ymin = -0.8, bf.ymax = 16.8;
  if (!cont.x.empty()) bf.series.push_back(cont);
  for (int j = ladder.size() - 1; j >= 0; --j)
    if (!bits_tier[static_cast<std::size_t>(j)].x.empty()) bf.series.push_back(bits_tier[static_cast<std::size_t>(j)]);
  bf.series.push_back({"budget B (mean bits)", Rgb{110, 110, 110}, Style::Dashed, {bf.xmin, bf.xmax}, {s.budget, s.budget}, 1});

  ViewResult v;
  v.figures = {lv, bf};
  v.hover = {hover_level, hover_bits};
  std::ostringstream info;
  info << "Head " << head << ": T = " << T << " tokens, d = " << hd.keys.cols() << ", "
       << hd.obs_queries.rows() << " observation queries, S = " << hd.decode_keys.rows() << " decode steps\n";
  if (e->fit.fitted)
    info << "noise model n_h(b) = " << format_label(num.alpha, "%.3g") << " * " << format_label(num.beta, "%.3f") << "^(-b); theta = "
         << format_label(num.theta, "%.4g") << "\n";
  else
    info << "noise model not fitted (" << e->fit.note << "); y shows a_t\n";
  if (!feasible) {
    info << "family " << to_string(s.family) << " is infeasible at B = " << format_label(s.budget) << " on " << ladder.name() << "\n";
  } else {
    std::vector<int> count(static_cast<std::size_t>(ladder.size()), 0);
    for (auto t : hr.tiers) ++count[t];
    info << "allocation " << num.option << " (" << to_string(s.solver) << "): rate " << format_label(num.rate.code_bits, "%.3f")
         << " code / " << format_label(num.rate.total_bits, "%.3f") << " total bits; evicted "
         << format_label(100 * num.evicted_fraction, "%.1f") << "%\n  tokens per tier:";
    for (int j = 0; j < ladder.size(); ++j) info << " " << ladder.tiers[static_cast<std::size_t>(j)].name() << " " << count[static_cast<std::size_t>(j)];
    info << "\nrelative output error e = ||o^ - o||^2 / ||o||^2:\n"
         << "  surrogate prediction (obs)   " << format_label(num.surrogate_rel, "%.4g") << "\n";
    if (s.recompute_obs) info << "  recomputed, obs queries      " << format_label(num.obs.rel_error, "%.4g") << "\n";
    if (num.step_used > 0)
      info << "  recomputed, decode step s=" << num.step_used << "  " << format_label(num.step.rel_error, "%.4g") << "\n";
    info << "time: solve " << format_label(num.solve_ms, "%.1f") << " ms, recompute " << format_label(num.recompute_ms, "%.1f")
         << " ms, tier-local keys " << format_label(num.materialize_ms, "%.1f") << " ms (" << num.tiers_quantized
         << " tier" << (num.tiers_quantized == 1 ? "" : "s") << " quantized again)";
  }
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  if (out) *out = std::move(num);
  return v;
}

ErrorMetrics Engine::obs_error(const Settings& s, const std::atomic<bool>* cancel) {
  std::shared_ptr<Last> last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = last_;
  }
  if (!last || last->key != settings_key(s)) {
    Settings t = s;
    t.recompute_obs = true;
    WaterfillNumbers n;
    waterfill(t, &n, cancel);
    return n.obs;
  }
  if (last->obs_done) return last->obs;
  check(cancel);
  std::lock_guard<std::mutex> lock(mu_);
  const RateLadder ladder = RateLadder::parse(s.ladder);
  apply_(s.layer, s.kv_head, ladder, last->tiers);  // a no-op unless another view replaced the work entry
  last->obs = obs_error_(cancel);
  last->obs_done = true;
  return last->obs;
}

Engine::~Engine() = default;

CompressedHead Engine::allocation_keys(const Settings& s) {
  std::lock_guard<std::mutex> lock(mu_);
  const RateLadder ladder = RateLadder::parse(s.ladder);
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, nullptr);
  const HeadSolution r = solve_(*e, smoothed_(*e, s.smoothing), s, s.family, ladder, nullptr);
  if (r.tiers.empty()) throw InputError("explorer: no feasible allocation at B = " + format_label(s.budget) + ".");
  apply_(s.layer, s.kv_head, ladder, r.tiers);
  const Work& w = *work_;
  CompressedHead c;
  c.keys = w.keys.topRows(w.T);
  c.kept.assign(r.tiers.size(), 0);
  for (std::size_t t = 0; t < r.tiers.size(); ++t) {
    if (r.tiers[t] > 0) c.kept[t] = 1;
    else c.keys.row(static_cast<Eigen::Index>(t)).setZero();
  }
  c.rate = allocation_rate(*w.head, source_->meta().rope, ladder, r.tiers);
  return c;
}

// ---------------------------------------------------------------------------------------
// (b) head map

ViewResult Engine::head_map(const Settings& s, std::vector<HeadMapEntry>* out, const Progress& progress,
                            const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  const TraceMeta& m = source_->meta();
  const int two = ladder.index_of_bits(2);
  std::vector<HeadMapEntry> entries;
  const int total = m.n_heads();
  Settings rs = s;
  if (rs.solver == FamilySolver::Waterfill) rs.solver = FamilySolver::Exact;  // routing compares options exactly
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      check(cancel);
      if (progress) progress(static_cast<double>(l * m.n_kv_heads + h) / total, "head L" + std::to_string(l) + ".H" + std::to_string(h));
      auto e = ladder_(l, h, ladder, s.rate_kind, cancel);
      HeadMapEntry he;
      he.layer = l, he.kv_head = h;
      he.R2 = two >= 0 ? e->dom.R[static_cast<std::size_t>(two)] : kNaN;
      he.dominated = two >= 0 && e->dom.dominated[static_cast<std::size_t>(two)];
      const HeadSolution r = solve_(*e, e->costs.cost, rs, FamilyChoice::Routed, ladder, &he.option);
      he.family = he.option.empty() ? '-' : he.option[0];
      he.objective = r.tiers.empty() ? kNaN : r.objective / std::max(e->costs.output_norm2, 1e-300);
      entries.push_back(he);
    }
  Figure f;
  f.title = "Layer x head map at B = " + format_label(s.budget) + ": routed family, 2-bit dominance (click a head)";
  f.xlabel = "KV head h";
  f.ylabel = "layer l";
  const double cell = std::min(760.0 / m.n_kv_heads, 430.0 / (m.n_layers + 0.9 + 0.27 * 4));
  Series q{"Q: quantize only", palette(0), Style::Squares, {}, {}, cell * 0.82};
  Series ee{"E: evict only", palette(1), Style::Squares, {}, {}, cell * 0.82};
  Series mm{"M: mixed tiers", palette(2), Style::Squares, {}, {}, cell * 0.82};
  Series dom{"R_h(2-bit) >= 1: 2-bit tier dominated", Rgb{0, 0, 0}, Style::Points, {}, {}, std::max(5.0, cell * 0.22)};
  Series sel{"selected head", palette(3), Style::Squares, {}, {}, std::max(5.0, cell * 0.22)};
  std::vector<HoverPoint> hover;
  for (const auto& he : entries) {
    Series* sp = he.family == 'Q' ? &q : he.family == 'E' ? &ee : he.family == 'M' ? &mm : nullptr;
    if (sp) sp->x.push_back(he.kv_head), sp->y.push_back(he.layer);
    if (he.dominated) dom.x.push_back(he.kv_head - 0.2), dom.y.push_back(he.layer);
    if (he.layer == s.layer && he.kv_head == s.kv_head) sel.x.push_back(he.kv_head + 0.2), sel.y.push_back(he.layer);
    hover.push_back({static_cast<double>(he.kv_head), static_cast<double>(he.layer),
                     "head L" + std::to_string(he.layer) + ".H" + std::to_string(he.kv_head) + "\nrouted: " +
                         (he.option.empty() ? std::string("infeasible") : he.option) + "\nR_h(2-bit) = " +
                         format_label(he.R2, "%.4g") + (he.dominated ? " (dominated)" : "") +
                         "\nsurrogate error (rel) = " + format_label(he.objective, "%.4g")});
  }
  for (Series* sp : {&q, &ee, &mm, &dom, &sel})
    if (!sp->x.empty() || sp == &q || sp == &ee || sp == &mm) f.series.push_back(*sp);
  f.xmin = -0.6, f.xmax = m.n_kv_heads - 0.4;
  f.ymin = -0.6, f.ymax = m.n_layers - 0.4;
  // Ticks at integer heads and layers only ("H3", "L0"), every k-th when there are many.
  auto int_ticks = [](int n, const char* prefix, int most) {
    std::vector<Tick> ticks;
    const int step = std::max(1, (n + most - 1) / most);
    for (int i = 0; i < n; i += step) ticks.push_back({static_cast<double>(i), prefix + std::to_string(i)});
    return ticks;
  };
  f.xticks = int_ticks(m.n_kv_heads, "H", 16);
  f.yticks = int_ticks(m.n_layers, "L", 16);
  ViewResult v;
  v.figures = {f};
  v.hover = {hover};
  int counts[3] = {0, 0, 0}, ndom = 0;
  for (const auto& he : entries) {
    counts[0] += he.family == 'Q', counts[1] += he.family == 'E', counts[2] += he.family == 'M';
    ndom += he.dominated;
  }
  std::ostringstream info;
  info << m.n_layers << " layers x " << m.n_kv_heads << " KV heads, ladder " << ladder.name() << ", B = " << format_label(s.budget)
       << "\nrouted (head scope, exact): Q " << counts[0] << ", E " << counts[1] << ", M " << counts[2] << "\n";
  if (two >= 0)
    info << "dominated share (R_h(2-bit) >= 1): " << ndom << " / " << entries.size() << " = "
         << format_label(static_cast<double>(ndom) / std::max<std::size_t>(1, entries.size()), "%.3f") << "\n";
  else
    info << "the ladder has no 2-bit tier: no dominance marks\n";
  info << "click a square to pick the head for the other views";
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  if (out) *out = std::move(entries);
  if (progress) progress(1.0, "head map done");
  return v;
}

// ---------------------------------------------------------------------------------------
// (c) interior advantage

namespace {

struct HeadAdvantage {
  double A_decode = kNaN, A_obs = kNaN, A_sur = kNaN;
  double err_dec[3] = {kNaN, kNaN, kNaN};
  std::string options[3];
};

}  // namespace

// The interior advantage of one head (pipeline/head.hpp head_interior), for the plots.
static HeadAdvantage head_advantage(const HeadData& hd, const RopeParams& rope, const SurrogateCosts& sc,
                                    const std::vector<double>& rates, const RateLadder& ladder, RateKind kind,
                                    double budget, Recomputer& backend) {
  InteriorOptions io;
  io.budget = budget;
  io.rate_kind = kind;
  io.ladder = ladder;
  const HeadInterior hi = head_interior(hd, rope, sc, rates, io, backend);
  HeadAdvantage r;
  r.A_decode = hi.advantage_decode, r.A_obs = hi.advantage_obs, r.A_sur = hi.advantage_surrogate;
  const FamilyOutcome* f[3] = {&hi.Q, &hi.E, &hi.M};
  for (int k = 0; k < 3; ++k) {
    r.options[k] = f[k]->option;
    if (f[k]->feasible && hd.decode_keys.rows() > 0) r.err_dec[k] = f[k]->decode.rel_error;
  }
  return r;
}

ViewResult Engine::interior(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  ViewResult v;
  const std::string dir = source_->run_dir();
  if (source_->has_tables()) {
    const nlohmann::json in = read_table_json(dir + "/tables/interior.json");
    const std::string verdict = in.value("queries", std::string("decode"));
    {
      Figure f;
      f.title = "Interior advantage vs dominated share per cell (B = " + format_label(val(in, "primary_budget")) +
                "): rho = " + format_label(val(in, "rho"), "%.2f") + " [" + format_label(val(in, "ci_lo"), "%.2f") + ", " +
                format_label(val(in, "ci_hi"), "%.2f") + "]";
      f.xlabel = "dominated share (heads with R_h(2-bit) >= 1)";
      f.ylabel = "median over heads of A (" + verdict + ")";
      std::map<std::string, Series> by;
      std::vector<HoverPoint> hv;
      double ylo = 0, yhi = 0;
      for (const auto& p : in.value("points", nlohmann::json::array())) {
        const double x = val(p, "dominated_share"), y = val(p, "A");
        if (!std::isfinite(x) || !std::isfinite(y)) continue;
        const std::string preset = p.value("preset", std::string("cells"));
        Series& se = by[preset];
        se.x.push_back(x), se.y.push_back(y);
        ylo = std::min(ylo, y), yhi = std::max(yhi, y);
        hv.push_back({x, y, p.value("cell", preset) + "\ndominated share " + format_label(x, "%.3f") + "\nmedian A " + format_label(y, "%.4g")});
      }
      int k = 0;
      for (auto& [name, se] : by) {
        se.name = name, se.color = palette(k++), se.size = 10;
        f.series.push_back(se);
      }
      pad_range(ylo, yhi, 0.12);
      f.xmin = -0.05, f.xmax = 1.05, f.ymin = ylo, f.ymax = yhi;
      f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {-1, 2}, {0, 0}, 1});
      v.figures.push_back(f);
      v.hover.push_back(hv);
    }
    {
      const auto cols = read_table_csv(dir + "/tables/heads.csv");
      std::vector<std::size_t> rows;
      const Figure f = advantage_vs_budget_figure(in, cols, &rows);
      std::vector<HoverPoint> hv;
      const Series& pts = f.series.at(0);
      for (std::size_t k = 0; k < rows.size() && k < pts.x.size(); ++k) {
        const std::size_t i = rows[k];
        std::string txt = "B = " + cols.at("budget")[i] + ", A = " + format_label(std::strtod(cols.at("A")[i].c_str(), nullptr), "%.4g");
        for (const char* c : {"cell", "layer", "kv_head", "winner"})
          if (cols.count(c) && i < cols.at(c).size()) txt += std::string("\n") + c + " " + cols.at(c)[i];
        hv.push_back({pts.x[k], pts.y[k], txt});
      }
      v.figures.push_back(f);
      v.hover.push_back(hv);
    }
    v.info = "From the scenario run " + dir + " (tables/interior.json, tables/heads.csv).\nrho = " +
             format_label(val(in, "rho"), "%.3f") + ", interval [" + format_label(val(in, "ci_lo"), "%.3f") + ", " +
             format_label(val(in, "ci_hi"), "%.3f") + "], cells " + std::to_string(in.value("n_cells", 0));
    v.seconds = ms_since(t0) / 1000;
    return v;
  }

  // Live: the selected head vs budget, and every head at B.
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  const TraceMeta& m = source_->meta();
  std::vector<double> budgets;
  for (double b : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0}) budgets.push_back(b);
  if (std::find(budgets.begin(), budgets.end(), s.budget) == budgets.end()) budgets.push_back(s.budget);
  std::sort(budgets.begin(), budgets.end());
  const int total = static_cast<int>(budgets.size()) + m.n_heads();
  int done = 0;
  auto tick = [&](const std::string& what) {
    check(cancel);
    if (progress) progress(static_cast<double>(done++) / total, what);
  };
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, cancel);
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  Series sd{"A on decode queries (verdict)", palette(3), Style::Line, {}, {}, 6};
  Series so{"A on observation queries", palette(0), Style::Line, {}, {}, 6};
  Series ss{"A by the surrogate", palette(2), Style::Dashed, {}, {}, 1};
  std::vector<HoverPoint> hv1;
  double ylo = -0.2, yhi = 1;
  for (double b : budgets) {
    tick(head + " at B = " + format_label(b));
    const HeadAdvantage r = head_advantage(*head_(s.layer, s.kv_head), m.rope, e->costs, e->rates, ladder, s.rate_kind, b, *backend_);
    auto add = [&](Series& se, double y) {
      if (std::isfinite(y)) se.x.push_back(b), se.y.push_back(std::max(y, -2.0)), ylo = std::min(ylo, std::max(y, -2.0));
    };
    add(sd, r.A_decode), add(so, r.A_obs), add(ss, r.A_sur);
    hv1.push_back({b, std::isfinite(r.A_decode) ? std::max(r.A_decode, -2.0) : 0,
                   "B = " + format_label(b) + "\nA decode " + format_label(r.A_decode, "%.4g") + ", obs " + format_label(r.A_obs, "%.4g") +
                       ", surrogate " + format_label(r.A_sur, "%.4g") + "\nerr (decode): " + r.options[0] + " " +
                       format_label(r.err_dec[0], "%.3g") + ", E " + format_label(r.err_dec[1], "%.3g") + ", M " + format_label(r.err_dec[2], "%.3g")});
  }
  Figure f1;
  f1.title = "Interior advantage of head " + head + " vs budget (A < -2 drawn at -2)";
  f1.xlabel = "budget B (bits per key element)";
  f1.ylabel = "A = 1 - err(M*) / min(err(Q*), err(E*))";
  f1.series = {sd, so, ss, {"A = 0", Rgb{120, 120, 120}, Style::Dashed, {-100, 100}, {0, 0}, 1}};
  f1.xmin = 0, f1.xmax = budgets.back() * 1.05;
  pad_range(ylo, yhi, 0.08);
  f1.ymin = ylo, f1.ymax = yhi;

  Series ph{"A per head (decode queries; obs when S = 0)", palette(0), Style::Points, {}, {}, 9};
  Series psel{"selected head", palette(3), Style::Points, {}, {}, 12};
  std::vector<HoverPoint> hv2;
  double y2lo = -0.2, y2hi = 1;
  std::vector<double> as;
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      tick("head L" + std::to_string(l) + ".H" + std::to_string(h));
      auto eh = ladder_(l, h, ladder, s.rate_kind, cancel);
      const HeadAdvantage r = head_advantage(*head_(l, h), m.rope, eh->costs, eh->rates, ladder, s.rate_kind, s.budget, *backend_);
      const double A = std::isfinite(r.A_decode) ? r.A_decode : r.A_obs;
      const double x = l * m.n_kv_heads + h;
      if (std::isfinite(A)) {
        const double y = std::max(A, -2.0);
        ((l == s.layer && h == s.kv_head) ? psel : ph).x.push_back(x);
        ((l == s.layer && h == s.kv_head) ? psel : ph).y.push_back(y);
        y2lo = std::min(y2lo, y);
        as.push_back(A);
        hv2.push_back({x, y, "head L" + std::to_string(l) + ".H" + std::to_string(h) + "\nA = " + format_label(A, "%.4g") +
                                 "\nQ* " + r.options[0] + ", E* " + r.options[1] + ", M* " + r.options[2]});
      }
    }
  Figure f2;
  f2.title = "Interior advantage per head at B = " + format_label(s.budget) + " (A < -2 drawn at -2)";
  f2.xlabel = "head index l * " + std::to_string(m.n_kv_heads) + " + h";
  f2.ylabel = "interior advantage A";
  f2.series = {ph, psel, {"A = 0", Rgb{120, 120, 120}, Style::Dashed, {-100, 1e6}, {0, 0}, 1}};
  f2.xmin = -0.8, f2.xmax = m.n_heads() - 0.2;
  pad_range(y2lo, y2hi, 0.08);
  f2.ymin = y2lo, f2.ymax = y2hi;
  v.figures = {f1, f2};
  v.hover = {hv1, hv2};
  std::sort(as.begin(), as.end());
  std::ostringstream info;
  info << "Live, on " << source_->description() << " (no scenario tables" << (dir.empty() ? "" : " in " + dir) << ").\n"
       << "Per head: Q*, E*, M* solved exactly on the surrogate, materialised, recomputed.\n"
       << "median A over heads at B = " << format_label(s.budget) << ": " << format_label(as.empty() ? kNaN : as[as.size() / 2], "%.4g")
       << ", heads with A > 0: " << std::count_if(as.begin(), as.end(), [](double a) { return a > 0; }) << " / " << as.size();
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(1.0, "interior done");
  return v;
}

// ---------------------------------------------------------------------------------------
// (d) dominance

ViewResult Engine::dominance(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  ViewResult v;
  const std::string dir = source_->run_dir();
  if (source_->has_tables() && fs::exists(dir + "/tables/phase.json")) {
    const nlohmann::json ph = read_table_json(dir + "/tables/phase.json");
    Figure f;
    f.title = "Dominance phase map: winning family by exact recomputation";
    f.xlabel = "logit scale (multiplier of query norms, log)";
    f.ylabel = "budget B (bits per key element)";
    Series q{"Q wins (quantize only)", palette(0), Style::Squares, {}, {}, 30};
    Series e{"E wins (evict only)", palette(1), Style::Squares, {}, {}, 30};
    Series mm{"M wins (mixed tiers)", palette(2), Style::Squares, {}, {}, 30};
    std::vector<HoverPoint> hv;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    std::map<double, std::vector<std::pair<double, std::string>>> by_budget;
    for (const auto& r : ph.value("rows", nlohmann::json::array())) {
      const double x = val(r, "logit_scale"), y = val(r, "budget");
      const std::string w = r.value("winner", std::string());
      Series* sp = w == "Q" ? &q : w == "E" ? &e : w == "M" ? &mm : nullptr;
      if (sp) sp->x.push_back(x), sp->y.push_back(y);
      by_budget[y].push_back({x, w});
      xlo = std::min(xlo, x), xhi = std::max(xhi, x), ylo = std::min(ylo, y), yhi = std::max(yhi, y);
      hv.push_back({x, y, "logit scale " + format_label(x) + ", B = " + format_label(y) + "\nwinner " + (w.empty() ? "-" : w) +
                              "\nshare of heads won: Q " + format_label(val(r, "share_Q"), "%.2f") + ", E " +
                              format_label(val(r, "share_E"), "%.2f") + ", M " + format_label(val(r, "share_M"), "%.2f") +
                              "\nmedian R_h(2) " + format_label(val(r, "R2_median"), "%.3g") + ", mean A " +
                              format_label(val(r, "mean_A"), "%.3g")});
    }
    // The recomputed boundary: per budget, the first logit scale from which eviction wins.
    Series rb{"recomputed boundary: E wins from here (per budget)", Rgb{90, 90, 90}, Style::Line, {}, {}, 6};
    for (auto& [b, row] : by_budget) {
      std::sort(row.begin(), row.end());
      for (std::size_t i = 1; i < row.size(); ++i)
        if (row[i].second == "E" && row[i - 1].second != "E") {
          rb.x.push_back(std::sqrt(row[i].first * row[i - 1].first));
          rb.y.push_back(b);
          break;
        }
    }
    pad_range(ylo, yhi, 0.12);
    f.xlog = xlo > 0;
    if (f.xlog) xlo /= 1.5, xhi *= 1.5;
    else pad_range(xlo, xhi, 0.1);
    f.series = {q, e, mm};
    if (!rb.x.empty()) f.series.push_back(rb);
    const double bnd = val(ph, "boundary_logit_scale");
    if (std::isfinite(bnd))
      f.series.push_back({"surrogate boundary: median R_h(2) = 1", Rgb{0, 0, 0}, Style::Dashed, {bnd, bnd}, {ylo - 10, yhi + 10}, 1});
    f.xmin = xlo, f.xmax = xhi, f.ymin = ylo, f.ymax = yhi;
    v.figures = {f};
    v.hover = {hv};
    v.info = "From the scenario run " + dir + " (tables/phase.json). Surrogate boundary at logit scale " + format_label(bnd, "%.3g") +
             "; hover a square for its numbers.";
    v.seconds = ms_since(t0) / 1000;
    return v;
  }
  check(cancel);
  if (progress) progress(0.2, "dominance of the selected head");
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, cancel);
  const DominanceReport& d = e->dom;
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  Figure f;
  f.title = "Dominance of head " + head + "'s tiers: normalised cost R_h(tau) vs rate";
  f.xlabel = std::string("rate r(tau) (") + (s.rate_kind == RateKind::Code ? "code" : "total") + " bits per key element)";
  f.ylabel = "R_h(tau) = sum_t c_t(tau) / sum_t c_t(0)";
  Series ok{"not dominated", palette(2), Style::Points, {}, {}, 12};
  Series hull_dom{"hull-dominated (never optimal for any lambda)", palette(1), Style::Points, {}, {}, 12};
  Series strict{"dominated: R >= 1 (worse than evicting)", palette(3), Style::Points, {}, {}, 12};
  Series hull{"lower convex hull", Rgb{90, 90, 90}, Style::Line, {}, {}, 6};
  std::vector<HoverPoint> hv;
  double yhi = 1.2;
  for (int j = 0; j < ladder.size(); ++j) {
    const double x = d.rate[static_cast<std::size_t>(j)], y = d.R[static_cast<std::size_t>(j)];
    const bool finite = j > 0 && j < ladder.exact_index();
    Series& se = finite && d.dominated[static_cast<std::size_t>(j)] ? strict
                 : finite && d.hull_dominated[static_cast<std::size_t>(j)] ? hull_dom : ok;
    se.x.push_back(x), se.y.push_back(y);
    yhi = std::max(yhi, y);
    hv.push_back({x, y, ladder.tiers[static_cast<std::size_t>(j)].name() + ": rate " + format_label(x, "%.3f") + ", R = " + format_label(y, "%.4g")});
  }
  for (int k : lower_hull(d.rate, d.R)) hull.x.push_back(d.rate[static_cast<std::size_t>(k)]), hull.y.push_back(d.R[static_cast<std::size_t>(k)]);
  f.series = {hull, ok};
  if (!hull_dom.x.empty()) f.series.push_back(hull_dom);
  if (!strict.x.empty()) f.series.push_back(strict);
  f.series.push_back({"R = 1 (eviction's cost)", Rgb{120, 120, 120}, Style::Dashed, {-1, 100}, {1, 1}, 1});
  f.xmin = -0.6, f.xmax = *std::max_element(d.rate.begin(), d.rate.end()) + 0.6;
  f.ymin = -0.05, f.ymax = yhi * 1.05;
  v.figures = {f};
  v.hover = {hv};
  std::ostringstream info;
  info << "Live, head " << head << " (open a phase-map scenario run, e.g. scenarios/files/02-phase-map.yaml, for the phase map).\n";
  for (int j = 0; j < ladder.size(); ++j)
    info << ladder.tiers[static_cast<std::size_t>(j)].name() << ": R = " << format_label(d.R[static_cast<std::size_t>(j)], "%.4g")
         << (j > 0 && j < ladder.exact_index() && d.dominated[static_cast<std::size_t>(j)] ? " (dominated)" : "")
         << (j > 0 && j < ladder.exact_index() && d.hull_dominated[static_cast<std::size_t>(j)] ? " (hull-dominated)" : "") << "\n";
  v.info = info.str();
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(1.0, "dominance done");
  return v;
}

// ---------------------------------------------------------------------------------------
// (e) staleness

ViewResult Engine::staleness(const Settings& s, const Progress& progress, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  ViewResult v;
  const std::string dir = source_->run_dir();
  Series ratio{"", palette(3), Style::Line, {}, {}, 6};
  Series jac{"", palette(0), Style::Line, {}, {}, 6};
  Series agr{"", palette(2), Style::Line, {}, {}, 6};
  std::vector<HoverPoint> hv;
  Figure f;
  f.xlabel = "decode step s (log)";
  f.ylabel = "error ratio, or overlap in [0, 1]";
  f.xlog = true;
  double yhi = 1;
  if (source_->has_tables() && fs::exists(dir + "/tables/staleness.json")) {
    const nlohmann::json st = read_table_json(dir + "/tables/staleness.json");
    ratio.name = "median error ratio err_stale / err_fresh";
    jac.name = "median Jaccard of evicted sets";
    agr.name = "median tier agreement";
    for (const auto& r : st.value("rows", nlohmann::json::array())) {
      const double x = val(r, "step");
      const double ys[3] = {val(r, "median_ratio"), val(r, "median_jaccard"), val(r, "median_agreement")};
      Series* ss[3] = {&ratio, &jac, &agr};
      for (int k = 0; k < 3; ++k)
        if (std::isfinite(ys[k])) ss[k]->x.push_back(x), ss[k]->y.push_back(ys[k]), yhi = std::max(yhi, ys[k]);
      hv.push_back({x, std::isfinite(ys[0]) ? ys[0] : 1,
                    "step " + format_label(x) + "\nmedian ratio " + format_label(ys[0], "%.4g") + ", Jaccard " + format_label(ys[1], "%.3f") +
                        ", agreement " + format_label(ys[2], "%.3f") + "\nshare same family " + format_label(val(r, "share_same_family"), "%.3f")});
    }
    f.title = "Allocation staleness over decode steps (scenario run), B = " + format_label(val(st, "budget")) + " bits";
    v.info = "From the scenario run " + dir + " (tables/staleness.json): medians over all cells' heads.";
  } else {
    check(cancel);
    const std::shared_ptr<const HeadData> head_data = head_(s.layer, s.kv_head);  // held: the cache may drop it
    const HeadData& hd = *head_data;
    const int S = static_cast<int>(hd.decode_keys.rows());
    if (S == 0) throw InputError("explorer: the trace has no decode steps, so there is no staleness to show.");
    StalenessOptions so;
    so.ladder = RateLadder::parse(s.ladder);
    so.rate_kind = s.rate_kind;
    so.budget = s.budget;
    for (int k = 1; k <= S; k *= 2) so.steps.push_back(k);
    if (so.steps.back() != S) so.steps.push_back(S);
    const int cur = std::clamp(s.decode_step, 1, S);
    if (std::find(so.steps.begin(), so.steps.end(), cur) == so.steps.end()) {
      so.steps.push_back(cur);
      std::sort(so.steps.begin(), so.steps.end());
    }
    if (progress) progress(0.1, "staleness of the selected head over " + std::to_string(so.steps.size()) + " steps");
    const StalenessHead sh = staleness_head(hd, so, *backend_);
    check(cancel);
    ratio.name = "error ratio err_stale / err_fresh";
    jac.name = "Jaccard of evicted sets";
    agr.name = "tier agreement";
    for (const auto& st : sh.steps) {
      const double x = st.step;
      if (std::isfinite(st.ratio)) ratio.x.push_back(x), ratio.y.push_back(st.ratio), yhi = std::max(yhi, st.ratio);
      jac.x.push_back(x), jac.y.push_back(st.jaccard);
      agr.x.push_back(x), agr.y.push_back(st.agreement);
      hv.push_back({x, std::isfinite(st.ratio) ? st.ratio : 1,
                    "step " + std::to_string(st.step) + "\nerr stale " + format_label(st.err_stale, "%.4g") + ", fresh " +
                        format_label(st.err_fresh, "%.4g") + "\nratio " + format_label(st.ratio, "%.4g") + ", Jaccard " +
                        format_label(st.jaccard, "%.3f") + ", agreement " + format_label(st.agreement, "%.3f") + "\nbest family " +
                        st.family + (st.same_family ? " (same as obs)" : " (changed)")});
    }
    const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
    f.title = "Staleness of head " + head + "'s M* over decode steps, B = " + format_label(s.budget) + " bits";
    std::ostringstream info;
    info << "Live, head " << head << ": M* from the observation queries (stale) vs M* from step s's queries (fresh).\n"
         << "best family on the observation queries: " << (sh.family_obs.empty() ? "-" : sh.family_obs);
    if (sh.steps.empty()) info << "\nM is infeasible at B = " << format_label(s.budget);
    v.info = info.str();
    f.series.push_back({"selected decode step", Rgb{150, 150, 150}, Style::Dashed, {double(cur), double(cur)}, {-10, 1e6}, 1});
  }
  double xlo = INFINITY, xhi = 0;
  for (const Series* se : {&ratio, &jac, &agr})
    for (double x : se->x) xlo = std::min(xlo, x), xhi = std::max(xhi, x);
  if (!std::isfinite(xlo)) xlo = 1, xhi = 2;
  f.xmin = xlo / 1.3, f.xmax = xhi * 1.3;
  f.ymin = 0, f.ymax = yhi * 1.08;
  f.series.insert(f.series.begin(), {ratio, jac, agr});
  f.series.push_back({"", Rgb{120, 120, 120}, Style::Dashed, {f.xmin, f.xmax}, {1, 1}, 1});
  v.figures = {f};
  v.hover = {hv};
  v.seconds = ms_since(t0) / 1000;
  if (progress) progress(1.0, "staleness done");
  return v;
}

Figure merged_for_csv(const ViewResult& v) {
  Figure m;
  if (v.figures.empty()) return m;
  m = v.figures.front();
  m.series.clear();
  for (std::size_t k = 0; k < v.figures.size(); ++k)
    for (std::size_t i = 0; i < v.figures[k].series.size(); ++i) {
      Series s = v.figures[k].series[i];
      if (s.name.empty()) s.name = "series " + std::to_string(i + 1);
      if (v.figures.size() > 1) s.name = "figure " + std::to_string(k + 1) + ": " + s.name;
      m.series.push_back(std::move(s));
    }
  return m;
}

}  // namespace tierlab::explorer
