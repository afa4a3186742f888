// Trace-level solving for one budget (allocate.hpp).
#include "scenarios/pipeline/allocate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/surrogate.hpp"
#include "scenarios/pipeline/budget_repair.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "model/base/clock.hpp"

namespace tierlab {

namespace {


// The family solver behind `s`: smoothed solves the pooled costs exact.
FamilySolver family_solver(AllocSolver s) { return s == AllocSolver::Smoothed ? FamilySolver::Exact : s; }

// The heads' common rates; where they differ (a published tier's data-dependent rate), the mean.
std::vector<double> mean_rates(const std::vector<HeadCosts>& kept) {
  if (kept.empty()) return {};
  std::vector<double> r = kept.front().rates;
  bool differ = false;
  for (const HeadCosts& k : kept) differ = differ || k.rates != r;
  if (!differ) return r;
  for (std::size_t j = 0; j < r.size(); ++j) {
    double s = 0.0;
    for (const HeadCosts& k : kept) s += k.rates[j];
    r[j] = s / static_cast<double>(kept.size());
  }
  return r;
}

double sum_cost(const MatrixRMd& c, const std::vector<std::uint8_t>& tiers) {
  long double s = 0.0L;
  for (std::size_t t = 0; t < tiers.size(); ++t) s += c(tiers[t], static_cast<Eigen::Index>(t));
  return static_cast<double>(s);
}

SolveStatus worse(SolveStatus a, SolveStatus b) {
  auto rank = [](SolveStatus s) {
    switch (s) {
      case SolveStatus::Trivial: return 0;
      case SolveStatus::Optimal: return 1;
      case SolveStatus::Feasible: return 2;
      case SolveStatus::Infeasible: return 3;
    }
    return 3;
  };
  return rank(a) >= rank(b) ? a : b;
}

// Every head's costs, one head at a time.
std::vector<HeadCosts> trace_head_costs(const TraceReader& trace, const AllocateOptions& opt, const Progress& progress) {
  const TraceMeta& meta = trace.meta();
  const int H = meta.n_heads();
  std::vector<HeadCosts> kept;
  kept.reserve(static_cast<std::size_t>(H));
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      kept.push_back(head_costs(trace.head(l, h), meta.rope, opt));
      if (progress) progress(static_cast<int>(kept.size()), H);
    }
  return kept;
}

// The allocation and the totals over heads and scopes.
void add_totals(AllocationReport& rep, const TraceMeta& meta, std::vector<std::vector<std::uint8_t>> tiers, bool smoothed) {
  const RateLadder& ladder = rep.options.ladder;
  const int m = ladder.size();
  const int H = meta.n_heads();
  rep.allocation.ladder = ladder;
  rep.allocation.n_layers = meta.n_layers;
  rep.allocation.n_kv_heads = meta.n_kv_heads;
  rep.allocation.prompt_len = meta.prompt_len;
  rep.allocation.tiers = std::move(tiers);
  rep.allocation.validate();

  rep.histogram.assign(static_cast<std::size_t>(m), 0);
  long double obj = 0.0L, rel = 0.0L, bound = 0.0L, unsm = 0.0L;
  for (const auto& h : rep.heads) {
    for (int j = 0; j < m; ++j) rep.histogram[static_cast<std::size_t>(j)] += h.histogram[static_cast<std::size_t>(j)];
    rep.rate.code_bits += h.rate.code_bits / H;
    rep.rate.total_bits += h.rate.total_bits / H;
    rep.budget_rate += h.budget_rate / H;
    obj += h.objective;
    rel += h.relative_objective / H;
    rep.family_share[static_cast<std::size_t>(h.family)] += 1.0 / H;
    ++rep.option_counts[h.option];
    rep.spans += h.spans;
    rep.spans_unsmoothed += h.spans_unsmoothed;
    unsm += std::isnan(h.unsmoothed_objective) ? 0.0L : static_cast<long double>(h.unsmoothed_objective);
  }
  for (const auto& s : rep.scopes) bound += s.lower_bound;
  rep.objective = static_cast<double>(obj);
  rep.relative_objective = static_cast<double>(rel);
  rep.lower_bound = static_cast<double>(bound);
  rep.gap = std::max(0.0, rep.objective - rep.lower_bound);
  rep.relative_gap = rep.gap / std::max(std::fabs(rep.objective), 1e-300);
  rep.has_spans = rep.spans.spans > 0;
  if (smoothed) rep.unsmoothed_objective = static_cast<double>(unsm);
}

// The groups of heads that share one budget (head, layer or model scope) and their names.
std::vector<std::vector<int>> scope_groups(const TraceMeta& meta, Scope scope, const std::vector<HeadCosts>& kept,
                                           std::vector<std::string>& group_names) {
  const int H = meta.n_heads();
  std::vector<std::vector<int>> groups;
  if (scope == Scope::Head) {
    for (int i = 0; i < H; ++i) {
      groups.push_back({i});
      group_names.push_back("L" + std::to_string(kept[i].layer) + ".H" + std::to_string(kept[i].kv_head));
    }
  } else if (scope == Scope::Layer) {
    for (int l = 0; l < meta.n_layers; ++l) {
      groups.emplace_back();
      for (int h = 0; h < meta.n_kv_heads; ++h) groups.back().push_back(l * meta.n_kv_heads + h);
      group_names.push_back("layer " + std::to_string(l));
    }
  } else {
    groups.emplace_back();
    for (int i = 0; i < H; ++i) groups.back().push_back(i);
    group_names.push_back("model");
  }
  return groups;
}

}  // namespace

