#pragma once
// Policy families and per-head routing (docs/model.md section 6), on top of the shared-ladder
// knapsack solvers (mckp.hpp, exact.hpp, greedy.hpp, waterfill.hpp).
//
// A head h has tokens t = 0..T_h-1 and costs c_t(tau_j) for every tier j of one RateLadder
// (tier-major, SurrogateCosts::cost), rates r_j in bits per element (code or total). At a
// budget B (bits per element over the tokens in scope) the families are tier subsets:
//   Q:tau  dense quantization endpoint  {tau, exact}, one finite tier tau, no eviction
//   E      eviction endpoint            {evict, exact}
//   M      mixed interior               the whole ladder
// Family Q is the best of its options Q:tau (by the objective); it is infeasible when B is
// below every finite tier's rate. Each option's optimum is the knapsack
//   minimise sum_t c_t(j_t)  subject to  sum_t r_{j_t} <= B T,  j_t in the option's tiers
// solved on the option's restricted cost view (the rows of its tiers; tiers of equal rate
// are merged, per token the cheaper one).
//
// Scope head: each head has its own budget B T_h and takes the option of least objective;
// an endpoint (Q or E) is kept instead of M when its objective is <= (1 + route_tolerance)
// times M's (ties and near-ties go to the simpler policy).
//
// Pooled scope (a layer, or the model): the heads share the budget B sum_h T_h and trade it.
// With one common multiplier lambda >= 0, head h takes the option and allocation minimising
//   L_h(lambda) = min_o sum_t min_{j in o} ( c_t(j) + lambda r_j )
// lambda is bisected until the total rate of these minimisers meets the budget; for every
// lambda >= 0
//   LB(lambda) = sum_h L_h(lambda) - lambda B sum_h T_h
// bounds the pooled optimum from below (weak duality), and the larger of LB at the two ends
// of the final bracket is reported as the bound (with several options it equals M's LP
// bound when M is among them). With the options fixed at the feasible end, the leftover
// budget is filled:
//   exact      one knapsack over all tokens in scope on the union ladder, where a tier
//              outside a head's option costs a penalty larger than every allowed
//              allocation (so it is never chosen); the per-head-scope solution is kept
//              instead when it is better (never worse than per-head routing)
//   greedy     one greedy knapsack (greedy or greedy-raw, greedy.hpp) per group of heads
//              sharing an option, each given its group's rate at the multiplier plus the
//              slack the previous groups left
//   waterfill  per head (RateQuant): continuous bits b_h by reverse water-filling on
//              w_h = sum_t a_t with the head's fitted n_h(b) = alpha_h beta_h^(-b), then
//              projected onto the options' tiers with each head dense at one tier (the
//              knapsack over heads with costs sum_t c_t(tau)); heads must have equal T.
// A single-option family (E, M, Q with one finite tier) pooled is one knapsack over the
// concatenated tokens (exact/greedy) or RateQuant (waterfill).
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/quantizers/tier.hpp"
#include "solvers/exact.hpp"
#include "solvers/mckp.hpp"
#include "solvers/waterfill.hpp"

