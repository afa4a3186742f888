// The interior advantage A = 1 - err(M*) / min(err(Q*), err(E*)) (interior.hpp).
#include "scenarios/pipeline/advantage.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "model/dominance.hpp"
#include "model/base/allocator_policy.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/pipeline/budget_repair.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/report.hpp"
#include "scenarios/pipeline/head.hpp"
#include "scenarios/pipeline/parallel_heads.hpp"
#include "solvers/families.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

namespace {

// Every head's surrogate costs side by side, for the model-wide solves: ladder.size() x
// (heads x T), head i in columns [i T, (i + 1) T). One matrix, so that a pooled solve reads
// the heads' costs in place rather than a restricted copy of them (restrict_costs): at 256
// heads x 32k tokens the copy was 378 MB on top of these 336 (docs/performance.md).
struct KeptCosts {
  MatrixRMd cost;
  Eigen::Index tokens = 0;  // T of every head
  int heads = 0;
  FamilyHead head(int i) const { return FamilyHead::columns(cost, i * tokens, tokens); }
};

// One family pooled over every head of the trace at model budget B, repaired until the mean
// measured rate meets B (budget_repair.hpp: the least objective of every allocation tried
// that meets B). Not yet recomputed.
struct ModelSolution {
  bool feasible = false, repaired = false;
  FamilyResult result;
  Rate rate;  // mean measured rate over the heads
  double objective = std::numeric_limits<double>::quiet_NaN();
};

ModelSolution solve_model_family(const TraceReader& trace, const InteriorOptions& opt,
                                 const KeptCosts& costs, const std::vector<double>& rates, double B, FamilyChoice family,
                                 RoutingMemo& memo) {
  const TraceMeta& meta = trace.meta();
  const std::vector<TierOption> options = family_options(opt.ladder, family);
  FamilyOptions fo;
  fo.exact = opt.exact;
  fo.routing_memo = &memo;  // the repair's budgets and the cell's share the multiplier's evaluations
  // The mean measured rate of an allocation over the heads (equal T, so a plain mean), without
  // materialising it (allocation_rate: the same accounting); heads are read only for the tiers
  // whose bits depend on the data.
  const bool needs_head = ladder_needs_head(opt.ladder);
  auto measure = [&](const FamilyResult& r) {
    Rate sum;
    for (int l = 0, i = 0; l < meta.n_layers; ++l)
      for (int h = 0; h < meta.n_kv_heads; ++h, ++i) {
        const auto& tiers = r.heads[static_cast<std::size_t>(i)].tiers;
        const Rate x = needs_head ? allocation_rate(trace.head(l, h), meta.rope, opt.ladder, tiers)
                                  : allocation_rate(meta.prompt_len, meta.head_dim, opt.ladder, tiers);
        sum.code_bits += x.code_bits, sum.total_bits += x.total_bits;
      }
    sum.code_bits /= meta.n_heads(), sum.total_bits /= meta.n_heads();
    return sum;
  };
  struct Attempt {
    FamilyResult r;
    Rate rate;
  };
  auto attempt = [&](double b) {
    FamilyProblem p;
    p.rates = rates;
    p.budget = b;
    for (int i = 0; i < costs.heads; ++i) p.heads.push_back(costs.head(i));
    Attempt a{solve_families_pooled(p, options, fo), {}};
    if (a.r.has_solution()) a.rate = measure(a.r);
    return a;
  };
  RepairedSolution<Attempt> rep = repair_to_measured_budget<Attempt>(
      B, attempt, [](const Attempt& a) { return a.r.has_solution(); },
      [&](const Attempt& a) { return rate_of(a.rate, opt.rate_kind); },
      [](const Attempt& a) { return a.r.objective; });
  ModelSolution out;
  if (!rep.best) return out;
  out.feasible = true;
  out.repaired = rep.repaired;
  out.rate = rep.best->rate;
  out.objective = rep.best->r.objective;
  out.result = std::move(rep.best->r);
  return out;
}

// One budget's model-wide solutions, solved and not yet recomputed, and the report's fields
// that the solves decide.
struct ModelScopeSolved {
  ModelSolution q, e, routed;
  ModelScopeReport m;
  // Recomputed: Q, E and the routed one unless it is an endpoint's (pointers into this object:
  // taken once it has its place).
  std::vector<const ModelSolution*> recomputed() const {
    std::vector<const ModelSolution*> out = {&q, &e};
    if (m.routed_is_endpoint.empty()) out.push_back(&routed);
    return out;
  }
};

// The multiplier routing's evaluations of each family, kept across a cell's budgets (one set of
// costs: RoutingMemo).
struct ModelMemos {
  RoutingMemo q, e, routed;
};

ModelScopeSolved solve_model_scope(const TraceReader& trace, const InteriorOptions& opt,
                                   const KeptCosts& costs, const std::vector<double>& rates, double B, ModelMemos& memos) {
  ModelScopeSolved s;
  ModelScopeReport& m = s.m;
  ModelSolution &q = s.q, &e = s.e, &routed = s.routed;
  if (opt.ladder.size() > 2) q = solve_model_family(trace, opt, costs, rates, B, FamilyChoice::Quantize, memos.q);
  e = solve_model_family(trace, opt, costs, rates, B, FamilyChoice::Evict, memos.e);
  routed = solve_model_family(trace, opt, costs, rates, B, FamilyChoice::Routed, memos.routed);
  // Nested at equal memory: Q*'s and E*'s allocations meet the measured budget and are
  // allocations of the routed family (its options contain Q's and E's), so the routed one is
  // never worse under the surrogate than either.
  for (const ModelSolution* endpoint : {&q, &e})
    if (endpoint->feasible && (!routed.feasible || endpoint->objective < routed.objective)) {
      routed = *endpoint;
      m.routed_is_endpoint = endpoint == &q ? "Q" : "E";
    }
  if (routed.feasible) {
    for (const FamilyHeadResult& h : routed.result.heads) {
      const Family f = routed.result.options[static_cast<std::size_t>(h.option)].family;
      (f == Family::Quantize ? m.routed_Q : f == Family::Evict ? m.routed_E : m.routed_M) += 1;
    }
  }
  // The routed allocation is one of the endpoints' when routed_is_endpoint says so: recomputed
  // once (ModelScopeSolved::recomputed).
  return s;
}

// The solved allocations of every budget recomputed in one pass over the heads: each head read
// once (a synthetic cell's heads are generated when read), heads side by side
// (parallel_heads.hpp); on each head, budget by budget, that budget's feasible families
// evaluated in one batch per query set (the head prepared once per budget; the numbers of one
// evaluation per family, gpu/cpu_recompute.cpp's batch-independent row blocks). Each head's
// errors go to its own slot; the sums over heads afterwards, in head order.
// out[b][k] is budget b's family sols[b][k].
std::vector<std::vector<ModelFamily>> recompute_model_families(const TraceReader& trace, const InteriorOptions& opt,
                                                               const std::vector<std::vector<const ModelSolution*>>& sols,
                                                               Recomputer& backend) {
  const TraceMeta& meta = trace.meta();
  const std::size_t nb = sols.size();
  std::vector<std::vector<ModelFamily>> out(nb);
  std::vector<std::vector<std::size_t>> live(nb);
  bool any = false;
  for (std::size_t b = 0; b < nb; ++b) {
    out[b].resize(sols[b].size());
    for (std::size_t k = 0; k < sols[b].size(); ++k) {
      if (!sols[b][k]->feasible) continue;
      out[b][k].feasible = true;
      out[b][k].rate = sols[b][k]->rate;
      out[b][k].repaired = sols[b][k]->repaired;
      out[b][k].surrogate = sols[b][k]->objective;
      live[b].push_back(k);
      any = true;
    }
  }
  if (!any) return out;
  const int n = meta.n_heads();
  // [head][budget][live family]
  std::vector<std::vector<std::vector<double>>> head_obs(static_cast<std::size_t>(n)), head_dec(static_cast<std::size_t>(n));
  for_each_head(n, backend, [&](int i) {
    const auto u = static_cast<std::size_t>(i);
    const HeadData head = trace.head(i / meta.n_kv_heads, i % meta.n_kv_heads);
    head_obs[u].resize(nb);
    head_dec[u].resize(nb);
    HeadEvaluations evaluations(head, backend);  // the exact half once for every budget
    for (std::size_t b = 0; b < nb; ++b) {
      if (live[b].empty()) continue;
      std::vector<MaterializedKeys> mats;
      for (std::size_t k : live[b])
        mats.push_back(materialize(head, meta.rope, opt.ladder, sols[b][k]->result.heads[u].tiers));
      for (const ErrorMetrics& e : evaluations.obs(mats)) head_obs[u][b].push_back(e.rel_error);
      if (meta.decode_steps > 0)
        for (const ErrorMetrics& e : evaluations.decode(std::move(mats))) head_dec[u][b].push_back(e.rel_error);
    }
  });
  for (std::size_t b = 0; b < nb; ++b) {
    std::vector<double> ed(sols[b].size(), 0.0), eo(sols[b].size(), 0.0);
    for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
      for (std::size_t j = 0; j < live[b].size(); ++j) {
        eo[live[b][j]] += head_obs[i][b].at(j);
        if (meta.decode_steps > 0) ed[live[b][j]] += head_dec[i][b].at(j);
      }
    for (std::size_t k : live[b]) {
      out[b][k].err_obs = eo[k] / meta.n_heads();
      out[b][k].err_decode = meta.decode_steps > 0 ? ed[k] / meta.n_heads() : std::numeric_limits<double>::quiet_NaN();
    }
  }
  return out;
}

// The report of one budget from its solutions and their recomputed families.
ModelScopeReport model_scope_report(const ModelScopeSolved& s, const std::vector<ModelFamily>& fams,
                                    const InteriorOptions& opt) {
  ModelScopeReport m = s.m;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  m.Q = fams[0];
  m.E = fams[1];
  m.routed = !m.routed_is_endpoint.empty() ? (m.routed_is_endpoint == "Q" ? m.Q : m.E) : fams[2];
  auto err = [nan](const ModelFamily& f, bool decode) { return f.feasible ? (decode ? f.err_decode : f.err_obs) : nan; };
  m.advantage_decode = interior_advantage_of(err(m.routed, true), err(m.Q, true), err(m.E, true), opt.error_floor);
  m.advantage_obs = interior_advantage_of(err(m.routed, false), err(m.Q, false), err(m.E, false), opt.error_floor);
  return m;
}

}  // namespace

