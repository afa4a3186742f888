// Allocation staleness over decode steps, out of sample (staleness_head.hpp).
#include "scenarios/pipeline/staleness_head.hpp"

#include <algorithm>
#include <cmath>

#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/base/text.hpp"
#include "scenarios/pipeline/head.hpp"
#include "solvers/families.hpp"

namespace tierlab {

namespace {

// The surrogate optima of Q, E and M for one query set's costs.
struct FamilyOptima {
  HeadSolution Q, E, M;
  std::string surrogate_best;  // argmin of the objective (ties Q, E, M)
};

FamilyOptima optima(const SurrogateCosts& sc, const StalenessOptions& opt, const std::vector<double>& rates) {
  FamilyOptima out;
  if (opt.ladder.size() > 2)
    out.Q = solve_head(sc.cost, sc.weights.a, rates, opt.ladder, opt.budget, FamilyChoice::Quantize);
  out.E = solve_head(sc.cost, sc.weights.a, rates, opt.ladder, opt.budget, FamilyChoice::Evict);
  out.M = solve_head(sc.cost, sc.weights.a, rates, opt.ladder, opt.budget, FamilyChoice::Mixed);
  double best = std::numeric_limits<double>::infinity();
  const std::pair<const HeadSolution*, const char*> fam[3] = {{&out.Q, "Q"}, {&out.E, "E"}, {&out.M, "M"}};
  for (const auto& [hs, letter] : fam)
    if (hs->feasible && hs->objective < best) best = hs->objective, out.surrogate_best = letter;
  return out;
}

// sum_t cost(tier_t, t): an allocation's surrogate objective under another query set's costs.
double objective_of(const MatrixRMd& cost, const std::vector<std::uint8_t>& tiers) {
  if (tiers.empty()) return kStaleNaN;
  double sum = 0;
  for (std::size_t t = 0; t < tiers.size(); ++t) sum += cost(tiers[t], static_cast<Eigen::Index>(t));
  return sum;
}

double ratio_of(double num, double den) {
  if (std::isnan(num) || std::isnan(den)) return kStaleNaN;
  if (den > 0) return num / den;
  return num == 0 ? 1.0 : kStaleNaN;
}

// The g query rows of decode steps first..last (row block per step, query heads in order).
MatrixRM step_rows(const HeadData& head, int g, int first, int last) {
  const DecodeQueries dq = decode_query_set(head);
  MatrixRM q((last - first + 1) * g, head.keys.cols());
  for (int u = first; u <= last; ++u)
    for (int j = 0; j < g; ++j) q.row((u - first) * g + j) = dq.query(j, u);
  return q;
}

// Exact errors (relative output error) of materialized allocations of the prompt's tokens on
// decode steps first..last: step u's rows see the T prompt tokens and decode keys 1..u
// (exact, kept). A null allocation gives NaN.
std::vector<double> score(const HeadData& head, int g, int first, int last,
                          const std::vector<const MaterializedKeys*>& allocations, Recomputer& backend) {
  const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
  const int N = T + last;
  const MatrixRM q = step_rows(head, g, first, last);
  MatrixRM exact(N, d), values(N, d);
  exact.topRows(T) = head.keys;
  exact.bottomRows(last) = head.decode_keys.topRows(last);
  values.topRows(T) = head.values;
  values.bottomRows(last) = head.decode_values.topRows(last);
  std::vector<MatrixRM> variants;
  std::vector<int> slot(allocations.size(), -1);
  for (std::size_t a = 0; a < allocations.size(); ++a) {
    if (!allocations[a]) continue;
    slot[a] = static_cast<int>(variants.size());
    variants.emplace_back(N, d);
    variants.back().topRows(T) = allocations[a]->keys;
    variants.back().bottomRows(last) = head.decode_keys.topRows(last);
  }
  std::vector<double> out(allocations.size(), kStaleNaN);
  if (variants.empty()) return out;
  HeadBatch b;
  b.problem.queries = &q;
  b.problem.exact_keys = &exact;
  b.problem.values = &values;
  for (const MatrixRM& v : variants) b.problem.variants.push_back(&v);
  for (int u = first; u <= last; ++u)
    for (int j = 0; j < g; ++j) b.problem.visible.push_back(T + u);
  for (std::size_t a = 0; a < allocations.size(); ++a) {
    if (slot[a] < 0) continue;
    const auto v = static_cast<std::uint8_t>(slot[a] + 1);
    Selection sel(static_cast<std::size_t>(N), v);
    for (int t = 0; t < T; ++t)
      sel[static_cast<std::size_t>(t)] = allocations[a]->kept[static_cast<std::size_t>(t)] ? v : 0;
    b.selections.push_back(std::move(sel));
  }
  const std::vector<HeadBatch> batches{std::move(b)};
  const auto errors = recompute(backend, batches);
  for (std::size_t a = 0; a < allocations.size(); ++a)
    if (slot[a] >= 0) out[a] = errors.at(0).at(static_cast<std::size_t>(slot[a])).rel_error;
  return out;
}

struct Materialized {
  bool present = false;
  MaterializedKeys keys;
  const MaterializedKeys* get() const { return present ? &keys : nullptr; }
};

Materialized materialized(const HeadData& head, const StalenessOptions& opt, const HeadSolution& hs) {
  Materialized m;
  if (!hs.feasible) return m;
  m.present = true;
  m.keys = materialize(head, opt.rope, opt.ladder, hs.tiers);
  return m;
}

}  // namespace

void StalenessOptions::validate() const {
  ladder.validate();
  check_budget(budget, "staleness budget");
  if (window < 0)
    throw InputError("staleness window = " + std::to_string(window) +
                     " decode steps; it must be >= 1 (or 0 for the trace's observation window).");
  if (horizon < 1) throw InputError("staleness horizon = " + std::to_string(horizon) + " steps; it must be >= 1.");
  for (std::size_t i = 0; i < steps.size(); ++i)
    if (steps[i] < 1 || (i > 0 && steps[i] <= steps[i - 1]))
      throw InputError("staleness steps: " + std::to_string(steps[i]) +
                       " at position " + std::to_string(i + 1) + "; steps must be >= 1 and increasing.");
}

std::string recomputed_best_family(const FamilyErrors& e) {
  std::string best;
  double lo = std::numeric_limits<double>::infinity();
  const std::pair<double, const char*> fam[3] = {{e.Q, "Q"}, {e.E, "E"}, {e.M, "M"}};
  for (const auto& [err, letter] : fam) {
    if (std::isnan(err)) continue;
    const double v = std::max(err, kFamilyErrorFloor);
    if (v < lo) lo = v, best = letter;
  }
  return best;
}

DecisionQueries fresh_decision_queries(const HeadData& head, int step, int window) {
  const CausalQueries obs = observation_queries(head);
  const int S = static_cast<int>(head.decode_keys.rows()), d = static_cast<int>(head.keys.cols());
  const int T = static_cast<int>(head.keys.rows());
  const int g = head.group_size;
  const int W_obs = static_cast<int>(head.obs_queries.rows()) / g;
  if (step < 1 || step > S + 1)
    throw InputError("fresh_decision_queries: step " + std::to_string(step) + " is outside 1.." +
                     std::to_string(S + 1) + " (the head has " + std::to_string(S) + " decode steps).");
  if (window < 1) throw InputError("fresh_decision_queries: window = " + std::to_string(window) + "; it must be >= 1.");
  if (S > 0 && head.decode_queries.rows() != static_cast<Eigen::Index>(g) * S)
    throw InputError("fresh_decision_queries: head (" + std::to_string(head.layer) + ", " +
                     std::to_string(head.kv_head) + ") has " + std::to_string(head.decode_queries.rows()) +
                     " decode query rows, not g S = " + std::to_string(g * S) + ".");
  DecisionQueries dq;
  dq.decode_rows = std::min(window, step - 1);
  dq.observation_rows = std::min(W_obs, window - dq.decode_rows);
  const int per_head = dq.observation_rows + dq.decode_rows;
  if (per_head == 0)
    throw InputError("fresh_decision_queries: head (" + std::to_string(head.layer) + ", " +
                     std::to_string(head.kv_head) + ") has no observation queries to decide step 1 from.");
  dq.rows.resize(static_cast<Eigen::Index>(g) * per_head, d);
  dq.visible.reserve(static_cast<std::size_t>(g * per_head));
  const DecodeQueries decode = decode_query_set(head);
  int r = 0;
  for (int j = 0; j < g; ++j) {
    for (int i = W_obs - dq.observation_rows; i < W_obs; ++i, ++r) {
      dq.rows.row(r) = head.obs_queries.row(j * W_obs + i);
      dq.visible.push_back(obs.visible[static_cast<std::size_t>(j * W_obs + i)]);
    }
    for (int u = step - dq.decode_rows; u <= step - 1; ++u, ++r) {
      dq.rows.row(r) = decode.query(j, u);
      dq.visible.push_back(T);
    }
  }
  return dq;
}

double evicted_jaccard(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) throw InputError("evicted_jaccard: allocations of " + std::to_string(a.size()) + " and " +
                                             std::to_string(b.size()) + " tokens differ in length.");
  std::size_t both = 0, either = 0;
  for (std::size_t t = 0; t < a.size(); ++t) {
    const bool ea = a[t] == 0, eb = b[t] == 0;
    both += ea && eb ? 1 : 0;
    either += ea || eb ? 1 : 0;
  }
  return either == 0 ? 1.0 : static_cast<double>(both) / static_cast<double>(either);
}

