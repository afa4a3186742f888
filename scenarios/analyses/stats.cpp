// Rank statistics of the analyses (stats.hpp).
#include "scenarios/analyses/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx), syy += (y[i] - my) * (y[i] - my);
  if (sxx <= 0 || syy <= 0) return std::numeric_limits<double>::quiet_NaN();
  return sxy / std::sqrt(sxx * syy);
}

std::vector<double> mid_ranks(const std::vector<double>& x) {
  std::vector<std::size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    const double rank = 0.5 * (static_cast<double>(i) + static_cast<double>(j)) + 1.0;
    for (std::size_t k = i; k <= j; ++k) r[idx[k]] = rank;
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return pearson(mid_ranks(x), mid_ranks(y));
}

namespace {

// The 95% percentile interval of the resampled rhos.
Interval percentile_interval(const std::vector<double>& rhos) {
  Interval iv;
  iv.used = static_cast<int>(rhos.size());
  iv.lo = quantile_or_nan(rhos, 0.025);
  iv.hi = quantile_or_nan(rhos, 0.975);
  return iv;
}

}  // namespace

Interval bootstrap_spearman(const std::vector<double>& x, const std::vector<double>& y, int resamples, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = x.size();
  std::vector<double> rhos;
  if (n >= 2) {
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    std::vector<double> bx(n), by(n);
    for (int r = 0; r < resamples; ++r) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t k = pick(rng);
        bx[i] = x[k], by[i] = y[k];
      }
      const double rho = spearman(bx, by);
      if (std::isfinite(rho)) rhos.push_back(rho);
    }
  }
  return percentile_interval(rhos);
}

std::size_t distinct_count(const std::vector<std::string>& labels) {
  std::vector<std::string> s = labels;
  std::sort(s.begin(), s.end());
  return static_cast<std::size_t>(std::unique(s.begin(), s.end()) - s.begin());
}

Interval cluster_bootstrap_spearman(const std::vector<double>& x, const std::vector<double>& y,
                                    const std::vector<std::string>& cluster, int resamples, std::uint64_t seed) {
  std::vector<std::string> names = cluster;
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::vector<std::size_t>> members(names.size());
  for (std::size_t i = 0; i < cluster.size() && i < x.size(); ++i)
    members[static_cast<std::size_t>(std::lower_bound(names.begin(), names.end(), cluster[i]) - names.begin())]
        .push_back(i);
  std::mt19937_64 rng(seed);
  std::vector<double> rhos;
  const std::size_t k = names.size();
  if (k >= 2) {
    std::uniform_int_distribution<std::size_t> pick(0, k - 1);
    std::vector<double> bx, by;
    for (int r = 0; r < resamples; ++r) {
      bx.clear(), by.clear();
      for (std::size_t c = 0; c < k; ++c)
        for (const std::size_t i : members[pick(rng)]) bx.push_back(x[i]), by.push_back(y[i]);
      const double rho = spearman(bx, by);
      if (std::isfinite(rho)) rhos.push_back(rho);
    }
  }
  return percentile_interval(rhos);
}

double cohen_kappa(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  std::map<std::string, double> pa, pb;
  double agree = 0;
  for (std::size_t i = 0; i < n; ++i) {
    pa[a[i]] += 1.0 / n, pb[b[i]] += 1.0 / n;
    agree += a[i] == b[i] ? 1.0 : 0.0;
  }
  double pe = 0;
  for (const auto& [k, p] : pa)
    if (auto it = pb.find(k); it != pb.end()) pe += p * it->second;
  const double po = agree / n;
  if (pe >= 1.0 - 1e-12) return std::numeric_limits<double>::quiet_NaN();
  return (po - pe) / (1.0 - pe);
}

Interval bootstrap_kappa(const std::vector<std::string>& a, const std::vector<std::string>& b,
                         const std::vector<std::string>& cluster, int resamples, std::uint64_t seed) {
  const std::size_t n = std::min(a.size(), b.size());
  // Items grouped by cluster (each item its own cluster when none is given).
  std::map<std::string, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < n; ++i) groups[cluster.empty() ? std::to_string(i) : cluster[i]].push_back(i);
  std::vector<const std::vector<std::size_t>*> g;
  for (const auto& [k, v] : groups) g.push_back(&v);
  std::vector<double> kappas;
  if (!g.empty()) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::size_t> pick(0, g.size() - 1);
    std::vector<std::string> ra, rb;
    for (int r = 0; r < resamples; ++r) {
      ra.clear(), rb.clear();
      for (std::size_t k = 0; k < g.size(); ++k)
        for (std::size_t i : *g[pick(rng)]) ra.push_back(a[i]), rb.push_back(b[i]);
      if (const double k = cohen_kappa(ra, rb); std::isfinite(k)) kappas.push_back(k);
    }
  }
  return percentile_interval(kappas);
}

}  // namespace tierlab
