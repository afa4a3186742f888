// The operational rate-distortion curve (rd_curve.hpp).
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/pipeline/rd_curve.hpp"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include "gpu/cpu_recompute.hpp"
#include "model/base/clock.hpp"
#include "model/dominance.hpp"
#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "model/base/text.hpp"
#include "solvers/exact_parametric.hpp"

namespace tierlab {

namespace {

constexpr auto kRdQueries = enum_table<RdQueries>(
    "query set", {{RdQueries::Decode, "decode"}, {RdQueries::Obs, "obs"}, {RdQueries::Step, "step"}});


// The exact part of one head's recomputation on one query set, prepared once; each
// allocation then sets its key variant and evaluates its selection.
class PreparedQuerySet {
 public:
  // step: the decode step s of RdQueries::Step.
  PreparedQuerySet(const HeadData& head, RdQueries which, int step) : T_(static_cast<int>(head.keys.rows())) {
    HeadProblem hp;
    if (which == RdQueries::Obs) {
      hp.queries = &head.obs_queries;
      hp.exact_keys = &head.keys;
      hp.values = &head.values;
      hp.visible = observation_queries(head).visible;
    } else if (which == RdQueries::Step) {  // step s's g rows over the T + s tokens they see
      const int d = static_cast<int>(head.keys.cols());
      exact_.resize(T_ + step, d);
      exact_.topRows(T_) = head.keys;
      exact_.bottomRows(step) = head.decode_keys.topRows(step);
      values_.resize(T_ + step, d);
      values_.topRows(T_) = head.values;
      values_.bottomRows(step) = head.decode_values.topRows(step);
      queries_ = decode_query_set(head).step(step);
      hp.queries = &queries_;
      hp.exact_keys = &exact_;
      hp.values = &values_;
      hp.visible.assign(static_cast<std::size_t>(queries_.rows()), T_ + step);
    } else {  // as evaluate_decode_steps: T + S tokens, step s sees the first T + s
      const int S = static_cast<int>(head.decode_keys.rows()), d = static_cast<int>(head.keys.cols());
      exact_.resize(T_ + S, d);
      exact_.topRows(T_) = head.keys;
      exact_.bottomRows(S) = head.decode_keys;
      values_.resize(T_ + S, d);
      values_.topRows(T_) = head.values;
      values_.bottomRows(S) = head.decode_values;
      hp.queries = &head.decode_queries;
      hp.exact_keys = &exact_;
      hp.values = &values_;
      hp.visible = decode_query_set(head).visible();
    }
    base_ = cpu::prepare_head(hp, 0, static_cast<int>(hp.queries->rows()));
  }

  // The query set's problem (queries, exact keys, values, causal limits).
  const HeadProblem& problem() const { return base_.problem; }

  PreparedQuerySet(const PreparedQuerySet&) = delete;
  PreparedQuerySet& operator=(const PreparedQuerySet&) = delete;

  // One thread's evaluator: its own copy of the prepared head (set_variants writes the
  // variant part) and scratch.
  class Evaluator {
   public:
    explicit Evaluator(const PreparedQuerySet& qs)
        : T_(qs.T_), ph_(qs.base_), variant_(*qs.base_.problem.exact_keys),
          differ_(static_cast<std::size_t>(variant_.rows()), 0) {}
    // The errors of one materialised allocation of the prompt's tokens: `tiers` its ladder
    // tiers, `exact_tier` the ladder's exact index. Only the rows of kept tokens at a finite
    // tier differ from the exact keys (evicted rows are never read); the variant keeps the
    // exact keys elsewhere, so only the rows the last allocation changed are written back.
    ErrorMetrics evaluate(const MaterializedKeys& mk, const std::vector<std::uint8_t>& tiers, int exact_tier) {
      const MatrixRM& exact = *ph_.problem.exact_keys;
      for (const int t : dirty_) variant_.row(t) = exact.row(t), differ_[static_cast<std::size_t>(t)] = 0;
      dirty_.clear();
      Selection sel(static_cast<std::size_t>(exact.rows()), 1);
      for (int t = 0; t < T_; ++t) {
        const bool kept = mk.kept[static_cast<std::size_t>(t)] != 0;
        sel[static_cast<std::size_t>(t)] = kept ? 1 : 0;
        if (kept && tiers[static_cast<std::size_t>(t)] != exact_tier) {
          variant_.row(t) = mk.keys.row(t);
          differ_[static_cast<std::size_t>(t)] = 1;
          dirty_.push_back(t);
        }
      }
      cpu::set_variants(ph_, {&variant_}, &differ_);
      const ErrorMetrics m = cpu::evaluate_selection(ph_, sel, ws_);
      if (const std::string bad = non_finite_metric(m); !bad.empty())  // as the recompute() seam checks
        throw RecomputeError("the rate-distortion curve's recomputation gave " + bad +
                             " within the magnitude range of docs/model.md section 12, convention 10; this is a "
                             "defect: please report it with the trace.");
      return m;
    }