void AllocateOptions::validate() const {
  ProblemOptions::validate();
  smoothing.validate();
  if (!(route_tolerance >= 0) || !std::isfinite(route_tolerance))
    throw InputError("route tolerance = " + format_number(route_tolerance) + "; it must be finite and >= 0.");
  exact.validate();
  if (solver == AllocSolver::Waterfill && ladder.size() < 3)
    throw InputError("ladder '" + ladder.name() + "' has no finite tier; waterfill fits n_h(b) on the finite tiers.");
}

std::string AllocateOptions::name() const {
  std::string s = std::string(to_string(solver)) + " " + std::string(to_string(family)) + " " +
                  std::string(to_string(scope)) + " B=" + format_number(budget) + " " + std::string(to_string(rate_kind));
  if (solver == AllocSolver::Smoothed) s += " " + smoothing.name();
  return s;
}

HeadCosts head_costs(const HeadData& head, const RopeParams& rope, const AllocateOptions& opt) {
  HeadCosts k;
  SurrogateCosts sc = surrogate_costs(head, rope, observation_queries(head), opt.ladder);
  k.rates = ladder_rates(head, rope, opt.ladder, opt.rate_kind);
  k.layer = head.layer;
  k.kv_head = head.kv_head;
  k.output_norm2 = sc.output_norm2;
  k.spans = head.spans;
  if (opt.solver == AllocSolver::Waterfill) {
    const HeadNoiseModel n = fit_head_noise(sc, k.rates);
    k.noise = DistortionModel{n.alpha, n.beta};
  }
  k.a = std::move(sc.weights.a);
  k.cost = std::move(sc.cost);
  if (opt.solver == AllocSolver::Smoothed) k.smoothed = smooth_costs(k.cost, opt.smoothing);
  return k;
}

AllocationReport allocate_trace(const TraceReader& trace, const AllocateOptions& opt, const Progress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  opt.validate();
  const TraceMeta& meta = trace.meta();
  const std::vector<HeadCosts> kept = trace_head_costs(trace, opt, progress);
  const double seconds_costs = seconds_since(t0);
  const bool needs_head = ladder_needs_head(opt.ladder);
  AllocationReport rep = allocate_heads(meta, kept, opt, [&](int i, const std::vector<std::uint8_t>& tiers) {
    const HeadCosts& kh = kept[static_cast<std::size_t>(i)];
    return needs_head ? allocation_rate(trace.head(kh.layer, kh.kv_head), meta.rope, opt.ladder, tiers)
                      : allocation_rate(static_cast<int>(kh.cost.cols()), meta.head_dim, opt.ladder, tiers);
  });
  rep.trace_path = trace.path();
  rep.seconds_costs = seconds_costs;
  rep.seconds = seconds_since(t0);
  return rep;
}