std::vector<InteriorReport> interior_advantage(const TraceReader& trace, const InteriorOptions& opt,
                                               const std::vector<double>& budgets, Recomputer& backend,
                                               const std::atomic<bool>* stop, const Progress& progress,
                                               bool model_scope) {
  const auto t0 = std::chrono::steady_clock::now();
  opt.validate();
  const TraceMeta& meta = trace.meta();
  std::vector<InteriorReport> reps(budgets.size());
  std::vector<InteriorOptions> opts(budgets.size(), opt);
  for (std::size_t b = 0; b < budgets.size(); ++b) {
    opts[b].budget = budgets[b];
    opts[b].validate();
    reps[b].options = opts[b];
    reps[b].trace_path = trace.path();
    reps[b].backend = backend.description();
    reps[b].has_decode = meta.decode_steps > 0;
  }
  const RateLadder& ladder = opt.ladder;
  const int total = meta.n_heads();
  KeptCosts kept;  // model_scope: every head's costs
  if (model_scope) {
    kept.tokens = meta.prompt_len;
    kept.heads = total;
    kept.cost.resize(static_cast<Eigen::Index>(ladder.size()), kept.tokens * total);
  }
  std::vector<std::vector<double>> head_rates(static_cast<std::size_t>(total));
  std::vector<std::vector<HeadInterior>> head_reps(static_cast<std::size_t>(total));  // [head][budget]
  int done = 0;
  std::mutex progress_lock;
  // Head-major, heads side by side (parallel_heads.hpp): each head's costs and rates once,
  // then every budget; each head's results in its own slot.
  for_each_head(total, backend, [&](int i) {
    throw_if_cancelled(stop);
    const auto u = static_cast<std::size_t>(i);
    const HeadData head = trace.head(i / meta.n_kv_heads, i % meta.n_kv_heads);
    const SurrogateCosts sc = surrogate_costs(head, meta.rope, observation_queries(head), ladder);
    head_rates[u] = ladder_rates(head, meta.rope, ladder, opt.rate_kind);
    HeadEvaluations evaluations(head, backend);  // the exact half once for every budget
    for (std::size_t b = 0; b < budgets.size(); ++b)
      head_reps[u].push_back(head_interior(head, meta.rope, sc, head_rates[u], opts[b], backend, &evaluations));
    if (model_scope) {
      if (sc.cost.cols() != kept.tokens)
        throw InputError("interior: head " + std::to_string(i / meta.n_kv_heads) + "." + std::to_string(i % meta.n_kv_heads) +
                         " has " + std::to_string(sc.cost.cols()) + " tokens, the trace's prompt_len is " +
                         std::to_string(kept.tokens) + "; the model-wide allocation needs every head at prompt_len.");
      kept.cost.middleCols(i * kept.tokens, kept.tokens) = sc.cost;
    }
    if (progress) {
      const std::lock_guard<std::mutex> lock(progress_lock);
      progress(++done, total);
    }
  });
  std::vector<double> common_rates;  // model_scope: the rates (one ladder, one rate per tier)
  for (int i = 0; i < total; ++i) {
    const auto u = static_cast<std::size_t>(i);
    for (std::size_t b = 0; b < budgets.size(); ++b) reps[b].heads.push_back(std::move(head_reps[u][b]));
    if (!model_scope) continue;
    if (common_rates.empty()) common_rates = head_rates[u];
    if (head_rates[u] != common_rates)  // a published tier whose rate depends on the head
      throw InputError("interior: the model-wide routed allocation needs one rate per tier for every head; "
                       "ladder '" + ladder.name() + "' has head-dependent rates (head " +
                       std::to_string(i / meta.n_kv_heads) + "." + std::to_string(i % meta.n_kv_heads) + ").");
  }
  if (model_scope) {
    // The per-head pass's working sets (prepared softmax, logit changes, materialised keys: up
    // to hundreds of MB per head at T = 32,768) lie free in the heap; the model-wide solves
    // allocate their own (the restricted costs of every head) on top. Given back here, the
    // cell's peak is the larger of the two phases, not their sum (model/base/allocator_policy.hpp).
    release_freed_buffers();
    // Every budget solved first, then one pass over the heads recomputes all of them.
    std::vector<ModelScopeSolved> solved;
    solved.reserve(budgets.size());
    std::vector<std::vector<const ModelSolution*>> sols;
    {
      ModelMemos memos;
      for (std::size_t b = 0; b < budgets.size(); ++b) {
        throw_if_cancelled(stop);
        solved.push_back(solve_model_scope(trace, opts[b], kept, common_rates, budgets[b], memos));
      }
    }
    for (const ModelScopeSolved& x : solved) sols.push_back(x.recomputed());
    // The solves were the last readers of every head's costs (ladder x T doubles per head: 336
    // MB at 256 heads x 32k tokens): freed, and given back, before the recomputation pass's
    // working sets come.
    kept = KeptCosts{};
    release_freed_buffers();
    const std::vector<std::vector<ModelFamily>> fams = recompute_model_families(trace, opt, sols, backend);
    for (std::size_t b = 0; b < budgets.size(); ++b) reps[b].model = model_scope_report(solved[b], fams[b], opts[b]);
  }
  const int two = ladder.index_of_bits(2);
  for (InteriorReport& rep : reps) {
    auto mean_of = [&](double HeadInterior::*field, int& defined) {
      double s = 0.0;
      defined = 0;
      for (const auto& h : rep.heads)
        if (!std::isnan(h.*field)) {
          s += h.*field;
          ++defined;
        }
      return defined > 0 ? s / defined : std::numeric_limits<double>::quiet_NaN();
    };
    rep.mean_advantage_decode = mean_of(&HeadInterior::advantage_decode, rep.defined_decode);
    rep.mean_advantage_obs = mean_of(&HeadInterior::advantage_obs, rep.defined_obs);
    rep.mean_advantage_surrogate = mean_of(&HeadInterior::advantage_surrogate, rep.defined_surrogate);
    auto median_of = [&](double HeadInterior::*field) {
      std::vector<double> v;
      for (const auto& h : rep.heads)
        if (!std::isnan(h.*field)) v.push_back(h.*field);
      return quantile_or_nan(v, 0.5);
    };
    rep.median_advantage_decode = median_of(&HeadInterior::advantage_decode);
    rep.median_advantage_obs = median_of(&HeadInterior::advantage_obs);
    rep.median_advantage_surrogate = median_of(&HeadInterior::advantage_surrogate);
    int dominated = 0;
    for (const auto& h : rep.heads) dominated += h.dominated_2bit ? 1 : 0;
    if (two >= 0 && !rep.heads.empty()) rep.dominated_share = static_cast<double>(dominated) / rep.heads.size();
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return reps;
}

InteriorReport interior_advantage(const TraceReader& trace, const InteriorOptions& opt, Recomputer& backend,
                                  const Progress& progress) {
  return interior_advantage(trace, opt, {opt.budget}, backend, nullptr, progress).front();
}


namespace {

nlohmann::json outcome_json(const FamilyOutcome& o) {
  if (!o.feasible) return {{"feasible", false}};
  return {{"feasible", true},
          {"option", o.option},
          {"surrogate_abs", o.surrogate},
          {"rate", {{"code_bits", o.rate.code_bits}, {"total_bits", o.rate.total_bits}}},
          {"obs", to_json(o.obs)},
          {"decode", to_json(o.decode)}};
}

// Text reports print an undefined number as "-".

}  // namespace

nlohmann::json to_json(const InteriorReport& r) {
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : r.heads)
    heads.push_back({{"layer", h.layer},
                     {"kv_head", h.kv_head},
                     {"Q", outcome_json(h.Q)},
                     {"E", outcome_json(h.E)},
                     {"M", outcome_json(h.M)},
                     {"advantage", {{"decode", h.advantage_decode}, {"obs", h.advantage_obs}, {"surrogate", h.advantage_surrogate}}},
                     {"dominated_2bit", h.dominated_2bit}});
  return {{"trace", r.trace_path},
          {"backend", r.backend},
          {"budget", r.options.budget},
          {"rate", std::string(to_string(r.options.rate_kind))},
          {"ladder", r.options.ladder.name()},
          {"mean_advantage",
           {{"decode", r.mean_advantage_decode}, {"obs", r.mean_advantage_obs}, {"surrogate", r.mean_advantage_surrogate}}},
          {"median_advantage",
           {{"decode", r.median_advantage_decode}, {"obs", r.median_advantage_obs}, {"surrogate", r.median_advantage_surrogate}}},
          {"defined_heads", {{"decode", r.defined_decode}, {"obs", r.defined_obs}, {"surrogate", r.defined_surrogate}}},
          {"dominated_share", r.dominated_share},
          {"heads", heads},
          {"seconds", r.seconds}};
}