   private:
    int T_ = 0;
    cpu::PreparedHead ph_;
    MatrixRM variant_;                 // exact keys but at the dirty rows
    std::vector<std::uint8_t> differ_;  // per token of the problem: variant_'s row differs
    std::vector<int> dirty_;
    cpu::Workspace ws_;
  };

 private:
  int T_ = 0;
  MatrixRM exact_, values_;  // decode: the T + S tokens (step: T + s)
  MatrixRM queries_;         // step: its g rows
  cpu::PreparedHead base_;   // the exact part (no variants)
};

double sum_row(const MatrixRMd& cost, const std::vector<std::uint8_t>& tiers) {
  long double s = 0;
  for (std::size_t t = 0; t < tiers.size(); ++t) s += cost(tiers[t], static_cast<Eigen::Index>(t));
  return static_cast<double>(s);
}

// Is y above the surrogate hull at x? The surrogate is double precision: 1e-9 relative.
bool above(const RdHull& h, double x, double y) {
  const double v = h.at(x);
  if (std::isnan(v)) return false;
  return y > v + 1e-9 * std::max(std::fabs(v), std::fabs(y)) + 1e-15;
}

RdHull hull_of(const std::vector<double>& x, const std::vector<double>& y, const std::vector<std::string>& label) {
  RdHull h;
  for (const int i : lower_hull(x, y)) {
    h.x.push_back(x[static_cast<std::size_t>(i)]);
    h.y.push_back(y[static_cast<std::size_t>(i)]);
    h.label.push_back(label[static_cast<std::size_t>(i)]);
  }
  return h;
}

// "Q", "E", "M", "R" (routed): the point labels of the hull.
std::string family_code(FamilyChoice f) {
  switch (f) {
    case FamilyChoice::Quantize: return "Q";
    case FamilyChoice::Evict: return "E";
    case FamilyChoice::Mixed: return "M";
    case FamilyChoice::Routed: return "R";
  }
  return "?";
}

// The errors of one head's distinct allocations (3. below); a worker's exception is rethrown.
std::vector<ErrorMetrics> recompute_allocations(const HeadData& head, const RopeParams& rope, const RateLadder& ladder,
                                                const PreparedQuerySet& qs,
                                                const std::vector<const std::vector<std::uint8_t>*>& distinct,
                                                const std::atomic<bool>* cancel) {
  const int max_threads = std::max(1, omp_get_max_threads());
  const int nd = static_cast<int>(distinct.size());
  const int nthreads = std::min(max_threads, std::max(nd, 1));
  std::vector<std::unique_ptr<PreparedQuerySet::Evaluator>> evaluators(static_cast<std::size_t>(nthreads));
  std::vector<ErrorMetrics> errors(static_cast<std::size_t>(nd));
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  // The token-local tiers (token<b>) quantized once for all of the head's allocations.
  const TierInput in = TierInput::of_head(head, rope);
  const TierRowCache rows(in, ladder);
  // Allocations in parallel, one evaluator per thread (inside, materialize and set_variants
  // run on their thread).
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
  for (int k = 0; k < nd; ++k) {
    if (failed.load() || (cancel && cancel->load())) continue;
    try {
      auto& ev = evaluators[static_cast<std::size_t>(omp_get_thread_num())];
      if (!ev) ev = std::make_unique<PreparedQuerySet::Evaluator>(qs);
      const std::vector<std::uint8_t>& t = *distinct[static_cast<std::size_t>(k)];
      errors[static_cast<std::size_t>(k)] = ev->evaluate(materialize(in, ladder, t, rows), t, ladder.exact_index());
    } catch (...) {
#pragma omp critical(rd_curve_failure)
      if (!failure) failure = std::current_exception();
      failed = true;
    }
  }
  if (failure) std::rethrow_exception(failure);
  return errors;
}

// 4. The hulls of all operating points, and the ladder points above them.
void add_hulls(RdCurve& out, bool recompute) {
  std::vector<double> x, y, ys;
  std::vector<std::string> label;
  for (const RdPoint& p : out.points) {
    if (!p.feasible) continue;
    x.push_back(p.x);
    y.push_back(p.error.rel_error);
    ys.push_back(p.surrogate);
    label.push_back(family_code(p.family) + " B=" + format_number(p.budget));
  }
  for (const RdLadderPoint& l : out.ladder) {
    x.push_back(l.x);
    y.push_back(l.error);
    ys.push_back(l.surrogate);
    label.push_back("tier " + l.tier);
  }
  if (recompute) out.hull = hull_of(x, y, label);
  out.surrogate_hull = hull_of(x, ys, label);
  for (RdLadderPoint& l : out.ladder) {
    l.above_hull = recompute && above_recomputed_hull(out.hull, l.x, l.error);
    l.above_surrogate_hull = above(out.surrogate_hull, l.x, l.surrogate);
  }
}

// The ladder's dense point of tier j (every token of every head at j): its rate and surrogate
// into lp; returns the allocation.
std::vector<std::vector<std::uint8_t>> ladder_point(int j, const RateLadder& ladder, RateKind kind,
                                                    const std::vector<HeadCosts>& costs, const HeadRate& head_rate,
                                                    RdLadderPoint& lp) {
  const int H = static_cast<int>(costs.size());
  lp.tier = ladder.tiers[static_cast<std::size_t>(j)].name();
  std::vector<std::vector<std::uint8_t>> dense(static_cast<std::size_t>(H));
  double sur = 0;
  for (int i = 0; i < H; ++i) {
    const HeadCosts& c = costs[static_cast<std::size_t>(i)];
    dense[static_cast<std::size_t>(i)].assign(static_cast<std::size_t>(c.cost.cols()), static_cast<std::uint8_t>(j));
    const Rate r = head_rate(i, dense[static_cast<std::size_t>(i)]);
    lp.rate.code_bits += r.code_bits / H;
    lp.rate.total_bits += r.total_bits / H;
    sur += (c.output_norm2 > 0 ? sum_row(c.cost, dense[static_cast<std::size_t>(i)]) / c.output_norm2 : 0.0) / H;
  }
  lp.x = rate_of(lp.rate, kind);
  lp.surrogate = sur;
  return dense;
}

using HeadSource = std::function<const HeadData&(int index)>;

// ---- the surrogate curve by one parametric pass per head and option (issue 18) --------
//
// Scope head, solver exact: each head's optimum of a family at B is, per family option
// (Q:tau, E, M: solvers/families.hpp), the exact knapsack optimum on the option's restricted
// costs at B, and the head takes the option of least objective (routed: an endpoint instead of
// M within route_tolerance). solve_exact_budgets gives every budget's optimum of one option in
// one pass (one sort of its hull slopes), equal to solve_exact at each budget; the option
// choice below is the one of solve_families_per_head, so a point equals what allocate_heads
// returns at its budget. A point is left to allocate_heads (one solve per budget, as before)
// when some head has no feasible option at B (its message) or when some head's materialised
// allocation measures more than B (the equal-memory repair re-solves at a smaller B').
class SweptOptions {
 public:
  SweptOptions(const std::vector<HeadCosts>& costs, const RdCurveOptions& opt) : costs_(costs), opt_(opt) {
    // The rates the budget counts: as allocate_heads (every head's ladder_rates; the mean over
    // the heads for a tier whose rate depends on the head's data).
    rates_ = costs.front().rates;
    bool differ = false;
    for (const HeadCosts& k : costs) differ = differ || k.rates != rates_;
    if (differ)
      for (std::size_t j = 0; j < rates_.size(); ++j) {
        double sum = 0.0;
        for (const HeadCosts& k : costs) sum += k.rates[j];
        rates_[j] = sum / static_cast<double>(costs.size());
      }
  }
  static bool applies(const RdCurveOptions& o) { return o.sweep && o.solve.solver == AllocSolver::Exact; }

