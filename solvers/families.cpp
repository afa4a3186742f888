// Policy families, restricted cost views and per-head routing (families.hpp).
#include "solvers/families.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "model/base/phases.hpp"
#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "solvers/greedy.hpp"
#include "solvers/problem.hpp"

namespace tierlab {

// ---- names ------------------------------------------------------------------------

constexpr auto kFamilies = enum_table<Family>("family", {{Family::Quantize, "quantize"},
                                                        {Family::Evict, "evict"},
                                                        {Family::Mixed, "mixed"}});
constexpr auto kFamilyLetters = enum_table<Family>("family letter", {{Family::Quantize, "Q"},
                                                                     {Family::Evict, "E"},
                                                                     {Family::Mixed, "M"}});
constexpr auto kFamilyChoices = enum_table<FamilyChoice>("family", {{FamilyChoice::Mixed, "mixed"},
                                                                    {FamilyChoice::Quantize, "quantize"},
                                                                    {FamilyChoice::Evict, "evict"},
                                                                    {FamilyChoice::Routed, "routed"}});
constexpr auto kScopes = enum_table<Scope>("scope", {{Scope::Head, "head"}, {Scope::Layer, "layer"}, {Scope::Model, "model"}});
constexpr auto kFamilySolvers = enum_table<FamilySolver>("solver", {{FamilySolver::Exact, "exact"},
                                                                    {FamilySolver::Greedy, "greedy"},
                                                                    {FamilySolver::GreedyRaw, "greedy-raw"},
                                                                    {FamilySolver::Waterfill, "waterfill"},
                                                                    {FamilySolver::Smoothed, "smoothed"}});

std::string_view to_string(Family f) { return enum_name(kFamilies, f); }

char family_letter(Family f) { return enum_name(kFamilyLetters, f)[0]; }

std::string_view to_string(FamilyChoice f) { return enum_name(kFamilyChoices, f); }

FamilyChoice parse_family_choice(std::string_view s) { return parse_enum(kFamilyChoices, s); }

std::string_view to_string(Scope s) { return enum_name(kScopes, s); }

Scope parse_scope(std::string_view s) { return parse_enum(kScopes, s); }

std::string_view to_string(FamilySolver s) { return enum_name(kFamilySolvers, s); }

FamilySolver parse_family_solver(std::string_view s) { return parse_enum(kFamilySolvers, s); }

std::vector<FamilyChoice> family_choices() {
  std::vector<FamilyChoice> out;
  for (const auto& n : kFamilyChoices.names) out.push_back(n.value);
  return out;
}

std::string_view solver_summary(FamilySolver s) {
  switch (s) {
    case FamilySolver::Exact: return "the certified knapsack optimum: Lagrangian LP bound, integer gap closed by core DP";
    case FamilySolver::Greedy: return "the classic MCKP greedy on each token's lower convex hull";
    case FamilySolver::GreedyRaw: return "marginal-return greedy on the raw ladder (ignores hull dominance)";
    case FamilySolver::Waterfill:
      return "reverse water-filling on the fitted n_h(b) = alpha beta^(-b): per token (head scope), per head "
             "(layer/model scope), projected on the tiers";
    case FamilySolver::Smoothed:
      return "costs pooled over neighbouring tokens (avg or max, odd kernel), then solved exactly";
  }
  return "";
}

std::vector<FamilySolver> family_solvers() {
  std::vector<FamilySolver> out;
  for (const auto& n : kFamilySolvers.names)
    if (n.value != FamilySolver::Smoothed) out.push_back(n.value);
  return out;
}

std::vector<TierOption> family_options(const RateLadder& ladder, FamilyChoice choice) {
  ladder.validate();
  const int ex = ladder.exact_index();
  std::vector<TierOption> out;
  const bool q = choice == FamilyChoice::Quantize || choice == FamilyChoice::Routed;
  const bool e = choice == FamilyChoice::Evict || choice == FamilyChoice::Routed;
  const bool m = choice == FamilyChoice::Mixed || choice == FamilyChoice::Routed;
  if (q) {
    for (int j = 1; j < ex; ++j) out.push_back({Family::Quantize, {j, ex}, "Q:" + ladder.tiers[j].name()});
    if (ex <= 1 && choice == FamilyChoice::Quantize)
      throw InputError("ladder '" + ladder.name() + "' has no finite tier between evict and exact; family quantize needs one.");
  }
  if (e) out.push_back({Family::Evict, {0, ex}, "E"});
  if (m) {
    TierOption all{Family::Mixed, {}, "M"};
    for (int j = 0; j < ladder.size(); ++j) all.tiers.push_back(j);
    out.push_back(std::move(all));
  }
  return out;
}

// ---- problem --------------------------------------------------------------------

std::int64_t FamilyProblem::tokens() const {
  std::int64_t n = 0;
  for (const auto& h : heads) n += h.tokens();
  return n;
}

namespace {


}  // namespace

void FamilyProblem::validate(FamilySolver solver) const {
  if (rates.empty()) throw InputError("FamilyProblem.rates is empty; give the rate of every ladder tier.");
  for (std::size_t j = 0; j < rates.size(); ++j)
    if (!std::isfinite(rates[j]) || rates[j] < 0)
      throw InputError("FamilyProblem.rates[" + std::to_string(j) + "] = " + number_text(rates[j]) +
                       " bits; rates must be finite and >= 0.");
  check_budget(budget, "FamilyProblem.budget");
  for (std::size_t h = 0; h < heads.size(); ++h) {
    const FamilyHead& hd = heads[h];
    if (!hd.has_cost()) throw InputError("FamilyProblem.heads[" + std::to_string(h) + "].cost is null.");
    if (hd.cost().rows() != static_cast<Eigen::Index>(rates.size()))
      throw InputError("FamilyProblem.heads[" + std::to_string(h) + "].cost has " + std::to_string(hd.cost().rows()) +
                       " tier rows but the ladder has " + std::to_string(rates.size()) + " rates.");
    if (hd.cost().cols() < 1) throw InputError("FamilyProblem.heads[" + std::to_string(h) + "] has no tokens.");
    if (solver == FamilySolver::Waterfill) {
      if (!hd.weights || hd.weights->size() != hd.cost().cols())
        throw InputError("FamilyProblem.heads[" + std::to_string(h) +
                         "].weights must hold a_t for every token when the solver is waterfill.");
      if (!(hd.noise.alpha > 0) || !(hd.noise.beta > 1) || !std::isfinite(hd.noise.alpha) || !std::isfinite(hd.noise.beta))
        throw InputError("FamilyProblem.heads[" + std::to_string(h) + "].noise = (alpha " + number_text(hd.noise.alpha) +
                         ", beta " + number_text(hd.noise.beta) + "); waterfill needs alpha > 0 and beta > 1.");
    }
  }
}

void FamilyOptions::validate() const {
  if (solver == FamilySolver::Smoothed)
    throw InputError("FamilyOptions.solver = smoothed; the family solvers are exact, greedy, greedy-raw and waterfill "
                     "(smoothed pools the costs first and then solves them exact: scenarios/pipeline/allocate.hpp).");
  if (!(route_tolerance >= 0) || !std::isfinite(route_tolerance))
    throw InputError("FamilyOptions.route_tolerance = " + number_text(route_tolerance) + "; it must be finite and >= 0.");
  if (max_bisection_steps < 1)
    throw InputError("FamilyOptions.max_bisection_steps = " + std::to_string(max_bisection_steps) + "; it must be >= 1.");
  exact.validate();
}

std::vector<int> FamilyResult::family_counts() const {
  std::vector<int> c(3, 0);
  for (const auto& h : heads)
    if (h.option >= 0) ++c[static_cast<int>(options[static_cast<std::size_t>(h.option)].family)];
  return c;
}

// ---- restricted cost views ----------------------------------------------------

FamilyHead::FamilyHead(const MatrixRMd* cost, const VectorD* w, DistortionModel n) : weights(w), noise(n) {
  if (cost) {
    data_ = cost->data();
    rows_ = cost->rows();
    cols_ = cost->cols();
    stride_ = cost->cols();
  }
}

FamilyHead FamilyHead::columns(const MatrixRMd& pooled, Eigen::Index first, Eigen::Index count, const VectorD* w,
                               DistortionModel n) {
  if (first < 0 || count < 0 || first + count > pooled.cols())
    throw InputError("FamilyHead::columns: columns [" + std::to_string(first) + ", " + std::to_string(first + count) +
                     ") are outside the " + std::to_string(pooled.cols()) + " columns of the pooled costs.");
  FamilyHead h(nullptr, w, n);
  h.data_ = pooled.data() + first;
  h.rows_ = pooled.rows();
  h.cols_ = count;
  h.stride_ = pooled.cols();
  return h;
}

MckpInstance RestrictedCosts::instance(double budget) const {
  MckpInstance inst;
  inst.rates = rates;
  if (is_view()) {
    inst.cost = view;
    inst.cost.allowed = allowed.empty() ? nullptr : allowed.data();
    inst.cost.penalty = penalty;
  } else {
    inst.cost = CostView::of_tier_major(cost);
  }
  inst.budget = budget;
  return inst;
}

namespace {

// Ladder tiers grouped by equal rate, groups in increasing rate (members in ladder order).
void rate_groups(const std::vector<int>& tiers, const std::vector<double>& rates, std::vector<double>& group_rate,
                 std::vector<std::vector<int>>& members) {
  std::vector<int> sorted = tiers;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) { return rates[a] < rates[b]; });
  group_rate.clear();
  members.clear();
  for (int j : sorted) {
    if (group_rate.empty() || rates[j] != group_rate.back()) {
      group_rate.push_back(rates[j]);
      members.emplace_back();
    }
    members.back().push_back(j);
  }
}

