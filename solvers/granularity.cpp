// Allocations restricted to an engine's granularity, each exact under its restriction
// (granularity.hpp).
#include "solvers/granularity.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "model/base/phases.hpp"
#include "model/base/error.hpp"

namespace tierlab {

namespace {

struct Named {
  Granularity g;
  const char* name;
};
const Named kNames[] = {{Granularity::Uniform, "uniform"},        {Granularity::Layer, "layer"},
                        {Granularity::Head, "head"},              {Granularity::Bands, "bands"},
                        {Granularity::BandsHead, "bands_head"},   {Granularity::Age, "age"},
                        {Granularity::AgeHead, "age_head"},       {Granularity::EvictShared, "evict_shared"},
                        {Granularity::EvictHead, "evict_head"},   {Granularity::EvictLayer, "evict_layer"},
                        {Granularity::TokenHead, "token_head"},   {Granularity::Token, "token"}};

constexpr double kRateTol = 1e-9;

bool fits(double used_bits, double budget_bits) { return used_bits <= budget_bits + kRateTol * std::max(1.0, budget_bits); }

// A group of tokens of every head that must share one tier (a band), as token indices.
using Bands = std::vector<std::vector<int>>;

// Tuples of tiers, one per band, for the band restrictions: every tuple (bands) or the
// tuples non-increasing from band 0 (age: newest first).
std::vector<std::vector<int>> tuples(int bands, int m, bool non_increasing) {
  std::vector<std::vector<int>> out;
  std::vector<int> t(static_cast<std::size_t>(bands), 0);
  std::function<void(int)> rec = [&](int k) {
    if (k == bands) {
      out.push_back(t);
      return;
    }
    const int hi = non_increasing && k > 0 ? t[static_cast<std::size_t>(k - 1)] : m - 1;
    for (int j = 0; j <= hi; ++j) t[static_cast<std::size_t>(k)] = j, rec(k + 1);
  };
  rec(0);
  return out;
}

// Band sums: sums[b][j] = sum over the band's tokens of c_t(tau_j), for one head.
std::vector<std::vector<double>> band_sums(const MatrixRMd& c, const Bands& bands) {
  std::vector<std::vector<double>> s(bands.size(), std::vector<double>(static_cast<std::size_t>(c.rows()), 0.0));
  for (std::size_t b = 0; b < bands.size(); ++b)
    for (int j = 0; j < c.rows(); ++j) {
      CompensatedSum sum;
      for (int t : bands[b]) sum.add(c(j, t));
      s[b][static_cast<std::size_t>(j)] = sum.value();
    }
  return s;
}

// One knapsack: item-major costs (N x options), per-option rates (bits per element of an item
// times the elements the rate is counted over, the same for every item), budget per item.
struct Knapsack {
  std::vector<double> rates;
  std::vector<double> cost;  // N x rates.size(), item-major
  std::int64_t items = 0;
  double budget = 0.0;       // per item, in the rates' unit
};

struct KnapsackChoice {
  SolveStatus status = SolveStatus::Infeasible;
  std::vector<std::uint8_t> choice;
  std::string message;
};

KnapsackChoice solve_knapsack(const Knapsack& k, const ExactOptions& opt) {
  MckpInstance inst;
  inst.rates = k.rates;
  inst.cost = CostView::item_major(k.cost.data(), k.items, static_cast<int>(k.rates.size()));
  inst.budget = k.budget;
  const MckpResult r = solve_exact(inst, opt);
  KnapsackChoice out;
  out.status = r.status == SolveStatus::Trivial ? SolveStatus::Optimal : r.status;
  out.choice = r.choice;
  out.message = r.message;
  return out;
}

// Options of equal rate collapsed to the cheapest per item: the distinct rates (increasing)
// and, per item and distinct rate, the cost and the option that gives it.
struct Collapsed {
  Knapsack k;
  std::vector<std::vector<int>> option;  // per item, per distinct rate: the original option
};
Collapsed collapse(const std::vector<double>& rates, const std::vector<std::vector<double>>& cost, double budget) {
  std::vector<double> distinct = rates;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end(),
                             [](double a, double b) { return std::fabs(a - b) <= 1e-12 * std::max(1.0, std::fabs(b)); }),
                 distinct.end());
  if (distinct.size() > 255)
    throw InputError("granularity: " + std::to_string(distinct.size()) +
                     " distinct rates of tier tuples exceed the solver's 255 options; use a shorter ladder or fewer bands.");
  auto index_of = [&](double r) {
    return static_cast<int>(std::lower_bound(distinct.begin(), distinct.end(), r - 1e-12 * std::max(1.0, std::fabs(r))) -
                            distinct.begin());
  };
  Collapsed c;
  c.k.rates = distinct;
  c.k.items = static_cast<std::int64_t>(cost.size());
  c.k.budget = budget;
  const std::size_t m = distinct.size();
  c.k.cost.assign(cost.size() * m, std::numeric_limits<double>::infinity());
  c.option.assign(cost.size(), std::vector<int>(m, -1));
  for (std::size_t i = 0; i < cost.size(); ++i)
    for (std::size_t o = 0; o < rates.size(); ++o) {
      const std::size_t d = static_cast<std::size_t>(index_of(rates[o]));
      if (cost[i][o] < c.k.cost[i * m + d]) c.k.cost[i * m + d] = cost[i][o], c.option[i][d] = static_cast<int>(o);
    }
  return c;
}

