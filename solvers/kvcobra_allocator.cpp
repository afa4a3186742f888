#include "solvers/kvcobra_allocator.hpp"

#include "model/base/text.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "solvers/exact.hpp"

namespace tierlab {
namespace {


const std::vector<MethodParam>& param_list() {
  static const std::vector<MethodParam> p = {
      {"redistribute", "waterfill", "waterfill (released C2) | uniform (C1 only) | optimal (exact knapsack over heads)"},
      {"rate", "paper", "optimal only: paper (r b / d) | code (pad(r) b / d, the stored codes)"},
      {"rounding", "floor", "C1 bits from B_h / r: floor (released) | round (legacy)"},
      {"min_rank", "2", "smallest rank"},
      {"min_bits", "2", "smallest bits"},
      {"max_bits", "8", "largest bits"},
      {"iterations", "5", "waterfill rounds"},
      {"damping", "0.3", "waterfill step"},
      {"basis", "auto", "quantizer basis: auto (pre-RoPE if present) | pre | post"},
      {"basis_cost", "fp16", "quantizer: fp16 (basis stored) | offline (not charged)"},
      {"group", "0", "quantizer: tokens per quantization group (0 = all)"},
      {"seed", "0", "quantizer: random Hadamard signs"}};
  return p;
}

long long floor_div(long long a, long long b) {  // Python's a // b for b > 0
  long long q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

double sum_range(const std::vector<double>& w, std::size_t from, std::size_t to) {
  double s = 0;
  for (std::size_t i = from; i < std::min(to, w.size()); ++i) s += w[i];
  return s;
}

KvcobraHeadChoice make_choice(const std::vector<double>& w, int d, int r, int b, long long budget) {
  KvcobraHeadChoice c;
  c.rank = r;
  c.bits = b;
  c.head_budget = budget;
  c.distortion = kvcobra_distortion(w, r, b);
  c.nominal_rate = double(r) * b / d;
  c.code_rate = double(next_pow2(r)) * b / d;
  return c;
}

void totals(KvcobraAllocation& a) {
  a.objective = a.nominal_rate = a.code_rate = 0;
  for (const auto& h : a.heads) {
    a.objective += h.distortion;
    a.nominal_rate += h.nominal_rate;
    a.code_rate += h.code_rate;
  }
  if (!a.heads.empty()) {
    a.nominal_rate /= double(a.heads.size());
    a.code_rate /= double(a.heads.size());
  }
}

KvcobraAllocation optimal(const std::vector<std::vector<double>>& w, int d, const KvcobraAllocOptions& o) {
  KvcobraAllocation out;
  out.options = o;
  out.head_dim = d;
  const bool code = o.rate == "code";
  // Grid pairs grouped by their integer rate R (bits per token per head).
  struct Pair {
    int r, b;
  };
  std::map<long long, std::vector<Pair>> by_rate;
  for (int r = std::max(o.min_rank, 2); r <= d; r += 2)
    for (int b = o.min_bits; b <= o.max_bits; ++b)
      by_rate[static_cast<long long>(code ? next_pow2(r) : r) * b].push_back({r, b});
  const std::size_t H = w.size();
  // Per head and rate: the least distortion among the pairs of that rate (first on ties).
  std::vector<long long> rates;
  std::vector<std::vector<double>> cost;      // [tier][head]
  std::vector<std::vector<Pair>> best_pair;  // [tier][head]
  std::vector<double> running(H, std::numeric_limits<double>::infinity());
  for (const auto& [R, pairs] : by_rate) {
    std::vector<double> c(H);
    std::vector<Pair> p(H);
    bool useful = false;
    for (std::size_t h = 0; h < H; ++h) {
      c[h] = std::numeric_limits<double>::infinity();
      for (const Pair& q : pairs) {
        const double D = kvcobra_distortion(w[h], q.r, q.b);
        if (D < c[h]) c[h] = D, p[h] = q;
      }
      if (c[h] < running[h]) useful = true;  // not dominated by a cheaper rate for this head
    }
    if (!useful) continue;
    for (std::size_t h = 0; h < H; ++h) running[h] = std::min(running[h], c[h]);
    rates.push_back(R);
    cost.push_back(std::move(c));
    best_pair.push_back(std::move(p));
  }
  if (rates.size() > 255)
    throw InputError("kvcobra allocator: " + std::to_string(rates.size()) + " distinct useful rates for head_dim " +
                     std::to_string(d) + " exceed the exact solver's 255 tiers; use rate=code or a narrower bit range");
  const int m = static_cast<int>(rates.size());
  std::vector<double> item_major(H * static_cast<std::size_t>(m));
  for (std::size_t h = 0; h < H; ++h)
    for (int j = 0; j < m; ++j) item_major[h * m + j] = cost[static_cast<std::size_t>(j)][h];
  MckpInstance inst;
  for (long long R : rates) inst.rates.push_back(double(R) / d);
  inst.cost = CostView::item_major(item_major.data(), static_cast<std::int64_t>(H), m);
  inst.budget = o.budget;
  const MckpResult r = solve_exact(inst);
  out.status = r.status;
  out.feasible_reason = r.feasible_reason;
  out.message = "kvcobra optimal (" + o.rate + " rate): " + r.message;
  out.lower_bound = r.lower_bound;
  if (!r.has_solution()) return out;
  for (std::size_t h = 0; h < H; ++h) {
    const Pair& p = best_pair[r.choice[h]][h];
    out.heads.push_back(make_choice(w[h], d, p.r, p.b, static_cast<long long>(p.r) * p.b));
  }
  return out;
}

}  // namespace

void KvcobraAllocOptions::validate() const {
  auto bad = [](const std::string& field, const std::string& value, const std::string& why) {
    throw InputError("kvcobra allocator: " + field + " = " + value + " " + why);
  };
  if (!(budget > 0) || !std::isfinite(budget)) bad("budget", format_number(budget), "must be finite and > 0");
  if (redistribute != "waterfill" && redistribute != "uniform" && redistribute != "optimal")
    bad("redistribute", "'" + redistribute + "'", "is not waterfill, uniform or optimal");
  if (rate != "paper" && rate != "code") bad("rate", "'" + rate + "'", "is not paper or code");
  if (rounding != "floor" && rounding != "round") bad("rounding", "'" + rounding + "'", "is not floor or round");
  if (min_rank < 1) bad("min_rank", std::to_string(min_rank), "must be >= 1");
  if (min_bits < 2 || min_bits > 8) bad("min_bits", std::to_string(min_bits), "must be in [2, 8]");
  if (max_bits < min_bits || max_bits > 8)
    bad("max_bits", std::to_string(max_bits), "must be in [min_bits, 8] (the released grid is 2..8)");
  if (iterations < 0 || iterations > 1000) bad("iterations", std::to_string(iterations), "must be in [0, 1000]");
  if (!(damping >= 0) || !std::isfinite(damping)) bad("damping", format_number(damping), "must be finite and >= 0");
  if (basis != "auto" && basis != "pre" && basis != "post") bad("basis", "'" + basis + "'", "is not auto, pre or post");
  if (basis_cost != "fp16" && basis_cost != "offline")
    bad("basis_cost", "'" + basis_cost + "'", "is not fp16 or offline");
  if (group < 0) bad("group", std::to_string(group), "must be >= 0");
}

std::string KvcobraAllocOptions::name() const {
  std::string s = "kvcobra:B=" + format_number(budget) + ",redistribute=" + redistribute;
  if (redistribute == "optimal") s += ",rate=" + rate;
  if (rounding != "floor") s += ",rounding=" + rounding;
  return s;
}

KvcobraAllocOptions KvcobraAllocOptions::from_params(double budget, const MethodParams& params) {
  // The one reader (model/base/method_info.hpp): every option takes the given value or the
  // default declared in param_list(), the same defaults as the struct's members (a test says so).
  MethodParamReader r("kvcobra allocator", param_list(), params);
  KvcobraAllocOptions o;
  o.budget = budget;
  o.redistribute = r.get_string("redistribute");
  o.rate = r.get_string("rate");
  o.rounding = r.get_string("rounding");
  o.min_rank = r.get_int("min_rank");
  o.min_bits = r.get_int("min_bits");
  o.max_bits = r.get_int("max_bits");
  o.iterations = r.get_int("iterations");
  o.damping = r.get_double("damping");
  o.basis = r.get_string("basis");
  o.basis_cost = r.get_string("basis_cost");
  o.group = r.get_int("group");
  o.seed = r.get_seed("seed");
  r.finish();
  o.validate();
  return o;
}

double kvcobra_distortion(const std::vector<double>& w, int rank, int bits) {
  const std::size_t r = static_cast<std::size_t>(std::max(rank, 0));
  return sum_range(w, r, w.size()) + std::ldexp(1.0, -2 * bits) / 12.0 * sum_range(w, 0, r);
}

RankBits kvcobra_rank_bits(const std::vector<double>& w, long long B, int d, const KvcobraAllocOptions& o) {
  int r = 0, b = 0;
  if (sum_range(w, 0, w.size()) < 1e-30) {
    r = static_cast<int>(std::max<long long>(o.min_rank, floor_div(B, std::max(o.min_bits, 1))));
    b = static_cast<int>(std::max<long long>(o.min_bits, floor_div(B, std::max(r, 1))));
  } else {
    const long long r_max = std::min<long long>(d, std::max<long long>(o.min_rank, floor_div(B, std::max(o.min_bits, 1))));
    std::vector<int> rs;
    for (long long x = std::max(o.min_rank, 2); x <= r_max; x += 2) rs.push_back(static_cast<int>(x));
    if (rs.empty()) rs.push_back(o.min_rank);
    int best_r = rs[0], best_b = o.min_bits;
    double best_D = std::numeric_limits<double>::infinity();
    for (int x : rs) {
      long long bi = o.rounding == "floor" ? floor_div(B, x) : static_cast<long long>(std::nearbyint(double(B) / x));
      if (bi < o.min_bits) continue;
      bi = std::min<long long>(bi, o.max_bits);
      const double D = kvcobra_distortion(w, x, static_cast<int>(bi));
      if (D < best_D) best_D = D, best_r = x, best_b = static_cast<int>(bi);
    }
    r = best_r;
    b = best_b;
  }
  // The released fix-up (method.py _rank_bit_configs): fill the head's budget at b.
  b = std::clamp(b, 2, 8);
  r = static_cast<int>(std::max<long long>(o.min_rank, std::min<long long>(d, floor_div(B, b))));
  return {r, b};
}

std::vector<long long> kvcobra_waterfill_budgets(const std::vector<std::vector<double>>& w, int d,
                                                 const KvcobraAllocOptions& o) {
  const long long avg = static_cast<long long>(o.budget * d);  // Python int(): truncation
  const std::size_t H = w.size();
  std::vector<long long> B(H, avg);
  const long long total = avg * static_cast<long long>(H);
  const long long B_min = std::max<long long>(4, floor_div(avg, 4));
  for (int it = 0; it < o.iterations; ++it) {
    std::vector<double> D(H);
    double sum = 0;
    for (std::size_t h = 0; h < H; ++h) {
      const RankBits rb = kvcobra_rank_bits(w[h], B[h], d, o);
      D[h] = kvcobra_distortion(w[h], rb.rank, rb.bits);
      sum += D[h];
    }
    const double mean = std::max(sum / double(H), 1e-30);
    for (std::size_t h = 0; h < H; ++h) {
      const double ratio = D[h] / mean;
      const long long adj = static_cast<long long>(std::trunc(double(avg) * (std::sqrt(ratio) - 1.0) * o.damping));
      B[h] = std::max(B_min, B[h] + adj);
    }
    long long current = 0;
    for (long long x : B) current += x;
    if (current > 0)
      for (std::size_t h = 0; h < H; ++h)
        B[h] = std::max(B_min, static_cast<long long>(std::floor(double(B[h] * total) / double(current))));
  }
  return B;
}

KvcobraAllocation allocate_kvcobra(const std::vector<std::vector<double>>& w, int d, const KvcobraAllocOptions& o) {
  o.validate();
  if (w.empty()) throw InputError("kvcobra allocator: no heads given");
  if (d < 2) throw InputError("kvcobra allocator: head_dim = " + std::to_string(d) + " must be >= 2");
  for (std::size_t h = 0; h < w.size(); ++h) {
    if (static_cast<int>(w[h].size()) != d)
      throw InputError("kvcobra allocator: head " + std::to_string(h) + " has " + std::to_string(w[h].size()) +
                       " weights, head_dim is " + std::to_string(d));
    for (std::size_t i = 1; i < w[h].size(); ++i)
      if (!(w[h][i] <= w[h][i - 1]))
        throw InputError("kvcobra allocator: head " + std::to_string(h) + " weights are not sorted descending at " +
                         std::to_string(i));
  }
  if (o.redistribute == "optimal") {
    KvcobraAllocation a = optimal(w, d, o);
    totals(a);
    return a;
  }
  KvcobraAllocation a;
  a.options = o;
  a.head_dim = d;
  const std::vector<long long> budgets =
      o.redistribute == "waterfill" ? kvcobra_waterfill_budgets(w, d, o)
                                    : std::vector<long long>(w.size(), static_cast<long long>(o.budget * d));
  for (std::size_t h = 0; h < w.size(); ++h) {
    const RankBits rb = kvcobra_rank_bits(w[h], budgets[h], d, o);
    a.heads.push_back(make_choice(w[h], d, rb.rank, rb.bits, budgets[h]));
  }
  totals(a);
  a.lower_bound = std::numeric_limits<double>::quiet_NaN();
  long long sum_budget = 0;
  for (long long x : budgets) sum_budget += x;
  a.set_feasible(FeasibleReason::Heuristic);
  a.message = "kvcobra " + o.redistribute + ": head budgets sum to " + std::to_string(sum_budget) + " of " +
              std::to_string(static_cast<long long>(o.budget * d) * static_cast<long long>(w.size())) +
              " bits per token; mean r b / d = " + format_number(a.nominal_rate) + " (budget " + format_number(o.budget) +
              "), mean pad(r) b / d = " + format_number(a.code_rate) + ".";
  return a;
}

KvcobraAllocation allocate_kvcobra(const TraceReader& trace, const KvcobraAllocOptions& o) {
  o.validate();
  const TraceMeta& m = trace.meta();
  std::vector<std::vector<double>> w;
  std::vector<std::pair<int, int>> ids;
  for (int l = 0; l < m.n_layers; ++l)
    for (int h = 0; h < m.n_kv_heads; ++h) {
      w.push_back(kvcobra_direction_weights(trace.head(l, h), m.rope, o.basis));
      ids.emplace_back(l, h);
    }
  KvcobraAllocation a = allocate_kvcobra(w, m.head_dim, o);
  for (std::size_t i = 0; i < a.heads.size(); ++i) {
    a.heads[i].layer = ids[i].first;
    a.heads[i].kv_head = ids[i].second;
  }
  return a;
}

std::unique_ptr<KeyQuantizer> KvcobraAllocation::quantizer(std::size_t i) const {
  if (i >= heads.size())
    throw InputError("kvcobra allocation: head index " + std::to_string(i) + " is outside its " +
                     std::to_string(heads.size()) + " heads");
  return make_key_quantizer("kvcobra", {{"rank", std::to_string(heads[i].rank)},
                                        {"bits", std::to_string(heads[i].bits)},
                                        {"group", std::to_string(options.group)},
                                        {"seed", std::to_string(options.seed)},
                                        {"basis", options.basis},
                                        {"basis_cost", options.basis_cost}});
}

std::string KvcobraAllocation::summary() const {
  std::ostringstream s;
  s << options.name() << ": " << status_text() << ", " << heads.size() << " heads, sum D = " << objective
    << ", mean r b / d = " << nominal_rate << ", mean pad(r) b / d = " << code_rate;
  return s.str();
}

MethodInfo kvcobra_allocator_method() {
  return {"kvcobra", "seed allocator",
          "per-head (rank, bits) on the query-weighted key SVD: C1 argmin D(r,b) per head, C2 damped water-filling "
          "of head budgets (or exact knapsack); applied by the kvcobra quantizer",
          "arXiv 2609.24298, github.com/seonha01/KV-COBRA", param_list()};
}

}  // namespace tierlab