namespace {

// Equal memory (docs/model.md section 6): while the materialised allocation r measures more than B,
// re-solve at a smaller B' and keep the least objective of every allocation tried that meets B
// (budget_repair.hpp, the same repair as solve_within_budget). The bound stays the one at B:
// measured >= nominal, so every allocation that measures <= B is nominally feasible at B.
// Returns the budget r was solved at.
template <class SolveAt, class Measured>
double repair_scope_to_measured_budget(FamilyResult& r, const AllocateOptions& opt, SolveAt solve_at, Measured measured) {
  const double tol = 1e-12 * std::max(1.0, opt.budget);
  if (!r.has_solution() || measured(r) <= opt.budget + tol) return opt.budget;
  const double bound_at_B = r.lower_bound;
  std::vector<double> head_bounds_at_B;
  for (const FamilyHeadResult& h : r.heads) head_bounds_at_B.push_back(h.bound);
  RepairedSolution<FamilyResult> rep = repair_to_measured_budget<FamilyResult>(
      opt.budget, solve_at, [](const FamilyResult& x) { return x.has_solution(); }, measured,
      [](const FamilyResult& x) { return x.objective; });
  if (!rep.best) {
    r = FamilyResult{};
    r.status = SolveStatus::Infeasible;
    r.message = "no allocation measures <= B = " + format_number(opt.budget) + " " +
                std::string(to_string(opt.rate_kind)) + " bits once materialised";
    return opt.budget;
  }
  r = std::move(*rep.best);
  r.lower_bound = bound_at_B;
  for (std::size_t k = 0; k < r.heads.size() && k < head_bounds_at_B.size(); ++k) r.heads[k].bound = head_bounds_at_B[k];
  // Optimal at B' is not a certificate at B: the gap to B's bound decides.
  const double gap = std::max(0.0, r.objective - r.lower_bound);
  if (r.status == SolveStatus::Optimal && gap > 1e-12 * std::max(std::fabs(r.objective), 1e-300))
    r.set_feasible(FeasibleReason::Heuristic);  // the search over B' proves nothing at B
  r.method += "; repaired to the measured budget (solved at B' = " + format_number(rep.solved_budget, 6) + ")";
  return rep.solved_budget;
}

// Head k of a solved scope r: its report (all but the measured rate); truth = the exact solve's
// result for the head on the true costs when r was solved on smoothed costs.
void fill_head_report(HeadSolveReport& hr, const HeadCosts& kh, const FamilyResult& r, std::size_t k,
                      const FamilyHeadResult* truth, const AllocateOptions& opt, int m, double scope_seconds) {
  const FamilyHeadResult& fr = r.heads[k];
  hr.layer = kh.layer;
  hr.kv_head = kh.kv_head;
  hr.tokens = static_cast<int>(kh.cost.cols());
  hr.option = r.options[static_cast<std::size_t>(fr.option)].name;
  hr.family = r.options[static_cast<std::size_t>(fr.option)].family;
  hr.histogram.assign(static_cast<std::size_t>(m), 0);
  for (auto j : fr.tiers) ++hr.histogram[j];
  hr.budget_rate = fr.rate_bits / hr.tokens;
  hr.objective = sum_cost(kh.cost, fr.tiers);
  hr.relative_objective = kh.output_norm2 > 0 ? hr.objective / kh.output_norm2 : 0.0;
  hr.decision_objective = fr.objective;
  if (opt.scope == Scope::Head) {
    hr.bound = truth ? truth->bound : fr.bound;
    hr.gap = std::max(0.0, hr.objective - hr.bound);
    hr.seconds = scope_seconds;
  }
  if (!kh.spans.empty()) hr.spans = span_truncation(kh.spans, fr.tiers);
  if (truth) {
    hr.unsmoothed_objective = truth->objective;
    if (!kh.spans.empty()) hr.spans_unsmoothed = span_truncation(kh.spans, truth->tiers);
  }
  if (opt.solver == AllocSolver::Waterfill) {
    hr.noise_alpha = kh.noise.alpha;
    hr.noise_beta = kh.noise.beta;
  }
}

}  // namespace

