// The per-head pipeline (head.hpp).
#include "scenarios/pipeline/head.hpp"

#include <algorithm>
#include <cmath>

#include "model/dominance.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/base/text.hpp"
#include "scenarios/pipeline/budget_repair.hpp"
#include "scenarios/pipeline/evaluation.hpp"

namespace tierlab {

HeadSolution solve_head(const MatrixRMd& cost, const VectorD& a, const std::vector<double>& rates,
                        const RateLadder& ladder, double budget, FamilyChoice family, const FamilyOptions& options,
                        DistortionModel noise) {
  FamilyProblem p;
  p.rates = rates;
  p.budget = budget;
  p.heads.push_back(FamilyHead{&cost, &a, noise});
  const FamilyResult r = solve_families_per_head(p, family_options(ladder, family), options);
  HeadSolution s;
  if (!r.has_solution()) {
    s.message = r.message;
    return s;
  }
  const FamilyHeadResult& h = r.heads.front();
  s.feasible = true;
  s.option = r.options[static_cast<std::size_t>(h.option)].name;
  s.tiers = h.tiers;
  s.objective = h.objective;
  s.bound = h.bound;
  return s;
}

RepairedHead solve_head_at_equal_memory(const HeadData& head, const RopeParams& rope, const MatrixRMd& cost,
                                        const VectorD& a, const std::vector<double>& rates, const RateLadder& ladder,
                                        double budget, RateKind kind, FamilyChoice family,
                                        const FamilyOptions& options, DistortionModel noise,
                                        const MatrixRMd* true_cost) {
  // Attempts measure the allocation's rate without materialising it (same accounting). The
  // repair keeps the least objective of every attempt that meets B (budget_repair.hpp).
  auto attempt = [&](double b) {
    HeadSolution r = solve_head(cost, a, rates, ladder, b, family, options, noise);
    if (r.feasible && true_cost) {
      double obj = 0;
      for (std::size_t t = 0; t < r.tiers.size(); ++t) obj += (*true_cost)(r.tiers[t], static_cast<Eigen::Index>(t));
      r.objective = obj;
    }
    return r;
  };
  RepairedSolution<HeadSolution> rep = repair_to_measured_budget<HeadSolution>(
      budget, attempt, [](const HeadSolution& r) { return r.feasible; },
      [&](const HeadSolution& r) { return rate_of(allocation_rate(head, rope, ladder, r.tiers), kind); },
      [](const HeadSolution& r) { return r.objective; });
  RepairedHead out;
  out.solved_budget = budget;
  if (rep.first_infeasible) {
    out.solution = attempt(budget);  // its message says why
    return out;
  }
  out.repaired = rep.repaired;
  if (!rep.best) {
    out.solution.message = "no allocation of family " + std::string(to_string(family)) + " measures <= B = " +
                           format_number(budget) + " " + std::string(to_string(kind)) + " bits once materialised";
    return out;
  }
  out.solution = std::move(*rep.best);
  out.solved_budget = rep.solved_budget;
  return out;
}

BudgetedSolution solve_within_budget(const HeadData& head, const RopeParams& rope, const SurrogateCosts& costs,
                                     const std::vector<double>& rates, const RateLadder& ladder, double budget,
                                     RateKind kind, FamilyChoice family, const FamilyOptions& options) {
  const RepairedHead r = solve_head_at_equal_memory(head, rope, costs.cost, costs.weights.a, rates, ladder, budget, kind,
                                                    family, options);
  BudgetedSolution out;
  out.solution = r.solution;
  out.solved_budget = r.solved_budget;
  out.repaired = r.repaired;
  if (out.solution.feasible) out.keys = materialize(head, rope, ladder, out.solution.tiers);  // only the one returned
  return out;
}

void InteriorOptions::validate() const {
  check_budget(budget, "interior budget");
  if (!std::isfinite(error_floor) || error_floor < 0)
    throw InputError("interior error_floor = " + format_number(error_floor) + "; it must be finite and >= 0.");
  ladder.validate();
  exact.validate();
  validate_dense_quantizers(dense_quantizers, "interior dense_routing");
}

bool all_below_floor(double err_m, double err_q, double err_e, double floor) {
  int defined = 0;
  for (const double e : {err_m, err_q, err_e}) {
    if (std::isnan(e)) continue;
    ++defined;
    if (e > floor) return false;
  }
  return defined > 0;
}

double interior_advantage_of(double err_m, double err_q, double err_e, double floor) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (floor > 0 && all_below_floor(err_m, err_q, err_e, floor)) return nan;
  auto f = [floor](double e) { return std::isnan(e) ? e : std::max(e, floor); };
  double best = std::numeric_limits<double>::infinity();
  if (!std::isnan(err_q)) best = std::min(best, f(err_q));
  if (!std::isnan(err_e)) best = std::min(best, f(err_e));
  if (std::isnan(err_m) || !std::isfinite(best) || !(best > 0)) return nan;
  return 1.0 - f(err_m) / best;
}

