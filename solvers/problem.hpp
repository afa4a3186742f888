#pragma once
// The problem every front door solves (docs/model.md section 12, convention 11), defined once.
//
// An allocation gives a tier of the ladder to every (layer, KV head, prompt token) of a scope
// so that the average key rate, counted in the rate kind, is at most the budget; its errors
// are recomputed on a query set. ProblemOptions holds those five parts with one default each:
//   ladder     tau_0 = evict < ... < exact                 default evict,kivi2,kivi4,kivi8,exact
//   rate_kind  how B counts bits (model/quantizers/tier.hpp) default total (codes + metadata:
//              equal memory, convention 5)
//   budget     B, bits per key element, finite, 0 <= B <= 16 (check_budget)   default 4
//   scope      where B holds: head (each KV head spends B T_h d bits), layer, model
//                                                         default head
//   queries    the query set errors are recomputed on: decode (out-of-sample) or obs
//                                                         default decode (convention 3)
// The command line (`tierlab solve`, `tierlab eval --seed`), Python (`solve`, `rd_curve`,
// `interior_advantage`, `Explorer`), scenario files and the explorer embed it, spell its options
// the same way (--ladder, --rate, --budget, --scope, --queries; ladder, rate_kind, budgets,
// scope, queries) and call its validate(); a front door that fixes a part (the per-head
// interior is head scope) says so where it reads it.
#include <string>
#include <string_view>

#include "model/quantizers/tier.hpp"
#include "solvers/families.hpp"
#include "model/base/method_info.hpp"

namespace tierlab {

// The default ladder of every front door.
inline constexpr std::string_view kDefaultLadder = "evict,kivi2,kivi4,kivi8,exact";
// The default rate kind of every front door: total bits (equal memory).
inline constexpr RateKind kDefaultRateKind = RateKind::Total;
// The largest budget: 16 bits per element, every token exact (a larger budget buys nothing).
inline constexpr double kMaxBudget = 16.0;

// Which query set errors are recomputed on (convention 3): decode (out-of-sample) or obs.
enum class QuerySet { Decode, Obs };
std::string_view to_string(QuerySet);          // "decode" | "obs"
QuerySet parse_query_set(std::string_view);    // InputError lists the choices

// The one budget rule: B finite and 0 <= B <= kMaxBudget. Throws InputError
// "FIELD = V bits per key element; it must be finite and in [0, 16]." (FIELD as the caller
// names it: "--budget", "budgets[2]", "SeedProblem.budget").
void check_budget(double budget, std::string_view field);

struct ProblemOptions {
  RateLadder ladder = RateLadder::parse(kDefaultLadder);
  RateKind rate_kind = kDefaultRateKind;
  double budget = 4.0;
  Scope scope = Scope::Head;
  QuerySet queries = QuerySet::Decode;
  // InputError naming the field and value: the budget (check_budget) and a ladder that starts
  // with evict and ends with exact (RateLadder::parse already refuses any other).
  void validate() const;
  // "B=4 total head ladder evict,kivi2,kivi4,kivi8,exact decode"
  std::string name() const;
};

// The solvers of `tierlab solve --solver` (family_solvers() and the smoothed solver) as the
// catalogue lists them, each parameter's default the ProblemOptions default.
std::vector<MethodInfo> solver_methods();

}  // namespace tierlab