class Solver {
 public:
  explicit Solver(const GranularityProblem& p)
      : p_(p), m_(static_cast<int>(p.rates.size())), T_(p.tokens()), H_(static_cast<int>(p.costs.size())) {}

  GranularAllocation solve(Granularity g) {
    GranularAllocation a;
    a.granularity = g;
    a.tiers.assign(static_cast<std::size_t>(H_), std::vector<std::uint8_t>(static_cast<std::size_t>(T_), 0));
    switch (g) {
      case Granularity::Uniform: enumerate(a, whole_bands(), tuples(1, m_, false), /*no_evict=*/true); break;
      case Granularity::Bands: enumerate(a, position_bands(), tuples(3, m_, false), false); break;
      case Granularity::Age: enumerate(a, age_bands(), tuples(p_.age_steps, m_, true), false); break;
      case Granularity::BandsHead: per_head_tuples(a, position_bands(), tuples(3, m_, false)); break;
      case Granularity::AgeHead: per_head_tuples(a, age_bands(), tuples(p_.age_steps, m_, true)); break;
      case Granularity::Layer: groups_one_tier(a, p_.n_kv_heads); break;
      case Granularity::Head: groups_one_tier(a, 1); break;
      case Granularity::EvictShared: tokens(a, {0, m_ - 1}, p_.n_kv_heads, /*shared=*/true, H_ / p_.n_kv_heads); break;
      case Granularity::EvictHead: tokens(a, {0, m_ - 1}, 1, false, 1); break;
      case Granularity::EvictLayer: tokens(a, {0, m_ - 1}, p_.n_kv_heads, false, 1); break;
      case Granularity::TokenHead: tokens(a, all_tiers(), 1, false, 1); break;
      case Granularity::Token: tokens(a, all_tiers(), H_, false, 1); break;
    }
    if (a.feasible()) finish(a);
    return a;
  }

 private:
  const GranularityProblem& p_;
  const int m_, T_, H_;