AllocationReport allocate_heads(const TraceMeta& meta, const std::vector<HeadCosts>& kept, const AllocateOptions& opt,
                                const HeadRate& head_rate) {
  const auto t0 = std::chrono::steady_clock::now();
  opt.validate();
  if (static_cast<int>(kept.size()) != meta.n_heads())
    throw InputError("allocate_heads: " + std::to_string(kept.size()) + " heads' costs for a trace of " +
                     std::to_string(meta.n_heads()) + " heads");
  AllocationReport rep;
  rep.objective = rep.lower_bound = rep.gap = rep.relative_gap = 0.0;  // what an infeasible call reports
  rep.options = opt;
  const RateLadder& ladder = opt.ladder;
  const int m = ladder.size();
  for (const HeadCosts& k : kept)
    if (k.cost.rows() != m || (opt.solver == AllocSolver::Smoothed && k.smoothed.rows() != m) ||
        (opt.solver == AllocSolver::Waterfill && !(k.noise.beta > 0)))
      throw InputError("allocate_heads: the costs of L" + std::to_string(k.layer) + ".H" + std::to_string(k.kv_head) +
                       " were not computed for ladder '" + ladder.name() + "' and solver " +
                       std::string(to_string(opt.solver)) + " (head_costs with the same options)");
  // The rates r_j the budget counts: every head's (ladder_rates); a tier whose rate depends on
  // the head's data (a published quantizer's) is counted at the mean over the heads.
  const std::vector<TierOption> options = family_options(ladder, opt.family);
  const bool smoothed = opt.solver == AllocSolver::Smoothed;
  const int H = meta.n_heads();
  const std::vector<double> rates = mean_rates(kept);

  // 2. Scopes: groups of heads sharing one budget.
  std::vector<std::string> group_names;
  const std::vector<std::vector<int>> groups = scope_groups(meta, opt.scope, kept, group_names);

  FamilyOptions fo;
  fo.solver = family_solver(opt.solver);
  fo.route_tolerance = opt.route_tolerance;
  fo.exact = opt.exact;
  FamilyOptions fo_exact = fo;
  fo_exact.solver = FamilySolver::Exact;

  auto make_problem = [&](const std::vector<int>& members, bool use_smoothed, double budget) {
    FamilyProblem p;
    p.rates = rates;
    p.budget = budget;
    for (int i : members) {
      const HeadCosts& k = kept[static_cast<std::size_t>(i)];
      p.heads.push_back(FamilyHead{use_smoothed ? &k.smoothed : &k.cost, &k.a, k.noise});
    }
    return p;
  };
  auto solve = [&](const FamilyProblem& p, const FamilyOptions& o) {
    return opt.scope == Scope::Head ? solve_families_per_head(p, options, o) : solve_families_pooled(p, options, o);
  };

  const auto t_solve = std::chrono::steady_clock::now();
  rep.status = SolveStatus::Trivial;
  rep.heads.resize(static_cast<std::size_t>(H));
  std::vector<std::vector<std::uint8_t>> tiers(static_cast<std::size_t>(H));
  // The scope's MEASURED rate in the budget's kind (partial groups and metadata counted),
  // token-weighted over its heads.
  auto measured = [&](const std::vector<int>& members, const FamilyResult& r) {
    double sum = 0, tokens = 0;
    for (std::size_t k = 0; k < members.size(); ++k) {
      const HeadCosts& kh = kept[static_cast<std::size_t>(members[k])];
      const int n = static_cast<int>(kh.cost.cols());
      const Rate x = head_rate(members[k], r.heads[k].tiers);
      sum += rate_of(x, opt.rate_kind) * n, tokens += n;
    }
    return tokens > 0 ? sum / tokens : 0.0;
  };
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto tg = std::chrono::steady_clock::now();
    FamilyResult r = solve(make_problem(groups[g], smoothed, opt.budget), fo);
    // Equal memory: repaired to the measured budget (repair_scope_to_measured_budget).
    const double solved_budget = repair_scope_to_measured_budget(
        r, opt, [&](double budget) { return solve(make_problem(groups[g], smoothed, budget), fo); },
        [&](const FamilyResult& x) { return measured(groups[g], x); });
    FamilyResult r_true;
    if (smoothed && r.has_solution()) {
      r_true = solve(make_problem(groups[g], false, solved_budget), fo_exact);
      if (!r_true.has_solution())
        throw std::logic_error("the exact solve on the true costs found no allocation where the smoothed one did (" +
                         group_names[g] + "); the two share one budget and ladder, so this is a bug.");
    }
    ScopeReport sr;
    sr.objective = sr.lower_bound = sr.gap = 0.0;  // what an infeasible scope reports
    sr.name = group_names[g];
    sr.status = r.status;
    sr.feasible_reason = r.feasible_reason;
    sr.message = r.message;
    sr.method = r.method;
    sr.lambda = r.lambda;
    sr.rate_budget = r.rate_budget;
    sr.seconds = seconds_since(tg);
    if (!r.has_solution()) {
      rep.scopes.push_back(sr);
      rep.status = SolveStatus::Infeasible;
      rep.message = sr.name + ": " + r.message;
      continue;
    }
    sr.rate_used = r.rate_used;
    double objective = 0.0;
    for (std::size_t k = 0; k < groups[g].size(); ++k) {
      const int i = groups[g][k];
      const HeadCosts& kh = kept[static_cast<std::size_t>(i)];
      const FamilyHeadResult& fr = r.heads[k];
      HeadSolveReport& hr = rep.heads[static_cast<std::size_t>(i)];
      fill_head_report(hr, kh, r, k, smoothed ? &r_true.heads[k] : nullptr, opt, m, sr.seconds);
      hr.rate = head_rate(i, fr.tiers);
      objective += hr.objective;
      tiers[static_cast<std::size_t>(i)] = fr.tiers;
    }
    sr.objective = objective;
    sr.lower_bound = smoothed ? r_true.lower_bound : r.lower_bound;
    sr.gap = std::max(0.0, objective - sr.lower_bound);
    if (smoothed) {  // exact on the pooled costs proves nothing on the true ones: only the gap can
      if (sr.gap <= 1e-12 * std::max(std::fabs(objective), 1e-300))
        sr.status = SolveStatus::Optimal;
      else
        sr.set_feasible(FeasibleReason::Heuristic);
    }
    if (smoothed)
      sr.method = "exact on costs pooled by " + opt.smoothing.name() + "; bound from the exact solve on the true costs";
    rep.status = worse(rep.status, sr.status);
    rep.feasible_reason = feasible_reason_of(rep.feasible_reason, sr.unproven_reason());
    rep.scopes.push_back(std::move(sr));
  }
  rep.seconds_solve = seconds_since(t_solve);

  if (rep.status == SolveStatus::Infeasible) {
    rep.heads.clear();
    rep.seconds = seconds_since(t0);
    return rep;
  }

  // 3. The allocation and the totals.
  add_totals(rep, meta, std::move(tiers), smoothed);
  rep.message = std::to_string(groups.size()) + " " + std::string(to_string(opt.scope)) + " scope(s) solved";
  if (!rep.scopes.empty()) rep.message += "; " + rep.scopes.front().method;
  rep.seconds = seconds_since(t0);
  return rep;
}