// restrict_costs without a copy, where the costs allow it (RestrictedCosts states when):
// the view reads the heads' rows in place; a tier an option lacks reads as the penalty,
// computed as the copy computes it (the same sum in the same order), so both forms give the
// solvers the same numbers. False when the copy is needed.
bool restrict_in_place(const FamilyProblem& p, const std::vector<int>& heads,
                       const std::vector<const TierOption*>& options, std::int64_t N, RestrictedCosts& rc) {
  const int m = static_cast<int>(rc.rates.size());
  if (heads.empty() || N < 1) return false;
  for (const auto& group : rc.members)
    if (group.size() != 1) return false;  // equal rates: each token takes the cheaper member
  const FamilyHead& first = p.heads[static_cast<std::size_t>(heads.front())];
  const double* next = first.data();
  for (int h : heads) {
    const FamilyHead& hd = p.heads[static_cast<std::size_t>(h)];
    if (hd.data() != next || hd.stride() != first.stride()) return false;
    next = hd.data() + hd.tokens();
  }
  // Which restricted tiers each head's option allows (bit k).
  std::vector<std::uint8_t> head_bits(heads.size(), 0);
  bool every = true;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    for (int k = 0; k < m; ++k)
      for (int j : options[i]->tiers)
        if (j == rc.members[static_cast<std::size_t>(k)].front()) head_bits[i] |= static_cast<std::uint8_t>(1u << k);
    every &= head_bits[i] == static_cast<std::uint8_t>((1u << m) - 1);
  }
  if (!every && m > 8) return false;
  rc.view.data = first.data();
  rc.view.items = N;
  rc.view.tiers = m;
  rc.view.item_stride = 1;
  rc.view.tier_stride = first.stride();
  rc.view.offsets.resize(static_cast<std::size_t>(m));
  for (int k = 0; k < m; ++k)
    rc.view.offsets[static_cast<std::size_t>(k)] = rc.members[static_cast<std::size_t>(k)].front() * first.stride();
  if (every) return true;
  rc.allowed.resize(static_cast<std::size_t>(N));
  long double abs_sum = 0.0L;
  std::int64_t base = 0;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const CostBlock c = p.heads[static_cast<std::size_t>(heads[i])].cost();
    const std::int64_t T = c.cols();
    std::fill(rc.allowed.begin() + base, rc.allowed.begin() + base + T, head_bits[i]);
    for (std::int64_t t = 0; t < T; ++t) {
      double worst = 0.0;
      for (int k = 0; k < m; ++k)
        if ((head_bits[i] >> k) & 1) worst = std::max(worst, std::fabs(c(rc.members[static_cast<std::size_t>(k)].front(), t)));
      abs_sum += worst;
    }
    base += T;
  }
  rc.penalty = abs_sum > 0 ? static_cast<double>(4.0L * abs_sum) : 1.0;
  return true;
}

}  // namespace