std::string text_report(const InteriorReport& r, bool per_head) {
  std::ostringstream os;
  char buf[256];
  os << "interior advantage A = 1 - err(M*)/min(err(Q*), err(E*)) at B = " << r.options.budget << " "
     << to_string(r.options.rate_kind) << " bits (recomputed on " << r.backend << ")\n";
  if (per_head) {
    os << "head       Q* option     err Q*     err E*     err M*   A decode      A obs  A surrog  2-bit dominated\n";
    for (const auto& h : r.heads) {
      std::snprintf(buf, sizeof buf, "L%d.H%-6d %-10s %10s %10s %10s %10s %10s %9s  %s\n", h.layer, h.kv_head,
                    h.Q.feasible ? h.Q.option.c_str() : "(none)",
                    format_or_nan(h.Q.feasible ? h.Q.decode.rel_error : NAN, "%.3e", "-").c_str(),
                    format_or_nan(h.E.decode.rel_error, "%.3e", "-").c_str(), format_or_nan(h.M.decode.rel_error, "%.3e", "-").c_str(),
                    format_or_nan(h.advantage_decode, "%.4f", "-").c_str(), format_or_nan(h.advantage_obs, "%.4f", "-").c_str(),
                    format_or_nan(h.advantage_surrogate, "%.4f", "-").c_str(), h.dominated_2bit ? "yes" : "no");
      os << buf;
    }
  }
  std::snprintf(buf, sizeof buf, "median A: decode %s, obs %s, surrogate %s (A is unbounded below; the median, not the mean, "
                "summarises the heads)\n",
                format_or_nan(r.median_advantage_decode, "%.4f", "-").c_str(), format_or_nan(r.median_advantage_obs, "%.4f", "-").c_str(),
                format_or_nan(r.median_advantage_surrogate, "%.4f", "-").c_str());
  os << buf;
  std::snprintf(buf, sizeof buf,
                "mean A: decode %s (%d heads), obs %s (%d heads), surrogate %s (%d heads); dominated share %s\n",
                format_or_nan(r.mean_advantage_decode, "%.4f", "-").c_str(), r.defined_decode, format_or_nan(r.mean_advantage_obs, "%.4f", "-").c_str(),
                r.defined_obs, format_or_nan(r.mean_advantage_surrogate, "%.4f", "-").c_str(), r.defined_surrogate,
                format_or_nan(r.dominated_share, "%.3f", "-").c_str());
  os << buf;
  return os.str();
}

}  // namespace tierlab
