#include "solvers/seed_allocators.hpp"


#include "model/base/text.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/quantizers/tier_quantizer.hpp"
#include "solvers/families.hpp"
#include "solvers/granularity.hpp"
#include "solvers/smoothing.hpp"
#include "solvers/waterfill.hpp"

namespace tierlab {
namespace {


double to_double(const std::string& method, const std::string& p, const std::string& v) {
  if (const std::optional<double> x = read_real(v)) return *x;  // model/base/numbers.hpp: the whole text, finite
  throw InputError("method '" + method + "': parameter " + p + " = '" + v + "' is not a number");
}

// The registry (one entry per seed allocator, declared once at the end of this file).
// info: name, kind, summary, source, parameters with their defaults; make: the allocator.
using SeedAllocatorEntry = MethodEntry<SeedAllocation (*)(const SeedProblem&, const MethodParams&)>;
const std::vector<SeedAllocatorEntry>& seed_registry();

const SeedAllocatorEntry& seed_entry(const std::string& name) {
  for (const auto& e : seed_registry())
    if (e.info.name == name) return e;
  if (name == "kvcobra")
    throw InputError("seed allocator 'kvcobra' allocates a (rank, bits) per head from the heads' keys, not tiers "
                     "from surrogate costs: use allocate_kvcobra (solvers/kvcobra_allocator.hpp) or "
                     "`tierlab eval TRACE --seed kvcobra`");
  std::vector<std::string> names;
  for (const auto& e : seed_registry()) names.push_back(e.info.name);
  std::sort(names.begin(), names.end());
  throw InputError("seed allocator '" + name + "' is unknown; valid: " + join(names));
}

// Every declared parameter's text, given or its declared default, through the one reader
// (model/base/method_info.hpp: an unknown parameter is an InputError listing the valid ones).
MethodParams with_defaults(const SeedAllocatorEntry& e, const MethodParams& given) {
  MethodParamReader r("method '" + e.info.name + "'", e.info.params, given);
  MethodParams out;
  for (const auto& p : e.info.params) out[p.name] = r.text(p.name);
  r.finish();
  return out;
}

std::string method_name(const std::string& name, const MethodParams& p) {
  std::string s = name;
  bool first = true;
  for (const auto& [k, v] : p) {
    if (v.empty()) continue;
    s += (first ? ":" : ",") + k + "=" + v;
    first = false;
  }
  return s;
}

void account(SeedAllocation& out, const SeedProblem& pr, const std::vector<double>& rates) {
  out.objective = 0;
  out.rate_used = 0;
  out.tokens = 0;
  for (std::size_t h = 0; h < out.tiers.size(); ++h) {
    const auto& c = pr.heads[h]->cost;
    for (std::size_t t = 0; t < out.tiers[h].size(); ++t) {
      out.objective += c(out.tiers[h][t], static_cast<Eigen::Index>(t));
      out.rate_used += rates[out.tiers[h][t]];
    }
    out.tokens += static_cast<std::int64_t>(out.tiers[h].size());
  }
  out.rate_budget = pr.budget * static_cast<double>(out.tokens);
}

// ratequant's parameter quantizer: a quantizer family with bit-width tiers (tier_forms()).
std::string fit_quantizer(const std::string& name) {
  std::string valid;
  for (const TierForm& f : tier_forms()) {
    if (!f.has_bits) continue;
    if (f.prefix == name) return name;
    valid += (valid.empty() ? "" : ", ") + f.prefix;
  }
  throw InputError("ratequant: parameter quantizer = '" + name + "' is not a quantizer with bit-width tiers; valid "
                   "choices are " + valid + ".");
}

SeedAllocation rate_quant(const SeedProblem& pr, const MethodParams& p) {
  SeedAllocation out;
  out.method = method_name("ratequant", p);
  const auto rates = ladder_rates(pr);
  const int m = pr.ladder.size();
  const std::string quantizer = p.at("quantizer").empty() ? pr.ladder.tiers[1].quantizer() : fit_quantizer(p.at("quantizer"));
  const std::size_t H = pr.heads.size();
  const Eigen::Index T = pr.heads[0]->cost.cols();
  WaterfillProblem wp;
  for (std::size_t h = 0; h < H; ++h) {
    if (pr.heads[h]->cost.cols() != T)
      throw InputError("ratequant: head " + std::to_string(h) + " has " + std::to_string(pr.heads[h]->cost.cols()) +
                       " tokens, head 0 has " + std::to_string(T) + "; per-head bits need equal token counts");
    const NoiseFit fit = fit_noise(*pr.heads[h], quantizer);
    wp.weights.push_back(pr.heads[h]->weights.a.sum());
    wp.models.push_back({fit.alpha, fit.beta});
  }
  wp.budget = pr.budget;
  wp.max_bits = pr.ladder.tiers.back().bits;
  // Projection instance over heads on the non-evicting tiers: cost(h, k) = sum_t c_t(tau_{k+1}).
  std::vector<double> head_cost(H * static_cast<std::size_t>(m - 1));
  for (std::size_t h = 0; h < H; ++h)
    for (int k = 1; k < m; ++k) head_cost[h * (m - 1) + (k - 1)] = pr.heads[h]->cost.row(k).sum();
  MckpInstance inst;
  inst.rates.assign(rates.begin() + 1, rates.end());
  inst.cost = CostView::item_major(head_cost.data(), static_cast<std::int64_t>(H), m - 1);
  inst.budget = pr.budget;
  WaterfillOptions wo;
  wo.compute_bound = false;
  const WaterfillResult r = waterfill(wp, inst, wo);
  out.continuous_bits = r.continuous.bits;
  out.multiplier = r.continuous.theta;
  out.max_kkt_residual = r.continuous.max_kkt_residual;
  out.status = r.projected.status;
  out.feasible_reason = r.projected.feasible_reason;
  out.message = r.projected.message;
  if (r.projected.has_solution()) {
    out.tiers.resize(H);
    for (std::size_t h = 0; h < H; ++h) out.tiers[h].assign(static_cast<std::size_t>(T), r.projected.choice[h] + 1);
  }
  account(out, pr, rates);
  return out;
}

double paper_eps(int bits) {
  const double eps = rdkv_paper_key_nmse(bits);
  if (std::isnan(eps))
    throw InputError("rdkv: the paper's eps(b) has no value for " + std::to_string(bits) +
                     " bits (it covers 0, 2, 4, 8, 16); pass eps=... for this ladder");
  return eps;
}

SeedAllocation rdkv(const SeedProblem& pr, const MethodParams& p) {
  SeedAllocation out;
  out.method = method_name("rdkv", p);
  const auto rates = ladder_rates(pr);
  const int m = pr.ladder.size();
  std::vector<double> eps;
  if (p.at("eps").empty()) {
    for (const Tier& t : pr.ladder.tiers) eps.push_back(paper_eps(t.bits));
  } else {
    std::stringstream ss(p.at("eps"));
    std::string item;
    while (std::getline(ss, item, ',')) eps.push_back(to_double("rdkv", "eps", item));
    if (static_cast<int>(eps.size()) != m)
      throw InputError("rdkv: parameter eps has " + std::to_string(eps.size()) + " values; the ladder '" +
                       pr.ladder.name() + "' has " + std::to_string(m) + " tiers");
  }
  const std::string score = p.at("score");
  if (score != "attention" && score != "weight")
    throw InputError("rdkv: parameter score = '" + score + "' is not attention or weight");
  const double kd = to_double("rdkv", "kernel", p.at("kernel"));
  SmoothingOptions so;
  so.pool = PoolKind::Avg;
  so.kernel = static_cast<int>(kd);
  so.padding = Padding::Reflect;
  if (kd != so.kernel) throw InputError("rdkv: parameter kernel = '" + p.at("kernel") + "' is not an integer");
  so.validate();
  // Smoothed scores, all heads concatenated.
  std::vector<std::vector<double>> s(pr.heads.size());
  for (std::size_t h = 0; h < pr.heads.size(); ++h) {
    const TokenWeights& w = pr.heads[h]->weights;
    if (score == "weight") {
      s[h].assign(w.a.data(), w.a.data() + w.a.size());
    } else {
      s[h].assign(w.attention.data(), w.attention.data() + w.attention.size());
    }
    if (so.kernel > 1 && !s[h].empty()) s[h] = smooth_scores(s[h], so);
  }
  std::int64_t N = 0;
  for (const auto& v : s) N += static_cast<std::int64_t>(v.size());
  auto choose = [&](double lambda, std::vector<std::vector<std::uint8_t>>* tiers) {
    double used = 0;
    if (tiers) tiers->resize(s.size());
    for (std::size_t h = 0; h < s.size(); ++h) {
      if (tiers) (*tiers)[h].resize(s[h].size());
      for (std::size_t t = 0; t < s[h].size(); ++t) {
        int best = 0;
        double bv = s[h][t] * eps[0] + lambda * rates[0];
        for (int j = 1; j < m; ++j) {
          const double v = s[h][t] * eps[j] + lambda * rates[j];
          if (v < bv) bv = v, best = j;
        }
        used += rates[best];
        if (tiers) (*tiers)[h][t] = static_cast<std::uint8_t>(best);
      }
    }
    return used;
  };
  const double cap = pr.budget * static_cast<double>(N) + 1e-9 * std::max(1.0, pr.budget * N);
  const double rmin = *std::min_element(rates.begin(), rates.end());
  if (pr.budget < rmin) {
    out.status = SolveStatus::Infeasible;
    out.message = "rdkv: budget below the ladder's smallest rate.";
    account(out, pr, rates);
    return out;
  }
  double lambda = 0.0;
  if (choose(0.0, nullptr) > cap) {
    double hi = 1.0, lo = 0.0;
    while (choose(hi, nullptr) > cap && hi < 1e300) lo = hi, hi *= 16;
    // geometric bisection between lo (over budget, or 0) and hi (fits)
    for (int it = 0; it < 200; ++it) {
      const double mid = lo > 0 ? std::sqrt(lo * hi) : hi / 1024;
      if (choose(mid, nullptr) > cap) lo = mid;
      else hi = mid;
      if (lo > 0 && hi / lo < 1 + 1e-12) break;
    }
    lambda = hi;
    out.set_feasible(FeasibleReason::Heuristic);  // the multiplier's minimisers: no proof
  } else {
    out.status = SolveStatus::Trivial;
  }
  choose(lambda, &out.tiers);
  out.multiplier = lambda;
  out.message = "rdkv: lambda = " + std::to_string(lambda) + " by bisection.";
  account(out, pr, rates);
  return out;
}

SeedAllocation granularity(const SeedProblem& pr, const MethodParams& p) {
  SeedAllocation out;
  out.method = method_name("granularity", p);
  const Granularity g = parse_granularity(p.at("restriction"));
  auto count = [&](const char* key) {
    const double v = to_double("granularity", key, p.at(key));
    if (v != std::floor(v) || v < 0 || v > (1 << 30))
      throw InputError("granularity: parameter " + std::string(key) + " = '" + p.at(key) + "' is not a whole number >= 0");
    return static_cast<int>(v);
  };
  GranularityProblem gp;
  gp.rates = ladder_rates(pr);
  for (const SurrogateCosts* c : pr.heads) gp.costs.push_back(&c->cost);
  const int H = static_cast<int>(pr.heads.size());
  gp.n_kv_heads = pr.n_kv_heads > 0 ? pr.n_kv_heads : H;
  gp.n_layers = H / gp.n_kv_heads;
  gp.budget = pr.budget;
  gp.sink = count("sink"), gp.recent = count("recent"), gp.age_steps = count("age_steps");
  const GranularAllocation a = solve_granularity(gp, g);
  out.status = a.status;
  out.feasible_reason = a.status == SolveStatus::Feasible ? FeasibleReason::Limit : FeasibleReason::None;  // the exact solver stopped before its proof
  out.message = a.feasible() ? "exact under the restriction " + std::string(to_string(g)) : a.message;
  if (!a.feasible()) return out;
  out.tiers = a.tiers;
  account(out, pr, gp.rates);
  return out;
}

SeedAllocation routed(const SeedProblem& pr, const MethodParams& p) {
  SeedAllocation out;
  out.method = method_name("routed", p);
  const auto rates = ladder_rates(pr);
  const Scope scope = parse_scope(p.at("scope"));
  FamilyOptions fo;
  fo.solver = parse_family_solver(p.at("solver"));
  fo.route_tolerance = to_double("routed", "route_tolerance", p.at("route_tolerance"));
  fo.validate();
  FamilyProblem fp;
  fp.rates = rates;
  fp.budget = pr.budget;
  for (const SurrogateCosts* c : pr.heads) {
    FamilyHead fh(&c->cost, &c->weights.a);
    if (fo.solver == FamilySolver::Waterfill) {
      const HeadNoiseModel fit = fit_head_noise(*c, rates);  // the library's convention, as `tierlab solve`
      fh.noise = {fit.alpha, fit.beta};
    }
    fp.heads.push_back(fh);
  }
  const auto options = family_options(pr.ladder, FamilyChoice::Routed);
  const FamilyResult r = scope == Scope::Head ? solve_families_per_head(fp, options, fo)
                                              : solve_families_pooled(fp, options, fo);
  out.status = r.status;
  out.feasible_reason = r.feasible_reason;
  out.message = r.message;
  out.multiplier = std::isfinite(r.lambda) ? r.lambda : 0.0;
  for (const auto& h : r.heads) out.tiers.push_back(h.tiers);
  account(out, pr, rates);
  return out;
}

}  // namespace

void SeedProblem::validate() const {
  ladder.validate();
  if (heads.empty()) throw InputError("SeedProblem.heads is empty; give at least one head's costs");
  if (head_dim <= 0) throw InputError("SeedProblem.head_dim = " + std::to_string(head_dim) + " must be positive");
  if (n_kv_heads < 0 || (n_kv_heads > 0 && heads.size() % static_cast<std::size_t>(n_kv_heads) != 0))
    throw InputError("SeedProblem.n_kv_heads = " + std::to_string(n_kv_heads) + " must be 0 or divide the " +
                     std::to_string(heads.size()) + " heads");
  check_budget(budget, "SeedProblem.budget");
  for (std::size_t h = 0; h < heads.size(); ++h) {
    if (!heads[h]) throw InputError("SeedProblem.heads[" + std::to_string(h) + "] is null");
    if (heads[h]->cost.rows() != ladder.size() || heads[h]->ladder.tiers != ladder.tiers)
      throw InputError("SeedProblem.heads[" + std::to_string(h) + "] has costs on ladder '" +
                       heads[h]->ladder.name() + "', not '" + ladder.name() + "'");
  }
}

std::vector<double> ladder_rates(const SeedProblem& pr) {
  std::vector<double> r;
  for (std::size_t j = 0; j < pr.ladder.tiers.size(); ++j) {
    const std::optional<Rate> closed = make_tier_quantizer(pr.ladder.tiers[j])->closed_nominal_rate(pr.head_dim);
    if (closed) {
      r.push_back(rate_of(*closed, pr.rate_kind));
      continue;
    }
    double sum = 0.0;  // a data-dependent rate (kvquant, kvcobra): the mean of the heads' dense rates
    for (const SurrogateCosts* c : pr.heads) sum += rate_of(c->rates.at(j), pr.rate_kind);
    r.push_back(sum / double(pr.heads.size()));
  }
  return r;
}

namespace {

const std::vector<SeedAllocatorEntry>& seed_registry() {
  static const std::vector<SeedAllocatorEntry> r = {
      {{"ratequant", "seed allocator",
        "per-head bits by reverse water-filling on per-quantizer fitted n_h(b) = alpha beta^-b, projected to the ladder",
        "arXiv 2605.06675 (RateQuant)",
        {{"quantizer", "", "quantizer whose fit n_h(b) is used: kivi, token, turboquant, ... (default: the quantizer of the ladder's first finite tier)"}}},
       rate_quant},
      {{"rdkv", "seed allocator",
        "per-token argmin s eps(b) + lambda b, lambda by bisection, scores reflect-avg-pooled k5 (keys per channel: quantizer rdkv-channel)",
        "arXiv 2605.08317, Junkai1860/RDKV",
        {{"score", "attention", "token score: attention (mean_q p) | weight (a_t)"},
        {"kernel", "5", "reflect-padded average pool kernel (1 = none)"},
        {"eps", "", "eps(b) per ladder tier, comma-separated (default: paper NMSE by bits {0,2,4,8,16})"}}},
       rdkv},
      {{"routed", "seed allocator", "each head routes to family Q, E or M (docs/model.md section 6)",
        "tierlab (solvers/families.hpp)",
        {{"scope", "head", "head (own budget per head) | model (heads pool the budget)"},
        {"solver", "exact", "exact | greedy | greedy-raw | waterfill"},
        {"route_tolerance", "0", "keep an endpoint family within (1 + tol) of the mixed objective"}}},
       routed},
      {{"granularity", "seed allocator",
        "the exact surrogate optimum under one engine granularity: a tier per layer, per head, per position band, an age "
        "schedule, keep/evict masks shared or per head, or per token (docs/model.md section 9)",
        "tierlab (solvers/granularity.hpp)",
        {{"restriction", "head", "uniform | layer | head | bands | bands_head | age | age_head | evict_shared | evict_head | "
                                 "evict_layer | token_head | token"},
         {"sink", "4", "bands: tokens in the first band"},
         {"recent", "64", "bands: tokens in the last band"},
         {"age_steps", "4", "age: equal bands by age, the tier never rising with age"}}},
       granularity}};
  return r;
}

}  // namespace

const std::vector<MethodInfo>& seed_allocator_methods() {
  static const std::vector<MethodInfo> v = [] {
    std::vector<MethodInfo> out;
    for (const auto& e : seed_registry()) out.push_back(e.info);
    return out;
  }();
  return v;
}

SeedAllocation allocate_seed(std::string_view name_view, const MethodParams& given, const SeedProblem& problem) {
  const SeedAllocatorEntry& e = seed_entry(std::string(name_view));
  const MethodParams p = with_defaults(e, given);
  problem.validate();
  return e.make(problem, p);
}

}  // namespace tierlab