  std::vector<int> all_tiers() const {
    std::vector<int> v(static_cast<std::size_t>(m_));
    for (int j = 0; j < m_; ++j) v[static_cast<std::size_t>(j)] = j;
    return v;
  }
  Bands whole_bands() const {
    Bands b(1);
    for (int t = 0; t < T_; ++t) b[0].push_back(t);
    return b;
  }
  Bands position_bands() const {
    Bands b(3);
    for (int t = 0; t < T_; ++t) b[static_cast<std::size_t>(position_band(t, T_, p_.sink, p_.recent))].push_back(t);
    return b;
  }
  Bands age_bands() const {
    Bands b(static_cast<std::size_t>(p_.age_steps));
    for (int t = 0; t < T_; ++t) b[static_cast<std::size_t>(age_band(t, T_, p_.age_steps))].push_back(t);
    return b;
  }
  // Bits per channel of one head under a tuple (sum over tokens of the tier's rate).
  double tuple_bits(const Bands& bands, const std::vector<int>& tup) const {
    double s = 0;
    for (std::size_t b = 0; b < bands.size(); ++b)
      s += static_cast<double>(bands[b].size()) * p_.rates[static_cast<std::size_t>(tup[b])];
    return s;
  }
  void assign(GranularAllocation& a, int head, const Bands& bands, const std::vector<int>& tup) const {
    for (std::size_t b = 0; b < bands.size(); ++b)
      for (int t : bands[b]) a.tiers[static_cast<std::size_t>(head)][static_cast<std::size_t>(t)] = static_cast<std::uint8_t>(tup[b]);
  }

  // One tuple for the whole model: every admissible tuple tried.
  void enumerate(GranularAllocation& a, const Bands& bands, const std::vector<std::vector<int>>& tups, bool no_evict) {
    std::vector<std::vector<std::vector<double>>> sums;
    for (const MatrixRMd* c : p_.costs) sums.push_back(band_sums(*c, bands));
    const double budget_bits = p_.budget * T_;
    double best = std::numeric_limits<double>::infinity();
    const std::vector<int>* arg = nullptr;
    for (const auto& tup : tups) {
      if (no_evict && tup[0] == 0) continue;
      if (!fits(tuple_bits(bands, tup), budget_bits)) continue;
      CompensatedSum s;
      for (const auto& hs : sums)
        for (std::size_t b = 0; b < bands.size(); ++b) s.add(hs[b][static_cast<std::size_t>(tup[b])]);
      if (s.value() < best) best = s.value(), arg = &tup;
    }
    if (!arg) {
      a.message = "no " + std::string(to_string(a.granularity)) + " allocation fits B = " + number_text(p_.budget) + " bits";
      return;
    }
    a.status = SolveStatus::Optimal;
    for (int h = 0; h < H_; ++h) assign(a, h, bands, *arg);
  }

  // Each head its own tuple, heads trading the budget.
  void per_head_tuples(GranularAllocation& a, const Bands& bands, const std::vector<std::vector<int>>& tups) {
    std::vector<double> rates;
    for (const auto& tup : tups) rates.push_back(tuple_bits(bands, tup));
    std::vector<std::vector<double>> cost(static_cast<std::size_t>(H_));
    for (int h = 0; h < H_; ++h) {
      const auto s = band_sums(*p_.costs[static_cast<std::size_t>(h)], bands);
      for (const auto& tup : tups) {
        CompensatedSum c;
        for (std::size_t b = 0; b < bands.size(); ++b) c.add(s[b][static_cast<std::size_t>(tup[b])]);
        cost[static_cast<std::size_t>(h)].push_back(c.value());
      }
    }
    const Collapsed col = collapse(rates, cost, p_.budget * T_);
    const KnapsackChoice k = solve_knapsack(col.k, p_.exact);
    take(a, k);
    if (!a.feasible()) return;
    for (int h = 0; h < H_; ++h) {
      const int o = col.option[static_cast<std::size_t>(h)][k.choice[static_cast<std::size_t>(h)]];
      assign(a, h, bands, tups[static_cast<std::size_t>(o)]);
    }
  }