  // Pooled scope (a layer's heads, or the model's), a family of one option (E, M, Q with one
  // finite tier): the scope's optimum at B is one exact knapsack over its heads' concatenated
  // tokens (solve_families_pooled), so one parametric pass of that instance gives every
  // budget's. The tiers of each member head at budget index k, or false when the knapsack is
  // not proven optimal there (solve_families_pooled may then take a per-head incumbent).
  bool choose_pooled(int group, const std::vector<int>& members, const TierOption& option, int k,
                     std::vector<const std::vector<std::uint8_t>*>& tiers) {
    const Pooled& s = pooled(group, members, option);
    if (!s.proven[static_cast<std::size_t>(k)]) return false;
    tiers.clear();
    for (const auto& t : s.tiers[static_cast<std::size_t>(k)]) tiers.push_back(&t);
    return true;
  }

  // Head i's allocation of `options` at budget index k, or false when no option is feasible.
  bool choose(int i, const std::vector<TierOption>& options, int k, Family& family, const std::vector<std::uint8_t>*& tiers) {
    int best = -1, best_end = -1;
    std::vector<const Solved*> sol(options.size());
    for (std::size_t o = 0; o < options.size(); ++o) {
      sol[o] = &solved(i, options[o]);
      if (!sol[o]->feasible[static_cast<std::size_t>(k)]) continue;
      const double v = sol[o]->objective[static_cast<std::size_t>(k)];
      if (best < 0 || v < sol[static_cast<std::size_t>(best)]->objective[static_cast<std::size_t>(k)]) best = static_cast<int>(o);
      if (options[o].family != Family::Mixed &&
          (best_end < 0 || v < sol[static_cast<std::size_t>(best_end)]->objective[static_cast<std::size_t>(k)]))
        best_end = static_cast<int>(o);
    }
    if (best < 0) return false;
    if (best_end >= 0 && options[static_cast<std::size_t>(best)].family == Family::Mixed) {
      const double vm = sol[static_cast<std::size_t>(best)]->objective[static_cast<std::size_t>(k)];
      const double ve = sol[static_cast<std::size_t>(best_end)]->objective[static_cast<std::size_t>(k)];
      if (ve <= vm + opt_.solve.route_tolerance * std::fabs(vm) + 1e-12 * std::fabs(vm)) best = best_end;
    }
    family = options[static_cast<std::size_t>(best)].family;
    tiers = &sol[static_cast<std::size_t>(best)]->tiers[static_cast<std::size_t>(k)];
    return true;
  }
  double seconds() const { return seconds_; }