RestrictedCosts restrict_costs(const FamilyProblem& p, const std::vector<int>& heads,
                               const std::vector<const TierOption*>& options) {
  if (heads.size() != options.size())
    throw InputError("restrict_costs: " + std::to_string(heads.size()) + " heads but " + std::to_string(options.size()) +
                     " options; give one option per head.");
  RestrictedCosts rc;
  std::vector<int> all;
  for (const TierOption* o : options) all.insert(all.end(), o->tiers.begin(), o->tiers.end());
  for (int j : all)
    if (j < 0 || j >= static_cast<int>(p.rates.size()))
      throw InputError("restrict_costs: tier index " + std::to_string(j) + " is outside the ladder of " +
                       std::to_string(p.rates.size()) + " tiers.");
  rate_groups(all, p.rates, rc.rates, rc.members);
  const int m = static_cast<int>(rc.rates.size());
  std::int64_t N = 0;
  for (int h : heads) N += p.heads.at(static_cast<std::size_t>(h)).tokens();
  if (restrict_in_place(p, heads, options, N, rc)) return rc;
  rc.cost.resize(m, N);
  rc.pick.assign(static_cast<std::size_t>(N) * m, 255);
  const int L = static_cast<int>(p.rates.size());
  bool needs_penalty = false;
  long double abs_sum = 0.0L;
  std::int64_t base = 0;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const CostBlock c = p.heads[static_cast<std::size_t>(heads[i])].cost();
    std::vector<char> allowed(static_cast<std::size_t>(L), 0);
    for (int j : options[i]->tiers) allowed[static_cast<std::size_t>(j)] = 1;
    const std::int64_t T = c.cols();
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t item = base + t;
      double worst = 0.0;
      for (int k = 0; k < m; ++k) {
        double best = std::numeric_limits<double>::infinity();
        int arg = -1;
        for (int j : rc.members[static_cast<std::size_t>(k)]) {
          if (!allowed[static_cast<std::size_t>(j)]) continue;
          const double v = c(j, t);
          if (arg < 0 || v < best) {
            best = v;
            arg = j;
          }
        }
        if (arg < 0) {
          needs_penalty = true;
          rc.cost(k, item) = 0.0;  // set below
        } else {
          rc.cost(k, item) = best;
          rc.pick[static_cast<std::size_t>(item) * m + k] = static_cast<std::uint8_t>(arg);
          worst = std::max(worst, std::fabs(best));
        }
      }
      abs_sum += worst;
    }
    base += T;
  }
  if (needs_penalty) {
    // Any allocation using a penalised tier costs at least penalty - abs_sum > abs_sum,
    // more than any allowed allocation (whose cost is at most abs_sum).
    rc.penalty = abs_sum > 0 ? static_cast<double>(4.0L * abs_sum) : 1.0;
    for (std::int64_t item = 0; item < N; ++item)
      for (int k = 0; k < m; ++k)
        if (rc.pick[static_cast<std::size_t>(item) * m + k] == 255) rc.cost(k, item) = rc.penalty;
  }
  return rc;
}

// ---- solving one restricted instance ---------------------------------------------

