// The interior advantage A = 1 - err(M*) / min(err(Q*), err(E*)) (interior.hpp).
#include "scenarios/pipeline/advantage.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/dominance.hpp"
#include "model/error.hpp"
#include "model/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/report.hpp"
#include "solvers/families.hpp"
#include "scenarios/run/table_numbers.hpp"

namespace tierlab {

void InteriorOptions::validate() const {
  if (!std::isfinite(budget) || budget < 0)
    throw InputError("interior budget = " + std::to_string(budget) + " bits per element; it must be finite and >= 0.");
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

InteriorReport interior_advantage(const TraceReader& trace, const InteriorOptions& opt, Recomputer& backend,
                                  const InteriorProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  opt.validate();
  const TraceMeta& meta = trace.meta();
  InteriorReport rep;
  rep.options = opt;
  rep.trace_path = trace.path();
  rep.backend = backend.description();
  rep.has_decode = meta.decode_steps > 0;
  const RateLadder& ladder = opt.ladder;
  std::vector<double> rates;
  for (const Tier& t : ladder.tiers) rates.push_back(rate_of(t.nominal_rate(meta.head_dim), opt.rate_kind));
  bool has_finite = ladder.size() > 2;
  const std::vector<TierOption> q_opts = has_finite ? family_options(ladder, FamilyChoice::Quantize)
                                                    : std::vector<TierOption>{};
  const std::vector<TierOption> e_opts = family_options(ladder, FamilyChoice::Evict);
  const std::vector<TierOption> m_opts = family_options(ladder, FamilyChoice::Mixed);
  bool has_two_bit = false;
  for (int j = 1; j + 1 < ladder.size(); ++j) has_two_bit |= ladder.tiers[j].bits == 2;
  FamilyOptions fo;
  fo.exact = opt.exact;

  std::vector<DominanceReport> dom;
  const int total = meta.n_heads();
  int done = 0;
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      const HeadData head = trace.head(l, h);
      const SurrogateCosts sc = surrogate_costs(head.keys, head.values, head.obs_queries, ladder);
      FamilyProblem p;
      p.rates = rates;
      p.budget = opt.budget;
      p.heads.push_back(FamilyHead{&sc.cost, &sc.weights.a, {}});

      HeadInterior hi;
      hi.layer = l;
      hi.kv_head = h;
      if (has_two_bit) {
        dom.push_back(dominance(sc, opt.rate_kind));
        for (int j = 1; j + 1 < ladder.size(); ++j)
          if (ladder.tiers[j].bits == 2) hi.dominated_2bit = hi.dominated_2bit || dom.back().dominated[j];
      }
      FamilyOutcome* outcomes[3] = {&hi.Q, &hi.E, &hi.M};
      const std::vector<TierOption>* family_opts[3] = {&q_opts, &e_opts, &m_opts};
      std::vector<MaterializedKeys> mats;
      std::vector<int> which;
      for (int f = 0; f < 3; ++f) {
        if (family_opts[f]->empty()) continue;
        const FamilyResult r = solve_families_per_head(p, *family_opts[f], fo);
        if (!r.has_solution()) continue;
        FamilyOutcome& out = *outcomes[f];
        const FamilyHeadResult& fr = r.heads.front();
        out.feasible = true;
        out.option = r.options[static_cast<std::size_t>(fr.option)].name;
        out.surrogate = fr.objective;
        mats.push_back(materialize(head.keys, ladder, fr.tiers));
        out.rate = mats.back().rate;
        which.push_back(f);
      }
      // Observation queries: one batch, one variant and one selection per family.
      if (!mats.empty()) {
        const std::vector<ErrorMetrics> obs = evaluate_obs_queries(head, mats, backend);
        for (std::size_t k = 0; k < mats.size(); ++k) outcomes[which[k]]->obs = obs.at(k);
        for (std::size_t k = 0; k < mats.size(); ++k)
          outcomes[which[k]]->decode = evaluate_decode_steps(head, mats[k].keys, mats[k].kept, backend);
      }
      auto err = [](const FamilyOutcome& o, bool decode) {
        return o.feasible ? (decode ? o.decode.rel_error : o.obs.rel_error) : std::numeric_limits<double>::quiet_NaN();
      };
      auto sur = [](const FamilyOutcome& o) { return o.feasible ? o.surrogate : std::numeric_limits<double>::quiet_NaN(); };
      if (rep.has_decode) hi.advantage_decode = interior_advantage_of(err(hi.M, true), err(hi.Q, true), err(hi.E, true));
      hi.advantage_obs = interior_advantage_of(err(hi.M, false), err(hi.Q, false), err(hi.E, false));
      hi.advantage_surrogate = interior_advantage_of(sur(hi.M), sur(hi.Q), sur(hi.E));
      rep.heads.push_back(hi);
      if (progress) progress(++done, total);
    }

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
  if (has_two_bit && !dom.empty()) rep.dominated_share = dominated_share(dom, ladder, 2);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
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
std::string fmt(double v, const char* f) { return format_or_nan(v, f, "-"); }

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
                    fmt(h.Q.feasible ? h.Q.decode.rel_error : NAN, "%.3e").c_str(),
                    fmt(h.E.decode.rel_error, "%.3e").c_str(), fmt(h.M.decode.rel_error, "%.3e").c_str(),
                    fmt(h.advantage_decode, "%.4f").c_str(), fmt(h.advantage_obs, "%.4f").c_str(),
                    fmt(h.advantage_surrogate, "%.4f").c_str(), h.dominated_2bit ? "yes" : "no");
      os << buf;
    }
  }
  std::snprintf(buf, sizeof buf,
                "mean A: decode %s (%d heads), obs %s (%d heads), surrogate %s (%d heads); dominated share %s\n",
                fmt(r.mean_advantage_decode, "%.4f").c_str(), r.defined_decode, fmt(r.mean_advantage_obs, "%.4f").c_str(),
                r.defined_obs, fmt(r.mean_advantage_surrogate, "%.4f").c_str(), r.defined_surrogate,
                fmt(r.dominated_share, "%.3f").c_str());
  os << buf;
  return os.str();
}

}  // namespace tierlab