 private:
  struct Solved {
    std::vector<std::vector<std::uint8_t>> tiers;  // per budget, ladder tier per token
    std::vector<double> objective;                 // per budget, sum_t c_t(tiers_t)
    std::vector<bool> feasible;
  };
  const Solved& solved(int i, const TierOption& option) {
    auto& per_head = cache_[option.name];
    if (per_head.empty()) per_head.resize(costs_.size());
    Solved& s = per_head[static_cast<std::size_t>(i)];
    if (!s.feasible.empty()) return s;
    const auto t0 = std::chrono::steady_clock::now();
    const HeadCosts& hc = costs_[static_cast<std::size_t>(i)];
    FamilyProblem p;
    p.rates = rates_;
    p.heads.push_back(FamilyHead{&hc.cost, &hc.a, hc.noise});
    const RestrictedCosts rc = restrict_costs(p, {0}, {&option});
    const std::vector<MckpResult> res = solve_exact_budgets(rc.instance(0.0), opt_.budgets, opt_.solve.exact);
    const std::size_t nb = opt_.budgets.size();
    s.tiers.resize(nb);
    s.objective.assign(nb, 0.0);
    s.feasible.assign(nb, false);
    const auto T = static_cast<std::size_t>(hc.cost.cols());
    for (std::size_t k = 0; k < nb; ++k) {
      if (!res[k].has_solution()) continue;
      std::vector<std::uint8_t>& t = s.tiers[k];
      t.resize(T);
      long double obj = 0.0L;  // as the family solvers score a head
      for (std::size_t j = 0; j < T; ++j) {
        t[j] = rc.ladder_tier(static_cast<std::int64_t>(j), res[k].choice[j]);
        obj += hc.cost(t[j], static_cast<Eigen::Index>(j));
      }
      s.objective[k] = static_cast<double>(obj);
      s.feasible[k] = true;
    }
    seconds_ += seconds_since(t0);
    return s;
  }
  struct Pooled {
    std::vector<std::vector<std::vector<std::uint8_t>>> tiers;  // per budget, per member head
    std::vector<bool> proven;                                   // per budget: optimal or trivial
  };
  const Pooled& pooled(int group, const std::vector<int>& members, const TierOption& option) {
    Pooled& s = pooled_[option.name + "|" + std::to_string(group)];
    if (!s.proven.empty()) return s;
    const auto t0 = std::chrono::steady_clock::now();
    FamilyProblem p;
    p.rates = rates_;
    std::vector<int> all;
    for (int i : members) {
      const HeadCosts& hc = costs_[static_cast<std::size_t>(i)];
      all.push_back(static_cast<int>(p.heads.size()));
      p.heads.push_back(FamilyHead{&hc.cost, &hc.a, hc.noise});
    }
    const RestrictedCosts rc = restrict_costs(p, all, std::vector<const TierOption*>(all.size(), &option));
    const std::vector<MckpResult> res = solve_exact_budgets(rc.instance(0.0), opt_.budgets, opt_.solve.exact);
    const std::size_t nb = opt_.budgets.size();
    s.tiers.assign(nb, {});
    s.proven.assign(nb, false);
    for (std::size_t k = 0; k < nb; ++k) {
      if (res[k].status != SolveStatus::Optimal && res[k].status != SolveStatus::Trivial) continue;
      std::vector<std::vector<std::uint8_t>>& out = s.tiers[k];
      out.assign(members.size(), {});
      std::int64_t base = 0;
      bool valid = true;
      for (std::size_t h = 0; h < members.size() && valid; ++h) {
        const auto T = costs_[static_cast<std::size_t>(members[h])].cost.cols();
        out[h].resize(static_cast<std::size_t>(T));
        for (Eigen::Index t = 0; t < T; ++t) {
          const std::uint8_t j = rc.ladder_tier(base + t, res[k].choice[static_cast<std::size_t>(base + t)]);
          if (j == 255) valid = false;
          out[h][static_cast<std::size_t>(t)] = j;
        }
        base += T;
      }
      s.proven[k] = valid;
    }
    seconds_ += seconds_since(t0);
    return s;
  }
  const std::vector<HeadCosts>& costs_;
  const RdCurveOptions& opt_;
  std::vector<double> rates_;
  std::map<std::string, std::vector<Solved>> cache_;
  std::map<std::string, Pooled> pooled_;
  double seconds_ = 0;
};

RdCurve rd_curve_core(const TraceMeta& meta, const HeadSource& head_at, const RdCurveOptions& opt,
                      const Progress& progress, const std::atomic<bool>* cancel, std::vector<HeadCosts> costs) {
  const auto t0 = std::chrono::steady_clock::now();
  opt.validate();
  RdCurve out;
  out.options = opt;
  out.heads = meta.n_heads();
  out.tokens = meta.prompt_len;
  out.queries = opt.queries != RdQueries::Obs && meta.decode_steps == 0 ? RdQueries::Obs : opt.queries;
  if (out.queries == RdQueries::Step && opt.decode_step > meta.decode_steps)
    throw InputError("rd_curve decode_step = " + std::to_string(opt.decode_step) + "; the trace has " +
                     std::to_string(meta.decode_steps) + " decode steps (1 <= s <= " + std::to_string(meta.decode_steps) + ").");
  const RateLadder& ladder = opt.solve.ladder;
  const RateKind kind = opt.solve.rate_kind;
  const int H = meta.n_heads(), m = ladder.size();
  const int nb = static_cast<int>(opt.budgets.size()), nf = static_cast<int>(opt.families.size());
  const int work = H + nf * nb + (opt.recompute ? H : 0);
  int done = 0;
  auto step = [&] {
    throw_if_cancelled(cancel);
    if (progress) progress(++done, work);
  };

  // 1. Costs, once per head (unless given).
  if (!costs.empty() && static_cast<int>(costs.size()) != H)
    throw InputError("rd_curve: " + std::to_string(costs.size()) + " heads' costs given for " + std::to_string(H) + " heads.");
  if (costs.empty()) {
    costs.reserve(static_cast<std::size_t>(H));
    for (int i = 0; i < H; ++i) {
      costs.push_back(head_costs(head_at(i), meta.rope, opt.solve));
      step();
    }
  } else {
    for (int i = 0; i < H; ++i) step();
  }
  out.seconds_costs = seconds_since(t0);

  // 2. One solve per (family, budget) and the ladder's dense points. Every allocation is kept
  // until the recomputation (a pooled scope needs all heads' at once): one byte per token.
  const double bytes = double(nf * nb + m) * H * meta.prompt_len;
  if (bytes > kMaxRdAllocationBytes)
    throw InputError("rd_curve: " + std::to_string(nf * nb + m) + " allocations of " + std::to_string(H) + " heads x " +
                     std::to_string(meta.prompt_len) + " tokens would keep " + format_number(bytes / (1 << 30), 3) +
                     " GiB of tiers (at most " + format_number(kMaxRdAllocationBytes / (1 << 30), 3) +
                     "); use fewer budgets or families, or fewer heads.");
  const auto t1 = std::chrono::steady_clock::now();
  const bool needs_head = ladder_needs_head(ladder);
  const HeadRate head_rate = [&](int i, const std::vector<std::uint8_t>& tiers) {
    return needs_head ? allocation_rate(head_at(i), meta.rope, ladder, tiers)
                      : allocation_rate(static_cast<int>(costs[static_cast<std::size_t>(i)].cost.cols()), meta.head_dim,
                                        ladder, tiers);
  };
  // tiers[p][i]: the allocation of head i at point p (curve points, then ladder points).
  std::vector<std::vector<std::vector<std::uint8_t>>> tiers;
  std::unique_ptr<SweptOptions> swept;
  if (SweptOptions::applies(opt) && H > 0) swept = std::make_unique<SweptOptions>(costs, opt);
  // The scopes' heads, as allocate_heads groups them: one head, a layer's heads, or all.
  std::vector<std::vector<int>> groups;
  for (int i = 0; i < H; ++i) {
    const bool next = opt.solve.scope == Scope::Head || (opt.solve.scope == Scope::Layer && i % meta.n_kv_heads == 0);
    if (groups.empty() || next) groups.emplace_back();
    groups.back().push_back(i);
  }
  // A point from the sweep: false when it is left to allocate_heads (see SweptOptions).
  auto from_sweep = [&](FamilyChoice family, int k, RdPoint& pt, std::vector<std::vector<std::uint8_t>>& point_tiers) {
    std::vector<TierOption> options;
    try {
      options = family_options(ladder, family);
    } catch (const InputError&) {
      return false;
    }
    const double B = opt.budgets[static_cast<std::size_t>(k)];
    const double tol = 1e-12 * std::max(1.0, B);
    point_tiers.assign(static_cast<std::size_t>(H), {});
    std::vector<Rate> rates(static_cast<std::size_t>(H));
    std::vector<Family> fams(static_cast<std::size_t>(H));
    // Each scope's heads (one head each in head scope) and the scope's measured rate: above B,
    // the point is left to allocate_heads (its equal-memory repair).
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::vector<int>& members = groups[g];
      std::vector<const std::vector<std::uint8_t>*> ts(members.size(), nullptr);
      if (opt.solve.scope == Scope::Head) {
        if (!swept->choose(members[0], options, k, fams[static_cast<std::size_t>(members[0])], ts[0])) return false;
      } else {
        if (options.size() != 1 || !swept->choose_pooled(static_cast<int>(g), members, options[0], k, ts)) return false;
        for (int i : members) fams[static_cast<std::size_t>(i)] = options[0].family;
      }
      double sum = 0, tokens = 0;
      for (std::size_t j = 0; j < members.size(); ++j) {
        const auto i = static_cast<std::size_t>(members[j]);
        rates[i] = head_rate(members[j], *ts[j]);
        const double n = static_cast<double>(ts[j]->size());
        sum += rate_of(rates[i], kind) * n, tokens += n;
        point_tiers[i] = *ts[j];
      }
      if (tokens > 0 && sum / tokens > B + tol) return false;  // repair: allocate_heads
    }
    long double rel = 0.0L;
    for (int i = 0; i < H; ++i) {
      const HeadCosts& c = costs[static_cast<std::size_t>(i)];
      const Rate& r = rates[static_cast<std::size_t>(i)];
      pt.rate.code_bits += r.code_bits / H;
      pt.rate.total_bits += r.total_bits / H;
      long double obj = 0.0L;
      const std::vector<std::uint8_t>& t = point_tiers[static_cast<std::size_t>(i)];
      for (std::size_t j = 0; j < t.size(); ++j) obj += c.cost(t[j], static_cast<Eigen::Index>(j));
      const double rel_i = c.output_norm2 > 0 ? static_cast<double>(obj) / c.output_norm2 : 0.0;
      rel += rel_i / H;
      pt.head_surrogate.push_back(rel_i);
      pt.family_share[static_cast<std::size_t>(fams[static_cast<std::size_t>(i)])] += 1.0 / H;
    }
    pt.feasible = true;
    pt.x = rate_of(pt.rate, kind);
    pt.surrogate = static_cast<double>(rel);
    return true;
  };
  for (int f = 0; f < nf; ++f)
    for (int k = 0; k < nb; ++k) {
      if (swept) {
        RdPoint pt;
        pt.family = opt.families[static_cast<std::size_t>(f)];
        pt.budget = opt.budgets[static_cast<std::size_t>(k)];
        std::vector<std::vector<std::uint8_t>> point_tiers;
        if (from_sweep(pt.family, k, pt, point_tiers)) {
          tiers.push_back(std::move(point_tiers));
          out.points.push_back(std::move(pt));
          ++out.swept_points;
          step();
          continue;
        }
      }
      AllocateOptions o = opt.solve;
      o.family = opt.families[static_cast<std::size_t>(f)];
      o.budget = opt.budgets[static_cast<std::size_t>(k)];
      RdPoint pt;
      pt.family = o.family;
      pt.budget = o.budget;
      AllocationReport rep;
      try {
        rep = allocate_heads(meta, costs, o, head_rate);
      } catch (const InputError& e) {  // e.g. Q on a ladder without a finite tier
        rep.status = SolveStatus::Infeasible;
        rep.message = e.what();
      }
      pt.feasible = rep.has_solution();
      pt.message = rep.message;
      if (pt.feasible) {
        pt.rate = rep.rate;
        pt.x = rate_of(rep.rate, kind);
        pt.surrogate = rep.relative_objective;
        pt.family_share = rep.family_share;
        for (const HeadSolveReport& h : rep.heads) pt.head_surrogate.push_back(h.relative_objective);
        tiers.push_back(std::move(rep.allocation.tiers));
      } else {
        tiers.emplace_back();
      }
      out.points.push_back(std::move(pt));
      step();
    }
  for (int j = 0; j < m; ++j) {
    RdLadderPoint lp;
    tiers.push_back(ladder_point(j, ladder, kind, costs, head_rate, lp));
    out.ladder.push_back(std::move(lp));
  }
  out.seconds_solve = seconds_since(t1);

