// Reverse water-filling and its projection onto a ladder (waterfill.hpp).
#include "solvers/waterfill.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>
#include <sstream>

#include "model/base/error.hpp"
#include "solvers/exact.hpp"

namespace tierlab {

namespace {

// ln of the marginal return at 0 bits, ln(w alpha ln beta); -inf for w = 0.
double log_g0(double w, const DistortionModel& d) {
  return w > 0 ? std::log(w) + std::log(d.alpha) + std::log(std::log(d.beta)) : -std::numeric_limits<double>::infinity();
}

}  // namespace

void WaterfillProblem::validate() const {
  if (!(models.size() == 1 || (models.size() == weights.size() && !models.empty())))
    throw InputError("WaterfillProblem.models has " + std::to_string(models.size()) +
                     " entries; it needs 1 (shared) or one per item (" + std::to_string(weights.size()) + ").");
  for (std::size_t i = 0; i < weights.size(); ++i)
    if (!std::isfinite(weights[i]) || weights[i] < 0)
      throw InputError("WaterfillProblem.weights[" + std::to_string(i) + "] = " + number_text(weights[i]) +
                       "; weights must be finite and >= 0.");
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (!std::isfinite(models[i].alpha) || models[i].alpha <= 0)
      throw InputError("WaterfillProblem.models[" + std::to_string(i) + "].alpha = " + number_text(models[i].alpha) +
                       "; alpha must be finite and > 0.");
    if (!std::isfinite(models[i].beta) || models[i].beta <= 1)
      throw InputError("WaterfillProblem.models[" + std::to_string(i) + "].beta = " + number_text(models[i].beta) +
                       "; beta must be finite and > 1.");
  }
  if (!std::isfinite(budget) || budget < 0)
    throw InputError("WaterfillProblem.budget = " + number_text(budget) + " bits; the budget must be finite and >= 0.");
  if (!(max_bits > 0))
    throw InputError("WaterfillProblem.max_bits = " + number_text(max_bits) + "; b_max must be > 0.");
}

