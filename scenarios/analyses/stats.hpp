#pragma once
// Rank statistics shared by the analyses (scenarios/analyses/*).
//   pearson(x, y)   sum (x - mx)(y - my) / sqrt(sum (x - mx)^2 sum (y - my)^2); NaN when n < 2
//                   or either sample is constant
//   mid_ranks(x)    1-based ranks, ties given the mean of their ranks
//   spearman(x, y)  pearson(mid_ranks(x), mid_ranks(y))
//   bootstrap_spearman  percentile interval [2.5%, 97.5%] of rho over `resamples` resamples
//                   of the pairs with replacement (std::mt19937_64 seeded by `seed`);
//                   resamples whose ranks are constant are skipped (`used` counts the rest)
//   cluster_bootstrap_spearman  the same, resampling whole CLUSTERS with replacement (cells
//                   sharing a cluster label, e.g. one synthetic model draw or one prompt
//                   seed, are not independent): each resample draws as many clusters as there
//                   are, with replacement, and takes all their pairs; with one pair per
//                   cluster it is bootstrap_spearman
#include <cstdint>
#include <string>
#include <vector>

namespace tierlab {

double pearson(const std::vector<double>& x, const std::vector<double>& y);
std::vector<double> mid_ranks(const std::vector<double>& x);
double spearman(const std::vector<double>& x, const std::vector<double>& y);  // NaN when n < 2 or constant

struct Interval {
  double lo = 0, hi = 0;
  int used = 0;  // resamples with a defined rho
};
Interval bootstrap_spearman(const std::vector<double>& x, const std::vector<double>& y, int resamples,
                            std::uint64_t seed);
Interval cluster_bootstrap_spearman(const std::vector<double>& x, const std::vector<double>& y,
                                    const std::vector<std::string>& cluster, int resamples, std::uint64_t seed);
// Cohen's kappa of two labellings of the same items: (p_o - p_e) / (1 - p_e), p_o the share
// of items with equal labels, p_e = sum_k pa(k) pb(k) the agreement expected from the
// marginals alone. 0 when the labels are as independent as their marginals say; NaN when
// p_e = 1 (both labellings constant on one label: agreement says nothing) or no item.
double cohen_kappa(const std::vector<std::string>& a, const std::vector<std::string>& b);
// Percentile interval [2.5%, 97.5%] of kappa over resamples of the items (pairs) with
// replacement, or of whole clusters when `cluster` is non-empty; undefined resamples skipped.
Interval bootstrap_kappa(const std::vector<std::string>& a, const std::vector<std::string>& b,
                         const std::vector<std::string>& cluster, int resamples, std::uint64_t seed);
// The number of distinct labels.
std::size_t distinct_count(const std::vector<std::string>& labels);

}  // namespace tierlab
