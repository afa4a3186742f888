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
#include "scenarios/pipeline/head.hpp"
#include "solvers/families.hpp"
#include "scenarios/run/table_numbers.hpp"

namespace tierlab {

std::vector<InteriorReport> interior_advantage(const TraceReader& trace, const InteriorOptions& opt,
                                               const std::vector<double>& budgets, Recomputer& backend,
                                               const std::atomic<bool>* stop, const Progress& progress) {
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
  int done = 0;
  // Head-major: each head's costs and rates once, then every budget.
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      throw_if_cancelled(stop);
      const HeadData head = trace.head(l, h);
      const SurrogateCosts sc = surrogate_costs(head, meta.rope, observation_queries(head), ladder);
      const std::vector<double> rates = ladder_rates(head, meta.rope, ladder, opt.rate_kind);
      for (std::size_t b = 0; b < budgets.size(); ++b)
        reps[b].heads.push_back(head_interior(head, meta.rope, sc, rates, opts[b], backend));
      if (progress) progress(++done, total);
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
