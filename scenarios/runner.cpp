#include "scenarios/runner.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "model/capture.hpp"
#include "model/dominance.hpp"
#include "model/llama2c.hpp"
#include "model/error.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic.hpp"
#include "scenarios/analyses.hpp"
#include "scenarios/atomic_file.hpp"
#include "scenarios/interior.hpp"
#include "scenarios/mismatch.hpp"
#include "scenarios/proxy.hpp"
#include "scenarios/entropy_phase.hpp"
#include "scenarios/progress.hpp"
#include "scenarios/smoothing_study.hpp"
#include "scenarios/staleness.hpp"
#include "scenarios/table_numbers.hpp"
#include "solvers/waterfill.hpp"

namespace tierlab {

namespace fs = std::filesystem;

std::atomic<bool>& run_stop_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {

extern "C" void on_sigint(int) { run_stop_flag().store(true); }

// NaN -> null in JSON.
double verdict_err(const FamilyOutcome& f, QuerySet q) {
  if (!f.feasible) return std::numeric_limits<double>::quiet_NaN();
  return q == QuerySet::Decode ? f.decode.rel_error : f.obs.rel_error;
}

// Family with the least error; ties to the endpoint (Q, then E). "" when none feasible.
std::string winner(double q, double e, double m) {
  std::string best;
  double v = std::numeric_limits<double>::infinity();
  const std::pair<const char*, double> c[3] = {{"Q", q}, {"E", e}, {"M", m}};
  for (const auto& [name, err] : c)
    if (std::isfinite(err) && err < v) v = err, best = name;
  return best;
}

}  // namespace

std::string cell_path(const std::string& out, const ScenarioCell& cell) { return out + "/cells/" + cell.id + ".json"; }

nlohmann::json compute_cell(const Scenario& sc, const ScenarioCell& cell, Recomputer& backend,
                            const std::string& work_dir, const std::atomic<bool>* stop) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string trace_path = cell.path;
  bool temporary = false;
  if (cell.source == "synthetic") {
    fs::create_directories(work_dir);
    trace_path = work_dir + "/" + cell.id + ".safetensors";
    write_synthetic_trace(cell.synth, trace_path);
    temporary = true;
  } else if (cell.source == "model") {
    fs::create_directories(work_dir);
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
  TraceReader trace(trace_path);
  const TraceMeta& m = trace.meta();
  if (sc.queries == QuerySet::Decode && m.decode_steps == 0)
    throw InputError(sc.file + ": cell '" + cell.id + "' has no decode steps; use 'queries: obs' for this trace.");

  nlohmann::json j = {{"id", cell.id},
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
                      {"queries", sc.queries == QuerySet::Decode ? "decode" : "obs"},
                      {"backend", backend.name()}};

  // R_h(2-bit tier) per head (surrogate on the observation queries).
  int two = -1;
  for (int i = 0; i < sc.ladder.size(); ++i)
    if (sc.ladder.tiers[static_cast<std::size_t>(i)].bits == 2) two = i;
  nlohmann::json r2 = nlohmann::json::array();
  std::vector<double> r2v;
  if (two >= 0)
    for (int l = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h) {
        const HeadData head = trace.head(l, h);
        const DominanceReport d =
            dominance(surrogate_costs(head.keys, head.values, head.obs_queries, sc.ladder), sc.rate_kind);
        r2v.push_back(d.R[static_cast<std::size_t>(two)]);
        r2.push_back(finite_or_null(r2v.back()));
      }
  j["R2"] = r2;
  if (!r2v.empty()) {
    std::vector<double> s = r2v;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    j["R2_median"] = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  } else {
    j["R2_median"] = nullptr;
  }

  if (sc.waterfill.enabled && sc.waterfill.cell == cell.id) {
    const WaterfillSpec& w = sc.waterfill;
    if (w.layer >= m.n_layers || w.kv_head >= m.n_kv_heads)
      throw InputError(sc.file + ": waterfill head L" + std::to_string(w.layer) + ".H" + std::to_string(w.kv_head) +
                       " is outside cell '" + cell.id + "' (" + std::to_string(m.n_layers) + " layers x " +
                       std::to_string(m.n_kv_heads) + " KV heads).");
    const HeadData head = trace.head(w.layer, w.kv_head);
    const SurrogateCosts costs = surrogate_costs(head.keys, head.values, head.obs_queries, sc.ladder);
    const NoiseFit fit = fit_noise(costs, QuantizerKind::KiviPerChannel);
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

  if (sc.staleness.enabled) {
    if (m.decode_steps == 0)
      throw InputError(sc.file + ": cell '" + cell.id + "' has no decode steps; the staleness analysis needs them.");
    StalenessOptions so;
    so.ladder = sc.ladder;
    so.rate_kind = sc.rate_kind;
    so.budget = sc.staleness.budget;
    so.steps = sc.staleness.steps;
    nlohmann::json heads = nlohmann::json::array();
    for (int l = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h) {
        if (stop && stop->load()) throw Interrupted();
        const StalenessHead r = staleness_head(trace.head(l, h), so, backend);
        nlohmann::json steps = nlohmann::json::array();
        for (const StalenessStep& st : r.steps)
          steps.push_back({{"step", st.step},
                           {"err_stale", finite_or_null(st.err_stale)},
                           {"err_fresh", finite_or_null(st.err_fresh)},
                           {"ratio", finite_or_null(st.ratio)},
                           {"jaccard", finite_or_null(st.jaccard)},
                           {"agreement", finite_or_null(st.agreement)},
                           {"family", st.family},
                           {"same_family", st.same_family}});
        heads.push_back({{"layer", l}, {"kv_head", h}, {"family_obs", r.family_obs}, {"steps", steps}});
      }
    j["staleness"] = {{"budget", so.budget}, {"heads", heads}};
  }

  if (sc.entropy_phase) j["entropy"] = head_entropies(trace);  // per head, nats (scenarios/entropy_phase.hpp)
  if (sc.smoothing.enabled) j["smoothing"] = smoothing_cell(sc, trace, backend, stop);  // scenarios/smoothing_study.hpp
  if (sc.mismatch.enabled) j["mismatch"] = mismatch_cell(sc, trace, backend, stop);  // scenarios/mismatch.hpp
  if (sc.proxy.enabled) j["proxy"] = proxy_cell(sc, cell, trace, backend, stop);     // scenarios/proxy.hpp

  j["budgets"] = nlohmann::json::array();
  double dominated = std::nan("");
  for (const double B : sc.budgets) {
    if (stop && stop->load()) throw Interrupted();
    InteriorOptions opt;
    opt.budget = B;
    opt.rate_kind = sc.rate_kind;
    opt.ladder = sc.ladder;
    const InteriorReport rep = interior_advantage(trace, opt, backend);
    dominated = rep.dominated_share;
    nlohmann::json b = {
        {"budget", B},
        {"A", finite_or_null(sc.queries == QuerySet::Decode ? rep.mean_advantage_decode : rep.mean_advantage_obs)},
        {"A_decode", finite_or_null(rep.mean_advantage_decode)},
        {"A_obs", finite_or_null(rep.mean_advantage_obs)},
        {"A_surrogate", finite_or_null(rep.mean_advantage_surrogate)},
        {"heads", nlohmann::json::array()}};
    int wins[3] = {0, 0, 0}, defined = 0;
    for (const HeadInterior& h : rep.heads) {
      const double q = verdict_err(h.Q, sc.queries), e = verdict_err(h.E, sc.queries), mm = verdict_err(h.M, sc.queries);
      const std::string w = winner(q, e, mm);
      if (w == "Q") ++wins[0];
      if (w == "E") ++wins[1];
      if (w == "M") ++wins[2];
      const double A = sc.queries == QuerySet::Decode ? h.advantage_decode : h.advantage_obs;
      defined += std::isfinite(A) ? 1 : 0;
      b["heads"].push_back({{"layer", h.layer},
                            {"kv_head", h.kv_head},
                            {"A", finite_or_null(A)},
                            {"A_surrogate", finite_or_null(h.advantage_surrogate)},
                            {"err_Q", finite_or_null(q)},
                            {"err_E", finite_or_null(e)},
                            {"err_M", finite_or_null(mm)},
                            {"option_Q", h.Q.option},
                            {"winner", w},
                            {"dominated_2bit", h.dominated_2bit}});
    }
    b["defined"] = defined;
    b["wins"] = {{"Q", wins[0]}, {"E", wins[1]}, {"M", wins[2]}};
    // Cell winner: the family winning the most heads (ties to the endpoint, Q before E).
    std::string cw = "Q";
    int best = wins[0];
    if (wins[1] > best) cw = "E", best = wins[1];
    if (wins[2] > best) cw = "M", best = wins[2];
    b["winner"] = best > 0 ? cw : "";
    j["budgets"].push_back(b);
  }
  j["dominated_share"] = finite_or_null(dominated);
  j["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return j;
}

RunResult run_scenario(const Scenario& sc, const RunOptions& opt) {
  if (opt.out.empty()) throw InputError("run: the output folder (--out) is empty.");
  if (opt.jobs < 1 || opt.jobs > 64) throw InputError("run: --jobs is " + std::to_string(opt.jobs) + "; it must be in [1, 64].");
  const Backend backend_kind = opt.backend ? *opt.backend : sc.backend;
  fs::create_directories(opt.out + "/cells");
  {
    std::ifstream in(sc.file);
    std::stringstream ss;
    ss << in.rdbuf();
    if (in) write_file_atomically(opt.out + "/scenario.yaml", ss.str());
  }
  RunResult res;
  res.cells_total = static_cast<int>(sc.cells.size());
  std::vector<const ScenarioCell*> pending;
  for (const auto& c : sc.cells) {
    if (!opt.force && fs::exists(cell_path(opt.out, c))) {
      ++res.cells_skipped;
      if (opt.on_cell) opt.on_cell(c.id, false);
    } else {
      pending.push_back(&c);
    }
  }

  std::atomic<bool>& stop = run_stop_flag();
  stop.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  struct Restore {
    decltype(previous) p;
    ~Restore() { std::signal(SIGINT, p); }
  } restore{previous};

  std::mutex mu;
  std::atomic<std::size_t> next{0};
  int done = 0;
  std::string first_error;
  TerminalProgress bar("run " + sc.name);
  if (opt.progress) bar.update(res.cells_skipped, res.cells_total);
  auto worker = [&]() {
    std::string note;
    std::unique_ptr<Recomputer> be;
    try {
      be = make_recomputer(backend_kind, &note);
      if (!be) throw InputError("run: backend unavailable: " + note);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      if (first_error.empty()) first_error = e.what();
      stop.store(true);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      res.backend = be->description();
    }
    while (!stop.load()) {
      const std::size_t i = next.fetch_add(1);
      if (i >= pending.size()) break;
      const ScenarioCell& cell = *pending[i];
      try {
        const nlohmann::json j = compute_cell(sc, cell, *be, opt.out + "/traces", &stop);
        write_file_atomically(cell_path(opt.out, cell), j.dump(1) + "\n");
        std::lock_guard<std::mutex> lock(mu);
        ++res.cells_computed, ++done;
        if (opt.on_cell) opt.on_cell(cell.id, true);
        if (opt.progress) bar.update(res.cells_skipped + done, res.cells_total);
      } catch (const Interrupted&) {
        break;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = "cell '" + cell.id + "': " + e.what();
        stop.store(true);
      }
    }
  };
  const int n = std::min<int>(opt.jobs, std::max<int>(1, static_cast<int>(pending.size())));
  if (n == 1) {
    worker();
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }
  bar.finish();
  std::error_code ec;
  fs::remove(opt.out + "/traces", ec);  // only when empty
  if (!first_error.empty()) throw InputError(first_error);
  if (stop.load()) {
    res.interrupted = true;
    return res;
  }
  std::vector<nlohmann::json> cells;
  for (const auto& c : sc.cells) {
    std::ifstream in(cell_path(opt.out, c));
    cells.push_back(nlohmann::json::parse(in));
  }
  write_analyses(sc, cells, opt.out);
  res.tables_written = true;
  return res;
}

}  // namespace tierlab
