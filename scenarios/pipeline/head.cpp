// The per-head pipeline (head.hpp).
#include "scenarios/pipeline/head.hpp"

#include <cmath>

#include "model/dominance.hpp"
#include "model/error.hpp"
#include "model/quantizer.hpp"
#include "model/text.hpp"
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

void InteriorOptions::validate() const {
  if (!std::isfinite(budget) || budget < 0)
    throw InputError("interior budget = " + format_number(budget) + " bits per element; it must be finite and >= 0.");
  ladder.validate();
  exact.validate();
}

double interior_advantage_of(double err_m, double err_q, double err_e) {
  double best = std::numeric_limits<double>::infinity();
  if (!std::isnan(err_q)) best = std::min(best, err_q);
  if (!std::isnan(err_e)) best = std::min(best, err_e);
  if (std::isnan(err_m) || !std::isfinite(best) || !(best > 0)) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - err_m / best;
}

HeadInterior head_interior(const HeadData& head, const RopeParams& rope, const SurrogateCosts& costs,
                           const std::vector<double>& rates, const InteriorOptions& opt, Recomputer& backend) {
  const RateLadder& ladder = opt.ladder;
  HeadInterior hi;
  hi.layer = head.layer;
  hi.kv_head = head.kv_head;
  if (const int two = ladder.index_of_bits(2); two >= 0)
    hi.dominated_2bit = dominance(costs, opt.rate_kind).dominated[static_cast<std::size_t>(two)];
  FamilyOptions fo;
  fo.exact = opt.exact;
  const FamilyChoice families[3] = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
  FamilyOutcome* outcomes[3] = {&hi.Q, &hi.E, &hi.M};
  std::vector<MaterializedKeys> mats;
  std::vector<int> which;
  for (int f = 0; f < 3; ++f) {
    if (f == 0 && ladder.size() <= 2) continue;  // no finite tier: no Q
    const HeadSolution s = solve_head(costs.cost, costs.weights.a, rates, ladder, opt.budget, families[f], fo);
    if (!s.feasible) continue;
    FamilyOutcome& out = *outcomes[f];
    out.feasible = true;
    out.option = s.option;
    out.surrogate = s.objective;
    mats.push_back(materialize(head, rope, ladder, s.tiers));
    out.rate = mats.back().rate;
    which.push_back(f);
  }
  if (!mats.empty()) {  // observation queries: one batch, one variant and one selection per family
    const std::vector<ErrorMetrics> obs = evaluate_obs_queries(head, mats, backend);
    for (std::size_t k = 0; k < mats.size(); ++k) outcomes[which[k]]->obs = obs.at(k);
    for (std::size_t k = 0; k < mats.size(); ++k)
      outcomes[which[k]]->decode = evaluate_decode_steps(head, mats[k].keys, mats[k].kept, backend);
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto err = [nan](const FamilyOutcome& o, bool decode) {
    return o.feasible ? (decode ? o.decode.rel_error : o.obs.rel_error) : nan;
  };
  auto sur = [nan](const FamilyOutcome& o) { return o.feasible ? o.surrogate : nan; };
  if (head.decode_keys.rows() > 0)
    hi.advantage_decode = interior_advantage_of(err(hi.M, true), err(hi.Q, true), err(hi.E, true));
  hi.advantage_obs = interior_advantage_of(err(hi.M, false), err(hi.Q, false), err(hi.E, false));
  hi.advantage_surrogate = interior_advantage_of(sur(hi.M), sur(hi.Q), sur(hi.E));
  return hi;
}

}  // namespace tierlab