namespace tierlab {

enum class Family { Quantize, Evict, Mixed };
std::string_view to_string(Family);  // "quantize" | "evict" | "mixed"
char family_letter(Family);          // 'Q' | 'E' | 'M'

// What a solve may use per head: one family, or routed (each head picks Q, E or M).
enum class FamilyChoice { Mixed, Quantize, Evict, Routed };
std::string_view to_string(FamilyChoice);              // "mixed" | "quantize" | "evict" | "routed"
FamilyChoice parse_family_choice(std::string_view);    // InputError lists the choices
std::vector<FamilyChoice> family_choices();             // every choice, in table order (menus read this list)

// Where the budget holds: each head alone, each layer's heads together, or all heads.
enum class Scope { Head, Layer, Model };
std::string_view to_string(Scope);      // "head" | "layer" | "model"
Scope parse_scope(std::string_view);

// The solvers, one list of names for the family solvers and `tierlab solve --solver`
// (AllocSolver, scenarios/pipeline/allocate.hpp): exact, greedy (the classic greedy on
// each token's lower convex hull), greedy-raw (the marginal-return greedy on the raw
// ladder; greedy.hpp states both) and waterfill solve a FamilyProblem; smoothed pools the
// costs over neighbouring tokens first and then solves them exact (allocate.hpp), so
// FamilyOptions::validate rejects it.
enum class FamilySolver { Exact, Greedy, GreedyRaw, Waterfill, Smoothed };
std::string_view to_string(FamilySolver);  // "exact" | "greedy" | "greedy-raw" | "waterfill" | "smoothed"
FamilySolver parse_family_solver(std::string_view);
// The solvers a family problem takes (FamilyOptions::solver), in table order: every
// FamilySolver but Smoothed (which allocate carries out). Menus and help read this list.
std::vector<FamilySolver> family_solvers();
// One line on what the solver does, as `tierlab methods --kind solver` prints it.
std::string_view solver_summary(FamilySolver);

// One option of a family: the ladder tiers a head may use.
struct TierOption {
  Family family = Family::Mixed;
  std::vector<int> tiers;  // ladder indices, increasing
  std::string name;        // "Q:kivi2", "E", "M"
};
// Q: one option per finite tier (ladder order); E; M; routed: Q options, then E, then M
// (this order breaks ties). Throws InputError when the ladder has no finite tier and Q is asked.
std::vector<TierOption> family_options(const RateLadder& ladder, FamilyChoice choice);

// One head's costs as the family solvers read them: ladder.size() x T, tier-major, either a
// matrix of its own or T columns of a matrix that holds several heads side by side (a pooled
// scope whose heads lie next to each other in one matrix is solved on it in place, with no
// restricted copy: restrict_costs).
using CostBlock = Eigen::Map<const MatrixRMd, 0, Eigen::OuterStride<>>;

// One head as the family solvers read it (the costs and weights stay owned by the caller).
struct FamilyHead {
  FamilyHead() = default;
  // cost: ladder.size() x T, tier-major: cost(j, t) = c_t(tau_j)
  FamilyHead(const MatrixRMd* cost, const VectorD* weights = nullptr, DistortionModel noise = {});
  // Columns [first, first + count) of `pooled` (ladder.size() x sum of the heads' T).
  static FamilyHead columns(const MatrixRMd& pooled, Eigen::Index first, Eigen::Index count,
                            const VectorD* weights = nullptr, DistortionModel noise = {});

  const VectorD* weights = nullptr;  // a_t, T entries (waterfill only)
  DistortionModel noise;             // n_h(b) on the budget's rate kind (waterfill only)

  bool has_cost() const { return data_ != nullptr; }
  CostBlock cost() const { return CostBlock(data_, rows_, cols_, Eigen::OuterStride<>(stride_)); }
  std::int64_t tokens() const { return cols_; }
  // Where the costs lie (restrict_costs: heads next to each other in one matrix).
  const double* data() const { return data_; }
  Eigen::Index stride() const { return stride_; }