  // Groups of `per_group` consecutive heads (a layer, or one head), each one tier for all its
  // tokens, trading the budget.
  void groups_one_tier(GranularAllocation& a, int per_group) {
    Knapsack k;
    k.rates = p_.rates;
    k.items = H_ / per_group;
    k.budget = p_.budget;
    k.cost.assign(static_cast<std::size_t>(k.items * m_), 0.0);
    for (std::int64_t g = 0; g < k.items; ++g)
      for (int j = 0; j < m_; ++j) {
        CompensatedSum s;
        for (int h = 0; h < per_group; ++h) s.add(p_.costs[static_cast<std::size_t>(g * per_group + h)]->row(j).sum());
        k.cost[static_cast<std::size_t>(g * m_ + j)] = s.value();
      }
    const KnapsackChoice c = solve_knapsack(k, p_.exact);
    take(a, c);
    if (!a.feasible()) return;
    for (int h = 0; h < H_; ++h)
      std::fill(a.tiers[static_cast<std::size_t>(h)].begin(), a.tiers[static_cast<std::size_t>(h)].end(),
                c.choice[static_cast<std::size_t>(h / per_group)]);
  }

  // Per-token knapsacks over the tiers `allowed`. Heads are taken `span` at a time, each span
  // one knapsack with its own budget B (span = H: the whole model). shared: the heads of a
  // span share each token's tier (one item per token, costs summed over the span's heads).
  // `spans_at_once` > 1 (shared): that many consecutive spans solved as one knapsack.
  void tokens(GranularAllocation& a, const std::vector<int>& allowed, int span, bool shared, int spans_at_once) {
    const int opts = static_cast<int>(allowed.size());
    std::vector<double> rates;
    for (int j : allowed) rates.push_back(p_.rates[static_cast<std::size_t>(j)]);
    const int group = span * spans_at_once;  // heads per knapsack
    SolveStatus worst = SolveStatus::Optimal;
    for (int first = 0; first < H_; first += group) {
      Knapsack k;
      k.rates = rates;
      k.budget = p_.budget;
      if (shared) {
        k.items = static_cast<std::int64_t>(spans_at_once) * T_;
        k.cost.assign(static_cast<std::size_t>(k.items * opts), 0.0);
        for (int s = 0; s < spans_at_once; ++s)
          for (int t = 0; t < T_; ++t)
            for (int o = 0; o < opts; ++o) {
              double c = 0;
              for (int h = 0; h < span; ++h) c += (*p_.costs[static_cast<std::size_t>(first + s * span + h)])(allowed[static_cast<std::size_t>(o)], t);
              k.cost[static_cast<std::size_t>((static_cast<std::int64_t>(s) * T_ + t) * opts + o)] = c;
            }
      } else {
        k.items = static_cast<std::int64_t>(group) * T_;
        k.cost.assign(static_cast<std::size_t>(k.items * opts), 0.0);
        for (int h = 0; h < group; ++h)
          for (int t = 0; t < T_; ++t)
            for (int o = 0; o < opts; ++o)
              k.cost[static_cast<std::size_t>((static_cast<std::int64_t>(h) * T_ + t) * opts + o)] =
                  (*p_.costs[static_cast<std::size_t>(first + h)])(allowed[static_cast<std::size_t>(o)], t);
      }
      const KnapsackChoice c = solve_knapsack(k, p_.exact);
      if (c.status == SolveStatus::Infeasible) {
        a.status = SolveStatus::Infeasible;
        a.message = c.message;
        return;
      }
      if (c.status == SolveStatus::Feasible) worst = SolveStatus::Feasible, a.message = c.message;
      for (int h = 0; h < group; ++h)
        for (int t = 0; t < T_; ++t) {
          const std::int64_t item = shared ? static_cast<std::int64_t>(h / span) * T_ + t : static_cast<std::int64_t>(h) * T_ + t;
          a.tiers[static_cast<std::size_t>(first + h)][static_cast<std::size_t>(t)] =
              static_cast<std::uint8_t>(allowed[c.choice[static_cast<std::size_t>(item)]]);
        }
    }
    a.status = worst;
  }

  void take(GranularAllocation& a, const KnapsackChoice& k) const {
    a.status = k.status;
    if (k.status == SolveStatus::Infeasible || k.status == SolveStatus::Feasible) a.message = k.message;
  }