  // 3. Recomputation: per head, the exact part once; each distinct allocation once.
  const auto t2 = std::chrono::steady_clock::now();
  const std::size_t np = out.points.size();
  if (opt.recompute) {
    std::vector<ErrorMetrics> sum(tiers.size());
    for (RdPoint& p : out.points) p.head_error.assign(p.feasible ? static_cast<std::size_t>(H) : 0, kNaN);
    for (int i = 0; i < H; ++i) {
      const HeadData& head = head_at(i);
      // The head's distinct allocations, each recomputed once.
      std::map<std::vector<std::uint8_t>, int> index;
      std::vector<const std::vector<std::uint8_t>*> distinct;
      std::vector<int> which(tiers.size(), -1);
      // The E points of the curve (tiers evict and exact only), in increasing budget: their kept
      // sets are nested as the budget grows (the LP base keeps every token whose upgrade is more
      // efficient than lambda*, and lambda* falls with B), so each updates the previous one by
      // the tokens it adds (cpu::IncrementalKeptSet). Where the integer optimum's repair makes a
      // kept set not contain the previous one, that step resets and adds the whole set (a full
      // pass), counted in incremental_resets.
      std::vector<std::size_t> incremental;
      if (opt.incremental)
        for (std::size_t p = 0; p < np; ++p) {
          if (tiers[p].empty() || out.points[p].family != FamilyChoice::Evict) continue;
          const std::vector<std::uint8_t>& t = tiers[p][static_cast<std::size_t>(i)];
          if (std::all_of(t.begin(), t.end(), [&](std::uint8_t j) { return j == 0 || j == ladder.exact_index(); }))
            incremental.push_back(p);
        }
      std::stable_sort(incremental.begin(), incremental.end(),
                       [&](std::size_t a, std::size_t b) { return out.points[a].budget < out.points[b].budget; });
      std::vector<bool> is_incremental(tiers.size(), false);
      for (const std::size_t p : incremental) is_incremental[p] = true;
      for (std::size_t p = 0; p < tiers.size(); ++p) {
        if (tiers[p].empty() || is_incremental[p]) continue;
        const auto [it, inserted] = index.emplace(tiers[p][static_cast<std::size_t>(i)], static_cast<int>(distinct.size()));
        if (inserted) distinct.push_back(&it->first);
        which[p] = it->second;
      }
      const PreparedQuerySet qs(head, out.queries, opt.decode_step);
      const int nd = static_cast<int>(distinct.size());
      const std::vector<ErrorMetrics> errors = recompute_allocations(head, meta.rope, ladder, qs, distinct, cancel);
      throw_if_cancelled(cancel);
      out.evaluations += nd;
      std::vector<ErrorMetrics> inc_errors(tiers.size());
      if (!incremental.empty()) {
        cpu::IncrementalKeptSet inc(qs.problem(), meta.prompt_len);
        const std::vector<std::uint8_t>* previous = nullptr;
        for (const std::size_t p : incremental) {
          const std::vector<std::uint8_t>& t = tiers[p][static_cast<std::size_t>(i)];
          if (previous && *previous == t) {  // the same kept set: the same errors
            inc_errors[p] = inc.metrics();
            ++out.incremental_points;
            continue;
          }
          std::vector<int> add;
          bool nested = true;
          for (int j = 0; j < meta.prompt_len; ++j) {
            const bool keep = t[static_cast<std::size_t>(j)] != 0;
            const bool had = inc.kept()[static_cast<std::size_t>(j)] != 0;
            if (had && !keep) nested = false;
            if (keep && !had) add.push_back(j);
          }
          if (!nested) {  // not nested in the previous kept set: a full pass for this step
            inc.reset();
            add.clear();
            for (int j = 0; j < meta.prompt_len; ++j)
              if (t[static_cast<std::size_t>(j)] != 0) add.push_back(j);
            ++out.incremental_resets;
          }
          inc.add(add);
          inc_errors[p] = inc.metrics();
          previous = &t;
          ++out.incremental_points;
          ++out.evaluations;
          throw_if_cancelled(cancel);
        }
        out.incremental_updates += inc.updates();
      }
      for (std::size_t p = 0; p < tiers.size(); ++p) {
        if (which[p] < 0 && !is_incremental[p]) continue;
        const ErrorMetrics& e = is_incremental[p] ? inc_errors[p] : errors[static_cast<std::size_t>(which[p])];
        sum[p].rel_error += e.rel_error / H;
        sum[p].abs_error += e.abs_error / H;
        sum[p].attn_tv += e.attn_tv / H;
        sum[p].logit_error += e.logit_error / H;
        if (p < np) out.points[p].head_error[static_cast<std::size_t>(i)] = e.rel_error;
      }
      step();
    }
    for (std::size_t p = 0; p < tiers.size(); ++p) {
      if (tiers[p].empty()) continue;
      if (p < np) out.points[p].error = sum[p];
      else out.ladder[p - np].error = sum[p].rel_error;
    }
  } else {
    for (RdPoint& p : out.points) p.error.rel_error = kNaN;
  }
  out.seconds_recompute = seconds_since(t2);