ContinuousWaterfill waterfill_continuous(const WaterfillProblem& p) {
  p.validate();
  ContinuousWaterfill out;
  const std::size_t N = p.items();
  out.bits.assign(N, 0.0);
  out.kkt_residual.assign(N, 0.0);
  if (N == 0) return out;
  const double bmax = p.max_bits;

  std::vector<double> L(N), lnb(N);
  double L_max = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < N; ++i) {
    L[i] = log_g0(p.weights[i], p.model(i));
    lnb[i] = std::log(p.model(i).beta);
    L_max = std::max(L_max, L[i]);
  }
  auto bits_at = [&](double log_theta, std::size_t i) {
    if (!std::isfinite(L[i])) return 0.0;
    return std::clamp((L[i] - log_theta) / lnb[i], 0.0, bmax);
  };
  auto total_at = [&](double log_theta) {
    double s = 0;
    for (std::size_t i = 0; i < N; ++i) s += bits_at(log_theta, i);
    return s;
  };
  const double target = p.budget * static_cast<double>(N);
  auto finish = [&](double log_theta) {
    out.theta = std::exp(log_theta);
    double sum = 0, obj = 0, worst = 0;
    for (std::size_t i = 0; i < N; ++i) {
      const double b = out.bits[i];
      sum += b;
      const auto& d = p.model(i);
      obj += p.weights[i] * d.alpha * std::pow(d.beta, -b);
      double r = 0;
      if (std::isfinite(L[i]) && out.theta > 0) {
        const double g = std::exp(L[i] - lnb[i] * b);  // g_i(b_i)
        if (b <= 0)
          r = std::max(0.0, g - out.theta) / out.theta;
        else if (b >= bmax)
          r = std::max(0.0, out.theta - g) / out.theta;
        else
          r = std::fabs(g - out.theta) / out.theta;
      }
      out.kkt_residual[i] = r;
      worst = std::max(worst, r);
    }
    out.mean_bits = sum / static_cast<double>(N);
    out.objective = obj;
    out.max_kkt_residual = worst;
    return out;
  };

  if (!std::isfinite(L_max)) {  // every weight 0: any split is optimal; spread evenly
    std::fill(out.bits.begin(), out.bits.end(), std::min(p.budget, bmax));
    out.theta = 0;
    auto r = finish(-std::numeric_limits<double>::infinity());
    r.theta = 0;
    return r;
  }
  std::size_t n_positive = 0;
  for (std::size_t i = 0; i < N; ++i) n_positive += std::isfinite(L[i]) ? 1 : 0;
  if (target >= bmax * static_cast<double>(n_positive)) {  // every weighted item at b_max; theta = smallest g_i(b_max)
    std::fill(out.bits.begin(), out.bits.end(), bmax);
    double lt = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < N; ++i)
      if (std::isfinite(L[i])) lt = std::min(lt, L[i] - lnb[i] * bmax);
    for (std::size_t i = 0; i < N; ++i)
      if (!std::isfinite(L[i])) out.bits[i] = 0;
    out.saturated = true;
    return finish(lt);
  }
  if (p.budget == 0) return finish(L_max);

  // Bisection on ln theta: hi gives 0 bits, lo enough bits.
  double hi = L_max, lo = L_max - 1.0;
  while (total_at(lo) < target) lo = hi - 2.0 * (hi - lo);
  int it = 0;
  for (; it < 200 && hi - lo > 1e-15 * std::max(1.0, std::fabs(hi)); ++it) {
    const double mid = 0.5 * (lo + hi);
    if (total_at(mid) < target)
      hi = mid;
    else
      lo = mid;
  }
  out.iterations = it;
  double log_theta = 0.5 * (lo + hi);
  // Exact level on the active set at this theta.
  double num_sum = 0, den = 0, sat = 0;
  for (std::size_t i = 0; i < N; ++i) {
    const double b = bits_at(log_theta, i);
    if (b >= bmax)
      sat += bmax;
    else if (b > 0) {
      num_sum += L[i] / lnb[i];
      den += 1.0 / lnb[i];
    }
  }
  if (den > 0) {
    const double exact = (num_sum - (target - sat)) / den;
    if (std::isfinite(exact)) log_theta = exact;
  }
  for (std::size_t i = 0; i < N; ++i) out.bits[i] = bits_at(log_theta, i);
  return finish(log_theta);
}

MatrixRMd model_cost_matrix(const WaterfillProblem& p, const std::vector<double>& rates) {
  p.validate();
  const auto N = static_cast<Eigen::Index>(p.items());
  MatrixRMd c(static_cast<Eigen::Index>(rates.size()), N);
  for (Eigen::Index j = 0; j < c.rows(); ++j)
    for (Eigen::Index i = 0; i < N; ++i) {
      const auto& d = p.model(static_cast<std::size_t>(i));
      c(j, i) = p.weights[static_cast<std::size_t>(i)] * d.alpha * std::pow(d.beta, -rates[static_cast<std::size_t>(j)]);
    }
  return c;
}