// ---- reports ----------------------------------------------------------------------

namespace {

nlohmann::json spans_json(const SpanTruncation& s) {
  return {{"spans", s.spans}, {"truncated", s.truncated}, {"fully_evicted", s.fully_evicted}, {"rate", s.rate()}};
}

nlohmann::json histogram_json(const RateLadder& ladder, const std::vector<int>& hist) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < ladder.size() && i < static_cast<int>(hist.size()); ++i)
    j[ladder.tiers[static_cast<std::size_t>(i)].name()] = hist[static_cast<std::size_t>(i)];
  return j;
}

nlohmann::json rate_json(const Rate& r) { return {{"code_bits", r.code_bits}, {"total_bits", r.total_bits}}; }

// One row's aggregate over some heads.
struct RowSum {
  std::vector<int> hist;
  Rate rate;
  double budget_rate = 0, objective = 0, rel = 0;
  int n = 0;
  std::array<int, 3> fam{0, 0, 0};
  SpanTruncation spans;
  void add(const HeadSolveReport& h) {
    if (hist.empty()) hist.assign(h.histogram.size(), 0);
    for (std::size_t j = 0; j < hist.size(); ++j) hist[j] += h.histogram[j];
    rate.code_bits += h.rate.code_bits;
    rate.total_bits += h.rate.total_bits;
    budget_rate += h.budget_rate;
    objective += h.objective;
    rel += h.relative_objective;
    ++fam[static_cast<std::size_t>(h.family)];
    spans += h.spans;
    ++n;
  }
};

