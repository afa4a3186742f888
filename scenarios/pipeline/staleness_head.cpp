#include "scenarios/pipeline/staleness_head.hpp"

#include <cmath>
#include <limits>

#include "model/error.hpp"
#include "model/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/pipeline/head.hpp"
#include "solvers/families.hpp"

namespace tierlab {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The surrogate optima of Q, E and M for one head's costs; M's tiers.
struct FamilyOptima {
  std::string best;                 // argmin of the surrogate objective (ties Q, E, M)
  bool m_feasible = false;
  std::vector<std::uint8_t> m_tiers;
};

FamilyOptima optima(const SurrogateCosts& sc, const StalenessOptions& opt, const std::vector<double>& rates) {
  const bool has_finite = opt.ladder.size() > 2;
  const FamilyChoice choice[3] = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
  const char* letter[3] = {"Q", "E", "M"};
  FamilyOptima out;
  double best = std::numeric_limits<double>::infinity();
  for (int f = 0; f < 3; ++f) {
    if (f == 0 && !has_finite) continue;
    const HeadSolution hs = solve_head(sc.cost, sc.weights.a, rates, opt.ladder, opt.budget, choice[f]);
    if (!hs.feasible) continue;
    if (hs.objective < best) best = hs.objective, out.best = letter[f];
    if (f == 2) out.m_feasible = true, out.m_tiers = hs.tiers;
  }
  return out;
}

}  // namespace

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

StalenessHead staleness_head(const HeadData& head, const StalenessOptions& opt, Recomputer& backend) {
  StalenessHead out;
  out.layer = head.layer;
  out.kv_head = head.kv_head;
  const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
  const int S = static_cast<int>(head.decode_keys.rows());
  const std::vector<double> rates = ladder_rates(head, opt.rope, opt.ladder, opt.rate_kind);
  const FamilyOptima obs = optima(surrogate_costs(head, opt.rope, observation_queries(head), opt.ladder), opt, rates);
  out.family_obs = obs.best;
  if (S == 0 || head.decode_queries.rows() == 0 || !obs.m_feasible) return out;
  out.stale_tiers = obs.m_tiers;
  const int g = static_cast<int>(head.decode_queries.rows() / S);
  const MaterializedKeys stale = materialize(head, opt.rope, opt.ladder, obs.m_tiers);
  for (const int s : opt.steps) {
    if (s < 1 || s > S) continue;
    MatrixRM q(g, d);
    for (int j = 0; j < g; ++j) q.row(j) = head.decode_queries.row(j * S + (s - 1));
    const FamilyOptima fresh_opt = optima(surrogate_costs(head, opt.rope, all_visible(q, T), opt.ladder), opt, rates);
    StalenessStep st;
    st.step = s;
    st.family = fresh_opt.best;
    st.same_family = fresh_opt.best == obs.best;
    st.agreement = kNaN;
    st.jaccard = kNaN;
    st.err_fresh = st.err_stale = st.ratio = kNaN;
    if (fresh_opt.m_feasible) {
      st.fresh_tiers = fresh_opt.m_tiers;
      const MaterializedKeys fresh = materialize(head, opt.rope, opt.ladder, fresh_opt.m_tiers);
      st.jaccard = evicted_jaccard(stale.kept, fresh.kept);
      st.agreement = tier_agreement(obs.m_tiers, fresh_opt.m_tiers);
      // Step s sees the T prompt tokens and the s appended decode tokens (exact, kept).
      MatrixRM exact(T + s, d), values(T + s, d), vs(T + s, d), vf(T + s, d);
      exact.topRows(T) = head.keys;
      exact.bottomRows(s) = head.decode_keys.topRows(s);
      values.topRows(T) = head.values;
      values.bottomRows(s) = head.decode_values.topRows(s);
      vs.topRows(T) = stale.keys;
      vs.bottomRows(s) = head.decode_keys.topRows(s);
      vf.topRows(T) = fresh.keys;
      vf.bottomRows(s) = head.decode_keys.topRows(s);
      HeadBatch b;
      b.problem.queries = &q;
      b.problem.exact_keys = &exact;
      b.problem.values = &values;
      b.problem.variants = {&vs, &vf};
      for (int v = 0; v < 2; ++v) {
        const std::vector<std::uint8_t>& kept = v == 0 ? stale.kept : fresh.kept;
        Selection sel(static_cast<std::size_t>(T + s), static_cast<std::uint8_t>(v + 1));
        for (int t = 0; t < T; ++t) sel[static_cast<std::size_t>(t)] = kept[static_cast<std::size_t>(t)] ? static_cast<std::uint8_t>(v + 1) : 0;
        b.selections.push_back(std::move(sel));
      }
      std::vector<HeadBatch> batches{std::move(b)};
      const auto errors = recompute(backend, batches);
      st.err_stale = errors.at(0).at(0).rel_error;
      st.err_fresh = errors.at(0).at(1).rel_error;
      st.ratio = st.err_fresh > 0 ? st.err_stale / st.err_fresh : st.err_stale == 0 ? 1.0 : kNaN;
    }
    out.steps.push_back(std::move(st));
  }
  return out;
}

}  // namespace tierlab
