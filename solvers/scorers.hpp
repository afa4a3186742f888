#pragma once
// Eviction scorers: the published token-eviction methods as policies of the eviction
// family E (tiers {evict, exact}: RateLadder::parse("evict,exact"), evict = 0, exact = 1).
// Sources and the variants public implementations disagree on: docs/methods.md,
// section 3, "Eviction scorers", which also states the facts each follows.
//
// Notation (one KV head of one layer, HeadData): keys k_t, values v_t, t = 0..T-1, head
// dim d; observation queries q_{j,i} (query head j = 0..g-1 of the GQA group, window
// position i = 0..W_trace-1, row j * W_trace + i, prompt position T - W_trace + i). A
// scorer that reads a window uses its last W rows per query head (W <= W_trace).
// Logits z_{j,i,t} = q_{j,i}.k_t / sqrt(d); attention p_{j,i,t} = softmax_t(z) over the
// keys the query may see: with causal = true (default, as the models and SnapKV/kvpress
// compute it) query i sees t <= T - W_trace + i; with causal = false every key.
// Outputs o_{j,i} = sum_t p_{j,i,t} v_t.
//
// Per-query-head scores x_{j,t} are reduced over the group by the GQA aggregate
// (gqa = mean (default) | max | sum):  x_t = agg_j x_{j,t}.
//
// Scores (larger = keep):
//   streaming   none: rank by position (the most recent win); sinks = 4 forced
//   h2o         x_{j,t} = sum_i p_{j,i,t} over every query so far (prefill: the W window
//               queries; decode: H2OCache adds each step's query); keep the heavy hitters
//               plus a recent window of round(recent_fraction * K) tokens (default 0.5)
//   snapkv      x_{j,t} = R_i p_{j,i,t} over the last W window queries, R = sum (original,
//               default) | mean (kvpress), on the prefix t < T - W only (the window itself
//               is always kept); then pooled over positions with kernel k (default 5),
//               padding k//2: avg with count_include_pad = true (zero padding counted in
//               the average at both edges; PyTorch's default and the original's, default)
//               or false (the window shrinks at the edges), or max (padding never wins).
//               group_order = after (default, kvpress: pool each query head, then
//               aggregate) | before (AdaKV's GQA code: aggregate, then pool). Avg pooling is
//               linear and commutes with the mean; max pooling does not.
//   tova        last window query's attention averaged over all query heads of the LAYER
//               (every KV head's g heads): x_t = mean_{h,j} p_{h,j,W-1,t}; one shared
//               top-K per layer applied to every head (TovaCache re-scores each step)
//   adakv       SnapKV's score per head; budget: see "Budget rules" (floor fraction 0.2)
//   pyramidkv   SnapKV's score per head; layer budgets decreasing linearly with depth
//   dropkv      x_{j,t} = sum_i (p/(1-p))^2 ||v_t - o_{j,i}||^2 over the window (the exact
//               squared output change of removing t alone), avg-pooled kernel 11
//               (count_include_pad = true); absolute squared-output units, comparable
//               across heads
//   obcache     value score  x_{j,t} = sum_i p_{j,i,t}^2 ||v_t||^2
//               key score    x_{j,t} = sum_i (p_{j,i,t} z_{j,i,t})^2 ||v_t - o_{j,i}||^2
//               score = value | key | joint (= value + key, default); optional pooling
//               (kernel 1 = none, default); sinks 4 + recent W forced
//   expected    Expected Attention: mu_j, Sigma_j = mean and (biased, 1/W) covariance of
//               the W window queries of query head j (POST-RoPE: the trace has no pre-RoPE
//               queries, so RoPE is not averaged over future positions as in kvpress);
//               e_{j,t} = exp(mu_j.k_t / sqrt(d) + k_t^T Sigma_j k_t / (2 d)) normalised over
//               t (sum_t = 1), x_{j,t} = e_{j,t} ||v_t|| (use_value_norm = true); sinks 4
//   keydiff     x_t = -cos(k_t, kbar), kbar = mean_u k_u / ||k_u|| (no attention)
//   laprox      the exact formula is not public; approximation used: the single-removal
//               output cost c_t(0) of model/surrogate.hpp (mean over all g W window
//               queries, causal as every query set) divided by the layer's output norm
//               mean_h mean_q ||o_q||^2, x_t = c_t(0) / N_l; comparable across layers
//               and heads; one model-wide top-K
//
// Budgets. A Budget is a keep RATIO rho in [0, 1] or a token COUNT n >= 0 per head:
//   K(T) = round_half_up(rho T)   or   K(T) = min(n, T)
// (pitfall: a ratio is per head of its own T; a count larger than T keeps everything).
// K counts the forced tokens (sinks, window, recent) too: as in SnapKV's
// max_capacity_prompt and kvpress's compression ratio.
//
// Budget rules (selection):
//   forced     the first `sinks` tokens and the last `recent` tokens (snapkv family: the W
//              window) are kept first; if K is smaller, sinks first, then the most recent
//   head       per head: forced + the top (K - forced) scores (ties to the earlier token)
//   layer      the heads of a layer pool their free slots: top sum_h (K_h - forced_h)
//              scores over all heads (Ada-KV without floor; needs comparable units)
//   model      the same over every head of every layer (LaProx default)
//   adakv      per layer, with F_h = K_h - forced_h, floor fraction a: head h first gets
//              floor(a F_h); the rest, sum_h F_h - sum_h floor(a F_h), goes to a layer-wide
//              top over all heads' remaining scores; head budget = floor + share won
//   pyramidkv  per layer l of L (PyramidKV repo): F = K - W, m = F / beta (integer
//              division, beta = 20), M = 2 F - m, s = (M - m) / (L - 1),
//              F_l = M - l s (L = 1: F_l = F); per head: window + top F_l
//   tova       per layer: forced + one shared top over the layer score
//
// Registry. Each scorer is one registry entry (ScorerEntry), declared once in the source file
// that holds its score and its budget rule (scorers_window.cpp: snapkv, adakv, pyramidkv;
// scorers_saliency.cpp: dropkv, obcache, expected; scorers_position.cpp: streaming, keydiff,
// laprox; scorers_decode.cpp: h2o, tova and their decode caches): its name, summary, source,
// the parameters it takes with their defaults, and a factory that reads them through a
// ScorerParamReader. make_scorer, `tierlab methods`, scenario files and docs/methods.md's
// test read the list (scorer_registry()).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "solvers/families.hpp"
#include "model/base/method_info.hpp"
#include "solvers/smoothing.hpp"

