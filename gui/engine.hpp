#pragma once
// tierlab-explorer's engine (no Qt types): the views of an opened source (gui/source.hpp),
// each built as tierlab::Figure (scenarios/figures/figure.hpp), and the per-head caches behind
// them. The Engine's caches and shared per-head work are in gui/engine.cpp, each view in
// gui/views/<view>.cpp.
//
// Views (for the selected head (l, h), budget B bits per key element, ladder, solver,
// family, smoothing kernel k, decode step s):
//   (a) water-filling: tokens sorted by weight a_t (model/surrogate.hpp); the marginal
//       return per bit at 0 bits g_t(0) = a_t alpha ln(beta) with the head's fitted noise
//       model n_h(b) = alpha beta^(-b) (fit_noise on the ladder's quantizer); the water level
//       theta of continuous reverse water-filling at B (solvers/waterfill.hpp; tokens with
//       g_t(0) < theta get 0 bits, b_t = log_beta(g_t(0) / theta) otherwise, b_max = 16);
//       the discrete allocation of the chosen solver and family on the (smoothed) surrogate
//       costs, coloured by tier; its surrogate prediction sum_t c_t / mean_q ||o_q||^2 (true
//       costs) next to the exact recomputed relative error e = ||o^ - o||^2 / ||o||^2 (the
//       engine's Recomputer, gpu/recompute.hpp; CPU in the app) on decode step s's g queries (the T prompt tokens
//       under the allocation plus the s decode keys, exact) and on the observation queries.
//       The keys are those `tierlab eval --allocation` recomputes (model/quantizers/quantizer.hpp
//       materialize, docs/model.md convention 9): the tokens of one tier are quantized together,
//       in position order (quantize_block per tier; a tier whose token set did not change
//       is not quantized again). Per allocation the backend prepares the step's g rows
//       (and, when asked, the observation queries) with these keys as one variant.
//   (b) head map: per head, R_h(2-bit) = sum_t c_t(2-bit) / sum_t c_t(0)
//       (model/dominance.hpp; dominated when >= 1) and the routed family (Q, E or M,
//       solvers/families.hpp, head scope) at B.
//   (c) interior advantage A = 1 - err(M*) / min(err(Q*), err(E*)) (scenarios/pipeline/advantage.hpp):
//       from a run's tables (per cell vs dominated share; per head vs budget), else live for
//       the selected head vs budget and for every head at B.
//   (d) dominance: a run's phase map (winner per logit scale x budget, surrogate boundary
//       median R_h(2) = 1 dashed), else the selected head's R_h(tau) vs rate with its lower
//       convex hull.
//   (e) staleness (scenarios/pipeline/staleness_head.hpp): a run's per-step medians, else the selected
//       head's err_stale/err_fresh, Jaccard of evicted sets and tier agreement per step.
//   (f) rate-distortion curve (scenarios/pipeline/rd_curve.hpp): the selected head's Q, E and M
//       optima over B = kRdCurveGrid, recomputed exactly on decode step s's g queries (as the
//       water-filling view; the observation queries without decode steps), the surrogate
//       beside them, the ladder points and the lower convex hull; B marked (the grid point
//       nearest B per family). The curve is computed once per (head, ladder, rate kind,
//       solver, s) and cached: moving the budget slider only redraws. With more than one head
//       in the source, a second figure: the model-wide curve (every head shares B, scope
//       model, B = kRdModelGrid), cached the same way. The named methods of Settings::rd_methods
//       (scenarios/methods/rd_methods.hpp, as `tierlab solve --budgets --method`) are points
//       on both, recomputed on the same queries, "above the hull" where so.
//
// Caching: per head, the HeadData; per (head, ladder, rate kind), the surrogate costs, the
// noise fit, the weight order, the sorted log weights of the water level and the smoothed
// costs per kernel. These per-head entries are bounded: least recently used first, the
// heads' data and then the (head, ladder) entries are dropped while their bytes exceed
// the limit (set_cache_limit; default 1 GiB, or TIERLAB_EXPLORER_CACHE_MB), those of the
// head in use always kept. Besides, one "work" entry for the water-filling view's head:
// the tier-local quantization per tier, the allocation's keys extended by the decode
// step's keys, the T + s exact keys and values, and the current allocation's error at
// step s. A budget change re-solves, re-quantizes the tiers whose tokens changed and
// recomputes decode step s's g rows (the backend's two phases, on one thread).
#include <atomic>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <compare>
#include <map>
#include <optional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "gui/source.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/head.hpp"
#include "scenarios/methods/rd_methods.hpp"
#include "scenarios/figures/figure.hpp"
#include "solvers/families.hpp"
#include "solvers/waterfill.hpp"
#include "solvers/problem.hpp"

namespace tierlab {
struct RdCurve;
struct RdCurveOptions;
struct HeadCosts;
}