// Text reports print an undefined number as "-".

}  // namespace

nlohmann::json to_json(const AllocationReport& r) {
  const AllocateOptions& o = r.options;
  nlohmann::json opts = {{"budget", o.budget},
                         {"rate", std::string(to_string(o.rate_kind))},
                         {"solver", std::string(to_string(o.solver))},
                         {"family", std::string(to_string(o.family))},
                         {"scope", std::string(to_string(o.scope))},
                         {"ladder", o.ladder.name()},
                         {"route_tolerance", o.route_tolerance}};
  if (o.solver == AllocSolver::Smoothed)
    opts["smoothing"] = {{"pool", std::string(to_string(o.smoothing.pool))},
                         {"kernel", o.smoothing.kernel},
                         {"padding", std::string(to_string(o.smoothing.padding))}};
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : r.heads) {
    nlohmann::json j = {{"layer", h.layer},
                        {"kv_head", h.kv_head},
                        {"tokens", h.tokens},
                        {"option", h.option},
                        {"family", std::string(1, family_letter(h.family))},
                        {"histogram", histogram_json(o.ladder, h.histogram)},
                        {"rate", rate_json(h.rate)},
                        {"budget_rate", h.budget_rate},
                        {"objective", h.objective},
                        {"relative_objective", h.relative_objective},
                        {"decision_objective", h.decision_objective},
                        {"bound", h.bound},
                        {"gap", h.gap},
                        {"seconds", h.seconds}};
    if (h.spans.spans > 0) j["span_truncation"] = spans_json(h.spans);
    if (o.solver == AllocSolver::Smoothed) {
      j["unsmoothed_objective"] = h.unsmoothed_objective;
      if (h.spans_unsmoothed.spans > 0) j["span_truncation_unsmoothed"] = spans_json(h.spans_unsmoothed);
    }
    if (o.solver == AllocSolver::Waterfill) j["noise_fit"] = {{"alpha", h.noise_alpha}, {"beta", h.noise_beta}};
    heads.push_back(std::move(j));
  }
  // An infeasible scope or call has no objective, bound, gap or rate: null, never 0.
  auto if_feasible = [](bool ok, double v) { return ok ? nlohmann::json(v) : nlohmann::json(); };
  // Why a feasible result is not proven optimal (mckp.hpp FeasibleReason); null otherwise.
  auto reason = [](const SolveSummary& s) {
    return s.status == SolveStatus::Feasible ? nlohmann::json(std::string(to_string(s.feasible_reason))) : nlohmann::json();
  };
  nlohmann::json scopes = nlohmann::json::array();
  for (const auto& s : r.scopes) {
    const bool ok = s.status != SolveStatus::Infeasible;
    scopes.push_back({{"name", s.name},
                      {"status", std::string(to_string(s.status))},
                      {"feasible_reason", reason(s)},
                      {"feasible", ok},
                      {"message", s.message},
                      {"method", s.method},
                      {"objective", if_feasible(ok, s.objective)},
                      {"bound", if_feasible(ok, s.lower_bound)},
                      {"gap", if_feasible(ok, s.gap)},
                      {"lambda", s.lambda},
                      {"rate_used_bits", if_feasible(ok, s.rate_used)},
                      {"rate_budget_bits", s.rate_budget},
                      {"seconds", s.seconds}});
  }
  const bool ok = r.has_solution();
  nlohmann::json model = {{"feasible", ok},
                          {"histogram", histogram_json(o.ladder, r.histogram)},
                          {"rate", ok ? rate_json(r.rate) : nlohmann::json()},
                          {"budget_rate", if_feasible(ok, r.budget_rate)},
                          {"objective", if_feasible(ok, r.objective)},
                          {"relative_objective", if_feasible(ok, r.relative_objective)},
                          {"bound", if_feasible(ok, r.lower_bound)},
                          {"gap", if_feasible(ok, r.gap)},
                          {"relative_gap", if_feasible(ok, r.relative_gap)},
                          {"family_share", {{"Q", r.family_share[0]}, {"E", r.family_share[1]}, {"M", r.family_share[2]}}},
                          {"option_counts", r.option_counts}};
  if (r.has_spans) model["span_truncation"] = spans_json(r.spans);
  if (o.solver == AllocSolver::Smoothed) {
    model["unsmoothed_objective"] = r.unsmoothed_objective;
    if (r.has_spans) model["span_truncation_unsmoothed"] = spans_json(r.spans_unsmoothed);
  }
  return {{"trace", r.trace_path},
          {"options", opts},
          {"status", std::string(to_string(r.status))},
          {"feasible_reason", reason(r)},
          {"message", r.message},
          {"model", model},
          {"scopes", scopes},
          {"heads", heads},
          {"seconds", {{"costs", r.seconds_costs}, {"solve", r.seconds_solve}, {"total", r.seconds}}}};
}