  // The objective and the nominal rate of the allocation, from its tiers.
  void finish(GranularAllocation& a) const {
    CompensatedSum obj, bits;
    for (int h = 0; h < H_; ++h)
      for (int t = 0; t < T_; ++t) {
        const int j = a.tiers[static_cast<std::size_t>(h)][static_cast<std::size_t>(t)];
        obj.add((*p_.costs[static_cast<std::size_t>(h)])(j, t));
        bits.add(p_.rates[static_cast<std::size_t>(j)]);
      }
    a.objective = obj.value();
    a.rate = bits.value() / (static_cast<double>(H_) * T_);
  }
};

}  // namespace

const std::vector<Granularity>& all_granularities() {
  static const std::vector<Granularity> v = [] {
    std::vector<Granularity> out;
    for (const Named& n : kNames) out.push_back(n.g);
    return out;
  }();
  return v;
}

std::string_view to_string(Granularity g) {
  for (const Named& n : kNames)
    if (n.g == g) return n.name;
  return "?";
}

Granularity parse_granularity(std::string_view name) {
  std::string names;
  for (const Named& n : kNames) {
    if (name == n.name) return n.g;
    names += std::string(names.empty() ? "" : ", ") + n.name;
  }
  throw InputError("unknown granularity '" + std::string(name) + "'; known: " + names + ".");
}

bool is_engine_axis(Granularity g) { return g != Granularity::TokenHead && g != Granularity::Token; }

int GranularityProblem::tokens() const { return costs.empty() || !costs.front() ? 0 : static_cast<int>(costs.front()->cols()); }

void GranularityProblem::validate() const {
  auto bad = [](const std::string& field, const std::string& value, const std::string& why) {
    throw InputError("GranularityProblem." + field + " = " + value + ": " + why);
  };
  if (rates.size() < 2 || rates.size() > 255) bad("rates", std::to_string(rates.size()) + " tiers", "need 2 to 255 tiers");
  if (rates[0] != 0.0) bad("rates[0]", number_text(rates[0]), "tier 0 is evict, 0 bits");
  for (std::size_t j = 1; j < rates.size(); ++j)
    if (!(rates[j] > rates[j - 1]) || !std::isfinite(rates[j]))
      bad("rates[" + std::to_string(j) + "]", number_text(rates[j]), "rates must be finite and strictly increasing");
  if (n_layers < 1 || n_kv_heads < 1) bad("n_layers x n_kv_heads", std::to_string(n_layers) + " x " + std::to_string(n_kv_heads), "must be >= 1 each");
  if (costs.size() != static_cast<std::size_t>(n_layers) * static_cast<std::size_t>(n_kv_heads))
    bad("costs", std::to_string(costs.size()) + " heads", "must be n_layers x n_kv_heads");
  const int T = tokens();
  if (T < 1) bad("costs", "no tokens", "every head needs T >= 1 tokens");
  for (std::size_t i = 0; i < costs.size(); ++i)
    if (!costs[i] || costs[i]->rows() != static_cast<Eigen::Index>(rates.size()) || costs[i]->cols() != T)
      bad("costs[" + std::to_string(i) + "]", "a matrix of another shape", "must be tiers x T like head 0");
  if (!std::isfinite(budget) || budget < 0) bad("budget", number_text(budget), "must be finite and >= 0");
  if (sink < 0) bad("sink", std::to_string(sink), "must be >= 0");
  if (recent < 0) bad("recent", std::to_string(recent), "must be >= 0");
  if (age_steps < 1) bad("age_steps", std::to_string(age_steps), "must be >= 1");
  exact.validate();
}

int position_band(int t, int T, int sink, int recent) {
  if (t < sink) return 0;
  if (t >= T - recent) return 2;
  return 1;
}

int age_band(int t, int T, int age_steps) {
  const long long age = static_cast<long long>(T) - 1 - t;
  return static_cast<int>(age * age_steps / T);
}

GranularAllocation solve_granularity(const GranularityProblem& p, Granularity g) {
  const PhaseScope phase(Phase::Solve);
  p.validate();
  return Solver(p).solve(g);
}

}  // namespace tierlab