namespace tierlab::explorer {

// The budget grids of the rate-distortion view (A:B:STEP, bits per key element): the head's
// curve, and the model-wide one (every head of the trace shares B; a coarser grid, as each
// point solves all heads).
inline constexpr const char* kRdCurveGrid = "0:16:0.25";
inline constexpr const char* kRdModelGrid = "0:16:1";

struct Settings {
  int layer = 0, kv_head = 0;
  double budget = 2.0;  // B, bits per key element
  std::string ladder = std::string(kDefaultLadder);
  RateKind rate_kind = kDefaultRateKind;
  FamilySolver solver = FamilySolver::Exact;
  FamilyChoice family = FamilyChoice::Mixed;
  int smoothing = 1;  // avg-pool kernel k (odd; 1 = none), reflect padding
  int decode_step = 1;  // s (clamped to [1, S])
  // Recompute on the observation queries too (g * W rows: the costly part on long heads).
  // The app leaves it out of the interactive update and asks obs_error() right after.
  bool recompute_obs = true;
  // Named methods on the RD curve view: entries separated by ';', each as `tierlab solve
  // --method` reads it ("kivi:2", "{scorer: snapkv}", "{quantizer: kivi, bits: 2}"); empty: none.
  std::string rd_methods;
};

// The RD view's methods field, split into its entries (';' between them, blanks trimmed).
std::vector<std::string> rd_method_texts(const std::string& field);
// Checks Settings::rd_methods as the RD view reads it (scenarios/methods/rd_methods.hpp
// parse_rd_methods on the settings' ladder and the view's grid): InputError naming the field
// ("methods on the RD curve") and the entry.
void check_rd_methods(const Settings&);
inline constexpr const char* kRdMethodsField = "methods on the RD curve";
// What the window's methods field holds at first: a uniform 2-bit KIVI policy and the SnapKV
// scorer keeping 1/8 of the tokens (2 bits per element, beside kivi2 and B = 2), over all the
// trace's observation queries (window 0: its default window of 32 exceeds a short capture's).
// Without `keep` a scorer is placed at every keep ratio B/16 of the grid (64 points per head).
inline constexpr const char* kDefaultRdMethods = "kivi:2; {scorer: snapkv, window: 0, keep: ratio:0.125}";

// One entry of the RD view's methods menu: kind ("key quantizer", "eviction scorer", "seed
// allocator", "uniform policy"), the registry name, the text it adds to the field and a line
// for its tooltip.
struct RdMethodChoice {
  std::string kind, name, text, summary;
};
// Every entry of the catalogue of methods (scenarios/methods/catalogue.hpp) but the solvers, in
// its order, each in the forms a scenario's `methods` list takes (seed allocators at B = 2, the
// uniform policies as kivi:2, kivi:4, token:4 and evict:0.25); each text is an entry the field
// accepts.
std::vector<RdMethodChoice> rd_method_choices();

// The points of one entry of the methods field (a scorer without `keep` gives one point per
// keep ratio B/16 of the grid's budgets), as rd_method_points computes them.
struct RdMethodGroup {
  std::string text;
  std::vector<RdMethodPoint> points;
};

// One point a hover can name: its data coordinates and the text to show.
struct HoverPoint {
  double x = 0, y = 0;
  std::string text;
};

// What a view shows: one or more figures (drawn stacked) and the numbers beside them.
struct ViewResult {
  std::vector<Figure> figures;
  std::vector<std::vector<HoverPoint>> hover;  // per figure
  std::string info;                            // several lines of numbers
  double seconds = 0;
};

// A view's result so far, delivered from the computing thread while a slow view fills in
// (the head map and the live interior advantage head by head, the live staleness step by
// step, the RD curve the head's curve before the model-wide one); the final result follows
// as the return value.
using PartialView = std::function<void(const ViewResult&)>;

// All the figures' series in one figure (for the CSV export of a view).
Figure merged_for_csv(const ViewResult&);

// The water-filling view's numbers (also in ViewResult::info).
struct WaterfillNumbers {
  double theta = 0, alpha = 0, beta = 0;   // water level, fitted noise model
  std::string option;                      // the family option chosen ("M", "Q:kivi4", "E")
  std::vector<std::uint8_t> tiers;         // ladder tier per prompt token
  Rate rate;                               // allocation_rate (convention 9 metadata), bits per key element
  double evicted_fraction = 0;
  double surrogate_abs = 0, surrogate_rel = 0;  // sum_t c_t(tau_t) (true costs), / mean ||o||^2
  ErrorMetrics obs;                        // recomputed, observation queries (NaN when not asked)
  ErrorMetrics step;                       // recomputed, decode step s (zeros when S = 0)
  int step_used = 0;                       // s actually used (0 when S = 0)
  double solve_ms = 0, materialize_ms = 0, recompute_ms = 0;  // materialize: the tier-local quantization
  int tiers_quantized = 0;                 // finite tiers quantized again by this call (the others were cached)
  // The discrete allocation's eviction cut beside the continuous water level theta: the
  // largest g_t(0) of an evicted token (NaN when none is), and where the tokens fall.
  double eviction_cut = std::numeric_limits<double>::quiet_NaN();
  int evicted = 0;              // tokens evicted by the allocation
  int below_level = 0;          // tokens with g_t(0) < theta (0 continuous bits; 0 when theta is not defined)
  int evicted_above_level = 0;  // evicted although g_t(0) >= theta (the continuous solution gives them bits)
  int kept_below_level = 0;     // kept although g_t(0) < theta
  int kept_below_cut = 0;       // kept although g_t(0) < the cut (the discrete cut is not a clean threshold)
};

struct HeadMapEntry {
  int layer = 0, kv_head = 0;
  double R2 = 0;  // R_h(2-bit tier), NaN when the ladder has no 2-bit tier
  bool dominated = false;
  char family = '-';
  std::string option;
  double objective = 0;
};

class Engine {
 public:
  explicit Engine(std::shared_ptr<const Source>, Backend backend = Backend::Cpu);
  ~Engine();
  const Source& source() const { return *source_; }
  std::string backend_description() const;

