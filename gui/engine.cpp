// tierlab-explorer's engine (engine.hpp): the per-head caches, their trimming by bytes,
// the water-filling view's work entry (the allocation's keys tier by tier, its errors) and
// the per-head work the views share (solve, allocate). The views are in gui/views/.
#include "gui/engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "gui/engine_detail.hpp"
#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "solvers/smoothing.hpp"

namespace tierlab::explorer {

using namespace detail;

namespace {

// `visible`: the rows' causal limits (empty: every row sees every token).
ErrorMetrics recompute_one(Recomputer& backend, const MatrixRM& queries, const MatrixRM& exact, const MatrixRM& values,
                           const MatrixRM& variant, const std::vector<std::uint8_t>& sel,
                           std::vector<int> visible = {}) {
  std::vector<HeadBatch> batches(1);
  batches[0].problem.queries = &queries;
  batches[0].problem.visible = std::move(visible);
  batches[0].problem.exact_keys = &exact;
  batches[0].problem.values = &values;
  batches[0].problem.variants = {&variant};
  batches[0].selections = {sel};
  return recompute(backend, batches).at(0).at(0);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Engine caches

namespace {


bool finite_tier(const Tier& t) { return t.kind != QuantizerKind::Evict && t.kind != QuantizerKind::Exact; }

std::size_t bytes_of(const MatrixRM& m) { return static_cast<std::size_t>(m.size()) * sizeof(float); }
std::size_t bytes_of(const MatrixRMd& m) { return static_cast<std::size_t>(m.size()) * sizeof(double); }
std::size_t bytes_of(const VectorD& v) { return static_cast<std::size_t>(v.size()) * sizeof(double); }

std::size_t bytes_of(const HeadData& h) {
  return bytes_of(h.keys) + bytes_of(h.keys_pre_rope) + bytes_of(h.values) + bytes_of(h.obs_queries) +
         bytes_of(h.decode_queries) + bytes_of(h.decode_keys) + bytes_of(h.decode_values) + sizeof(HeadData);
}


}  // namespace

Engine::Engine(std::shared_ptr<const Source> src, Backend backend) : source_(std::move(src)) {
  std::string note;
  backend_ = make_recomputer(backend, &note);
  if (!backend_) throw InputError("explorer: backend unavailable: " + note);
  if (const char* mb = std::getenv("TIERLAB_EXPLORER_CACHE_MB")) {
    const double v = read_real(mb).value_or(-1.0);  // model/base/numbers.hpp: the whole value, finite
    if (!(v >= 0))
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
  curves_.clear();
  rd_points_.clear();
  advantages_.clear();
}

void Engine::set_cache_limit(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_limit_ = bytes;
  trim_();
}

namespace {

std::size_t entry_bytes(const SurrogateCosts& c, const std::map<int, MatrixRMd>& smoothed, std::size_t order) {
  std::size_t b = bytes_of(c.cost) + bytes_of(c.noise) + bytes_of(c.weights.a) + bytes_of(c.weights.evict_cost) +
                  bytes_of(c.weights.attention) + order * sizeof(int);
  for (const auto& [k, m] : smoothed) b += bytes_of(m);
  return b;
}

}  // namespace

std::size_t Engine::cache_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t b = 0;
  for (const auto& [k, h] : heads_) b += bytes_of(*h);
  for (const auto& [k, e] : ladders_) b += entry_bytes(e->costs, e->smoothed, e->order.size());
  if (work_) {
    b += bytes_of(work_->keys) + bytes_of(work_->exact) + bytes_of(work_->values) + bytes_of(work_->queries) +
         work_->row_tier.size() * sizeof(int);
    for (std::size_t j = 0; j < work_->block.size(); ++j)
      b += bytes_of(work_->block[j]) + work_->tokens[j].size() * sizeof(int);
    // The work entry's head data, when the cache no longer holds it.
    if (!heads_.count(work_->head_index)) b += bytes_of(*work_->head);
  }
  return b;
}

int Engine::cached_heads() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(heads_.size());
}

void Engine::touch_(const CacheKey& key) { used_[key] = ++clock_; }

// Least recently used first: the heads' data, then the (head, ladder) entries, never those
// of the head touched last (in use).
void Engine::trim_() {
  int keep = -1;
  std::uint64_t newest_t = 0;
  for (const auto& [k, t] : used_)
    if (t >= newest_t) keep = k.head, newest_t = t;
  std::size_t total = 0;
  std::vector<std::pair<std::uint64_t, int>> heads;
  std::vector<std::pair<std::uint64_t, LadderKey>> entries;
  for (const auto& [idx, h] : heads_) {
    total += bytes_of(*h);
    if (idx != keep) heads.push_back({used_[CacheKey{idx, {}}], idx});
  }
  for (const auto& [k, e] : ladders_) {
    total += entry_bytes(e->costs, e->smoothed, e->order.size());
    if (k.head != keep) entries.push_back({used_[CacheKey{k.head, k}], k});
  }
  if (total <= cache_limit_) return;
  std::sort(heads.begin(), heads.end());
  std::sort(entries.begin(), entries.end());
  for (const auto& [t, idx] : heads) {
    if (total <= cache_limit_) return;
    total -= bytes_of(*heads_.at(idx));
    heads_.erase(idx);
    used_.erase(CacheKey{idx, {}});
  }
  for (const auto& [t, k] : entries) {
    if (total <= cache_limit_) return;
    const auto& e = ladders_.at(k);
    total -= entry_bytes(e->costs, e->smoothed, e->order.size());
    ladders_.erase(k);
    used_.erase(CacheKey{k.head, k});
  }
}

std::shared_ptr<const HeadData> Engine::head_(int l, int h) {
  const int idx = l * source_->meta().n_kv_heads + h;
  touch_(CacheKey{idx, {}});
  auto it = heads_.find(idx);
  if (it != heads_.end()) return it->second;
  if (work_ && work_->head_index == idx) return heads_[idx] = work_->head;
  auto p = std::make_shared<const HeadData>(source_->head(l, h));
  heads_[idx] = p;
  trim_();
  return p;
}

std::shared_ptr<Engine::LadderEntry> Engine::ladder_(int l, int h, const RateLadder& ladder, RateKind kind,
                                                     const std::atomic<bool>* cancel) {
  const LadderKey key{l * source_->meta().n_kv_heads + h, ladder.name(), kind};
  auto it = ladders_.find(key);
  if (it != ladders_.end()) {
    touch_(CacheKey{key.head, key});
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
  e->costs = surrogate_costs(hd, rope, observation_queries(hd), ladder);
  e->rates = ladder_rates(hd, rope, ladder, kind);
  const VectorD& a = e->costs.weights.a;
  e->order.resize(static_cast<std::size_t>(a.size()));
  std::iota(e->order.begin(), e->order.end(), 0);
  std::stable_sort(e->order.begin(), e->order.end(), [&](int x, int y) { return a[x] > a[y]; });
  e->fit = fit_head_noise(e->costs, e->rates);
  e->dom = tierlab::dominance(e->costs, kind);
  ladders_[key] = e;
  touch_(CacheKey{key.head, key});
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
  if (!work_ || work_->head_index != idx || work_->ladder_name != ladder.name()) {
    work_.reset();  // one work entry at a time
    auto w = std::make_unique<Work>();
    w->head_index = idx;
    w->ladder_name = ladder.name();
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
  // docs/model.md convention 9, as materialize: the tokens of a tier are quantized as one block
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
  if (w.step != step) {
    w.exact.resize(T + step, d);
    w.exact.topRows(T) = hd.keys;
    w.exact.bottomRows(step) = hd.decode_keys.topRows(step);
    w.values.resize(T + step, d);
    w.values.topRows(T) = hd.values;
    w.values.bottomRows(step) = hd.decode_values.topRows(step);
    w.queries = decode_query_set(hd).step(step);
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
  const std::vector<int> visible = observation_queries(hd).visible;  // causal (docs/model.md section 12, convention 4)
  // 64 rows (the CPU backend's row tile) per 32k tokens: ~0.1 s per chunk on 2 cores.
  const int chunk = 64 * std::max(1, (1 << 21) / (64 * std::max(1, w.T)));
  if (chunk >= nq) return recompute_one(*backend_, hd.obs_queries, hd.keys, hd.values, keys, sel, visible);
  ErrorMetrics m;
  for (int r0 = 0; r0 < nq; r0 += chunk) {
    check(cancel);
    const int n = std::min(chunk, nq - r0);
    const MatrixRM q = hd.obs_queries.middleRows(r0, n);
    const ErrorMetrics c = recompute_one(*backend_, q, hd.keys, hd.values, keys, sel,
                                         std::vector<int>(visible.begin() + r0, visible.begin() + r0 + n));
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
  // At equal memory, as every front door solves one head (scenarios/pipeline/head.hpp
  // solve_head_at_equal_memory): an allocation whose measured rate exceeds B (a tier-local
  // partial group's metadata) is re-solved at a smaller B'. The objective is the one on the
  // true costs (smoothing decides, the true costs score).
  const std::shared_ptr<const HeadData> head = head_(e.layer, e.kv_head);
  HeadSolution hr = solve_head_at_equal_memory(*head, source_->meta().rope, cost, e.costs.weights.a, e.rates, ladder,
                                               s.budget, e.rate_kind, choice, fo,
                                               DistortionModel{e.fit.alpha, e.fit.beta}, &e.costs.cost)
                        .solution;
  if (option) *option = hr.option;
  return hr;
}

std::vector<std::uint8_t> Engine::allocate(const Settings& s, std::string* option) {
  std::lock_guard<std::mutex> lock(mu_);
  const RateLadder ladder = RateLadder::parse(s.ladder);
  auto e = ladder_(s.layer, s.kv_head, ladder, s.rate_kind, nullptr);
  return solve_(*e, smoothed_(*e, s.smoothing), s, s.family, ladder, option).tiers;
}

Engine::~Engine() = default;

std::size_t Engine::cached_advantages() {
  std::lock_guard<std::mutex> lock(mu_);
  return advantages_.size();
}

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