double tier_agreement(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) throw InputError("tier_agreement: allocations of " + std::to_string(a.size()) + " and " +
                                             std::to_string(b.size()) + " tokens differ in length.");
  if (a.empty()) return 1.0;
  std::size_t same = 0;
  for (std::size_t t = 0; t < a.size(); ++t) same += a[t] == b[t] ? 1 : 0;
  return static_cast<double>(same) / static_cast<double>(a.size());
}

StalenessHead staleness_head(const HeadData& head, const StalenessOptions& opt, Recomputer& backend,
                             const StalenessStepCallback& on_step) {
  opt.validate();
  StalenessHead out;
  out.layer = head.layer;
  out.kv_head = head.kv_head;
  const int T = static_cast<int>(head.keys.rows());
  const int S = static_cast<int>(head.decode_keys.rows());
  const int g = head.group_size;
  const int W_obs = g > 0 ? static_cast<int>(head.obs_queries.rows()) / g : 0;
  out.window = opt.window > 0 ? opt.window : W_obs;
  const std::vector<double> rates = ladder_rates(head, opt.rope, opt.ladder, opt.rate_kind);
  const FamilyOptima obs = optima(surrogate_costs(head, opt.rope, observation_queries(head), opt.ladder), opt, rates);
  if (S == 0 || head.decode_queries.rows() == 0 || !obs.M.feasible) return out;
  if (out.window < 1)
    throw InputError("staleness: head (" + std::to_string(head.layer) + ", " + std::to_string(head.kv_head) +
                     ") has no observation queries, so the window W has no default; give staleness.window.");
  out.stale_tiers = obs.M.tiers;
  const Materialized stale_M = materialized(head, opt, obs.M), stale_Q = materialized(head, opt, obs.Q),
                     stale_E = materialized(head, opt, obs.E);
  const auto last_of = [&](int s) { return std::min(S, s + opt.horizon - 1); };
  // After prefill: the observation decision's families scored on steps 1..k.
  {
    const std::vector<double> e = score(head, g, 1, last_of(1), {stale_Q.get(), stale_E.get(), stale_M.get()}, backend);
    out.prefill_errors = {e[0], e[1], e[2]};
    out.family_obs = recomputed_best_family(out.prefill_errors);
    out.err_stale_first = e[2];
  }
  for (const int s : opt.steps) {
    if (s > S) continue;
    const int last = last_of(s);
    StalenessStep st;
    st.step = s;
    st.scored_steps = last - s + 1;
    // Fresh: decided from D(s), the queries before step s.
    const DecisionQueries dq = fresh_decision_queries(head, s, out.window);
    const FamilyOptima fresh = optima(surrogate_costs(head, opt.rope, dq.view(), opt.ladder), opt, rates);
    // In-sample bound: decided from the scored queries themselves.
    const MatrixRM scored = step_rows(head, g, s, last);
    const SurrogateCosts scored_costs = surrogate_costs(head, opt.rope, all_visible(scored, T), opt.ladder);
    const HeadSolution insample =
        solve_head(scored_costs.cost, scored_costs.weights.a, rates, opt.ladder, opt.budget, FamilyChoice::Mixed);
    const Materialized fresh_M = materialized(head, opt, fresh.M), fresh_Q = materialized(head, opt, fresh.Q),
                       fresh_E = materialized(head, opt, fresh.E), in_M = materialized(head, opt, insample);
    const std::vector<double> e = score(
        head, g, s, last, {stale_M.get(), fresh_Q.get(), fresh_E.get(), fresh_M.get(), in_M.get()}, backend);
    st.err_stale = e[0];
    st.family_errors = {e[1], e[2], e[3]};
    st.err_fresh = e[3];
    st.err_insample = e[4];
    st.ratio = ratio_of(st.err_stale, st.err_fresh);
    st.aging = ratio_of(st.err_stale, out.err_stale_first);
    st.ratio_insample = ratio_of(st.err_stale, st.err_insample);
    st.family = recomputed_best_family(st.family_errors);
    st.same_family = !st.family.empty() && st.family == out.family_obs;
    st.family_surrogate = fresh.surrogate_best;
    st.surrogate_stale = objective_of(scored_costs.cost, obs.M.tiers);
    st.surrogate_fresh = objective_of(scored_costs.cost, fresh.M.tiers);
    st.surrogate_insample = objective_of(scored_costs.cost, insample.tiers);
    if (fresh.M.feasible) {
      st.fresh_tiers = fresh.M.tiers;
      st.jaccard = evicted_jaccard(stale_M.keys.kept, fresh_M.keys.kept);
      st.agreement = tier_agreement(obs.M.tiers, fresh.M.tiers);
    }
    st.insample_tiers = insample.tiers;
    out.steps.push_back(std::move(st));
    if (on_step) on_step(out);
  }
  return out;
}

}  // namespace tierlab
