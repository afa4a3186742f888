#include "solvers/problem.hpp"

#include <cmath>

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/base/text.hpp"

namespace tierlab {

namespace {
constexpr auto kQuerySets = enum_table<QuerySet>("query set", {{QuerySet::Decode, "decode"}, {QuerySet::Obs, "obs"}});
}  // namespace

std::string_view to_string(QuerySet q) { return enum_name(kQuerySets, q); }

QuerySet parse_query_set(std::string_view s) { return parse_enum(kQuerySets, s); }

void check_budget(double budget, std::string_view field) {
  if (!std::isfinite(budget) || budget < 0 || budget > kMaxBudget)
    throw InputError(std::string(field) + " = " + format_number(budget) +
                     " bits per key element; it must be finite and in [0, 16] (16: every token exact).");
}

void ProblemOptions::validate() const {
  check_budget(budget, "budget");
  ladder.validate();
}

std::string ProblemOptions::name() const {
  return "B=" + format_number(budget) + " " + std::string(to_string(rate_kind)) + " " + std::string(to_string(scope)) +
         " ladder " + ladder.name() + " " + std::string(to_string(queries));
}

std::vector<MethodInfo> solver_methods() {
  std::vector<FamilySolver> all = family_solvers();
  all.push_back(FamilySolver::Smoothed);  // carried out by allocate (scenarios/pipeline), not a family solver
  const ProblemOptions defaults;
  std::vector<MethodInfo> out;
  for (FamilySolver s : all) {
    MethodInfo m{std::string(to_string(s)), "solver", std::string(solver_summary(s)), "tierlab (solvers/)", {}};
    m.params.push_back({"family", "mixed", "tiers a head may use", {"mixed", "quantize", "evict", "routed"}});
    m.params.push_back({"scope", std::string(to_string(defaults.scope)), "where the budget holds", {"head", "layer", "model"}});
    m.params.push_back({"rate", std::string(to_string(defaults.rate_kind)), "what the budget counts", {"code", "total"}});
    m.params.push_back({"ladder", std::string(kDefaultLadder), "tiers, comma-separated"});
    if (s == FamilySolver::Smoothed) {
      m.params.push_back({"smooth", "avg", "pooling", {"avg", "max"}});
      m.params.push_back({"kernel", "5", "odd window size"});
      m.params.push_back({"padding", "reflect", "edge handling", {"zero", "reflect", "replicate", "none"}});
    }
    if (s == FamilySolver::Exact || s == FamilySolver::Smoothed)
      m.params.push_back({"route_tolerance", "0", "routed, head scope: keep an endpoint within this margin of M"});
    for (MethodParam& p : m.params)
      for (std::size_t i = 0; i < p.choices.size(); ++i) p.help += (i == 0 ? "; one of " : " | ") + p.choices[i];
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace tierlab