namespace {

MckpResult solve_instance(const FamilyProblem& p, const RestrictedCosts& rc, const std::vector<int>& heads,
                          double budget, const FamilyOptions& opt) {
  const MckpInstance inst = rc.instance(budget);
  switch (opt.solver) {
    case FamilySolver::Exact:
    case FamilySolver::Smoothed:  // rejected by FamilyOptions::validate
      return solve_exact(inst, opt.exact);
    case FamilySolver::Greedy: return solve_greedy(inst);
    case FamilySolver::GreedyRaw: {
      GreedyOptions raw;
      raw.hull = false;
      return solve_greedy(inst, raw);
    }
    case FamilySolver::Waterfill: {
      // Per token (RDKV): weights a_t, each token with its head's fitted n_h(b).
      WaterfillProblem wp;
      wp.weights.reserve(static_cast<std::size_t>(rc.items()));
      for (int h : heads) {
        const FamilyHead& hd = p.heads[static_cast<std::size_t>(h)];
        for (Eigen::Index t = 0; t < hd.weights->size(); ++t) {
          wp.weights.push_back((*hd.weights)[t]);
          if (heads.size() > 1) wp.models.push_back(hd.noise);
        }
      }
      if (heads.size() == 1) wp.models = {p.heads[static_cast<std::size_t>(heads[0])].noise};
      wp.budget = std::max(0.0, budget);
      wp.max_bits = rc.rates.back() > 0 ? rc.rates.back() : 1.0;
      return waterfill(wp, inst).projected;
    }
  }
  throw std::logic_error("unknown family solver");
}

// The restricted choice mapped back to ladder tiers: out[i] for heads[i]. False when a
// penalised tier was chosen.
bool split_choice(const FamilyProblem& p, const RestrictedCosts& rc, const std::vector<int>& heads,
                  const std::vector<std::uint8_t>& choice, std::vector<std::vector<std::uint8_t>>& out) {
  out.assign(heads.size(), {});
  std::int64_t base = 0;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const std::int64_t T = p.heads[static_cast<std::size_t>(heads[i])].tokens();
    std::vector<std::uint8_t>& tiers = out[i];
    tiers.assign(static_cast<std::size_t>(T), 0);
    for (std::int64_t t = 0; t < T; ++t) {
      const std::uint8_t j = rc.ladder_tier(base + t, choice[static_cast<std::size_t>(base + t)]);
      if (j == 255) return false;
      tiers[static_cast<std::size_t>(t)] = j;
    }
    base += T;
  }
  return true;
}

// sum_t c_t(tiers_t) and sum_t r(tiers_t) of one head (long double accumulation).
void score_head(const FamilyProblem& p, int h, FamilyHeadResult& r) {
  const CostBlock c = p.heads[static_cast<std::size_t>(h)].cost();
  long double obj = 0.0L, rate = 0.0L;
  for (std::size_t t = 0; t < r.tiers.size(); ++t) {
    obj += c(r.tiers[t], static_cast<Eigen::Index>(t));
    rate += p.rates[r.tiers[t]];
  }
  r.objective = static_cast<double>(obj);
  r.rate_bits = static_cast<double>(rate);
}

void finish_totals(const FamilyProblem& p, FamilyResult& res) {
  long double obj = 0.0L, rate = 0.0L;
  for (const auto& h : res.heads) {
    obj += h.objective;
    rate += h.rate_bits;
  }
  res.objective = static_cast<double>(obj);
  res.rate_used = static_cast<double>(rate);
  res.rate_budget = p.budget * static_cast<double>(p.tokens());
  // The objective is feasible, so min(bound, objective) still bounds the optimum (this
  // removes the rounding of a bound computed equal to the objective).
  res.lower_bound = std::min(res.lower_bound, res.objective);
  res.gap = res.objective - res.lower_bound;
  res.relative_gap = res.gap / std::max(std::fabs(res.objective), 1e-300);
}

bool proven(const FamilyResult& r) { return r.gap <= 1e-12 * std::max(std::fabs(r.objective), 1e-300); }

double budget_tolerance(double budget_bits) { return 1e-9 * std::max(1.0, std::fabs(budget_bits)); }

}  // namespace

// ---- scope head -------------------------------------------------------------------

