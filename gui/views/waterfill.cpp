// tierlab-explorer's water-filling view: Engine::waterfill and Engine::obs_error (engine.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

#include <omp.h>

#include "gui/engine_detail.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "solvers/waterfill.hpp"
#include "scenarios/figures/tables_io.hpp"

namespace tierlab::explorer {

using namespace detail;

namespace {

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

// The title's short form: the water level (family M) or the option shown without one.
std::string family_level_title(const WaterfillNumbers& num) {
  const char family = num.option.empty() ? '-' : num.option[0];
  if (family == 'M') return "water level theta = " + format_label(num.theta, "%.3g");
  if (family == 'Q' || family == 'E') return num.option + ", no water level";
  return "no feasible allocation";
}

// What the allocation shown is, in words, with its counts per tier (its family: num.option's
// letter): Q:tau holds tau and exact (no eviction), E exact and evict, M the whole ladder.
std::string family_level_text(const WaterfillNumbers& num, const RateLadder& ladder) {
  const char family = num.option.empty() ? '-' : num.option[0];
  const std::string theta = "theta = " + format_label(num.theta, "%.3g");
  std::vector<int> count(static_cast<std::size_t>(ladder.size()), 0);
  for (auto t : num.tiers) ++count[t];
  std::string used;
  for (int j = ladder.size() - 1; j >= 0; --j)
    if (count[static_cast<std::size_t>(j)] > 0)
      used += (used.empty() ? "" : ", ") + std::to_string(count[static_cast<std::size_t>(j)]) + " " +
              (j == 0 ? std::string("evicted") : ladder.tiers[static_cast<std::size_t>(j)].name());
  if (family == 'M') return "water level " + theta + "; allocation M: " + used;
  if (family == 'Q')
    return "family Q has no water level: " + num.option + " quantizes every kept token at " + num.option.substr(num.option.find(':') + 1) +
           " or keeps it exact, evicting none (" + used + "); the mixed family's continuous " + theta + " is not drawn";
  if (family == 'E')
    return "family E has no water level: tokens kept exact or evicted (" + used + "); the mixed family's continuous " + theta +
           " is not drawn";
  return "no feasible allocation at this budget";
}

// Where the tokens fall: the discrete eviction cut (the heaviest evicted token's g_t(0))
// against the continuous water level theta.
void eviction_cut(const std::vector<double>& g0, const std::vector<std::uint8_t>& tiers, WaterfillNumbers& num) {
  const bool level = std::isfinite(num.theta) && num.theta > 0;
  double cut = -1;
  for (std::size_t t = 0; t < tiers.size(); ++t)
    if (tiers[t] == 0) ++num.evicted, cut = std::max(cut, g0[t]);
  num.eviction_cut = num.evicted > 0 ? cut : kNaN;
  for (std::size_t t = 0; t < tiers.size(); ++t) {
    const bool below = level && g0[t] < num.theta;
    num.below_level += below;
    num.evicted_above_level += level && tiers[t] == 0 && !below;
    num.kept_below_level += below && tiers[t] != 0;
    num.kept_below_cut += num.evicted > 0 && tiers[t] != 0 && g0[t] < cut;
  }
}

// The eviction cut in words, beside the water level.
std::string eviction_cut_text(const WaterfillNumbers& num, int T) {
  if (num.tiers.empty()) return {};
  if (num.evicted == 0) return "discrete allocation: no token evicted (no eviction cut)";
  std::string s = "discrete eviction cut at g_t(0) = " + format_label(num.eviction_cut, "%.3g") + ": " + std::to_string(num.evicted) +
                  " of " + std::to_string(T) + " tokens evicted";
  if (num.kept_below_cut > 0) s += " (" + std::to_string(num.kept_below_cut) + " kept tokens lie below the cut: not a clean threshold)";
  if (std::isfinite(num.theta) && num.theta > 0)
    s += "; continuous water level: " + std::to_string(num.below_level) + " tokens below theta get 0 bits; " +
         std::to_string(num.evicted_above_level) +
         " evicted tokens lie above theta (their continuous b_t is below the lowest finite tier's bits, which the "
         "discrete ladder cannot give), " + std::to_string(num.kept_below_level) + " kept tokens lie below it";
  return s;
}

}  // namespace

static std::string settings_key(const Settings& s) {
  return std::to_string(s.layer) + "." + std::to_string(s.kv_head) + "|" + s.ladder + "|" +
         std::string(to_string(s.rate_kind)) + "|" + std::string(to_string(s.solver)) + "|" +
         std::string(to_string(s.family)) + "|" + std::to_string(s.smoothing) + "|" + format_label(s.budget, "%.17g");
}

// ---------------------------------------------------------------------------------------
// (a) water-filling

// Continuous reverse water-filling on the head's noise model: g_t(0) per token (a_t when the
// model is not fitted), the water level theta (NaN when not fitted) and the continuous bits
// b_t (none when not fitted), from the library's reverse water-filling.
void Engine::waterfill_continuous_(LadderEntry& e, const Settings& s, int T, WaterfillNumbers& num,
                                   std::vector<double>& g0, std::vector<double>& cbits) {
  const VectorD& a = e.costs.weights.a;
  if (e.fit.fitted) {
    num.alpha = e.fit.alpha;
    num.beta = e.fit.beta;
    const double k = e.fit.alpha * std::log(e.fit.beta);
    for (int t = 0; t < T; ++t) g0[static_cast<std::size_t>(t)] = a[t] * k;
    // The library's reverse water-filling (solvers/waterfill.hpp), the one implementation:
    // weights a_t, the head's shared model, b_max = 16 bits.
    WaterfillProblem wp;
    wp.weights.assign(a.data(), a.data() + T);
    wp.models = {DistortionModel{e.fit.alpha, e.fit.beta}};
    wp.budget = std::clamp(s.budget, 0.0, 16.0);
    wp.max_bits = 16.0;
    ContinuousWaterfill c = waterfill_continuous(wp);
    num.theta = c.theta;
    cbits = std::move(c.bits);
  } else {
    num.theta = kNaN;
    for (int t = 0; t < T; ++t) g0[static_cast<std::size_t>(t)] = a[t];
  }
}

// The discrete allocation of the chosen solver and family on the (smoothed) costs, its keys as
// materialize gives them (only the tiers whose token sets changed are quantized again), its
// recomputed errors at decode step s and (when asked) on the observation queries, kept for
// obs_error. Its tiers are empty when the family is infeasible at B.
HeadSolution Engine::waterfill_allocation_(LadderEntry& e, const HeadData& hd, const RateLadder& ladder,
                                           const Settings& s, WaterfillNumbers& num,
                                           const std::atomic<bool>* cancel) {
  const int T = static_cast<int>(hd.keys.rows());
  // The discrete allocation, its keys and its error at step s, on this thread alone.
  std::optional<SerialOmp> serial;
  serial.emplace();
  auto ts = Clock::now();
  HeadSolution hr = solve_(e, smoothed_(e, s.smoothing), s, s.family, ladder, &num.option);
  num.solve_ms = ms_since(ts);
  num.tiers = hr.tiers;
  const bool feasible = !hr.tiers.empty();
  check(cancel);
  if (feasible) {
    // The allocation's keys as materialize gives them (tier-local groups, docs/model.md convention 9):
    // only the tiers whose token sets changed are quantized again.
    ts = Clock::now();
    num.rate = allocation_rate(hd, source_->meta().rope, ladder, hr.tiers);
    int ev = 0;
    for (auto k : hr.tiers) ev += k == 0 ? 1 : 0;
    num.evicted_fraction = T > 0 ? static_cast<double>(ev) / T : 0;
    num.surrogate_abs = hr.objective;
    num.surrogate_rel = e.costs.output_norm2 > 0 ? hr.objective / e.costs.output_norm2 : kNaN;
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
  return hr;
}

// The two figures (g_t(0) by weight rank coloured by tier, with the water level; bits per
// token, with the continuous b_t and the budget) and their hover points.
ViewResult Engine::waterfill_figures_(const LadderEntry& e, const RateLadder& ladder, const Settings& s,
                                      const std::string& head, int T, const std::vector<double>& g0,
                                      const std::vector<double>& cbits, const HeadSolution& hr,
                                      const WaterfillNumbers& num) {
  const VectorD& a = e.costs.weights.a;
  const bool feasible = !hr.tiers.empty();
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
    const int t = e.order[static_cast<std::size_t>(r - 1)];
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
                      "\nc_t(0) = " + format_label(e.costs.weights.evict_cost[t], "%.4g") +
                      (tier >= 0 ? "\ntier " + ladder.tiers[static_cast<std::size_t>(tier)].name() : std::string()) +
                      (cbits.empty() ? std::string() : "\ncontinuous b_t = " + format_label(cb, "%.3f"));
    hover_level.push_back({static_cast<double>(r), y, txt});
    if (tier >= 0) hover_bits.push_back({static_cast<double>(r), tb, txt});
  }
  // The water level and the continuous b_t are the mixed family's (continuous) solution:
  // drawn only when the allocation shown is M's; Q and E have none, and the title says so.
  const char family = num.option.empty() ? '-' : num.option[0];
  const bool level_shown = family == 'M' && std::isfinite(num.theta) && num.theta > 0;
  Figure lv;
  lv.title = "Reverse water-filling, " + head + ", B = " + format_label(s.budget) + " bits: " + family_level_title(num);
  lv.xlabel = "token rank by weight a_t (1 = heaviest, log)";
  lv.ylabel = e.fit.fitted ? "marginal return per bit at 0 bits, g_t(0) (log)" : "token weight a_t (log)";
  lv.xlog = true;
  lv.ylog = true;
  lv.xmin = 0.8, lv.xmax = T * 1.25;
  // The range covers g_t(0) and the continuous level whatever the family: switching family
  // (same head, same budget) keeps the axis.
  double ylo = floor_g, yhi = std::max(gmax, floor_g * 10);
  if (std::isfinite(num.theta) && num.theta > 0) ylo = std::min(ylo, num.theta), yhi = std::max(yhi, num.theta);
  lv.ymin = ylo / 3, lv.ymax = yhi * 3;
  // Every tier of the ladder in the legend (a family that uses few of them shows the same
  // key), two columns: switching family keeps the legend's rows and so the plot's size.
  for (int j = ladder.size() - 1; j >= 0; --j) lv.series.push_back(by_tier[static_cast<std::size_t>(j)]);
  lv.legend_columns = 2;
  if (!unsolved.x.empty()) lv.series.push_back(unsolved);
  if (level_shown)
    lv.series.push_back({"water level theta (continuous: g_t(0) < theta gets 0 bits)", palette(3), Style::Dashed,
                         {lv.xmin, lv.xmax}, {num.theta, num.theta}, 1});
  // The discrete allocation's eviction cut: the heaviest evicted token; evicted tokens lie on
  // or below it (and above theta where the ladder has no tier as low as their continuous bits).
  // (The level's and the cut's legend rows are there for every family, so the plot keeps its
  // size when the family changes.)
  if (!level_shown)
    lv.series.push_back({"no water level (" + (num.option.empty() ? std::string("infeasible") : "family " + num.option) + ")",
                         palette(3), Style::Dashed, {}, {}, 0});
  if (!(std::isfinite(num.eviction_cut) && num.eviction_cut > 0))
    lv.series.push_back({"no eviction cut (no token evicted)", Rgb{60, 60, 60}, Style::Line, {}, {}, 0});
  else
    lv.series.push_back({"discrete eviction cut (heaviest evicted token: " + std::to_string(num.evicted) + " evicted on or below)",
                         Rgb{60, 60, 60}, Style::Line, {lv.xmin, lv.xmax}, {std::max(num.eviction_cut, floor_g), std::max(num.eviction_cut, floor_g)}, 0});

  Figure bf;
  bf.title = "Bits per token, " + head + " (" + (num.option.empty() ? std::string("infeasible") : num.option) + ", " +
             std::string(to_string(s.solver)) + (s.smoothing > 1 ? ", avg" + std::to_string(s.smoothing) : std::string()) + ")";
  bf.xlabel = "token rank by weight a_t (1 = heaviest, log)";
  bf.ylabel = "bits per key element";
  bf.xlog = true;
  bf.xmin = lv.xmin, bf.xmax = lv.xmax;
  bf.ymin = -0.8, bf.ymax = 16.8;
  if (!cont.x.empty() && level_shown) bf.series.push_back(cont);
  for (int j = ladder.size() - 1; j >= 0; --j)
    if (!bits_tier[static_cast<std::size_t>(j)].x.empty()) bf.series.push_back(bits_tier[static_cast<std::size_t>(j)]);
  bf.series.push_back({"budget B (mean bits)", Rgb{110, 110, 110}, Style::Dashed, {bf.xmin, bf.xmax}, {s.budget, s.budget}, 1});
  bf.legend_columns = 2;

  ViewResult v;
  v.figures = {lv, bf};
  v.hover = {hover_level, hover_bits};
  return v;
}

namespace {

// The nominal rate of an allocation: the mean of the ladder's per-tier rates r_j (in the
// rate kind of the head's ladder entry), as the solver counted it against B.
double nominal_rate(const std::vector<double>& rates, const std::vector<std::uint8_t>& tiers) {
  double sum = 0;
  for (auto t : tiers) sum += rates[t];
  return tiers.empty() ? 0.0 : sum / static_cast<double>(tiers.size());
}

}  // namespace

// The view's numbers as text (ViewResult::info).
std::string Engine::waterfill_info_(const LadderEntry& e, const HeadData& hd, const RateLadder& ladder,
                                    const Settings& s, const std::string& head, const HeadSolution& hr,
                                    const WaterfillNumbers& num) {
  const int T = static_cast<int>(hd.keys.rows());
  const bool feasible = !hr.tiers.empty();
  std::ostringstream info;
  info << "Head " << head << ": T = " << T << " tokens, d = " << hd.keys.cols() << ", "
       << hd.obs_queries.rows() << " observation queries, S = " << hd.decode_keys.rows() << " decode steps\n";
  if (e.fit.fitted)
    info << "noise model n_h(b) = " << format_label(num.alpha, "%.3g") << " * " << format_label(num.beta, "%.3f")
         << "^(-b)\n" << family_level_text(num, ladder) << "\n";
  else
    info << "noise model not fitted (" << e.fit.note << "); y shows a_t\n";
  if (feasible) info << eviction_cut_text(num, T) << "\n";
  if (!feasible) {
    info << "family " << to_string(s.family) << " is infeasible at B = " << format_label(s.budget) << " on " << ladder.name() << "\n";
  } else {
    std::vector<int> count(static_cast<std::size_t>(ladder.size()), 0);
    for (auto t : hr.tiers) ++count[t];
    info << "allocation " << num.option << " (" << to_string(s.solver) << "): rate " << format_label(num.rate.code_bits, "%.3f")
         << " code / " << format_label(num.rate.total_bits, "%.3f") << " total bits measured, "
         << format_label(nominal_rate(e.rates, hr.tiers), "%.3f") << " nominal (" << to_string(s.rate_kind)
         << "); evicted " << format_label(100 * num.evicted_fraction, "%.1f") << "%\n";
    const double measured = rate_of(num.rate, s.rate_kind);
    if (measured > s.budget * (1 + 1e-9))
      info << "  the measured " << to_string(s.rate_kind) << " rate exceeds B = " << format_label(s.budget)
           << " by the partial groups this allocation forms; the view solves at B itself, tierlab solve re-solves "
              "at B' < B until the measured rate meets B\n";
    info << "  (" << measured_rate_legend() << "; " << budget_rate_legend(s.rate_kind, s.budget) << ")\n  tokens per tier:";
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
  return info.str();
}

ViewResult Engine::waterfill(const Settings& s, WaterfillNumbers* out, const std::atomic<bool>* cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  const RateLadder ladder = RateLadder::parse(s.ladder);
  ladder.validate();
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, cancel);
  const std::shared_ptr<const HeadData> head_data = head_(s.layer, s.kv_head);
  const HeadData& hd = *head_data;
  const int T = static_cast<int>(hd.keys.rows());
  WaterfillNumbers num;
  check(cancel);

  // Continuous reverse water-filling on the head's noise model.
  std::vector<double> cbits;
  std::vector<double> g0(static_cast<std::size_t>(T), 0.0);
  waterfill_continuous_(*e, s, T, num, g0, cbits);
  check(cancel);

  const HeadSolution hr = waterfill_allocation_(*e, hd, ladder, s, num, cancel);
  if (!hr.tiers.empty()) eviction_cut(g0, hr.tiers, num);

  // Figures.
  const std::string head = "L" + std::to_string(s.layer) + ".H" + std::to_string(s.kv_head);
  ViewResult v = waterfill_figures_(*e, ladder, s, head, T, g0, cbits, hr, num);
  v.info = waterfill_info_(*e, hd, ladder, s, head, hr, num);
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

}  // namespace tierlab::explorer