namespace tierlab {


// K(T) as in the header comment. parse: "ratio:0.25" | "count:64".
struct Budget {
  enum class Kind { Ratio, Count } kind = Kind::Ratio;
  double value = 1.0;
  static Budget ratio(double rho);
  static Budget count(std::int64_t n);
  static Budget parse(std::string_view text);
  int keep(int tokens) const;
  std::string name() const;
};

enum class GqaAggregate { Mean, Max, Sum };
enum class WindowReduce { Sum, Mean };
enum class GroupOrder { AfterPool, BeforePool };
// The top-k selection's scope (parameter "selection": head | layer | model) is a Scope
// (families.hpp): the heads whose tokens compete for the kept slots.

// The settings every scorer reads (parameters of the same names). A scorer that does not take
// one keeps the value its factory leaves (the defaults below unless it says otherwise).
struct ScorerSettings {
  GqaAggregate gqa = GqaAggregate::Mean;
  int window = 0;  // W window queries read (0 = all of the trace's; snapkv family: kept)
  bool causal = true;
  int sinks = 0;   // first tokens forced
  int recent = 0;  // last tokens forced (the snapkv family forces its window, h2o its share)
  Scope selection = Scope::Head;
  int group_size = 1;  // g query heads per KV head (TraceMeta::group_size)
};

class FreeSlots;  // the budget rule's view of the free slots (solvers/scorer_parts.hpp)

// One scorer with its own settings (built by its registry entry's factory). The defaults of
// the virtual functions are the common rules of the header comment.
class EvictionScorer {
 public:
  virtual ~EvictionScorer() = default;
  // x_t of one head (T entries, larger = keep; +inf for tokens the rule does not score).
  virtual VectorD head_scores(const ScorerSettings& s, const HeadData& h) const = 0;
  // The layer's scores after every head's head_scores (tova: shared; laprox: normalised).
  virtual void finish_layer(const ScorerSettings&, const std::vector<HeadData>&, std::vector<VectorD>&) const {}
  // The last tokens forced on a head of budget K (default: the parameter recent).
  virtual int forced_recent(const ScorerSettings& s, const HeadData&, int /*K*/) const { return s.recent; }
  // The budget rule: which free slots each head gets (default: top-k over s.selection).
  virtual void select(const ScorerSettings& s, FreeSlots& slots) const;
};

class ScorerParamReader;
using ScorerFactory = std::shared_ptr<const EvictionScorer> (*)(ScorerParamReader&, ScorerSettings&);

// One registered scorer, declared once: info (name, kind "eviction scorer", summary, source,
// the parameters it takes with their declared defaults and help) and its factory, which reads
// every declared parameter through the reader (common ones into the ScorerSettings, its own
// into the scorer) and throws InputError for bad values.
using ScorerEntry = MethodEntry<ScorerFactory>;

// One built scorer: its common settings, the scorer and the effective value of each
// parameter it takes. Built by make_scorer; the common settings may be read (and changed:
// validate() checks them again before use).
struct ScorerConfig : ScorerSettings {
  std::shared_ptr<const EvictionScorer> scorer;  // null in a default-constructed config
  const ScorerEntry* entry = nullptr;            // its registry entry (static)
  MethodParams effective;                        // the scorer's own parameters' values, as text
  std::string method() const;                    // the registry name ("" when not built)
  void validate() const;
  // "name:p=v,..." over the parameters it takes, in declared order.
  std::string name() const;
  // The effective value of parameter p as text; InputError when the scorer does not take p.
  std::string param(const std::string& p) const;
};


// The entries, one per scorer, each defined beside its score (see "Registry" above) and
// declared and listed by the registry (scorers.cpp): a new scorer is its own file and one line
// there (docs/extending.md).

// Registry: "streaming", "h2o", "snapkv", "tova", "adakv", "pyramidkv", "dropkv",
// "obcache", "expected", "keydiff", "laprox". Unknown names or parameters, and bad
// values, throw InputError listing the valid ones.
const std::vector<ScorerEntry>& scorer_registry();
const ScorerEntry& scorer_entry(std::string_view name);  // InputError listing the names
const std::vector<MethodInfo>& eviction_scorer_methods();
ScorerConfig make_scorer(std::string_view name, const MethodParams& params = {});
// make_scorer for a trace whose KV heads serve `group_size` query heads each: the scorers that
// aggregate over a GQA group get group_size unless params give it; the others are not handed a
// parameter they do not take. `tierlab eval --scorer` and scenario files both build this way.
ScorerConfig make_scorer_for_trace(std::string_view name, const MethodParams& params, int group_size);
// The ladder every scorer allocates on: {evict, exact}.
RateLadder eviction_ladder();

// A declared parameter shared by several scorers (window, gqa, causal, sinks, recent,
// selection, group_size, reduce, pool, kernel, count_include_pad, group_order) with its
// common help text and this scorer's default.
MethodParam shared_scorer_param(const std::string& name, const std::string& default_value);

// Reads one scorer's parameters: a parameter not given takes its declared default. Values
// are parsed and their errors worded "method 'NAME': parameter P = 'V' is not ...";
// the effective value of each parameter read is kept as text for ScorerConfig::name.
// The one reader (MethodParamReader, model/base/method_info.hpp) over a scorer's entry, its
// messages naming "method 'NAME'", with the scorers' enumerated parameters and their common
// settings.
class ScorerParamReader : public MethodParamReader {
 public:
  ScorerParamReader(const ScorerEntry& entry, const MethodParams& params)
      : MethodParamReader("method '" + entry.info.name + "'", entry.info.params, params), method_(entry.info.name) {}
  GqaAggregate get_gqa(const std::string& p);
  WindowReduce get_reduce(const std::string& p);
  GroupOrder get_group_order(const std::string& p);
  PoolKind get_pool(const std::string& p);
  Scope get_scope(const std::string& p);
  // Reads the common parameters this scorer declares into s.
  void read_settings(ScorerSettings& s);
  const std::string& method() const { return method_; }