FamilyResult solve_families_per_head(const FamilyProblem& p, const std::vector<TierOption>& options,
                                     const FamilyOptions& opt) {
  const PhaseScope phase(Phase::Solve);
  const auto t0 = std::chrono::steady_clock::now();
  opt.validate();
  p.validate(opt.solver);
  if (options.empty()) throw InputError("solve_families_per_head: no family options given.");
  FamilyResult res;
  res.options = options;
  res.method = "per head";
  res.heads.resize(p.heads.size());
  long double bound = 0.0L;
  const std::size_t n_opt = options.size();
  FeasibleReason inner = FeasibleReason::None;  // why an option's own solve was not proven
  for (std::size_t h = 0; h < p.heads.size(); ++h) {
    FamilyHeadResult& hr = res.heads[h];
    hr.option_objectives.assign(n_opt, std::numeric_limits<double>::quiet_NaN());
    std::vector<std::vector<std::uint8_t>> tiers(n_opt);
    double head_bound = std::numeric_limits<double>::infinity();
    const std::vector<int> one{static_cast<int>(h)};
    for (std::size_t o = 0; o < n_opt; ++o) {
      const RestrictedCosts rc = restrict_costs(p, one, {&options[o]});
      const MckpResult r = solve_instance(p, rc, one, p.budget, opt);
      if (!r.has_solution()) continue;
      inner = feasible_reason_of(inner, r.unproven_reason());
      std::vector<std::vector<std::uint8_t>> split;
      split_choice(p, rc, one, r.choice, split);
      FamilyHeadResult tmp;
      tmp.tiers = std::move(split[0]);
      score_head(p, static_cast<int>(h), tmp);
      hr.option_objectives[o] = tmp.objective;
      tiers[o] = std::move(tmp.tiers);
      head_bound = std::min(head_bound, std::min(r.lower_bound, tmp.objective));
    }
    // Least objective; M gives way to the best endpoint within the tolerance.
    int best = -1, best_end = -1;
    for (std::size_t o = 0; o < n_opt; ++o) {
      const double v = hr.option_objectives[o];
      if (std::isnan(v)) continue;
      if (best < 0 || v < hr.option_objectives[static_cast<std::size_t>(best)]) best = static_cast<int>(o);
      if (options[o].family != Family::Mixed &&
          (best_end < 0 || v < hr.option_objectives[static_cast<std::size_t>(best_end)]))
        best_end = static_cast<int>(o);
    }
    if (best < 0) {
      res.status = SolveStatus::Infeasible;
      res.heads.clear();
      // The caller names the head (allocate's scope names): an index into this problem's
      // heads is only worth giving when it holds several.
      res.message = "Budget B = " + number_text(p.budget) + " bits per element is below the smallest rate of every option" +
                    (p.heads.size() > 1 ? " (head " + std::to_string(h) + " of the " + std::to_string(p.heads.size()) +
                                              " solved together)"
                                        : std::string()) +
                    ": no allocation fits.";
      res.seconds = seconds_since(t0);
      return res;
    }
    if (best_end >= 0 && options[static_cast<std::size_t>(best)].family == Family::Mixed) {
      const double vm = hr.option_objectives[static_cast<std::size_t>(best)];
      const double ve = hr.option_objectives[static_cast<std::size_t>(best_end)];
      if (ve <= vm + opt.route_tolerance * std::fabs(vm) + 1e-12 * std::fabs(vm)) best = best_end;
    }
    hr.option = best;
    hr.tiers = std::move(tiers[static_cast<std::size_t>(best)]);
    score_head(p, static_cast<int>(h), hr);
    hr.bound = head_bound;
    bound += head_bound;
  }
  res.lower_bound = static_cast<double>(bound);
  finish_totals(p, res);
  // Unproven with every option's solve proven: the route tolerance kept an endpoint.
  if (proven(res))
    res.status = SolveStatus::Optimal;
  else
    res.set_feasible(inner != FeasibleReason::None ? inner : FeasibleReason::Tolerance);
  res.message = "Each of " + std::to_string(p.heads.size()) + " head(s) solved at its own budget with the " +
                std::string(to_string(opt.solver)) + " solver on " + std::to_string(n_opt) +
                " option(s); the bound is the sum of each head's least option bound.";
  res.seconds = seconds_since(t0);
  return res;
}

// ---- pooled scope: the routing multiplier ----------------------------------------

// c + lambda r, rounded once where the machine fuses a multiply-add (as the compiler contracts
// the plain expression there) and twice where it does not.
inline double lagrangian_term(double c, double lambda, double r) {
#ifdef __FP_FAST_FMA
  return std::fma(lambda, r, c);
#else
  return c + lambda * r;
#endif
}