HeadInterior head_interior(const HeadData& head, const RopeParams& rope, const SurrogateCosts& costs,
                           const std::vector<double>& rates, const InteriorOptions& opt, Recomputer& backend,
                           HeadEvaluations* evaluations) {
  const RateLadder& ladder = opt.ladder;
  HeadInterior hi;
  hi.layer = head.layer;
  hi.kv_head = head.kv_head;
  if (const int two = ladder.index_of_bits(2); two >= 0) {
    const DominanceReport d = dominance(costs, opt.rate_kind);
    hi.dominated_2bit = d.dominated[static_cast<std::size_t>(two)];
    hi.R_2bit = d.R[static_cast<std::size_t>(two)];
  }
  FamilyOptions fo;
  fo.exact = opt.exact;
  const FamilyChoice families[3] = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
  FamilyOutcome* outcomes[3] = {&hi.Q, &hi.E, &hi.M};
  std::vector<MaterializedKeys> mats;  // the distinct allocations
  int mat_of[3] = {-1, -1, -1};        // family (Q, E, M) -> index into mats
  for (int f = 0; f < 3; ++f) {
    if (f == 0 && ladder.size() <= 2) continue;  // no finite tier: no Q
    BudgetedSolution b =
        solve_within_budget(head, rope, costs, rates, ladder, opt.budget, opt.rate_kind, families[f], fo);
    if (!b.solution.feasible) continue;
    FamilyOutcome& out = *outcomes[f];
    out.feasible = true;
    out.option = b.solution.option;
    out.surrogate = b.solution.objective;
    out.repaired = b.repaired;
    out.rate = b.keys.rate;
    mat_of[f] = static_cast<int>(mats.size());
    mats.push_back(std::move(b.keys));
  }
  // M's tiers contain Q's and E's: once the budget is the measured one, an endpoint's
  // allocation that meets it is an M allocation too, so M* is the best of the three by the
  // surrogate (a repaired M can otherwise lose to an endpoint whose groups fill evenly).
  for (int f = 0; f < 2; ++f) {
    if (mat_of[f] < 0 || mat_of[2] < 0 || !(outcomes[f]->surrogate < hi.M.surrogate)) continue;
    hi.M.surrogate = outcomes[f]->surrogate;
    hi.M.option = "M=" + outcomes[f]->option;
    hi.M.rate = outcomes[f]->rate;
    mat_of[2] = mat_of[f];  // the same allocation: recomputed once
  }
  if (!mats.empty()) {  // one batch per query set, one variant and one selection per allocation
    const std::vector<ErrorMetrics> obs =
        evaluations ? evaluations->obs(mats) : evaluate_obs_queries(head, mats, backend);
    const std::vector<ErrorMetrics> dec =
        evaluations ? evaluations->decode(std::move(mats)) : evaluate_decode_steps(head, std::move(mats), backend);
    for (int f = 0; f < 3; ++f)
      if (mat_of[f] >= 0) {
        outcomes[f]->obs = obs.at(static_cast<std::size_t>(mat_of[f]));
        outcomes[f]->decode = dec.at(static_cast<std::size_t>(mat_of[f]));
      }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto err = [nan](const FamilyOutcome& o, bool decode) {
    return o.feasible ? (decode ? o.decode.rel_error : o.obs.rel_error) : nan;
  };
  auto sur = [nan](const FamilyOutcome& o) { return o.feasible ? o.surrogate : nan; };
  const double f = opt.error_floor;
  if (head.decode_keys.rows() > 0) {
    hi.advantage_decode = interior_advantage_of(err(hi.M, true), err(hi.Q, true), err(hi.E, true), f);
    hi.below_floor_decode = all_below_floor(err(hi.M, true), err(hi.Q, true), err(hi.E, true), f);
  }
  hi.advantage_obs = interior_advantage_of(err(hi.M, false), err(hi.Q, false), err(hi.E, false), f);
  hi.below_floor_obs = all_below_floor(err(hi.M, false), err(hi.Q, false), err(hi.E, false), f);
  hi.advantage_surrogate = interior_advantage_of(sur(hi.M), sur(hi.Q), sur(hi.E));
  if (!opt.dense_quantizers.empty())
    hi.dense = route_dense(head, rope, opt.dense_quantizers, opt.budget, opt.rate_kind, hi.M.feasible, sur(hi.M),
                           hi.M.obs, hi.M.decode, backend);
  return hi;
}

}  // namespace tierlab