 private:
  const double* data_ = nullptr;
  Eigen::Index rows_ = 0, cols_ = 0, stride_ = 0;
};

struct FamilyProblem {
  std::vector<double> rates;  // r_j of every ladder tier, bits per element (code or total)
  std::vector<FamilyHead> heads;
  double budget = 0.0;  // B, bits per element
  std::int64_t tokens() const;
  void validate(FamilySolver solver) const;  // InputError naming the field
};

// The multiplier routing's evaluations at every lambda it tried (L_h(lambda) summed, the rate,
// each head's option and rate), kept between calls on the same heads' costs and the same
// options at different budgets (the budgets an equal-memory repair tries, a cell's budgets):
// the bisections of nearby budgets try the same first midpoints, and a lambda tried before is
// looked up instead of read from every head's costs again (the same numbers: the same
// arithmetic gave them). A memo used with other costs or options forgets what it held; the
// caller must not change the costs' values while it uses one memo for them.
struct RoutingMemo {
  struct Entry {
    double L = 0.0, rate = 0.0;
    std::vector<int> option;
    std::vector<double> head_rate;
  };
  std::vector<std::uintptr_t> signature;             // the costs (where, how many tokens) and options it holds
  std::unordered_map<std::uint64_t, Entry> entries;  // by the bits of lambda
  long long hits = 0, misses = 0;
};

struct FamilyOptions {
  FamilySolver solver = FamilySolver::Exact;
  double route_tolerance = 0.0;  // >= 0, see the header comment
  ExactOptions exact;
  int max_bisection_steps = 200;
  bool head_incumbent = true;  // exact, pooled: keep the per-head solution when better
  RoutingMemo* routing_memo = nullptr;  // pooled: the multiplier routing's evaluations kept (optional)
  void validate() const;
};

// The costs of some heads restricted to tier subsets, as one shared-ladder instance over
// their concatenated tokens. Restricted tier k has rate rates[k] (distinct, increasing)
// and stands for the ladder tiers members[k] (equal rates), of which each token takes the
// cheapest its head's option allows; a tier the option lacks costs `penalty`.
// Two forms with the same costs: a view in place (`view`, when every restricted tier is one
// ladder tier, the heads lie next to each other in one matrix in the order given, and, when
// options differ, the union has at most 8 tiers: an item's allowed tiers are then one byte),
// or a copy (`cost` and `pick`) otherwise. The view saves a copy of every head's costs in a
// model-wide solve (336 MB at 256 heads x 32k tokens, docs/performance.md).
struct RestrictedCosts {
  std::vector<double> rates;
  std::vector<std::vector<int>> members;
  MatrixRMd cost;                  // copy: rates.size() x N, tier-major
  std::vector<std::uint8_t> pick;  // copy: N x rates.size(): ladder tier behind (item, k); 255 = not allowed
  CostView view;                   // view: data null for the copy
  std::vector<std::uint8_t> allowed;  // view: bit k of allowed[item]; empty when every tier is allowed
  double penalty = 0.0;            // 0 when every tier is allowed for every item
  bool is_view() const { return view.data != nullptr; }
  std::int64_t items() const { return is_view() ? view.items : cost.cols(); }
  MckpInstance instance(double budget) const;
  std::uint8_t ladder_tier(std::int64_t item, int k) const {
    if (is_view())
      return allowed.empty() || ((allowed[static_cast<std::size_t>(item)] >> k) & 1)
                 ? static_cast<std::uint8_t>(members[static_cast<std::size_t>(k)].front())
                 : std::uint8_t{255};
    return pick[static_cast<std::size_t>(item) * rates.size() + static_cast<std::size_t>(k)];
  }
};
// heads[i] with option options[i] (same length), tokens concatenated in that order.
RestrictedCosts restrict_costs(const FamilyProblem&, const std::vector<int>& heads,
                               const std::vector<const TierOption*>& options);

// The multiplier routing of the pooled scope (see the header comment).
struct RoutingMultiplier {
  SolveStatus status = SolveStatus::Feasible;  // Trivial (lambda = 0 fits), Infeasible, or Feasible
  double lambda = 0.0;                // feasible end of the final bracket
  double bound = 0.0;                 // max LB(lambda) over the bracket ends
  std::vector<int> option_of_head;    // option minimising L_h at lambda
  std::vector<double> head_rate_bits; // sum_t r at the minimisers, per head
  double rate_bits = 0.0;             // their total (<= budget)
  int steps = 0;                      // bisection steps
};
RoutingMultiplier route_by_multiplier(const FamilyProblem&, const std::vector<TierOption>& options,
                                      const FamilyOptions& = {});

struct FamilyHeadResult {
  int option = -1;                   // index into FamilyResult::options
  std::vector<std::uint8_t> tiers;   // ladder tier per token
  double objective = 0.0;            // sum_t c_t(tiers_t)
  double rate_bits = 0.0;            // sum_t r_{tiers_t}
  double bound = std::numeric_limits<double>::quiet_NaN();  // head scope: min over options of their bounds
  std::vector<double> option_objectives;  // head scope: objective of every option (NaN when infeasible)
};

// The SolveSummary of the family solve (lambda: pooled, the routing multiplier; rate_budget
// = B sum_h T_h) and its per-head solution.
struct FamilyResult : SolveSummary {
  std::string method;  // how the answer was reached (e.g. "per head", "joint exact", "per-head incumbent")
  std::vector<TierOption> options;
  std::vector<FamilyHeadResult> heads;  // empty when Infeasible

  std::vector<int> family_counts() const;  // heads per Family (Q, E, M)
};

// Each head with its own budget B T_h (scope head).
FamilyResult solve_families_per_head(const FamilyProblem&, const std::vector<TierOption>& options,
                                     const FamilyOptions& = {});
// All heads sharing the budget B sum_h T_h (scope layer or model: the caller passes the heads).
FamilyResult solve_families_pooled(const FamilyProblem&, const std::vector<TierOption>& options,
                                   const FamilyOptions& = {});

}  // namespace tierlab