RoutingMultiplier route_by_multiplier(const FamilyProblem& p, const std::vector<TierOption>& options,
                                      const FamilyOptions& opt) {
  opt.validate();
  p.validate(FamilySolver::Exact);
  if (options.empty()) throw InputError("route_by_multiplier: no family options given.");
  const std::size_t H = p.heads.size();
  // Each option's tiers by increasing rate (ties: ladder order), so that a strict
  // comparison keeps the lower rate among equal Lagrangian values.
  std::vector<std::vector<int>> sorted(options.size());
  for (std::size_t o = 0; o < options.size(); ++o) {
    sorted[o] = options[o].tiers;
    std::stable_sort(sorted[o].begin(), sorted[o].end(), [&](int a, int b) { return p.rates[a] < p.rates[b]; });
  }
  const double budget_bits = p.budget * static_cast<double>(p.tokens());
  const double tol = budget_tolerance(budget_bits);

  struct Eval {
    double L = 0.0, rate = 0.0;
    std::vector<int> option;
    std::vector<double> head_rate;
  };
  // The memo (FamilyOptions::routing_memo) holds evaluations of these costs and options only.
  RoutingMemo* memo = opt.routing_memo;
  if (memo) {
    std::vector<std::uintptr_t> sig;
    for (const FamilyHead& hd : p.heads) {
      sig.push_back(reinterpret_cast<std::uintptr_t>(hd.data()));
      sig.push_back(static_cast<std::uintptr_t>(hd.tokens()));
      sig.push_back(static_cast<std::uintptr_t>(hd.stride()));
    }
    for (const auto& tiers : sorted) {
      sig.push_back(tiers.size());
      for (int j : tiers) sig.push_back(static_cast<std::uintptr_t>(j));
    }
    for (double r : p.rates) sig.push_back(static_cast<std::uintptr_t>(std::bit_cast<std::uint64_t>(r)));
    if (sig != memo->signature) {
      memo->signature = std::move(sig);
      memo->entries.clear();
    }
  }
  auto compute = [&](double lambda) {
    Eval e;
    e.option.assign(H, -1);
    e.head_rate.assign(H, 0.0);
    // Each head's best option on its own (in parallel over heads when the work is large: the
    // heads are independent), then the sums over heads in head order, so the result does not
    // depend on the number of threads.
    std::vector<double> head_value(H, 0.0);
    long long work = 0;
    for (std::size_t h = 0; h < H; ++h) work += static_cast<long long>(p.heads[h].tokens());
    work *= static_cast<long long>(options.size());
#pragma omp parallel for schedule(dynamic, 1) if (H > 1 && work >= (1LL << 16))
    for (std::size_t h = 0; h < H; ++h) {
      const CostBlock c = p.heads[h].cost();
      const Eigen::Index T = c.cols();
      double best_v = std::numeric_limits<double>::infinity(), best_r = 0.0;
      int best_o = -1;
      // Per token the least Lagrangian term over the option's tiers (a strict comparison in
      // increasing-rate order), tier by tier over all tokens, then the sums over tokens: both in
      // vector lanes (the sums in double with lane-wise partial sums; the search was 15% of a
      // paper cell with sequential long-double sums, docs/performance.md).
      thread_local std::vector<double> min_value, min_rate;
      min_value.resize(static_cast<std::size_t>(T));
      min_rate.resize(static_cast<std::size_t>(T));
      double* mv = min_value.data();
      double* mr = min_rate.data();
      for (std::size_t o = 0; o < options.size(); ++o) {
        const std::vector<int>& tiers = sorted[o];
        std::fill(mv, mv + T, std::numeric_limits<double>::infinity());
        std::fill(mr, mr + T, 0.0);
        for (int j : tiers) {
          const double* cj = c.row(j).data();
          const double rj = p.rates[static_cast<std::size_t>(j)];
#pragma omp simd
          for (Eigen::Index t = 0; t < T; ++t) {
            const double x = lagrangian_term(cj[t], lambda, rj);
            const bool lower = x < mv[t];
            mv[t] = lower ? x : mv[t];
            mr[t] = lower ? rj : mr[t];
          }
        }
        double v = 0.0, r = 0.0;
#pragma omp simd reduction(+ : v, r)
        for (Eigen::Index t = 0; t < T; ++t) {
          v += mv[t];
          r += mr[t];
        }
        if (best_o < 0 || v < best_v) {
          best_v = v;
          best_r = r;
          best_o = static_cast<int>(o);
        }
      }
      e.option[h] = best_o;
      e.head_rate[h] = best_r;
      head_value[h] = best_v;
    }
    long double L = 0.0L, R = 0.0L;
    for (std::size_t h = 0; h < H; ++h) {
      L += head_value[h];
      R += e.head_rate[h];
    }
    e.L = static_cast<double>(L);
    e.rate = static_cast<double>(R);
    return e;
  };
  auto eval = [&](double lambda) {
    if (!memo) return compute(lambda);
    const std::uint64_t key = std::bit_cast<std::uint64_t>(lambda);
    if (const auto it = memo->entries.find(key); it != memo->entries.end()) {
      ++memo->hits;
      return Eval{it->second.L, it->second.rate, it->second.option, it->second.head_rate};
    }
    ++memo->misses;
    Eval e = compute(lambda);
    memo->entries.emplace(key, RoutingMemo::Entry{e.L, e.rate, e.option, e.head_rate});
    return e;
  };

  RoutingMultiplier out;
  // Infeasible: even the lowest-rate option of every head exceeds the budget.
  long double min_bits = 0.0L;
  double max_cost = 0.0;
  for (std::size_t h = 0; h < H; ++h) {
    double r0 = std::numeric_limits<double>::infinity();
    for (const auto& s : sorted) r0 = std::min(r0, p.rates[s.front()]);
    min_bits += static_cast<long double>(r0) * p.heads[h].tokens();
    max_cost = std::max(max_cost, p.heads[h].cost().cwiseAbs().maxCoeff());
  }
  if (static_cast<double>(min_bits) > budget_bits + tol) {
    out.status = SolveStatus::Infeasible;
    out.bound = std::numeric_limits<double>::infinity();
    return out;
  }
  Eval lo_e = eval(0.0);
  if (lo_e.rate <= budget_bits + tol) {
    out.status = SolveStatus::Trivial;
    out.lambda = 0.0;
    out.bound = lo_e.L;
    out.option_of_head = std::move(lo_e.option);
    out.head_rate_bits = std::move(lo_e.head_rate);
    out.rate_bits = lo_e.rate;
    return out;
  }
  // lambda > 2 max|c| / (smallest rate step) puts every token at its option's lowest rate
  // and every head on its lowest-rate option: feasible.
  std::vector<double> distinct = p.rates;
  std::sort(distinct.begin(), distinct.end());
  double step = std::numeric_limits<double>::infinity();
  for (std::size_t j = 1; j < distinct.size(); ++j)
    if (distinct[j] > distinct[j - 1]) step = std::min(step, distinct[j] - distinct[j - 1]);
  double lo = 0.0, hi = (std::isfinite(step) && max_cost > 0) ? 4.0 * max_cost / step : 1.0;
  Eval hi_e = eval(hi);
  for (int k = 0; k < 200 && hi_e.rate > budget_bits + tol; ++k) {
    lo = hi;
    lo_e = std::move(hi_e);
    hi *= 2.0;
    hi_e = eval(hi);
  }
  int steps = 0;
  while (steps < opt.max_bisection_steps) {
    const double mid = lo + 0.5 * (hi - lo);
    if (!(mid > lo && mid < hi) || hi - lo <= 1e-14 * hi) break;
    ++steps;
    Eval e = eval(mid);
    if (e.rate <= budget_bits + tol) {
      hi = mid;
      hi_e = std::move(e);
    } else {
      lo = mid;
      lo_e = std::move(e);
    }
  }
  out.status = SolveStatus::Feasible;
  out.lambda = hi;
  out.steps = steps;
  out.bound = std::max(hi_e.L - hi * budget_bits, lo_e.L - lo * budget_bits);
  out.option_of_head = std::move(hi_e.option);
  out.head_rate_bits = std::move(hi_e.head_rate);
  out.rate_bits = hi_e.rate;
  return out;
}