 private:
  std::string method_;
};

// Per-token scores of one head (T entries; for tova: this head's share, for the layer
// score use layer_scores). Tokens the rule does not score (snapkv window) get +inf.
VectorD head_scores(const ScorerConfig& cfg, const HeadData& head);
// Scores of every head of one layer (tova: the same shared vector for every head; laprox
// normalised by the layer's output norm).
std::vector<VectorD> layer_scores(const ScorerConfig& cfg, const std::vector<HeadData>& layer);

using HeadKeep = std::vector<std::uint8_t>;  // per token: 0 evict, 1 exact

struct EvictionPlan {
  std::string method;
  std::vector<std::vector<VectorD>> scores;  // [layer][head]
  std::vector<std::vector<HeadKeep>> keep;   // [layer][head]
  std::vector<std::vector<int>> head_budget; // tokens kept, [layer][head]
  std::int64_t kept = 0, tokens = 0;
};

// The whole rule: scores then the budget rule, for the heads given ([layer][head]).
EvictionPlan plan_eviction(const ScorerConfig& cfg, const std::vector<std::vector<HeadData>>& model,
                           const Budget& budget);

// H2O during decode. Construct from the prompt (prefill scores, then eviction to K
// tokens); step() appends the token of one decode step, adds the attention of that
// step's g queries (over the kept tokens, including the new one; group aggregate) to
// the accumulated scores, then evicts down to K (recent window + heavy hitters).
class H2OCache {
 public:
  H2OCache(const ScorerConfig& cfg, const HeadData& prompt, const Budget& budget);
  void step(const MatrixRM& queries /* g x d */, const VectorF& key, const VectorF& value);
  const std::vector<double>& scores() const { return acc_; }  // per token seen so far
  const std::vector<std::uint8_t>& alive() const { return alive_; }
  int capacity() const { return capacity_; }

 private:
  void evict();
  ScorerSettings cfg_;
  double recent_fraction_ = 0.5;
  MatrixRMd keys_, values_;
  std::vector<double> acc_;
  std::vector<std::uint8_t> alive_;
  int capacity_ = 0;
};

// TOVA during decode for one layer: every step re-scores the kept tokens by the new
// queries' attention averaged over all the layer's query heads and drops the lowest
// until K remain (one shared keep-set per layer).
class TovaCache {
 public:
  TovaCache(const ScorerConfig& cfg, const std::vector<HeadData>& layer, const Budget& budget);
  // queries[h]: g x d for KV head h; keys[h], values[h]: the new token's key and value.
  void step(const std::vector<MatrixRM>& queries, const std::vector<VectorF>& keys,
            const std::vector<VectorF>& values);
  const std::vector<std::uint8_t>& alive() const { return alive_; }
  const std::vector<double>& last_scores() const { return last_; }

 private:
  void evict();
  ScorerSettings cfg_;
  std::vector<MatrixRMd> keys_, values_;
  std::vector<std::uint8_t> alive_;
  std::vector<double> last_;
  int capacity_ = 0;
};

}  // namespace tierlab