std::string text_report(const AllocationReport& r, bool per_head) {
  const AllocateOptions& o = r.options;
  std::ostringstream os;
  os << "solve " << o.name() << ", ladder " << o.ladder.name() << " on " << r.trace_path << "\n";
  os << "status " << r.status_text() << ": " << r.message << "\n";
  if (!r.has_solution()) {
    for (const auto& s : r.scopes)
      if (s.status == SolveStatus::Infeasible) os << "  " << s.name << ": " << s.message << "\n";
    return os.str();
  }
  // Header: tier histogram columns, then rates and objectives.
  char buf[512];
  std::string head = "scope        family ";
  for (const Tier& t : o.ladder.tiers) {
    std::snprintf(buf, sizeof buf, "%7s", t.name().c_str());
    head += buf;
  }
  head += "   code  total nominal   objective   rel obj       bound         gap  spans";
  os << head << "\n";
  auto row = [&](const std::string& label, const std::string& family, const RowSum& s, double bound, double gap) {
    std::string line;
    std::snprintf(buf, sizeof buf, "%-12s %-6s ", label.c_str(), family.c_str());
    line += buf;
    for (int v : s.hist) {
      std::snprintf(buf, sizeof buf, "%7d", v);
      line += buf;
    }
    const double n = std::max(1, s.n);
    std::snprintf(buf, sizeof buf, " %6.3f %6.3f %7.3f %11.4e %9.3e %11s %11s", s.rate.code_bits / n,
                  s.rate.total_bits / n, s.budget_rate / n, s.objective, s.rel / n, format_or_nan(bound, "%.4e", "-").c_str(),
                  format_or_nan(gap, "%.3e", "-").c_str());
    line += buf;
    line += s.spans.spans > 0 ? "  " + format_or_nan(s.spans.rate(), "%.3f", "-") : "  -";
    return line + "\n";
  };
  auto fam_label = [](const RowSum& s) {
    return std::to_string(s.fam[0]) + "/" + std::to_string(s.fam[1]) + "/" + std::to_string(s.fam[2]);
  };
  int n_layers = 0;
  for (const auto& h : r.heads) n_layers = std::max(n_layers, h.layer + 1);
  for (int l = 0; l < n_layers; ++l) {
    RowSum s;
    double lb = 0.0;
    bool have_lb = o.scope == Scope::Head;
    for (const auto& h : r.heads) {
      if (h.layer != l) continue;
      s.add(h);
      if (o.scope == Scope::Head) lb += h.bound;
      if (per_head) {
        RowSum one;
        one.add(h);
        std::string fam = h.option;
        if (fam.size() > 6) fam = fam.substr(0, 6);
        os << row("  L" + std::to_string(h.layer) + ".H" + std::to_string(h.kv_head), fam, one, h.bound, h.gap);
      }
    }
    if (o.scope == Scope::Layer)
      for (const auto& sc : r.scopes)
        if (sc.name == "layer " + std::to_string(l)) {
          lb = sc.lower_bound;
          have_lb = true;
        }
    const double bound = have_lb ? lb : std::numeric_limits<double>::quiet_NaN();
    os << row("layer " + std::to_string(l), fam_label(s), s, bound,
              have_lb ? std::max(0.0, s.objective - lb) : std::numeric_limits<double>::quiet_NaN());
  }
  RowSum all;
  for (const auto& h : r.heads) all.add(h);
  os << row("model", fam_label(all), all, r.lower_bound, r.gap);
  os << "family column: heads routed Q/E/M.\n" << measured_rate_legend() << ";\n"
     << budget_rate_legend(o.rate_kind, o.budget) << ".\n";
  std::snprintf(buf, sizeof buf, "family shares: Q %.3f  E %.3f  M %.3f   (", r.family_share[0], r.family_share[1],
                r.family_share[2]);
  os << buf;
  bool first = true;
  for (const auto& [name, count] : r.option_counts) {
    os << (first ? "" : ", ") << name << " " << count;
    first = false;
  }
  os << ")\n";
  std::snprintf(buf, sizeof buf, "objective %.6e (relative %.4e), bound %.6e, gap %.3e (relative %.3e)\n", r.objective,
                r.relative_objective, r.lower_bound, r.gap, r.relative_gap);
  os << buf;
  if (o.solver == AllocSolver::Smoothed) {
    std::snprintf(buf, sizeof buf, "unsmoothed exact objective %.6e (smoothing costs %+.3e on the surrogate)\n",
                  r.unsmoothed_objective, r.objective - r.unsmoothed_objective);
    os << buf;
  }
  if (r.has_spans) {
    std::snprintf(buf, sizeof buf, "span truncation %.4f (%d of %d spans truncated, %d fully evicted)", r.spans.rate(),
                  r.spans.truncated, r.spans.spans, r.spans.fully_evicted);
    os << buf;
    if (o.solver == AllocSolver::Smoothed) {
      std::snprintf(buf, sizeof buf, "; without smoothing %.4f (%d of %d)", r.spans_unsmoothed.rate(),
                    r.spans_unsmoothed.truncated, r.spans_unsmoothed.spans);
      os << buf;
    }
    os << "\n";
  }
  for (const auto& s : r.scopes)
    if (o.scope != Scope::Head || per_head)
      os << "  " << s.name << ": " << s.status_text() << ", " << s.method << " (" << format_or_nan(s.seconds, "%.3f", "-")
         << " s)\n";
  std::snprintf(buf, sizeof buf, "time: costs %.3f s, solve %.3f s, total %.3f s\n", r.seconds_costs, r.seconds_solve,
                r.seconds);
  os << buf;
  return os.str();
}

}  // namespace tierlab