// ---- pooled scope -------------------------------------------------------------------

namespace {

// RateQuant: per-head continuous bits, then every head dense at one tier of the options' union.
void rate_quant(const FamilyProblem& p, const std::vector<TierOption>& options, FamilyResult& res) {
  const std::size_t H = p.heads.size();
  const std::int64_t T = p.heads.front().tokens();
  for (const auto& h : p.heads)
    if (h.tokens() != T)
      throw InputError("waterfill at layer/model scope (RateQuant) needs heads of equal length; got " +
                       std::to_string(T) + " and " + std::to_string(h.tokens()) + " tokens.");
  std::vector<int> all;
  for (const auto& o : options) all.insert(all.end(), o.tiers.begin(), o.tiers.end());
  std::vector<double> group_rate;
  std::vector<std::vector<int>> members;
  rate_groups(all, p.rates, group_rate, members);
  const int m = static_cast<int>(group_rate.size());
  // Dense cost of each tier per head: sum_t c_t(tau).
  MatrixRMd dense(m, static_cast<Eigen::Index>(H));
  std::vector<std::uint8_t> pick(H * static_cast<std::size_t>(m));
  WaterfillProblem wp;
  for (std::size_t h = 0; h < H; ++h) {
    const CostBlock c = p.heads[h].cost();
    for (int k = 0; k < m; ++k) {
      double best = std::numeric_limits<double>::infinity();
      int arg = -1;
      for (int j : members[static_cast<std::size_t>(k)]) {
        const double v = c.row(j).sum();
        if (arg < 0 || v < best) {
          best = v;
          arg = j;
        }
      }
      dense(k, static_cast<Eigen::Index>(h)) = best;
      pick[h * m + k] = static_cast<std::uint8_t>(arg);
    }
    wp.weights.push_back(p.heads[h].weights->sum());
    wp.models.push_back(p.heads[h].noise);
  }
  if (H == 1) wp.models.resize(1);
  wp.budget = std::max(0.0, p.budget);
  wp.max_bits = group_rate.back() > 0 ? group_rate.back() : 1.0;
  MckpInstance inst;
  inst.rates = group_rate;
  inst.cost = CostView::of_tier_major(dense);
  inst.budget = p.budget;
  const WaterfillResult wr = waterfill(wp, inst, WaterfillOptions{false});
  if (!wr.projected.has_solution()) {
    res.status = SolveStatus::Infeasible;
    res.message = wr.projected.message;
    return;
  }
  res.heads.assign(H, {});
  for (std::size_t h = 0; h < H; ++h) {
    const int tier = pick[h * m + wr.projected.choice[h]];
    FamilyHeadResult& hr = res.heads[h];
    hr.tiers.assign(static_cast<std::size_t>(T), static_cast<std::uint8_t>(tier));
    for (std::size_t o = 0; o < options.size(); ++o)
      if (std::find(options[o].tiers.begin(), options[o].tiers.end(), tier) != options[o].tiers.end()) {
        hr.option = static_cast<int>(o);
        break;
      }
    score_head(p, static_cast<int>(h), hr);
  }
  res.method = "RateQuant (per-head water-filling, heads dense, theta = " + number_text(wr.continuous.theta) + ")";
}

// Greedy fill per group of heads sharing an option.
void group_split(const FamilyProblem& p, const std::vector<TierOption>& options, const RoutingMultiplier& mult,
                 const FamilyOptions& opt, FamilyResult& res) {
  const double budget_bits = p.budget * static_cast<double>(p.tokens());
  double slack = std::max(0.0, budget_bits - mult.rate_bits);
  res.heads.assign(p.heads.size(), {});
  int groups = 0;
  for (std::size_t o = 0; o < options.size(); ++o) {
    std::vector<int> heads;
    double bits = slack;
    std::int64_t n = 0;
    for (std::size_t h = 0; h < p.heads.size(); ++h)
      if (mult.option_of_head[h] == static_cast<int>(o)) {
        heads.push_back(static_cast<int>(h));
        bits += mult.head_rate_bits[h];
        n += p.heads[h].tokens();
      }
    if (heads.empty()) continue;
    ++groups;
    const RestrictedCosts rc = restrict_costs(p, heads, std::vector<const TierOption*>(heads.size(), &options[o]));
    const MckpResult r = solve_instance(p, rc, heads, bits / static_cast<double>(n), opt);
    if (!r.has_solution())
      throw std::logic_error("group of option " + options[o].name + " got " + number_text(bits) +
                       " bits, below its multiplier allocation; this is a bug in the routing.");
    std::vector<std::vector<std::uint8_t>> split;
    split_choice(p, rc, heads, r.choice, split);
    for (std::size_t i = 0; i < heads.size(); ++i) {
      FamilyHeadResult& hr = res.heads[static_cast<std::size_t>(heads[i])];
      hr.option = static_cast<int>(o);
      hr.tiers = std::move(split[i]);
      score_head(p, heads[i], hr);
    }
    slack = std::max(0.0, bits - r.rate_used);
  }
  res.method = "multiplier routing, then " + std::string(to_string(opt.solver)) + " per option group (" +
               std::to_string(groups) + " group(s))";
}

}  // namespace