  // (a); numbers filled when non-null.
  ViewResult waterfill(const Settings&, WaterfillNumbers* numbers = nullptr, const std::atomic<bool>* cancel = nullptr);
  // (b); entries filled when non-null; `partial` receives the map so far, head by head.
  ViewResult head_map(const Settings&, std::vector<HeadMapEntry>* entries = nullptr, const Progress& = {},
                      const std::atomic<bool>* cancel = nullptr, const PartialView& partial = {});
  // (c); live, `partial` receives the figures so far (the selected head's curve, then head by head).
  ViewResult interior(const Settings&, const Progress& = {}, const std::atomic<bool>* cancel = nullptr,
                      const PartialView& partial = {});
  ViewResult dominance(const Settings&, const Progress& = {}, const std::atomic<bool>* cancel = nullptr);
  // (e); live, `partial` receives the curves so far, step by step.
  ViewResult staleness(const Settings&, const Progress& = {}, const std::atomic<bool>* cancel = nullptr,
                       const PartialView& partial = {});
  // (f); the curve is cached per (head, ladder, rate kind, solver, decode step). With more than
  // one head, `partial` receives the head's curve while the model-wide one is computed.
  ViewResult rd_curve(const Settings&, const Progress& = {}, const std::atomic<bool>* cancel = nullptr,
                      const PartialView& partial = {});

  // The recomputed error of the last water-filling allocation on the observation queries
  // (re-solves when `s` differs from the last call's settings).
  ErrorMetrics obs_error(const Settings& s, const std::atomic<bool>* cancel = nullptr);

  // How often a slow view delivers its partial result (PartialView), in ms (default 400; 0:
  // after every head).
  void set_partial_interval(int ms) { partial_ms_ = std::max(0, ms); }

  // Drops the caches (e.g. to measure a cold start).
  void clear_cache();
  // The per-head caches' limit in bytes (see Caching above) and what they hold now
  // (cache_bytes counts the work entry too).
  void set_cache_limit(std::size_t bytes);
  std::size_t cache_limit() const { return cache_limit_; }
  std::size_t cache_bytes();
  int cached_heads();  // heads whose data (keys, values, queries) is cached
  // (head, budget) interior advantages the live interior view keeps (a head or budget change
  // computes only those it has not seen).
  std::size_t cached_advantages();
  // Rate-distortion curves computed so far (the head's and the model-wide ones): a view served
  // from the curve cache leaves it unchanged; clear_cache does not reset it.
  int rd_curves_computed() const { return rd_curves_computed_; }

  // The allocation of the selected head that waterfill() would use (tests, benchmark).
  std::vector<std::uint8_t> allocate(const Settings&, std::string* option = nullptr);
  // Its keys as the water-filling view recomputes them (those of model/quantizers/quantizer.hpp
  // materialize: evicted rows zero), kept flags and rate.
  CompressedHead allocation_keys(const Settings&);

