// The rate-distortion curve's reports (scenarios/pipeline/rd_curve.hpp): its JSON (the
// `tierlab solve --budgets --json` output, the rd_curve analysis's cell key) and its text table.
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "model/base/text.hpp"
#include "scenarios/pipeline/rd_curve.hpp"

namespace tierlab {

nlohmann::json to_json(const RdCurve& c) {
  const RdCurveOptions& o = c.options;
  nlohmann::json j;
  j["source"] = c.source;
  j["rate_kind"] = to_string(o.solve.rate_kind);
  j["scope"] = to_string(o.solve.scope);
  j["solver"] = to_string(o.solve.solver);
  j["ladder"] = o.solve.ladder.name();
  j["queries"] = to_string(c.queries);
  if (c.queries == RdQueries::Step) j["decode_step"] = o.decode_step;
  j["recompute"] = o.recompute;
  j["heads"] = c.heads;
  j["tokens"] = c.tokens;
  j["budgets"] = o.budgets;
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json fams = nlohmann::json::object();
  for (std::size_t f = 0; f < o.families.size(); ++f) {
    nlohmann::json fj;
    for (std::size_t k = 0; k < o.budgets.size(); ++k) {
      const RdPoint& p = c.at(static_cast<int>(f), static_cast<int>(k));
      fj["feasible"].push_back(p.feasible);
      fj["code_bits"].push_back(p.feasible ? num(p.rate.code_bits) : nullptr);
      fj["total_bits"].push_back(p.feasible ? num(p.rate.total_bits) : nullptr);
      fj["rate"].push_back(p.feasible ? num(p.x) : nullptr);
      fj["surrogate"].push_back(p.feasible ? num(p.surrogate) : nullptr);
      fj["error"].push_back(p.feasible ? num(p.error.rel_error) : nullptr);
      fj["abs_error"].push_back(p.feasible && o.recompute ? num(p.error.abs_error) : nullptr);
      fj["attn_tv"].push_back(p.feasible && o.recompute ? num(p.error.attn_tv) : nullptr);
      fj["share"].push_back({{"Q", p.family_share[0]}, {"E", p.family_share[1]}, {"M", p.family_share[2]}});
      fj["message"].push_back(p.feasible ? "" : p.message);
    }
    fams[std::string(to_string(o.families[f]))] = fj;
  }
  j["families"] = fams;
  for (const RdLadderPoint& l : c.ladder)
    j["ladder_points"].push_back({{"tier", l.tier},
                                  {"code_bits", l.rate.code_bits},
                                  {"total_bits", l.rate.total_bits},
                                  {"rate", l.x},
                                  {"surrogate", num(l.surrogate)},
                                  {"error", num(l.error)},
                                  {"above_hull", l.above_hull},
                                  {"above_surrogate_hull", l.above_surrogate_hull}});
  auto hull_json = [&](const RdHull& h) { return nlohmann::json{{"rate", h.x}, {"value", h.y}, {"label", h.label}}; };
  j["hull"] = hull_json(c.hull);
  j["surrogate_hull"] = hull_json(c.surrogate_hull);
  j["evaluations"] = c.evaluations;
  j["swept_points"] = c.swept_points;
  j["incremental"] = {{"points", c.incremental_points}, {"resets", c.incremental_resets}, {"updates", c.incremental_updates}};
  j["seconds"] = {{"costs", c.seconds_costs}, {"solve", c.seconds_solve}, {"recompute", c.seconds_recompute}, {"total", c.seconds}};
  return j;
}

std::string text_report(const RdCurve& c) {
  const RdCurveOptions& o = c.options;
  std::ostringstream s;
  char buf[256];
  s << "rate-distortion curve: " << c.heads << " head(s) x " << c.tokens << " tokens, scope " << to_string(o.solve.scope)
    << ", solver " << to_string(o.solve.solver) << ", ladder " << o.solve.ladder.name() << ", budgets in "
    << to_string(o.solve.rate_kind) << " bits; errors recomputed on the " << to_string(c.queries) << " queries\n";
  std::snprintf(buf, sizeof buf, "%9s  %-8s  %9s  %9s  %12s  %12s\n", "budget", "family", "code", "total", "surrogate",
                "recomputed");
  s << buf;
  for (std::size_t f = 0; f < o.families.size(); ++f)
    for (std::size_t k = 0; k < o.budgets.size(); ++k) {
      const RdPoint& p = c.at(static_cast<int>(f), static_cast<int>(k));
      if (!p.feasible) {
        std::snprintf(buf, sizeof buf, "%9.4g  %-8s  infeasible: %s\n", p.budget, std::string(to_string(p.family)).c_str(),
                      p.message.c_str());
      } else {
        std::snprintf(buf, sizeof buf, "%9.4g  %-8s  %9.4f  %9.4f  %12.5g  %12.5g\n", p.budget,
                      std::string(to_string(p.family)).c_str(), p.rate.code_bits, p.rate.total_bits, p.surrogate,
                      p.error.rel_error);
      }
      s << buf;
    }
  s << "ladder points (every token at one tier):\n";
  for (const RdLadderPoint& l : c.ladder) {
    std::snprintf(buf, sizeof buf, "  %-10s code %7.4f  total %7.4f  surrogate %12.5g  recomputed %12.5g%s%s\n",
                  l.tier.c_str(), l.rate.code_bits, l.rate.total_bits, l.surrogate, l.error,
                  l.above_hull ? "  above the hull (dominated)" : "",
                  l.above_surrogate_hull ? "  above the surrogate hull" : "");
    s << buf;
  }
  auto hull_text = [&](const char* name, const RdHull& h) {
    s << name << " (" << h.x.size() << " vertices):";
    for (std::size_t i = 0; i < h.x.size(); ++i) s << (i ? ", " : " ") << h.label[i] << " (" << format_number(h.x[i], 4) << ", " << format_number(h.y[i], 4) << ")";
    s << "\n";
  };
  if (o.recompute) hull_text("lower convex hull of the recomputed errors", c.hull);
  hull_text("lower convex hull of the surrogate", c.surrogate_hull);
  std::snprintf(buf, sizeof buf, "time: costs %.3f s, solves %.3f s, recompute %.3f s (%d evaluations), total %.3f s\n",
                c.seconds_costs, c.seconds_solve, c.seconds_recompute, c.evaluations, c.seconds);
  s << buf;
  std::snprintf(buf, sizeof buf, "      %d of %zu points from the parametric sweep; %d E evaluations incremental (%d not nested: full pass), %lld tokens added\n",
                c.swept_points, c.points.size(), c.incremental_points, c.incremental_resets,
                static_cast<long long>(c.incremental_updates));
  s << buf;
  return s.str();
}

}  // namespace tierlab