  add_hulls(out, opt.recompute);
  out.seconds = seconds_since(t0);
  return out;
}

}  // namespace

std::string_view to_string(RdQueries q) { return enum_name(kRdQueries, q); }
RdQueries parse_rd_queries(std::string_view s) { return parse_enum(kRdQueries, s); }

std::vector<double> parse_budget_grid(std::string_view spec, std::string_view option) {
  const std::string o(option), text(spec);
  auto bad = [&](const std::string& why) {
    return InputError(o + " = '" + text + "': " + why + " (the form is A:B:STEP, bits per element, 0 <= A <= B, STEP > 0, at most " +
                      std::to_string(kMaxRdBudgets) + " budgets; e.g. 0:16:0.25).");
  };
  double v[3];
  std::size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    const std::size_t end = i < 2 ? text.find(':', pos) : text.size();
    if (end == std::string::npos) throw bad("three numbers separated by ':' are needed");
    const std::string part = text.substr(pos, end - pos);
    const std::optional<double> x = read_real(part);  // model/base/numbers.hpp: the whole part, finite
    if (!x) throw bad("'" + part + "' is not a number");
    v[i] = *x;
    pos = end + 1;
  }
  const double a = v[0], b = v[1], step = v[2];
  if (!std::isfinite(a) || a < 0) throw bad("A = " + format_number(a) + " must be finite and >= 0");
  if (!std::isfinite(b) || b < a) throw bad("B = " + format_number(b) + " must be finite and >= A = " + format_number(a));
  if (!std::isfinite(step) || !(step > 0)) throw bad("STEP = " + format_number(step) + " must be > 0");
  const double n = std::floor((b - a) / step + 1e-9) + 1;
  if (n > kMaxRdBudgets) throw bad(format_number(n) + " budgets are too many");
  std::vector<double> out;
  for (int k = 0; k < static_cast<int>(n); ++k) out.push_back(std::min(b, a + k * step));
  return out;
}