 private:
  // The least-recently-used caches, keyed by type (never a string parsed back): a head's data
  // by its index l * n_kv_heads + h, a ladder entry by (head index, ladder, rate kind).
  struct LadderKey {
    int head = 0;  // l * n_kv_heads + h
    std::string ladder;
    RateKind kind = kDefaultRateKind;
    auto operator<=>(const LadderKey&) const = default;
  };
  struct CacheKey {  // either a head's data (ladder empty) or a ladder entry
    int head = 0;
    std::optional<LadderKey> ladder;
    auto operator<=>(const CacheKey&) const = default;
  };
  struct LadderEntry;
  struct Work;
  struct Advantage;
  // head_interior of head (l, h) at B, cached (views/interior.cpp).
  const Advantage& advantage_(int l, int h, const RateLadder&, RateKind, double budget, const std::atomic<bool>* cancel);
  std::shared_ptr<const HeadData> head_(int l, int h);
  std::shared_ptr<LadderEntry> ladder_(int l, int h, const RateLadder&, RateKind, const std::atomic<bool>* cancel);
  const MatrixRMd& smoothed_(LadderEntry&, int kernel);
  HeadSolution solve_(const LadderEntry&, const MatrixRMd& cost, const Settings&, FamilyChoice, const RateLadder&,
                          std::string* option);
  // The work entry of head (l, h) on `ladder` holding allocation `tiers` (re-quantizes the
  // tiers whose token sets changed; returns how many), and its preparations.
  int apply_(int l, int h, const RateLadder& ladder, const std::vector<std::uint8_t>& tiers);
  ErrorMetrics step_error_(int step);  // the work entry's allocation at decode step s (S > 0)
  ErrorMetrics obs_error_(const std::atomic<bool>* cancel);  // ... on the observation queries
  std::shared_ptr<const RdCurve> rd_curve_(const Settings&, const Progress&, const std::atomic<bool>* cancel);
  std::shared_ptr<const RdCurve> model_rd_curve_(const Settings&, const Progress&, const std::atomic<bool>* cancel);
  std::string model_rd_key_(const Settings&) const;  // the model-wide curve's key in curves_
  std::string rd_key_(const Settings&) const;        // the head's curve's key in curves_
  // The named methods' points beside `curve` (the head's, or the model-wide one), cached by
  // curve and field; empty when the field is.
  std::shared_ptr<const std::vector<RdMethodGroup>> rd_methods_(const Settings&, const RdCurve& curve, bool model,
                                                                const std::string& curve_key,
                                                                const std::atomic<bool>* cancel);
  std::shared_ptr<const std::vector<RdMethodGroup>> methods_or_note(const Settings&, const RdCurve& curve, bool model,
                                                                    const std::string& curve_key,
                                                                    const std::atomic<bool>* cancel,
                                                                    std::string& note);
  RdCurveOptions rd_options_(const Settings&, const char* grid, Scope scope) const;
  HeadCosts rd_costs_(int l, int h, const RdCurveOptions&, const std::atomic<bool>* cancel);
  void touch_(const CacheKey& key);
  void trim_();  // drops least recently used entries while over the limit
  // The water-filling view's steps (gui/views/waterfill.cpp): the continuous water-filling,
  // the discrete allocation and its recomputation, the figures, the numbers as text.
  static void waterfill_continuous_(LadderEntry&, const Settings&, int T, WaterfillNumbers& num,
                                    std::vector<double>& g0, std::vector<double>& cbits);
  HeadSolution waterfill_allocation_(LadderEntry&, const HeadData&, const RateLadder&, const Settings&,
                                     WaterfillNumbers& num, const std::atomic<bool>* cancel);
  static ViewResult waterfill_figures_(const LadderEntry&, const RateLadder&, const Settings&,
                                       const std::string& head, int T, const std::vector<double>& g0,
                                       const std::vector<double>& cbits, const HeadSolution&,
                                       const WaterfillNumbers&);
  static std::string waterfill_info_(const LadderEntry&, const HeadData&, const RateLadder&, const Settings&,
                                     const std::string& head, const HeadSolution&, const WaterfillNumbers&);

  std::shared_ptr<const Source> source_;
  std::unique_ptr<Recomputer> backend_;
  std::mutex mu_;
  // The least-recently-used caches (LadderKey, CacheKey above).
  std::map<int, std::shared_ptr<const HeadData>> heads_;
  std::map<LadderKey, std::shared_ptr<LadderEntry>> ladders_;
  std::map<CacheKey, std::uint64_t> used_;  // cache key -> last use
  std::uint64_t clock_ = 0;
  std::size_t cache_limit_ = std::size_t(1) << 30;
  int partial_ms_ = 400;
  std::unique_ptr<Work> work_;
  std::map<std::string, std::shared_ptr<const RdCurve>> curves_;  // rd_curve_: (head, ladder, kind, solver) -> curve
  int rd_curves_computed_ = 0;  // rd_curve_ and model_rd_curve_ misses of curves_
  std::map<std::string, std::shared_ptr<const std::vector<RdMethodGroup>>> rd_points_;  // rd_methods_
  std::map<std::string, std::shared_ptr<const Advantage>> advantages_;  // advantage_
  struct Last;
  std::shared_ptr<Last> last_;  // the last water-filling allocation (for obs_error)
};

}  // namespace tierlab::explorer