MckpResult project_to_ladder(const std::vector<double>& bits, const MckpInstance& inst, const WaterfillOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  inst.validate();
  if (static_cast<std::int64_t>(bits.size()) != inst.items())
    throw InputError("project_to_ladder: bits has " + std::to_string(bits.size()) + " entries but the ladder instance has " +
                     std::to_string(inst.items()) + " items.");
  const RateUnits u = rate_units(inst);
  MckpResult res = begin_result(inst, u, "waterfill");
  const LadderGeometry g(inst.rates);
  const int m = g.m;
  const std::int64_t N = inst.items();
  auto elapsed = [&] { return seconds_since(t0); };
  if (res.status == SolveStatus::Infeasible) {
    res.seconds = elapsed();
    return res;
  }
  auto cost = [&](std::int64_t i, int k) { return checked_cost(inst, i, g.order[k]); };
  // Round to the nearest tier (ties to the lower).
  std::vector<int> pos(static_cast<std::size_t>(N));
  const double r_min = u.r_min;
  std::int64_t used_units = 0;
  double used_bits = 0;
  for (std::int64_t i = 0; i < N; ++i) {
    const double b = bits[static_cast<std::size_t>(i)] - r_min;
    int best = 0;
    for (int k = 1; k < m; ++k)
      if (std::fabs(g.rate[k] - b) < std::fabs(g.rate[best] - b)) best = k;
    pos[static_cast<std::size_t>(i)] = best;
    if (u.integral)
      used_units += u.tier_units[g.order[best]];
    else
      used_bits += g.rate[best];
  }
  auto over = [&] { return u.integral ? used_units > u.capacity_units : !u.fits_bits(used_bits); };
  struct Move {
    double key;
    std::int64_t item;
    bool operator<(const Move& o) const { return key < o.key || (key == o.key && item > o.item); }
  };
  std::int64_t moves = 0;
  // Down moves (max-heap on -increase per bit freed).
  if (over()) {
    std::priority_queue<Move> down;
    auto push_down = [&](std::int64_t i) {
      const int k = pos[static_cast<std::size_t>(i)];
      if (k > 0) down.push({-(cost(i, k - 1) - cost(i, k)) / (g.rate[k] - g.rate[k - 1]), i});
    };
    for (std::int64_t i = 0; i < N; ++i) push_down(i);
    while (over() && !down.empty()) {
      const Move mv = down.top();
      down.pop();
      int& k = pos[static_cast<std::size_t>(mv.item)];
      if (u.integral)
        used_units -= u.tier_units[g.order[k]] - u.tier_units[g.order[k - 1]];
      else
        used_bits -= g.rate[k] - g.rate[k - 1];
      --k;
      ++moves;
      push_down(mv.item);
    }
  }
  // Up moves into the slack (max-heap on decrease per bit, positive only).
  {
    std::priority_queue<Move> up;
    auto push_up = [&](std::int64_t i) {
      const int k = pos[static_cast<std::size_t>(i)];
      if (k + 1 < m) {
        const double gain = (cost(i, k) - cost(i, k + 1)) / (g.rate[k + 1] - g.rate[k]);
        if (gain > 0) up.push({gain, i});
      }
    };
    for (std::int64_t i = 0; i < N; ++i) push_up(i);
    while (!up.empty()) {
      const Move mv = up.top();
      up.pop();
      int& k = pos[static_cast<std::size_t>(mv.item)];
      bool fits;
      if (u.integral) {
        const std::int64_t du = u.tier_units[g.order[k + 1]] - u.tier_units[g.order[k]];
        fits = used_units + du <= u.capacity_units;
        if (fits) used_units += du;
      } else {
        const double db = g.rate[k + 1] - g.rate[k];
        fits = u.fits_bits(used_bits + db);
        if (fits) used_bits += db;
      }
      if (!fits) continue;
      ++k;
      ++moves;
      push_up(mv.item);
    }
  }
  std::vector<std::uint8_t> choice(static_cast<std::size_t>(N));
  for (std::int64_t i = 0; i < N; ++i)
    choice[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(g.order[pos[static_cast<std::size_t>(i)]]);
  finish_heuristic(inst, std::move(choice), moves, opt.compute_bound, res);
  res.message = "Water-filling rounded to the nearest tiers, budget repaired by " + std::to_string(moves) +
                " greedy move(s); no optimality claim.";
  res.seconds = elapsed();
  return res;
}

WaterfillResult waterfill(const WaterfillProblem& problem, const MckpInstance& ladder, const WaterfillOptions& opt) {
  WaterfillResult out;
  out.continuous = waterfill_continuous(problem);
  out.projected = project_to_ladder(out.continuous.bits, ladder, opt);
  return out;
}

}  // namespace tierlab