void RdCurveOptions::validate() const {
  if (budgets.empty()) throw InputError("rd_curve budgets: the grid is empty; give at least one budget.");
  if (budgets.size() > static_cast<std::size_t>(kMaxRdBudgets))
    throw InputError("rd_curve budgets: " + std::to_string(budgets.size()) + " budgets; at most " +
                     std::to_string(kMaxRdBudgets) + ".");
  for (const double b : budgets) check_budget(b, "rd_curve budget");
  if (families.empty()) throw InputError("rd_curve families: none given; name at least one of quantize, evict, mixed, routed.");
  for (std::size_t i = 0; i < families.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (families[i] == families[j])
        throw InputError("rd_curve families: " + std::string(to_string(families[i])) + " is named twice.");
  if (decode_step < 1)
    throw InputError("rd_curve decode_step = " + std::to_string(decode_step) + "; it must be >= 1.");
  solve.validate();
}

bool above_recomputed_hull(const RdHull& h, double x, double y) {
  const double v = h.at(x);
  if (std::isnan(v) || std::isnan(y)) return false;
  return y > v * (1 + kRecomputedHullTolerance) + 1e-15;
}

double RdHull::at(double v) const {
  if (x.empty() || !(v >= x.front() - 1e-12) || !(v <= x.back() + 1e-12)) return kNaN;
  if (x.size() == 1) return y.front();
  std::size_t k = 1;
  while (k + 1 < x.size() && x[k] < v) ++k;
  const double w = (v - x[k - 1]) / (x[k] - x[k - 1]);
  return y[k - 1] + std::clamp(w, 0.0, 1.0) * (y[k] - y[k - 1]);
}

const RdPoint& RdCurve::at(int f, int k) const {
  return points.at(static_cast<std::size_t>(f) * options.budgets.size() + static_cast<std::size_t>(k));
}

RdCurve rd_curve(const TraceReader& trace, const RdCurveOptions& options, const Progress& progress,
                 const std::atomic<bool>* cancel) {
  const TraceMeta& meta = trace.meta();
  HeadData current;
  int current_index = -1;
  const HeadSource source = [&](int i) -> const HeadData& {
    if (i != current_index) {
      current = trace.head(i / meta.n_kv_heads, i % meta.n_kv_heads);
      current_index = i;
    }
    return current;
  };
  RdCurve c = rd_curve_core(meta, source, options, progress, cancel, {});
  c.source = trace.path();
  return c;
}

RdCurve rd_curve(const std::vector<const HeadData*>& heads, const RopeParams& rope, const RdCurveOptions& options,
                 const Progress& progress, const std::atomic<bool>* cancel, std::vector<HeadCosts> costs) {
  if (heads.empty()) throw InputError("rd_curve: no heads given.");
  TraceMeta meta;
  meta.n_layers = 1;
  meta.n_kv_heads = static_cast<int>(heads.size());
  meta.rope = rope;
  const HeadData& h0 = *heads.front();
  meta.head_dim = static_cast<int>(h0.keys.cols());
  meta.prompt_len = static_cast<int>(h0.keys.rows());
  meta.decode_steps = static_cast<int>(h0.decode_keys.rows());
  for (const HeadData* h : heads)
    if (!h || h->keys.rows() != meta.prompt_len || h->keys.cols() != meta.head_dim ||
        h->decode_keys.rows() != meta.decode_steps)
      throw InputError("rd_curve: the heads differ in prompt length, head dimension or decode steps; one curve needs equal shapes.");
  RdCurve c = rd_curve_core(meta, [&](int i) -> const HeadData& { return *heads[static_cast<std::size_t>(i)]; }, options,
                            progress, cancel, std::move(costs));
  c.source = "heads";
  return c;
}

}  // namespace tierlab