FamilyResult solve_families_pooled(const FamilyProblem& p, const std::vector<TierOption>& options,
                                   const FamilyOptions& opt) {
  const PhaseScope phase(Phase::Solve);
  const auto t0 = std::chrono::steady_clock::now();
  opt.validate();
  p.validate(opt.solver);
  if (options.empty()) throw InputError("solve_families_pooled: no family options given.");
  FamilyResult res;
  res.options = options;
  res.rate_budget = p.budget * static_cast<double>(p.tokens());
  const RoutingMultiplier mult = route_by_multiplier(p, options, opt);
  if (mult.status == SolveStatus::Infeasible) {
    res.status = SolveStatus::Infeasible;
    res.message = "Budget B = " + number_text(p.budget) +
                  " bits per element is below the smallest rate every option allows: no allocation fits.";
    res.seconds = seconds_since(t0);
    return res;
  }
  res.lambda = mult.lambda;
  res.lower_bound = mult.bound;
  std::vector<int> all(p.heads.size());
  for (std::size_t h = 0; h < all.size(); ++h) all[h] = static_cast<int>(h);
  SolveStatus inner = SolveStatus::Feasible;
  // Why the result may be unproven: the knapsack's own reason, the routing by the multiplier
  // (a relaxation) when there are several options, a heuristic fill.
  FeasibleReason why = FeasibleReason::None;

  if (opt.solver == FamilySolver::Waterfill) {
    why = FeasibleReason::Heuristic;
    rate_quant(p, options, res);
    if (res.status == SolveStatus::Infeasible) {
      res.seconds = seconds_since(t0);
      return res;
    }
  } else if (options.size() == 1) {
    const RestrictedCosts rc = restrict_costs(p, all, std::vector<const TierOption*>(all.size(), &options[0]));
    const MckpResult r = solve_instance(p, rc, all, p.budget, opt);
    std::vector<std::vector<std::uint8_t>> split;
    if (r.has_solution() && split_choice(p, rc, all, r.choice, split)) {
      res.heads.assign(p.heads.size(), {});
      for (std::size_t h = 0; h < all.size(); ++h) {
        res.heads[h].option = 0;
        res.heads[h].tiers = std::move(split[h]);
        score_head(p, static_cast<int>(h), res.heads[h]);
      }
    }
    res.lower_bound = std::max(res.lower_bound, r.lower_bound);
    inner = r.status;
    why = r.unproven_reason();
    res.method = "one " + std::string(to_string(opt.solver)) + " knapsack over " + std::to_string(rc.items()) +
                 " tokens (" + r.summary() + ")";
  } else if (opt.solver == FamilySolver::Exact) {
    std::vector<const TierOption*> chosen(all.size());
    for (std::size_t h = 0; h < all.size(); ++h) chosen[h] = &options[static_cast<std::size_t>(mult.option_of_head[h])];
    const RestrictedCosts rc = restrict_costs(p, all, chosen);
    const MckpResult r = solve_instance(p, rc, all, p.budget, opt);
    why = feasible_reason_of(FeasibleReason::Relaxation, r.unproven_reason());
    std::vector<std::vector<std::uint8_t>> split;
    if (r.has_solution() && split_choice(p, rc, all, r.choice, split)) {
      res.heads.assign(p.heads.size(), {});
      for (std::size_t h = 0; h < all.size(); ++h) {
        res.heads[h].option = mult.option_of_head[h];
        res.heads[h].tiers = std::move(split[h]);
        score_head(p, static_cast<int>(h), res.heads[h]);
      }
      res.method = "multiplier routing, then one exact knapsack over all tokens with the options fixed (" +
                   r.summary() + ")";
    } else {
      res.heads.clear();  // the per-head incumbent below takes over
    }
  } else {
    group_split(p, options, mult, opt, res);
    why = FeasibleReason::Heuristic;
  }

  if (!res.heads.empty()) finish_totals(p, res);
  const bool need_incumbent = res.heads.empty() || (opt.solver == FamilySolver::Exact && opt.head_incumbent &&
                                                    !proven(res) && inner != SolveStatus::Optimal);
  if (need_incumbent) {
    FamilyResult per = solve_families_per_head(p, options, opt);
    if (per.has_solution() && (res.heads.empty() || per.objective < res.objective)) {
      const double bound = res.lower_bound;
      const double lambda = res.lambda;
      res = std::move(per);
      for (auto& h : res.heads) h.bound = std::numeric_limits<double>::quiet_NaN();
      res.lower_bound = bound;  // the per-head bounds do not bound the pooled optimum
      res.lambda = lambda;
      res.method = "per-head incumbent (better than the pooled fill)";
      why = feasible_reason_of(why, res.unproven_reason());
      finish_totals(p, res);
    }
  }
  if (res.heads.empty()) {
    res.status = SolveStatus::Infeasible;
    res.message = "No allocation found.";
    res.seconds = seconds_since(t0);
    return res;
  }
  for (auto& h : res.heads) h.option_objectives.clear();
  if (mult.status == SolveStatus::Trivial && proven(res))
    res.status = SolveStatus::Trivial;
  else if (proven(res))
    res.status = SolveStatus::Optimal;
  else if (why != FeasibleReason::None)
    res.set_feasible(why);
  else  // every knapsack proven, yet a gap: the exact fill's families came from the multiplier
    res.set_feasible(opt.solver == FamilySolver::Exact ? FeasibleReason::Relaxation : FeasibleReason::Heuristic);
  res.message = std::to_string(p.heads.size()) + " head(s) share " + number_text(res.rate_budget) + " bits; routing multiplier " +
                number_text(mult.lambda) + " after " + std::to_string(mult.steps) + " bisection step(s); " + res.method + ".";
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace tierlab
