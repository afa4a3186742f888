// Routing between the interior and dense quantizers outside the ladder (dense_routing.hpp).
#include "scenarios/pipeline/dense_routing.hpp"

#include <cmath>

#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "scenarios/pipeline/evaluation.hpp"

namespace tierlab {

namespace {

const TierForm* dense_form(const std::string& q) {
  for (const TierForm& f : tier_forms())
    if (f.prefix == q && f.has_bits && f.kind != QuantizerKind::Evict && f.kind != QuantizerKind::Exact &&
        f.bits_param != "budget")  // kvcobra's b is an allocation budget, not a dense quantizer's bits
      return &f;
  return nullptr;
}

}  // namespace

void validate_dense_quantizers(const std::vector<std::string>& quantizers, const std::string& where) {
  for (const std::string& q : quantizers)
    if (!dense_form(q)) {
      std::string names;
      for (const TierForm& f : tier_forms())
        if (dense_form(f.prefix)) names += (names.empty() ? "" : ", ") + f.prefix;
      throw InputError(where + ": '" + q + "' is not a dense quantizer with a bits parameter; choose from " + names + ".");
    }
}

Tier dense_tier_at_budget(const HeadData& head, const RopeParams& rope, const std::string& q, double budget,
                          RateKind kind) {
  const TierForm* f = dense_form(q);
  if (!f) validate_dense_quantizers({q}, "dense routing");
  const double tol = 1e-12 * std::max(1.0, budget);
  // Code bits <= rate in either kind, so b above B never fits.
  const int top = std::min(f->max_bits, static_cast<int>(std::floor(budget + tol)));
  for (int b = top; b >= f->min_bits; --b) {
    const Tier t = Tier::parse(q + std::to_string(b));
    if (rate_of(nominal_rate(head, rope, t), kind) <= budget + tol) return t;
  }
  return Tier(QuantizerKind::Evict, 0);  // none: evict marks "no candidate"
}

DenseRouting route_dense(const HeadData& head, const RopeParams& rope, const std::vector<std::string>& quantizers,
                         double budget, RateKind kind, bool has_m, double m_surrogate, const ErrorMetrics& m_obs,
                         const ErrorMetrics& m_decode, Recomputer& backend) {
  DenseRouting out;
  const bool decode = head.decode_keys.rows() > 0;
  const CausalQueries obs = observation_queries(head);
  for (const std::string& q : quantizers) {
    const Tier t = dense_tier_at_budget(head, rope, q, budget, kind);
    if (t.kind == QuantizerKind::Evict) continue;
    RateLadder ladder;
    ladder.tiers = {Tier(QuantizerKind::Evict, 0), t, Tier(QuantizerKind::Exact, 16)};
    const SurrogateCosts sc = surrogate_costs(head, rope, obs, ladder);
    DenseCandidate c;
    c.tier = t.name();
    c.surrogate = sc.cost.row(1).sum();
    const std::vector<std::uint8_t> all(static_cast<std::size_t>(head.keys.rows()), 1);
    const MaterializedKeys mk = materialize(head, rope, ladder, all);
    c.rate = mk.rate;
    c.obs = evaluate_obs_queries(head, mk.keys, mk.kept, backend);
    if (decode) c.decode = evaluate_decode_steps(head, mk.keys, mk.kept, backend);
    out.candidates.push_back(std::move(c));
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto route = [&](auto score, double m_score) {
    DenseRoute r;
    double best = std::numeric_limits<double>::infinity();
    if (has_m && std::isfinite(m_score)) {
      best = m_score, r.choice = "M", r.err_obs = m_obs.rel_error;
      r.err_decode = decode ? m_decode.rel_error : nan;
    }
    for (const DenseCandidate& c : out.candidates)
      if (const double v = score(c); v < best) {  // ties stay with M (the ladder's own allocation)
        best = v, r.choice = c.tier, r.err_obs = c.obs.rel_error;
        r.err_decode = decode ? c.decode.rel_error : nan;
      }
    return r;
  };
  out.by_surrogate = route([](const DenseCandidate& c) { return c.surrogate; }, m_surrogate);
  out.by_obs = route([](const DenseCandidate& c) { return c.obs.rel_error; }, m_obs.rel_error);
  return out;
}

}  // namespace tierlab
