// The ledger of the reference papers' claims (claims.hpp).
#include "scenarios/analyses/claims.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"
#include "model/base/text.hpp"
#include "scenarios/analyses/interior_verdict.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"

namespace tierlab {

namespace {


std::string f2(double v) { return format_or_nan(v, "%.2f", "-"); }
std::string f3(double v) { return format_or_nan(v, "%.3f", "-"); }
std::string pct_whole(double v) { return format_or_nan(100.0 * v, "%.0f%%", "-"); }

// A JSON number that may be null (NaN in the tables).
double num(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return kNaN;
  return j[key].get<double>();
}

nlohmann::json read_table(const std::string& tables_dir, const std::string& name, const ClaimSpec& c) {
  const std::string path = tables_dir + "/" + name;
  if (!std::filesystem::exists(path))
    throw InputError(c.where + ": claim '" + c.id + "' is measured from " + name + ", which this run did not write (" +
                     path + ").");
  return nlohmann::json::parse(read_regular_file(path, "table"));
}

std::string budgets_text(const std::vector<double>& b) {
  std::vector<std::string> s;
  for (double x : b) s.push_back(format_number(x));
  return join(s);
}

// The settings every verdict of a scenario depends on.
std::string common_settings(const Scenario& sc) {
  return "rate convention " + std::string(sc.rate_kind == RateKind::Code ? "code" : "total") + " bits; ladder `" +
         sc.ladder.name() + "`; " + std::to_string(sc.cells.size()) + " cells";
}

// Wilson score interval (95%) of k successes of n.
std::pair<double, double> wilson(double k, double n) {
  if (n <= 0) return {kNaN, kNaN};
  const double z = 1.959964, p = k / n, d = 1 + z * z / n;
  const double c = (p + z * z / (2 * n)) / d, h = z * std::sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d;
  return {std::max(0.0, c - h), std::min(1.0, c + h)};
}

std::string claim_cluster_of(const nlohmann::json& c) {
  const std::string who = c.contains("preset") && c["preset"].is_string() ? c["preset"].get<std::string>()
                                                                          : c.value("source", std::string("cell"));
  return who + "/s" + std::to_string(c.value("seed", std::uint64_t{0}));
}

// Median of xs over cells with a 95% percentile interval from resampling whole clusters.
struct MedianCI {
  double median = kNaN, lo = kNaN, hi = kNaN;
  std::size_t n = 0, clusters = 0;
};
MedianCI cluster_median(const std::vector<double>& xs, const std::vector<std::string>& groups, std::uint64_t seed,
                        int resamples) {
  MedianCI r;
  std::map<std::string, std::vector<double>> by;
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (std::isfinite(xs[i])) by[groups[i]].push_back(xs[i]);
  std::vector<std::vector<double>> cl;
  for (auto& [k, v] : by) cl.push_back(v), r.n += v.size();
  r.clusters = cl.size();
  if (cl.empty()) return r;
  std::vector<double> all;
  for (const auto& v : cl) all.insert(all.end(), v.begin(), v.end());
  r.median = quantile_or_nan(all, 0.5);
  if (cl.size() < kMinClustersForRho) return r;  // the same rule as rho: no interval under 5 clusters
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, cl.size() - 1);
  std::vector<double> meds;
  for (int b = 0; b < resamples; ++b) {
    std::vector<double> s;
    for (std::size_t i = 0; i < cl.size(); ++i) {
      const auto& v = cl[pick(rng)];
      s.insert(s.end(), v.begin(), v.end());
    }
    meds.push_back(quantile_or_nan(s, 0.5));
  }
  r.lo = quantile_or_nan(meds, 0.025), r.hi = quantile_or_nan(meds, 0.975);
  return r;
}

std::size_t budget_index(const Scenario& sc, double B) {
  for (std::size_t i = 0; i < sc.budgets.size(); ++i)
    if (sc.budgets[i] == B) return i;
  return 0;
}

// (a) rho(dominated share, primary summary) with its cluster-bootstrap interval: interior.json,
// judged by interior_verdict's rules (rho_standing, rho_verdict).
void claim_a(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "interior.json", v.spec);
  RhoEvidence e;
  e.cells = t.value("n_cells", std::size_t{0});
  e.clusters = t.value("clusters", std::size_t{0});
  e.rho = num(t, "rho"), e.lo = num(t, "ci_lo"), e.hi = num(t, "ci_hi");
  const double B = num(t, "primary_budget");
  for (const auto& q : t["q_feasible"])
    if (num(q, "budget") == B && !q.value("feasible", true)) {
      QFeasibility f;
      f.heads = q.value("heads", 0), f.heads_infeasible = q.value("heads_infeasible", 0);
      f.cells = static_cast<int>(e.cells), f.cells_model_infeasible = q.value("cells_model_infeasible", 0);
      e.withheld = f.reason(sc.ladder.name(), B, sc.rate_kind == RateKind::Code ? "code" : "total");
    }
  std::set<double> shares;
  for (const auto& p : t["points"]) shares.insert(num(p, "dominated_share"));
  e.share_constant = shares.size() == 1;
  if (e.share_constant) e.share = *shares.begin();
  const double within = num(t, "rho_within_model"), seed_level = num(t, "rho_seed_level");
  v.measured = e.share_constant
                   ? "rho not defined: the dominated share is " + format_number(e.share) + " in every one of the " +
                         std::to_string(e.cells) + " cells (" + std::to_string(e.clusters) + " clusters)"
                   : "rho = " + f2(e.rho) + " [" + f2(e.lo) + ", " + f2(e.hi) + "] (" + std::to_string(e.cells) + " cells, " +
                         std::to_string(e.clusters) + " clusters); within-model " + f2(within) + ", seed-level " + f2(seed_level);
  v.depends_on = common_settings(sc) + "; B = " + format_number(B) + "; cell summary " +
                 t.value("primary_aggregation", std::string()) + "; queries " + t.value("queries", std::string()) +
                 "; the sensitivity rows of this run's tables/sensitivity.csv";
  const std::string verdict = rho_verdict(e);
  if (rho_standing(e) != RhoStanding::Interval) {
    v.standing = ClaimStanding::NotTestable, v.why = rho_statement(e);
  } else if (!e.withheld.empty() || e.share_constant || !std::isfinite(e.lo) || !std::isfinite(e.hi)) {
    v.standing = ClaimStanding::NotTestable, v.why = "the relation " + verdict;
  } else if (e.hi < 0) {
    const bool size = e.lo <= kPaperRho && kPaperRho <= e.hi;
    v.standing = size ? ClaimStanding::Reproduced : ClaimStanding::Partly;
    v.why = size ? "the relation " + verdict
                 : "the sign holds (interval below 0), the size does not: " + paper_comparison(e.lo, e.hi);
  } else if (e.lo <= kPaperRho && kPaperRho <= e.hi) {
    v.standing = ClaimStanding::NotTestable;
    v.why = "inconclusive at this size: the interval contains both 0 and the paper's -0.978 (more clusters needed)";
  } else {
    v.standing = ClaimStanding::Refuted, v.why = "the relation " + verdict;
  }
}

// (b) per preset: the smallest swept budget from which the interior stops paying (median A <= 0
// at it and every larger budget), with its cluster-resampling interval (interior.json,
// stop_budget_per_preset). "Depends on the architecture" when two presets' intervals are
// disjoint (a stop beyond the sweep counts as above its largest budget); refuted when every
// preset stops at the same budget in every resample; else not testable (intervals overlap).
void claim_b(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "interior.json", v.spec);
  const double top = sc.budgets.empty() ? kNaN : *std::max_element(sc.budgets.begin(), sc.budgets.end());
  const double inf = std::numeric_limits<double>::infinity();
  struct Stop {
    std::string preset;
    double stop, lo, hi;
  };
  auto bound = [&](const nlohmann::json& x, const char* key, const char* beyond) {
    if (x.value(beyond, false)) return inf;
    const double b = num(x, key);
    return std::isfinite(b) ? b : inf;  // null: the interior pays at the largest budget
  };
  auto text = [&](double b) { return std::isinf(b) ? "> " + format_number(top) : format_number(b); };
  std::vector<Stop> stops;
  std::vector<std::string> parts;
  for (const auto& x : t["stop_budget_per_preset"]) {
    Stop st{x.value("preset", std::string()), bound(x, "stop", "stop_beyond_sweep"), bound(x, "ci_lo", "ci_lo_beyond_sweep"),
            bound(x, "ci_hi", "ci_hi_beyond_sweep")};
    stops.push_back(st);
    parts.push_back(st.preset + " B = " + text(st.stop) + " [" + text(st.lo) + ", " + text(st.hi) + "] (" +
                    std::to_string(x.value("clusters", 0)) + " clusters)");
  }
  v.measured = "stop budget (median A <= 0 from there on), per preset: " + join(parts, "; ") + "; budgets swept " +
               budgets_text(sc.budgets) + " " + (sc.rate_kind == RateKind::Code ? "code" : "total") + " bits";
  v.depends_on = common_settings(sc) + "; the swept budgets; the median over each preset's heads";
  if (stops.size() < 2) {
    v.standing = ClaimStanding::NotTestable, v.why = "fewer than two presets: no architecture to compare";
    return;
  }
  std::vector<std::string> apart;
  for (std::size_t i = 0; i < stops.size(); ++i)
    for (std::size_t j = i + 1; j < stops.size(); ++j) {
      const Stop &a = stops[i], &b = stops[j];
      if (a.hi < b.lo || b.hi < a.lo) apart.push_back(a.preset + " vs " + b.preset);
    }
  bool all_same = true;
  for (const Stop& st : stops) all_same = all_same && st.lo == stops[0].stop && st.hi == stops[0].stop;
  if (!apart.empty()) {
    v.standing = ClaimStanding::Reproduced;
    v.why = "the stop budget differs by architecture beyond its intervals: " + join(apart, ", ");
  } else if (all_same) {
    v.standing = ClaimStanding::Refuted;
    v.why = "every preset stops at B = " + text(stops[0].stop) + " in every resample of its clusters";
  } else {
    v.standing = ClaimStanding::NotTestable;
    v.why = "the presets' intervals overlap: the stop budgets may differ but this run cannot tell (more seeds, "
            "finer budgets)";
  }
}

// (g) two parts, from proxy.json: (1) how well the recomputed output error ranks the methods
// against the end-task proxies (Spearman with replay KL and with top-1 disagreement, bootstrap
// intervals over methods): "weakly" when the interval lies below kWeakRank; (2) whether the
// output error overstates the cost of rotated quantization noise: the median over TurboQuant and
// QuaRot entries of (rank by error - rank by KL; rank 1 = best) against the other methods'.
void claim_g(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "proxy.json", v.spec);
  double rho_kl = kNaN, lo_kl = kNaN, hi_kl = kNaN, rho_dis = kNaN, lo_dis = kNaN, hi_dis = kNaN;
  int n_methods = 0;
  for (const auto& c : t["correlations"]) {
    if (c.value("x", std::string()) != "error") continue;
    const std::string y = c.value("y", std::string());
    if (y == "kl") rho_kl = num(c, "spearman"), lo_kl = num(c, "ci_lo"), hi_kl = num(c, "ci_hi");
    if (y == "disagreement") rho_dis = num(c, "spearman"), lo_dis = num(c, "ci_lo"), hi_dis = num(c, "ci_hi");
    n_methods = c.value("methods", 0);
  }
  std::vector<double> rotated, others;
  for (const auto& m : t["methods"]) {
    const std::string name = m.value("method", std::string());
    const double shift = num(m, "rank_error") - num(m, "rank_kl");
    if (!std::isfinite(shift)) continue;
    const bool rot = name.rfind("turboquant", 0) == 0 || name.rfind("quarot", 0) == 0;
    (rot ? rotated : others).push_back(shift);
  }
  const double med_rot = quantile_or_nan(rotated, 0.5), med_other = quantile_or_nan(others, 0.5);
  v.measured = "Spearman(output error, replay KL) = " + f2(rho_kl) + " [" + f2(lo_kl) + ", " + f2(hi_kl) +
               "], (output error, top-1 disagreement) = " + f2(rho_dis) + " [" + f2(lo_dis) + ", " + f2(hi_dis) + "] over " +
               std::to_string(n_methods) + " methods; rank by error minus rank by KL (1 = best), median: rotated (" +
               std::to_string(rotated.size()) + " TurboQuant/QuaRot entries) " + f2(med_rot) + ", others " + f2(med_other);
  v.depends_on = common_settings(sc) + "; replay " + t.value("mode", std::string()) + "; the methods listed; weak = interval below " +
                 f2(kWeakRank);
  std::string part1, part2;
  int holds = 0, fails = 0;
  if (!std::isfinite(lo_kl) || !std::isfinite(hi_kl)) {
    part1 = "the ranking's strength has no interval";
  } else if (hi_kl < kWeakRank) {
    part1 = "output error ranks methods weakly against replay KL (interval below " + f2(kWeakRank) + ")", ++holds;
  } else if (lo_kl > kWeakRank) {
    part1 = "output error ranks methods strongly against replay KL (interval above " + f2(kWeakRank) + "), not weakly", ++fails;
  } else {
    part1 = "the interval of Spearman(error, KL) straddles " + f2(kWeakRank);
  }
  if (rotated.empty() || others.empty()) {
    part2 = "no rotated quantizer (TurboQuant, QuaRot) among the methods";
  } else if (med_rot > 0 && med_rot > med_other) {
    part2 = "output error ranks the rotated quantizers worse than replay KL does (it overstates their cost; " +
            std::to_string(rotated.size()) + " entries, no interval)", ++holds;
  } else {
    part2 = "output error does not rank the rotated quantizers worse than replay KL does (no overstatement)", ++fails;
  }
  v.standing = holds == 2 ? ClaimStanding::Reproduced
               : holds == 1 ? ClaimStanding::Partly
               : fails >= 1 ? ClaimStanding::Refuted
                            : ClaimStanding::NotTestable;
  v.why = part1 + "; " + part2 + " (end task: replay on the model, the simulated counterpart of task scores)";
}

// (q) from proxy.json: the share of the 2-bit base quantizer's output error and replay KL that
// HeadQ's side code removes (1 - headq / base; an exact cache has error and KL 0), for each headq
// entry, judged at the largest side-code rank; beside it, a plain quantizer entry at the same key
// code bits where the run has one (the side code's bits are not free).
void claim_q(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "proxy.json", v.spec);
  const nlohmann::json* base = nullptr;
  std::vector<const nlohmann::json*> side;
  for (const auto& m : t["methods"]) {
    const std::string name = m.value("method", std::string());
    if (m.value("kind", std::string()) != "quantizer") continue;
    if (name.rfind("headq", 0) == 0) side.push_back(&m);
    else if (!base && num(m, "code_bits") == 2.0) base = &m;
  }
  v.depends_on = common_settings(sc) + "; replay " + t.value("mode", std::string()) + "; the base at 2 code bits; most = share >= " +
                 f2(kMostRemoved);
  if (!base || side.empty()) {
    v.measured = "no 2-bit base quantizer and headq entries among the methods";
    v.standing = ClaimStanding::NotTestable, v.why = "the run lists no 2-bit base quantizer or no headq entry";
    return;
  }
  const double e0 = num(*base, "error"), k0 = num(*base, "mean_kl");
  std::vector<std::string> parts;
  const nlohmann::json* top = side.front();
  for (const nlohmann::json* m : side) {
    const double cb = num(*m, "code_bits");
    std::string same_rate;
    for (const auto& o : t["methods"])
      if (o.value("kind", std::string()) == "quantizer" && o.value("method", std::string()).rfind("headq", 0) != 0 &&
          num(o, "code_bits") == cb)
        same_rate = "; " + o.value("method", std::string()) + " at the same " + format_number(cb) + " code bits: error " +
                    f3(num(o, "error")) + ", KL " + f3(num(o, "mean_kl"));
    parts.push_back((*m).value("method", std::string()) + " (" + format_number(cb) + " code bits): error " +
                    f3(num(*m, "error")) + " (" + pct_whole(1 - num(*m, "error") / e0) + " of the base's removed), KL " +
                    f3(num(*m, "mean_kl")) + " (" + pct_whole(1 - num(*m, "mean_kl") / k0) + ")" + same_rate);
    if (num(*m, "code_bits") > num(*top, "code_bits")) top = m;
  }
  v.measured = "base " + (*base).value("method", std::string()) + ": error " + f3(e0) + ", replay KL " + f3(k0) + "; " +
               join(parts, "; ");
  const double se = 1 - num(*top, "error") / e0, sk = 1 - num(*top, "mean_kl") / k0;
  const bool he = se >= kMostRemoved, hk = sk >= kMostRemoved;
  const std::string at = "at the largest side code (" + (*top).value("method", std::string()) + ")";
  v.standing = he && hk ? ClaimStanding::Reproduced : (he || hk) ? ClaimStanding::Partly : ClaimStanding::Refuted;
  v.why = at + " the side code removes " + pct_whole(se) + " of the 2-bit keys' output error and " + pct_whole(sk) +
          " of their replay KL" + (he && hk ? " (most of both)" : he ? " (most of the error, not of the KL)"
                                                       : hk ? " (most of the KL, not of the error)"
                                                            : " (not most of either)");
}

// (n) from proxy.json: KV-COBRA's per-head allocation ("kvcobra B=..." seed entries, the released
// water-filling over heads) against uniform allocation (the kvcobra quantizer at the same code
// budget on every head, "kvcobra budget=..." entries) AT EQUAL MEASURED CODE BITS: the uniform
// error at the allocator's code bits by log-linear interpolation between the uniform entries (no
// extrapolation), and the gain 1 - err(allocator) / err(uniform). "Dominates" when every
// comparable gain is > 0; "largest at the lowest rates" when the gains fall as the rate grows.
void claim_n(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "proxy.json", v.spec);
  std::vector<std::pair<double, double>> uniform;  // (code bits, error)
  std::vector<std::pair<double, double>> alloc;
  for (const auto& m : t["methods"]) {
    const std::string name = m.value("method", std::string());
    const double cb = num(m, "code_bits"), e = num(m, "error");
    if (!std::isfinite(cb) || !std::isfinite(e) || e <= 0) continue;
    if (name.rfind("kvcobra budget=", 0) == 0 && m.value("kind", std::string()) == "quantizer") uniform.push_back({cb, e});
    if (name.rfind("kvcobra B=", 0) == 0 && m.value("kind", std::string()) == "seed") alloc.push_back({cb, e});
  }
  std::sort(uniform.begin(), uniform.end());
  std::sort(alloc.begin(), alloc.end());
  v.depends_on = common_settings(sc) + "; replay " + t.value("mode", std::string()) +
                 "; uniform = the kvcobra quantizer at one code budget on every head; equal measured code bits";
  auto uniform_at = [&](double c) {
    for (std::size_t k = 0; k + 1 < uniform.size(); ++k) {
      const auto& [c0, e0] = uniform[k];
      const auto& [c1, e1] = uniform[k + 1];
      if (c >= c0 && c <= c1 && c1 > c0) return std::exp(std::log(e0) + (c - c0) / (c1 - c0) * (std::log(e1) - std::log(e0)));
    }
    return kNaN;
  };
  std::vector<std::string> parts;
  std::vector<double> gains;
  for (const auto& [c, e] : alloc) {
    const double u = uniform_at(c);
    if (!std::isfinite(u)) {
      parts.push_back(format_number(c, 4) + " code bits: error " + f3(e) + " (outside the uniform sweep)");
      continue;
    }
    const double g = 1 - e / u;
    gains.push_back(g);
    parts.push_back(format_number(c, 4) + " code bits: error " + f3(e) + " vs uniform " + f3(u) + ", gain " + pct_whole(g));
  }
  v.measured = "KV-COBRA's allocation vs uniform at equal code bits: " + (parts.empty() ? std::string("no entries") : join(parts, "; ")) +
               " (" + std::to_string(uniform.size()) + " uniform entries)";
  if (gains.empty()) {
    v.standing = ClaimStanding::NotTestable;
    v.why = "no allocator entry falls within the uniform entries' code bits";
    return;
  }
  int wins = 0;
  for (double g : gains) wins += g > 0;
  bool falling = true;
  for (std::size_t k = 1; k < gains.size(); ++k) falling = falling && gains[k] <= gains[k - 1];
  if (wins == static_cast<int>(gains.size())) {
    v.standing = falling ? ClaimStanding::Reproduced : ClaimStanding::Partly;
    v.why = "the allocation beats uniform at every comparable rate" +
            std::string(falling ? ", most at the lowest" : ", but the gain does not fall with the rate");
  } else {
    v.standing = wins > 0 ? ClaimStanding::Partly : ClaimStanding::Refuted;
    v.why = "the allocation beats uniform at " + std::to_string(wins) + " of " + std::to_string(gains.size()) +
            " comparable rates (no interval: one run of the methods)";
  }
}

// (o) from channel_variance.json: the median over heads of the channel variances' peak-to-average
// ratio (1 = equal) before and after the random-sign Walsh-Hadamard rotation, for KV-COBRA's
// full-rank SVD latent (what it rotates) and for the raw keys. "Equalised" when the median after
// is at most kEqualisedPar and below the median before.
void claim_o(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "channel_variance.json", v.spec);
  auto med = [&](const char* k) { return t.contains(k) ? num(t[k], "median") : kNaN; };
  auto quart = [&](const char* k) {
    return t.contains(k) ? " [" + f2(num(t[k], "q1")) + ", " + f2(num(t[k], "q3")) + "]" : std::string();
  };
  const double lb = med("latent_par_before"), la = med("latent_par_after"), kb = med("keys_par_before"),
               ka = med("keys_par_after");
  v.measured = "peak-to-average ratio of the channel variances (1 = equal), median [quartiles] over " +
               std::to_string(t.value("heads", 0)) + " heads: SVD latent " + f2(lb) + quart("latent_par_before") + " -> " +
               f2(la) + quart("latent_par_after") + " after the rotation; raw keys " + f2(kb) + quart("keys_par_before") +
               " -> " + f2(ka) + quart("keys_par_after");
  v.depends_on = common_settings(sc) + "; post-RoPE keys of the prompt; equalised = median ratio <= " + f2(kEqualisedPar);
  const bool latent = la <= kEqualisedPar && la < lb, keys = ka <= kEqualisedPar && ka < kb;
  if (!std::isfinite(la) || !std::isfinite(ka)) {
    v.standing = ClaimStanding::NotTestable, v.why = "no head was measured";
  } else if (latent && keys) {
    v.standing = ClaimStanding::Reproduced;
    v.why = "the rotation equalises the variances of the SVD latent (the coordinates KV-COBRA quantizes; exact by "
            "construction: a decorrelated latent's covariance Lambda rotated by D H has every diagonal entry mean(Lambda)) "
            "and, empirically, of the raw keys";
  } else if (latent || keys) {
    v.standing = ClaimStanding::Partly;
    v.why = std::string("the rotation equalises the variances of the ") + (latent ? "SVD latent" : "raw keys") +
            " but not of the " + (latent ? "raw keys" : "SVD latent") + " (median ratio above " + f2(kEqualisedPar) + ")";
  } else {
    v.standing = ClaimStanding::Refuted;
    v.why = "after the rotation the median ratio stays above " + f2(kEqualisedPar) + " for the latent and the keys";
  }
}

// (i) from variance.json: the verdict's variance shares (variance.hpp) and the differences
// baselines - prompts and timing - prompts with intervals from resampling cells. Reproduced when
// both intervals lie above 0, partly when one does (the factor named), refuted when both lie
// below 0 (prompt sampling moves the verdict more than either), not testable when no interval
// excludes 0.
void claim_i(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "variance.json", v.spec);
  std::map<std::string, std::array<double, 3>> f;
  if (t.contains("factors"))
    for (const auto& x : t["factors"]) f[x.value("factor", std::string())] = {num(x, "share"), num(x, "lo"), num(x, "hi")};
  auto share = [&](const char* k) {
    const auto it = f.find(k);
    return it == f.end() ? std::string("-") : f2(it->second[0]) + " [" + f2(it->second[1]) + ", " + f2(it->second[2]) + "]";
  };
  auto diff = [&](const char* k) -> std::array<double, 3> {
    return t.contains(k) ? std::array<double, 3>{num(t[k], "value"), num(t[k], "lo"), num(t[k], "hi")}
                         : std::array<double, 3>{kNaN, kNaN, kNaN};
  };
  const auto db = diff("baselines_minus_prompts"), dt = diff("timing_minus_prompts");
  v.measured = "share of the variance of ln(err(" + t.value("allocator", std::string("allocator")) +
               ") / err(best baseline)) over " + std::to_string(t.value("cells", 0)) + " cells: baselines " +
               share("baselines") + ", timing " + share("timing") + ", prompts " + share("prompts") + ", interactions " +
               share("interactions") + "; baselines - prompts " + f2(db[0]) + " [" + f2(db[1]) + ", " + f2(db[2]) +
               "], timing - prompts " + f2(dt[0]) + " [" + f2(dt[1]) + ", " + f2(dt[2]) + "]";
  v.depends_on = common_settings(sc) + "; timing = the compression decided at the end of prefill or " +
                 std::to_string(t.value("defer", 0)) + " decode steps later (same memory); baseline sets " +
                 (t.contains("baseline_sets") ? t["baseline_sets"].dump() : std::string("-")) +
                 "; 95% intervals from resampling cells";
  const bool b_more = db[1] > 0, t_more = dt[1] > 0, b_less = db[2] < 0, t_less = dt[2] < 0;
  if (!std::isfinite(db[1]) || !std::isfinite(dt[1])) {
    v.standing = ClaimStanding::NotTestable, v.why = "no interval (fewer than 2 cells with every verdict defined)";
  } else if (b_more && t_more) {
    v.standing = ClaimStanding::Reproduced;
    v.why = "both the baseline set and the compression timing explain more of the verdict's variance than the prompts "
            "(both difference intervals above 0)";
  } else if (b_more || t_more) {
    v.standing = ClaimStanding::Partly;
    v.why = std::string("the ") + (b_more ? "baseline set" : "compression timing") +
            " moves the verdict more than prompt sampling; the " + (b_more ? "compression timing" : "baseline set") +
            ((b_more ? t_less : b_less) ? " moves it less" : " is not told apart from it");
  } else if (b_less && t_less) {
    v.standing = ClaimStanding::Refuted;
    v.why = "prompt sampling explains more of the verdict's variance than either the baseline set or the timing";
  } else {
    v.standing = ClaimStanding::NotTestable;
    v.why = "neither difference's interval excludes 0 at this number of prompts";
  }
}

// (p) from score_error.json: Spearman of the score-space error and of the key MSE with the
// attention KL within one bit width (across quantizers and heads; the mean over bit widths), and
// their difference with an interval from resampling heads. "Predicts far better" is judged as better beyond the interval (difference
// interval above 0); refuted when the interval lies below 0.
void claim_p(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "score_error.json", v.spec);
  const double rs = num(t, "within_bits_rho_score_kl"), rm = num(t, "within_bits_rho_mse_kl"),
               d = num(t, "within_bits_difference"), lo = num(t, "within_bits_ci_lo"), hi = num(t, "within_bits_ci_hi");
  std::vector<std::string> qs;
  for (const auto& q : t["quantizers"]) qs.push_back(q.get<std::string>());
  v.measured = "Spearman with attention KL within one bit width (mean over bit widths): score-space error " + f3(rs) +
               ", key MSE " + f3(rm) + "; difference " + f3(d) + " [" + f3(lo) + ", " + f3(hi) + "]; pooled over bit widths " +
               f3(num(t, "rho_score_kl")) + " vs " + f3(num(t, "rho_mse_kl")) + "; " + std::to_string(t.value("rows", 0)) +
               " rows of " + std::to_string(t.value("heads", 0)) + " heads (quantizers " + join(qs) + ")";
  v.depends_on = common_settings(sc) + "; decode queries; attention over the prompt tokens; the quantizers and bit widths listed";
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    v.standing = ClaimStanding::NotTestable, v.why = "no interval (too few heads or rows)";
  } else if (lo > 0) {
    v.standing = ClaimStanding::Reproduced;
    v.why = "the score-space error ranks the attention KL better than the key MSE (difference interval above 0); "
            "how much better is the measured difference";
  } else if (hi < 0) {
    v.standing = ClaimStanding::Refuted, v.why = "the key MSE ranks the attention KL better (difference interval below 0)";
  } else {
    v.standing = ClaimStanding::NotTestable, v.why = "the difference's interval contains 0";
  }
}

// (f) from the cells' proxy results, per model (a cell's preset: the checkpoint's name): the
// mean over its cells of each method's recomputed output error; the best dense key quantizer at 2
// code bits against the mixed family's optimum M* at B = 2 ("M* B=2"), and which quantizer is
// best. Part 1 holds when a dense quantizer beats M* in every model; part 2 when the best
// quantizer is not the same in every model (needs two models).
void claim_f(const Scenario& sc, const std::vector<nlohmann::json>& cells, ClaimVerdict& v) {
  std::map<std::string, std::map<std::string, std::pair<double, int>>> err;  // model -> label -> (sum, n)
  std::map<std::string, std::set<std::string>> dense;                         // model -> quantizer labels at 2 bits
  for (const auto& c : cells) {
    if (!c.contains("proxy")) continue;
    const std::string model = c.value("preset", std::string());
    for (const auto& m : c["proxy"]["methods"]) {
      const std::string label = m.value("label", std::string());
      const double e = num(m, "error");
      if (!std::isfinite(e)) continue;
      auto& acc = err[model][label];
      acc.first += e, acc.second += 1;
      if (m.value("kind", std::string()) == "quantizer" && num(m, "code_bits") == 2.0) dense[model].insert(label);
    }
  }
  v.depends_on = common_settings(sc) + "; 2 key code bits; M* = the mixed family's surrogate optimum per head at B = 2; "
                 "mean over each model's cells";
  std::vector<std::string> parts;
  std::set<std::string> best_names;
  int dense_wins = 0, models = 0;
  for (const auto& [model, labels] : err) {
    const auto mstar = labels.find("M* B=2");
    if (mstar == labels.end() || dense[model].empty()) continue;
    ++models;
    const double em = mstar->second.first / mstar->second.second;
    std::string best;
    double eb = std::numeric_limits<double>::infinity();
    for (const std::string& q : dense[model]) {
      const auto& a = labels.at(q);
      if (a.first / a.second < eb) eb = a.first / a.second, best = q;
    }
    best_names.insert(best.substr(0, best.find(' ')));
    dense_wins += eb < em;
    parts.push_back(model + ": best dense " + best + " " + f3(eb) + " vs M* " + f3(em));
  }
  v.measured = "output error at 2 key code bits, mean over each model's cells: " +
               (parts.empty() ? std::string("no model with both") : join(parts, "; "));
  if (models == 0) {
    v.standing = ClaimStanding::NotTestable, v.why = "no model has both dense quantizers at 2 bits and M* at B = 2";
    return;
  }
  const bool part1 = dense_wins == models;
  const std::string p1 = part1 ? "a dense quantizer beats M* in every model"
                               : "a dense quantizer beats M* in " + std::to_string(dense_wins) + " of " + std::to_string(models) + " models";
  std::string p2;
  bool part2 = false, p2_testable = models >= 2;
  if (!p2_testable) {
    p2 = "one model: whether the best quantizer depends on the model is not tested";
  } else {
    std::vector<std::string> names(best_names.begin(), best_names.end());
    part2 = names.size() > 1;
    p2 = part2 ? "the best quantizer depends on the model (" + join(names) + ")" : "the same quantizer is best in every model (" + join(names) + ")";
  }
  v.standing = part1 && part2 ? ClaimStanding::Reproduced
               : (part1 || part2) ? ClaimStanding::Partly
               : p2_testable || dense_wins == 0 ? ClaimStanding::Refuted
                                                : ClaimStanding::NotTestable;
  v.why = p1 + "; " + p2 + " (no interval: " + std::to_string(cells.size()) + " cells)";
}

// (e) three parts, from the cells: (1) the routed allocation ("routed* B=..." of the methods,
// mean output error over cells) beats every eviction scorer in the methods; (2) the model-wide
// routed allocation of the interior analysis sends 1-25% of heads to dense quantization (Q) at
// the primary budget (its routed_to counts, over all cells); (3) the mixed family alone ("M* B=")
// does worse than routed.
void claim_e(const Scenario& sc, const std::vector<nlohmann::json>& cells, ClaimVerdict& v) {
  std::map<std::string, std::pair<double, int>> err;  // label -> (sum, n)
  std::map<std::string, std::string> kind;
  int to_q = 0, heads = 0;
  const std::size_t bi = budget_index(sc, sc.primary_budget);
  for (const auto& c : cells) {
    if (c.contains("budgets") && bi < c["budgets"].size()) {
      const auto& model = c["budgets"][bi]["model"];
      if (model.contains("routed_to"))
        for (const auto& [fam, n] : model["routed_to"].items()) {
          heads += n.get<int>();
          if (fam == "Q") to_q += n.get<int>();
        }
    }
    if (!c.contains("proxy")) continue;
    for (const auto& m : c["proxy"]["methods"]) {
      const std::string label = m.value("label", std::string());
      const double e = num(m, "error");
      if (!std::isfinite(e)) continue;
      err[label].first += e, err[label].second += 1;
      kind[label] = m.value("kind", std::string());
    }
  }
  auto mean = [&](const std::string& l) { return err.count(l) ? err[l].first / err[l].second : kNaN; };
  std::string routed, mixed;
  for (const auto& [l, k] : kind) {
    if (l.rfind("routed* B=", 0) == 0) routed = l;
    if (l.rfind("M* B=", 0) == 0) mixed = l;
  }
  std::vector<std::string> scorers, beaten;
  for (const auto& [l, k] : kind)
    if (k == "scorer") scorers.push_back(l + " " + f3(mean(l)));
  const double er = routed.empty() ? kNaN : mean(routed), em = mixed.empty() ? kNaN : mean(mixed);
  int beats = 0, n_scorers = 0;
  for (const auto& [l, k] : kind)
    if (k == "scorer") ++n_scorers, beats += er < mean(l);
  const double share_q = heads > 0 ? static_cast<double>(to_q) / heads : kNaN;
  v.measured = "output error, mean over " + std::to_string(cells.size()) + " cells: " + (routed.empty() ? "no routed entry" : routed + " " + f3(er)) +
               (mixed.empty() ? "" : ", " + mixed + " " + f3(em)) + "; scorers: " + join(scorers, ", ") +
               "; the interior's model-wide routed allocation sends " + pct_whole(share_q) + " of " + std::to_string(heads) +
               " heads to Q at B = " + format_number(sc.primary_budget);
  v.depends_on = common_settings(sc) + "; scorers at the keep ratio of equal code bits (B/16); the end task is not simulated here (output error)";
  if (routed.empty() || n_scorers == 0) {
    v.standing = ClaimStanding::NotTestable, v.why = "the methods need a routed family entry and eviction scorers";
    return;
  }
  const bool p1 = beats == n_scorers, p2 = share_q >= 0.01 && share_q <= 0.25, p3 = std::isfinite(em) && em > er;
  const int held = int(p1) + int(p2) + int(p3);
  v.standing = held == 3 ? ClaimStanding::Reproduced : held == 0 ? ClaimStanding::Refuted : ClaimStanding::Partly;
  v.why = std::string(p1 ? "routed beats every eviction scorer" : "routed beats " + std::to_string(beats) + " of " + std::to_string(n_scorers) + " eviction scorers") +
          "; " + (p2 ? "it sends " + pct_whole(share_q) + " of heads to dense quantization (within 1-25%)"
                     : "it sends " + pct_whole(share_q) + " of heads to dense quantization (outside 1-25%)") +
          "; " + (p3 ? "the mixed family alone does worse than routed" : "the mixed family alone does not do worse than routed") +
          " (no interval)";
}

// (c) from the shortest to the longest T: the share of heads won by E and err(E*)/err(M*)
// (interior_verdict's context_trends, per preset).
void claim_c(const Scenario& sc, const std::vector<nlohmann::json>& cells, ClaimVerdict& v) {
  const std::size_t bi = budget_index(sc, sc.primary_budget);
  const std::vector<ContextTrend> trends = context_trends(sc, cells, bi);
  // Both measures toward / away, the continuous one only (no head changes winner), or disagreeing.
  std::vector<std::string> toward, cont_toward, away, cont_away, disagree, parts;
  for (const ContextTrend& t : trends) {
    if (t.preset == "(pooled)") continue;
    parts.push_back(t.preset + " T " + std::to_string(t.T0) + "->" + std::to_string(t.T1) + ": E wins " +
                    pct_whole(t.e_share0) + "->" + pct_whole(t.e_share1) + ", err(E*)/err(M*) " + f2(t.ratio0) + "->" + f2(t.ratio1));
    if (t.direction == "toward eviction") toward.push_back(t.preset);
    else if (t.direction == "away from eviction") away.push_back(t.preset);
    else if (t.direction.find("moves toward") != std::string::npos) cont_toward.push_back(t.preset);
    else if (t.direction.find("moves away") != std::string::npos) cont_away.push_back(t.preset);
    else disagree.push_back(t.preset);
  }
  v.measured = parts.empty() ? "no preset has two context lengths"
                             : join(parts, "; ") + " (E's share of heads won; median over cells of err(E*)/err(M*), "
                                                   "falling = toward eviction; no interval)";
  v.depends_on = common_settings(sc) + "; B = " + format_number(sc.primary_budget) +
                 "; 'toward' by both the discrete (E's share of wins) and the continuous (err(E*)/err(M*)) measure; "
                 "one preset's generator at its own sharpness, context length the only thing varied";
  const auto list = [](const std::vector<std::string>& x) { return x.empty() ? std::string("none") : join(x); };
  const std::string detail = "toward eviction by both measures: " + list(toward) + "; by err(E*)/err(M*) only: " +
                             list(cont_toward) + "; away by both: " + list(away) + "; away by err(E*)/err(M*) only (no head changes winner): " +
                             list(cont_away) + "; the two measures disagree: " + list(disagree);
  const std::size_t n = toward.size() + cont_toward.size() + away.size() + cont_away.size() + disagree.size();
  if (n == 0) {
    v.standing = ClaimStanding::NotTestable, v.why = "the scenario needs at least two context lengths per preset";
  } else if (toward.size() == n) {
    v.standing = ClaimStanding::Reproduced, v.why = "every preset moves toward eviction by both measures";
  } else if (!toward.empty() || !cont_toward.empty()) {
    v.standing = ClaimStanding::Partly, v.why = detail;
  } else if (!away.empty() || !cont_away.empty()) {
    v.standing = ClaimStanding::Refuted, v.why = "no preset moves toward eviction by both measures; " + detail;
  } else {
    v.standing = ClaimStanding::NotTestable, v.why = detail;
  }
}

// (m) the joint allocation (M*, routed model-wide) against eviction only (E) and quantization
// only (Q) at the same measured rate: per budget, the median over cells of A_model with a
// cluster-bootstrap interval (cells JSON A_routed, as cells.csv), where Q exists.
void claim_m(const Scenario& sc, const std::vector<nlohmann::json>& cells, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "interior.json", v.spec);
  std::vector<std::string> parts, pos, neg, other, infeasible;
  for (std::size_t bi = 0; bi < sc.budgets.size(); ++bi) {
    const double B = sc.budgets[bi];
    bool feasible = true;
    for (const auto& q : t["q_feasible"])
      if (num(q, "budget") == B) feasible = q.value("feasible", true);
    const std::string b = "B = " + format_number(B);
    if (!feasible) {
      infeasible.push_back(b);
      continue;
    }
    std::vector<double> xs;
    std::vector<std::string> groups;
    int wins_M = 0, heads = 0;
    for (const auto& c : cells) {
      const auto& bb = c["budgets"][bi];
      xs.push_back(num(bb, "A_routed"));
      groups.push_back(claim_cluster_of(c));
      wins_M += bb["wins"].value("M", 0);
      heads += bb["wins"].value("M", 0) + bb["wins"].value("Q", 0) + bb["wins"].value("E", 0);
    }
    const MedianCI m = cluster_median(xs, groups, sc.seed, sc.bootstrap);
    parts.push_back(b + ": median A_model " + f2(m.median) + " [" + f2(m.lo) + ", " + f2(m.hi) + "], M* wins " +
                    std::to_string(wins_M) + " of " + std::to_string(heads) + " heads");
    if (m.lo > 0) pos.push_back(b);
    else if (m.hi < 0) neg.push_back(b);
    else other.push_back(b);
  }
  v.measured = (parts.empty() ? std::string("no budget where Q exists") : join(parts, "; ")) + " (" +
               std::to_string(cells.size()) + " cells; A_model = 1 - err(routed)/min(err(Q pooled), err(E pooled)))";
  v.depends_on = common_settings(sc) + "; budgets " + budgets_text(sc.budgets) +
                 (infeasible.empty() ? "" : "; Q infeasible at " + join(infeasible) + " (no verdict there)") +
                 "; per token only (the per-key-channel allocation of RDKV is not a family here)";
  const std::string scope = "; the per-key-channel part is not tested here";
  if (parts.empty()) {
    v.standing = ClaimStanding::NotTestable, v.why = "Q does not exist at any budget of the ladder";
  } else if (pos.size() == parts.size()) {
    v.standing = ClaimStanding::Partly, v.why = "per token reproduced: the joint allocation beats both at every budget (interval above 0)" + scope;
  } else if (!pos.empty()) {
    v.standing = ClaimStanding::Partly,
    v.why = "per token the joint allocation beats both at " + join(pos) + " only (not at " + join(neg) +
            (neg.empty() || other.empty() ? "" : ", ") + join(other) + ")" + scope;
  } else if (!neg.empty()) {
    v.standing = ClaimStanding::Refuted, v.why = "a uniform endpoint beats the joint allocation at " + join(neg);
  } else {
    v.standing = ClaimStanding::NotTestable, v.why = "inconclusive: every interval contains 0 (or fewer than 5 clusters: no interval)";
  }
}

// (d) staleness.json: the allocation goes stale (median err_stale/err_fresh >= kStaleRatio at a
// step <= kStaleWithinSteps) while the family stays (same family as after prefill at the last
// step, share >= kStableFamilyShare; kappa with its interval beside).
void claim_d(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "staleness.json", v.spec);
  const auto& rows = t["rows"];
  if (rows.empty()) {
    v.standing = ClaimStanding::NotTestable, v.why = "no decode step was scored";
    return;
  }
  int stale_at = 0;
  double stale_ratio = kNaN;
  for (const auto& r : rows) {
    const int s = r.value("step", 0);
    if (s > kStaleWithinSteps) break;
    if (num(r, "median_ratio") >= kStaleRatio) {
      stale_at = s, stale_ratio = num(r, "median_ratio");
      break;
    }
  }
  const auto& last = rows.back();
  const int S = last.value("step", 0);
  const double same = num(last, "share_same_family"), k = num(last, "kappa"), klo = num(last, "kappa_lo"), khi = num(last, "kappa_hi");
  std::string early;
  for (const auto& r : rows)
    if (r.value("step", 0) <= kStaleWithinSteps && r.value("step", 0) > 1)
      early += (early.empty() ? "" : ", ") + ("s = " + std::to_string(r.value("step", 0)) + ": " + f2(num(r, "median_ratio")));
  v.measured = "median err_stale/err_fresh " + early + "; at s = " + std::to_string(S) + ": " + f2(num(last, "median_ratio")) +
               "; same family as after prefill at s = " + std::to_string(S) + ": " + pct_whole(same) + ", kappa " + f2(k) + " [" +
               f2(klo) + ", " + f2(khi) + "] (" + std::to_string(last.value("heads", 0)) + " heads)";
  const std::string W = t.contains("window") ? (t["window"].is_string() ? t["window"].get<std::string>() : t["window"].dump()) : "?";
  v.depends_on = common_settings(sc) + "; B = " + format_number(num(t, "budget")) + "; decision window W = " + (W == "trace" ? std::string("the trace's observation window") : W) +
                 " (tables/staleness_windows.csv has the others); horizon k = " + format_number(num(t, "horizon")) +
                 "; steps up to " + std::to_string(S) + " (the paper: 4,096); thresholds: stale when the median ratio >= " +
                 format_number(kStaleRatio) + " by s = " + std::to_string(kStaleWithinSteps) + ", stable when >= " +
                 pct_whole(kStableFamilyShare) + " keep their family";
  const bool stale = stale_at > 0, stable = same >= kStableFamilyShare;
  const std::string chance = std::isfinite(klo) && klo > 0 ? "above chance" : "not above chance (kappa's interval reaches 0)";
  const std::string stale_text = stale ? "the allocation goes stale by s = " + std::to_string(stale_at) + " (ratio " + f2(stale_ratio) + ")"
                                       : "the allocation does not go stale within " + std::to_string(kStaleWithinSteps) + " steps";
  const std::string stable_text = (stable ? "the family is kept by " : "the family is kept by only ") + pct_whole(same) +
                                  " of heads at s = " + std::to_string(S) + ", " + chance;
  v.why = stale_text + "; " + stable_text;
  v.standing = stale && stable ? ClaimStanding::Reproduced : stale || stable ? ClaimStanding::Partly : ClaimStanding::Refuted;
  // The decision window's robustness: the fresh allocation decided from the W decode steps
  // before s (staleness.windows). Does "stale within a few steps" survive every window?
  const std::string wpath = dir + "/staleness_windows.json";
  if (!std::filesystem::exists(wpath)) return;
  const nlohmann::json wt = read_table(dir, "staleness_windows.json", v.spec);
  std::map<int, std::pair<int, double>> stale_by_w;  // window -> (first stale step <= kStaleWithinSteps or 0, its ratio)
  for (const auto& r : wt.at("rows")) {
    const int w = r.at("window").get<int>(), s = r.at("step").get<int>();
    auto& x = stale_by_w[w];
    if (x.first == 0 && s <= kStaleWithinSteps && num(r, "median_ratio") >= kStaleRatio) x = {s, num(r, "median_ratio")};
  }
  if (stale_by_w.empty()) return;
  std::vector<std::string> parts, differ;
  for (const auto& [w, x] : stale_by_w) {
    parts.push_back("W = " + std::to_string(w) + ": " +
                    (x.first ? "stale by s = " + std::to_string(x.first) + " (" + f2(x.second) + ")"
                             : "not stale within " + std::to_string(kStaleWithinSteps) + " steps"));
    if ((x.first > 0) != stale) differ.push_back("W = " + std::to_string(w));
  }
  v.measured += "; by decision window (the fresh allocation from the W decode steps before s): " + join(parts, "; ");
  v.depends_on += "; decision windows " + join(parts, ", ");
  if (differ.empty()) {
    v.why += "; the staleness part is the same under every decision window (" + join(parts, "; ") + ")";
  } else {
    v.why += "; the staleness part changes with the decision window (" + join(differ, ", ") + ")";
    if (v.standing != ClaimStanding::NotTestable && v.standing != ClaimStanding::Partly) {
      v.why = std::string(to_string(v.standing)) + " with the trace's window only: " + v.why;
      v.standing = ClaimStanding::Partly;
    }
  }
}

// (h) smoothing.json, family M: span truncation rate from raw scores vs the best smoothed
// variant, per budget, with Wilson intervals over spans.
void claim_h(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "smoothing.json", v.spec);
  struct Rate { double k = 0, n = 0; std::string variant; };
  std::map<double, Rate> raw, best;
  for (const auto& r : t["rows"]) {
    if (r.value("family", std::string()) != "M") continue;
    const double B = num(r, "budget");
    Rate x{num(r, "truncated"), num(r, "spans"), r.value("variant", std::string())};
    if (r.value("kernel", 0) == 1) raw[B] = x;
    else if (!best.count(B) || x.k / x.n < best[B].k / best[B].n) best[B] = x;
  }
  std::vector<std::string> parts, most, notmost;
  for (const auto& [B, r] : raw) {
    if (!best.count(B) || r.n <= 0) continue;
    const Rate& s = best[B];
    const auto [rl, rh] = wilson(r.k, r.n);
    const auto [sl, sh] = wilson(s.k, s.n);
    const std::string b = "B = " + format_number(B);
    parts.push_back(b + ": raw " + pct_whole(r.k / r.n) + " [" + pct_whole(rl) + ", " + pct_whole(rh) + "] -> " + s.variant + " " +
                    pct_whole(s.k / s.n) + " [" + pct_whole(sl) + ", " + pct_whole(sh) + "] of " + format_number(r.n) + " spans");
    if (r.k > 0 && s.k / s.n <= kSmoothingRemovesMost * r.k / r.n) most.push_back(b);
    else if (r.k > 0) notmost.push_back(b);
  }
  v.measured = parts.empty() ? "no planted span" : join(parts, "; ") + " (M*, truncated spans; Wilson 95%)";
  v.depends_on = common_settings(sc) + "; smoothing budgets, kernels and pooling of the file; padding " +
                 t.value("padding", std::string()) + "; synthetic planted spans (retrieval heads), not answers of a task";
  const std::string scope = "; \"fails mainly by truncation\" is not measured here (no end task on synthetic traces)";
  if (most.empty() && notmost.empty()) {
    v.standing = ClaimStanding::NotTestable, v.why = "raw scores truncate no span at any budget";
  } else if (notmost.empty()) {
    v.standing = ClaimStanding::Partly, v.why = "smoothing removes most truncation (to <= half) at every budget" + scope;
  } else if (!most.empty()) {
    v.standing = ClaimStanding::Partly, v.why = "smoothing removes most truncation at " + join(most) + ", not at " + join(notmost) + scope;
  } else {
    v.standing = ClaimStanding::Refuted, v.why = "no smoothed variant halves the truncation rate at " + join(notmost);
  }
}

// (j) mismatch_beta.json: the fitted beta per quantizer (median and quartiles over heads).
void claim_j(const Scenario& sc, const std::string& dir, ClaimVerdict& v) {
  const nlohmann::json t = read_table(dir, "mismatch_beta.json", v.spec);
  std::vector<std::string> parts, outside;
  double lo_med = 1e300, hi_med = -1e300;
  std::vector<std::pair<double, double>> iqr;
  for (const auto& r : t["rows"]) {
    const std::string q = r.value("quantizer", std::string());
    const double m = num(r, "beta_median"), a = num(r, "beta_q25"), b = num(r, "beta_q75");
    parts.push_back(q + " " + f2(m) + " [" + f2(a) + ", " + f2(b) + "]");
    lo_med = std::min(lo_med, m), hi_med = std::max(hi_med, m);
    iqr.push_back({a, b});
    if (m < kPaperBetaLo || m > kPaperBetaHi) outside.push_back(q);
  }
  bool differs = false;  // two quantizers whose interquartile ranges do not overlap
  for (std::size_t i = 0; i < iqr.size(); ++i)
    for (std::size_t k = i + 1; k < iqr.size(); ++k)
      differs = differs || iqr[i].second < iqr[k].first || iqr[k].second < iqr[i].first;
  v.measured = "beta median [quartiles] over heads: " + join(parts, "; ") + " (range of medians " + f2(lo_med) + "-" + f2(hi_med) + ")";
  v.depends_on = common_settings(sc) + "; bits fitted " + t["bits"].dump() + "; beta fitted per head to the logit noise n(b) = alpha beta^-b";
  if (parts.empty()) {
    v.standing = ClaimStanding::NotTestable, v.why = "no quantizer was fitted";
  } else if (differs && outside.empty()) {
    v.standing = ClaimStanding::Reproduced, v.why = "beta differs across designs (quartiles apart) and every median lies in the paper's 3.6-5.3";
  } else if (differs) {
    v.standing = ClaimStanding::Partly, v.why = "beta differs across designs, but the medians of " + join(outside) + " lie outside the paper's 3.6-5.3";
  } else {
    v.standing = ClaimStanding::Refuted, v.why = "the quartiles of every quantizer's beta overlap: no difference across designs";
  }
}

// (k), (l) mismatch.json: per budget x actual quantizer Y x model X, the mean recomputed error's
// ratio to uniform Y and to matched (X = Y).
void claim_kl(const Scenario& sc, const std::string& dir, ClaimVerdict& v, bool k) {
  const nlohmann::json t = read_table(dir, "mismatch.json", v.spec);
  std::set<std::string> quantizers;
  for (const auto& r : t["rows"])
    if (r.value("matched", false)) quantizers.insert(r.value("actual", std::string()));
  int mism = 0, worse_uniform = 0, worse_matched = 0, matched_worse_uniform = 0;
  std::vector<double> ratios;
  std::map<double, std::vector<std::string>> matched_text;
  int matched_n = 0, matched_better = 0, measured_n = 0, measured_better = 0;
  for (const auto& r : t["rows"]) {
    const std::string X = r.value("model", std::string()), Y = r.value("actual", std::string());
    const double B = num(r, "budget"), ru = num(r, "ratio_to_uniform"), rm = num(r, "ratio_to_matched");
    if (quantizers.count(X) && X != Y) {
      ++mism, ratios.push_back(ru);
      worse_uniform += ru > 1, worse_matched += rm > 1;
    }
    if (X == Y) matched_text[B].push_back(Y + " " + f3(ru)), ++matched_n, matched_better += ru < 1, matched_worse_uniform += ru > 1;
    if (X == "measured") ++measured_n, measured_better += ru < 1;
  }
  const std::string common = common_settings(sc) + "; budgets (mean bits per head) " + t["budgets"].dump() +
                             "; " + std::to_string(sc.cells.size()) + " cells, means over their heads (no interval)";
  if (k) {
    v.measured = std::to_string(worse_uniform) + " of " + std::to_string(mism) + " mismatched (model X != quantizer Y) allocations are worse than uniform Y (median ratio " +
                 f3(quantile_or_nan(ratios, 0.5)) + "); " + std::to_string(worse_matched) + " of " + std::to_string(mism) + " worse than the matched allocation";
    v.depends_on = common + "; the inversion of the allocation order is not in the tables yet";
    if (mism == 0) {
      v.standing = ClaimStanding::NotTestable, v.why = "the scenario has fewer than two quantizers";
    } else if (2 * worse_uniform <= mism) {
      v.standing = ClaimStanding::Refuted, v.why = "most mismatched allocations are no worse than uniform";
    } else if (2 * worse_matched > mism && 2 * matched_worse_uniform <= matched_n) {
      v.standing = ClaimStanding::Partly,
      v.why = "mismatch is worse than uniform and than matched; the inversion of the allocation order is not measured here";
    } else if (2 * worse_matched > mism) {
      v.standing = ClaimStanding::Partly,
      v.why = "mismatched allocations are worse than uniform, but so is the matched allocation in " + std::to_string(matched_worse_uniform) +
              " of " + std::to_string(matched_n) + " cases: the loss to uniform is mostly not the mismatch's doing; the inversion of the allocation order is not measured here";
    } else {
      v.standing = ClaimStanding::Partly,
      v.why = "mismatched allocations are worse than uniform, but mostly no worse than the matched one: here the per-head allocation itself loses to uniform, not the mismatch";
    }
    return;
  }
  std::vector<std::string> parts;
  for (const auto& [B, s] : matched_text) parts.push_back("B = " + format_number(B) + ": " + join(s));
  v.measured = "matched (per-quantizer fitted model) error / uniform: " + join(parts, "; ") + "; " + std::to_string(matched_better) +
               " of " + std::to_string(matched_n) + " below 1; with the measured noise instead of the fit: " +
               std::to_string(measured_better) + " of " + std::to_string(measured_n) + " below 1";
  v.depends_on = common + "; the paper's 2.5 average bits is not a budget here (mismatch budgets are whole bits)";
  if (matched_n == 0) {
    v.standing = ClaimStanding::NotTestable, v.why = "no matched allocation in the tables";
  } else if (matched_better == matched_n) {
    v.standing = ClaimStanding::Reproduced, v.why = "calibrated allocation beats uniform for every quantizer and budget";
  } else if (matched_better > 0 || measured_better > 0) {
    v.standing = ClaimStanding::Partly,
    v.why = "the fitted-model allocation beats uniform in " + std::to_string(matched_better) + " of " + std::to_string(matched_n) +
            " cases, the measured-noise allocation in " + std::to_string(measured_better) + " of " + std::to_string(measured_n);
  } else {
    v.standing = ClaimStanding::Refuted, v.why = "no calibrated allocation beats uniform";
  }
}

// How a variation names one replaced key in a row: "rate_kind=code"; a replaced `traces` by what
// it runs on ("on trained models stories260K, kjv-l4-mha-d32").
std::string variation_label(const std::string& key, const YAML::Node& value) {
  if (key == "traces" && value.IsMap() && value["model"] && !value["synthetic"]) {
    std::vector<std::string> names;
    const YAML::Node models = value["model"];
    auto add = [&](const YAML::Node& m) {
      if (m.IsMap() && m["checkpoint"]) names.push_back(std::filesystem::path(m["checkpoint"].as<std::string>()).stem().string());
      else if (m.IsMap() && m["trace"]) names.push_back(std::filesystem::path(m["trace"].as<std::string>()).stem().string());
    };
    if (models.IsSequence())
      for (const auto& m : models) add(m);
    else
      add(models);
    return "on trained models " + join(names);
  }
  YAML::Emitter e;
  e << YAML::Flow << value;
  return key + "=" + e.c_str();
}

// `claim.dose: {preset: P, seeds: [..], SETTING: [values]}`: a dose-response of one generator
// setting within one preset, run as a variation of the scenario: traces.synthetic restricted to P
// (and to the given seeds, else the file's), with
// SETTING swept (`logit_scales`, or any key traces.synthetic.sweep accepts), everything else
// as the file gives it. The per-model verdicts group cells by preset and dose
// (model_group_of), so the row says how the claim's statistic moves with the setting.
ClaimVariation dose_variation(const YAML::Node& root, const YAML::Node& dose, const YamlReader& c) {
  const std::size_t fixed = dose.IsMap() ? (dose["preset"] ? 1 : 0) + (dose["seeds"] ? 1 : 0) : 0;
  if (!dose.IsMap() || !dose["preset"] || dose.size() != fixed + 1)
    c.fail(dose, "key 'claim.dose' must be a mapping of 'preset', optionally 'seeds', and ONE generator setting to a list "
                 "of values, e.g. {preset: llama-like, seeds: [0, 1, 2, 3, 4], logit_scales: [1.5, 3, 6, 12]}.");
  const YAML::Node syn = root["traces"] ? root["traces"]["synthetic"] : YAML::Node();
  if (!syn) c.fail(dose, "key 'claim.dose' varies a generator setting, but this scenario has no traces.synthetic.");
  const std::string preset = c.str(dose["preset"], "claim.dose.preset");
  bool listed = false;
  if (syn["presets"])
    for (const auto& p : syn["presets"]) listed = listed || (p.IsScalar() && p.as<std::string>() == preset);
  if (!listed) c.fail(dose["preset"], "key 'claim.dose.preset': '" + preset + "' is not one of this scenario's traces.synthetic.presets.");
  std::string key;
  YAML::Node values;
  for (const auto& kv : dose)
    if (kv.first.as<std::string>() != "preset" && kv.first.as<std::string>() != "seeds")
      key = kv.first.as<std::string>(), values = kv.second;
  if (!values.IsSequence() || values.size() < 2)
    c.fail(values, "key 'claim.dose." + key + "' must list at least two values (a dose-response needs two doses).");
  YAML::Node traces = YAML::Clone(root["traces"]);
  YAML::Node s = traces["synthetic"];
  s["presets"] = std::vector<std::string>{preset};
  if (dose["seeds"]) s["seeds"] = dose["seeds"];  // a dose-response needs clusters: its own seeds
  s.remove("sweep");
  s.remove("logit_scales");
  if (key == "logit_scales") {
    s["logit_scales"] = values;
  } else {
    YAML::Node sweep;
    sweep[key] = values;
    s["sweep"] = sweep;
  }
  YAML::Node mapping;
  mapping["traces"] = traces;
  YAML::Emitter flow, vals;
  flow << YAML::Flow << mapping;
  vals << YAML::Flow << values;
  ClaimVariation cv;
  cv.mapping = flow.c_str();
  cv.label = "dose-response of " + (key == "logit_scales" ? std::string("logit_scale") : key) + " " + vals.c_str() +
             " within " + preset;
  return cv;
}

std::shared_ptr<const Analysis> read_claims_section(const YAML::Node& root, const YamlReader& c, const Scenario& s) {
  const YAML::Node node = root["claim"];
  if (!node) return nullptr;
  std::vector<YAML::Node> maps;
  if (node.IsSequence()) {
    if (node.size() == 0) c.fail(node, "key 'claim' is an empty list; give one mapping per claim.");
    for (const auto& m : node) maps.push_back(m);
  } else {
    maps.push_back(node);
  }
  std::vector<ClaimSpec> out;
  std::vector<ClaimVariation> variations;
  std::set<std::string> seen;
  for (const YAML::Node& m : maps) {
    if (!m.IsMap()) c.fail(m, "key 'claim' must be a mapping of id, claim, source and paper (or a list of them).");
    c.keys(m, "claim", {"id", "claim", "source", "paper", "vary", "dose", "variant"});
    ClaimSpec spec;
    spec.where = c.at(m);
    for (const char* k : {"id", "claim", "source", "paper"})
      if (!m[k]) {
        const std::string what = std::string(k) == "claim"    ? "the claim in one sentence"
                                 : std::string(k) == "source" ? "the paper it comes from"
                                 : std::string(k) == "paper"  ? "the paper's number, as the paper states it"
                                                              : "a letter a to q (docs/claims.md)";
        c.fail(m, "key 'claim' needs the key 'claim." + std::string(k) + "' (" + what + ").");
      }
    spec.id = c.str(m["id"], "claim.id");
    if (spec.id.size() != 1 || spec.id[0] < 'a' || spec.id[0] > 'q')
      c.fail(m["id"], "key 'claim.id' is '" + spec.id + "'; the claims are a to q (docs/claims.md).");
    spec.claim = c.str(m["claim"], "claim.claim");
    spec.source = c.str(m["source"], "claim.source");
    spec.paper = c.str(m["paper"], "claim.paper");
    if (spec.claim.empty()) c.fail(m["claim"], "key 'claim.claim' is empty; state the claim in one sentence.");
    if (!seen.insert(spec.id).second) c.fail(m["id"], "key 'claim.id': claim '" + spec.id + "' is given twice.");
    const auto& ms = claim_measures();
    const auto it = std::find_if(ms.begin(), ms.end(), [&](const ClaimMeasure& x) { return x.id == spec.id; });
    if (it == ms.end()) {
      std::vector<std::string> ids;
      for (const auto& x : ms) ids.push_back(x.id);
      c.fail(m["id"], "key 'claim.id': claim '" + spec.id + "' has no measurement in tierlab yet (docs/claims.md says why); the claims measured are " + join(ids) + ".");
    }
    if (it->analysis != "interior" &&
        std::none_of(s.analyses.begin(), s.analyses.end(), [&](const auto& a) { return a->name() == it->analysis; }))
      c.fail(m["id"], "key 'claim.id': claim '" + spec.id + "' is measured by the " + it->analysis +
                          " analysis; add the key '" + it->analysis + "' to the scenario.");
    if (m["variant"]) spec.variant = c.str(m["variant"], "claim.variant");
    if (m["vary"]) {
      if (!m["vary"].IsSequence()) c.fail(m["vary"], "key 'claim.vary' must be a list of mappings of top-level scenario keys.");
      for (const auto& v : m["vary"]) {
        if (!v.IsMap() || v.size() == 0)
          c.fail(v, "key 'claim.vary': each entry is a mapping of top-level scenario keys and their replacements.");
        ClaimVariation cv;
        YAML::Emitter flow;
        flow << YAML::Flow << v;
        cv.mapping = flow.c_str();
        for (const auto& kv : v) {
          const std::string key = kv.first.as<std::string>();
          if (key == "name" || key == "claim" || key == "description" || (!root[key] && key != "rate_kind" && key != "ladder"))
            c.fail(kv.first, "key 'claim.vary': '" + key + "' is not a top-level key of this scenario that a variation may "
                             "replace (rate_kind, ladder, or a key the file gives).");
          cv.label += std::string(cv.label.empty() ? "" : ", ") + variation_label(key, kv.second);
        }
        variations.push_back(cv);
      }
    }
    if (m["dose"]) variations.push_back(dose_variation(root, m["dose"], c));
    out.push_back(spec);
  }
  return std::make_shared<ClaimAnalysis>(std::move(out), std::move(variations));
}

std::vector<NamedFigure> no_figures_claims(const std::string&) { return {}; }

std::string cell(std::string s) {  // a markdown table cell: no '|' or line end
  for (char& ch : s)
    if (ch == '|') ch = '/';
    else if (ch == '\n') ch = ' ';
  return s;
}

}  // namespace

std::string_view to_string(ClaimStanding s) {
  switch (s) {
    case ClaimStanding::Reproduced: return "reproduced";
    case ClaimStanding::Partly: return "partly";
    case ClaimStanding::Refuted: return "refuted";
    case ClaimStanding::NotTestable: return "not testable here";
  }
  return "?";
}

nlohmann::json ClaimVerdict::to_json() const {
  return {{"id", spec.id},         {"claim", spec.claim},     {"source", spec.source},
          {"paper", spec.paper},   {"scenario", scenario},    {"measured", measured},
          {"verdict", std::string(to_string(standing))},      {"why", why},
          {"depends_on", depends_on}, {"variant", spec.variant}};
}

ClaimVerdict ClaimVerdict::from_json(const nlohmann::json& j) {
  ClaimVerdict v;
  v.spec.id = j.value("id", ""), v.spec.claim = j.value("claim", ""), v.spec.source = j.value("source", "");
  v.spec.paper = j.value("paper", ""), v.scenario = j.value("scenario", ""), v.measured = j.value("measured", "");
  v.why = j.value("why", ""), v.depends_on = j.value("depends_on", ""), v.spec.variant = j.value("variant", "");
  const std::string w = j.value("verdict", "");
  for (ClaimStanding s : {ClaimStanding::Reproduced, ClaimStanding::Partly, ClaimStanding::Refuted, ClaimStanding::NotTestable})
    if (to_string(s) == w) v.standing = s;
  return v;
}

const std::vector<ClaimMeasure>& claim_measures() {
  static const std::vector<ClaimMeasure> m = {
      {"a", "interior", "rho(dominated share, the primary cell summary) with its cluster-bootstrap interval"},
      {"b", "interior", "the stop budget per preset (median A <= 0 from there on) with its cluster-resampling interval"},
      {"c", "interior", "E's share of wins and err(E*)/err(M*) from the shortest to the longest context, per preset"},
      {"d", "staleness", "err_stale/err_fresh in the first steps; family kept at the last step, with kappa"},
      {"e", "proxy", "routed vs every eviction scorer and vs M*; the share of heads the model-wide routing sends to Q"},
      {"f", "proxy", "per model: the best dense quantizer at 2 code bits vs M* at B = 2, and which quantizer is best"},
      {"g", "proxy", "Spearman of output error with replay KL and disagreement; rotated quantizers' rank by error vs by KL"},
      {"h", "smoothing", "span truncation rate of M*, raw vs the best smoothed scores, per budget"},
      {"j", "mismatch", "fitted beta per quantizer (median and quartiles over heads)"},
      {"k", "mismatch", "mismatched allocations vs uniform and vs matched"},
      {"l", "mismatch", "matched (calibrated) allocations vs uniform"},
      {"n", "proxy", "KV-COBRA's per-head allocation vs the uniform kvcobra quantizer at equal measured code bits"},
      {"o", "channel_variance", "channel variances' peak-to-average ratio before and after the Walsh-Hadamard rotation"},
      {"p", "score_error", "Spearman of score-space error and of key MSE with attention KL, their difference's interval"},
      {"q", "proxy", "the share of a 2-bit base's output error and replay KL that HeadQ's side code removes"},
      {"i", "variance", "shares of the verdict's variance by baseline set, compression timing and prompt, with intervals"},
      {"m", "interior", "A_model of the joint allocation vs pooled E and Q per budget, cluster-bootstrap interval"},
  };
  return m;
}

std::vector<ClaimVerdict> evaluate_claims(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                          const std::string& dir) {
  std::vector<ClaimVerdict> rows;
  const ClaimAnalysis* a = sc.find<ClaimAnalysis>();
  if (!a) return rows;
  for (const ClaimSpec& spec : a->claims) {
    ClaimVerdict v;
    v.spec = spec;
    v.scenario = sc.file;
    if (spec.id == "a") claim_a(sc, dir, v);
    else if (spec.id == "b") claim_b(sc, dir, v);
    else if (spec.id == "c") claim_c(sc, cells, v);
    else if (spec.id == "d") claim_d(sc, dir, v);
    else if (spec.id == "e") claim_e(sc, cells, v);
    else if (spec.id == "f") claim_f(sc, cells, v);
    else if (spec.id == "g") claim_g(sc, dir, v);
    else if (spec.id == "h") claim_h(sc, dir, v);
    else if (spec.id == "j") claim_j(sc, dir, v);
    else if (spec.id == "k") claim_kl(sc, dir, v, true);
    else if (spec.id == "l") claim_kl(sc, dir, v, false);
    else if (spec.id == "m") claim_m(sc, cells, dir, v);
    else if (spec.id == "n") claim_n(sc, dir, v);
    else if (spec.id == "o") claim_o(sc, dir, v);
    else if (spec.id == "p") claim_p(sc, dir, v);
    else if (spec.id == "q") claim_q(sc, dir, v);
    else if (spec.id == "i") claim_i(sc, dir, v);
    rows.push_back(v);
  }
  return rows;
}

std::string claims_table(std::vector<ClaimVerdict> all) {
  // The rows measured under the files' own settings, each with its variations' verdicts.
  std::vector<ClaimVerdict> rows;
  for (const auto& v : all)
    if (v.spec.variant.empty()) rows.push_back(v);
  if (rows.empty())  // a variation's own run: its rows, each saying which variation it is
    for (ClaimVerdict v : all) {
      v.why += " (under the variation " + v.spec.variant + ")";
      rows.push_back(std::move(v));
    }
  for (ClaimVerdict& v : rows) {
    if (!v.spec.variant.empty()) continue;
    std::vector<std::string> under;
    bool changed = false;
    for (const auto& x : all)
      if (!x.spec.variant.empty() && x.spec.id == v.spec.id && x.scenario == v.scenario) {
        under.push_back(x.spec.variant + ": " + std::string(to_string(x.standing)));
        changed = changed || x.standing != v.standing;
        // A dose-response or a run on trained models is a measurement of its own: its number
        // goes beside the file's (a rate-convention or ladder variation is named by its verdict).
        if (x.spec.variant.rfind("dose-response of ", 0) == 0 || x.spec.variant.rfind("on trained models ", 0) == 0)
          v.measured += "; " + x.spec.variant + ": " + x.measured;
      }
    if (under.empty()) continue;
    const std::string base = std::string(to_string(v.standing));
    if (changed && (v.standing == ClaimStanding::Reproduced || v.standing == ClaimStanding::Refuted)) {
      v.why = base + " under the file's settings, not under every variation (" + join(under, "; ") + "): " + v.why;
      v.standing = ClaimStanding::Partly;
    } else {
      v.why += std::string(changed ? "; under the variations: " : "; the same under ") + join(under, "; ");
    }
    v.depends_on += "; robustness: " + join(under, "; ");
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.spec.id < y.spec.id; });
  std::ostringstream s;
  s << "| claim | the paper | tierlab | verdict | scenario |\n|---|---|---|---|---|\n";
  for (const auto& v : rows)
    s << "| (" << v.spec.id << ") " << cell(v.spec.claim) << " (" << cell(v.spec.source) << ") | " << cell(v.spec.paper)
      << " | " << cell(v.measured) << " | **" << to_string(v.standing) << "**: " << cell(v.why) << " | `"
      << cell(v.scenario) << "` |\n";
  s << "\nWhat each verdict depends on:\n\n";
  for (const auto& v : rows) s << "- (" << v.spec.id << ") " << v.depends_on << ".\n";
  return s.str();
}

std::vector<Scenario> claim_variations(const Scenario& sc) {
  std::vector<Scenario> out;
  const ClaimAnalysis* a = sc.find<ClaimAnalysis>();
  if (!a || a->variations.empty()) return out;
  const YAML::Node file = YAML::LoadFile(sc.file);
  for (std::size_t k = 0; k < a->variations.size(); ++k) {
    const ClaimVariation& v = a->variations[k];
    YAML::Node root = YAML::Clone(file);
    for (const auto& kv : YAML::Load(v.mapping)) root[kv.first.as<std::string>()] = kv.second;
    root["name"] = root["name"].as<std::string>() + "-vary" + std::to_string(k + 1);
    YAML::Node claims = root["claim"];
    auto mark = [&](YAML::Node m) {
      m.remove("vary");
      m.remove("dose");
      m["variant"] = v.label;
    };
    if (claims.IsSequence())
      for (std::size_t i = 0; i < claims.size(); ++i) mark(claims[i]);
    else
      mark(claims);
    YAML::Emitter e;
    e << root;
    try {
      out.push_back(parse_scenario(e.c_str(), sc.file));
    } catch (const InputError& err) {
      throw InputError(sc.file + ": the claim variation '" + v.label + "' does not make a valid scenario: " + err.what());
    }
  }
  return out;
}

std::vector<ClaimVerdict> read_claim_rows(const std::string& run_dir) {
  std::vector<ClaimVerdict> rows;
  const std::string path = run_dir + "/tables/claims.json";
  if (!std::filesystem::exists(path)) return rows;
  const nlohmann::json t = nlohmann::json::parse(read_regular_file(path, "table"));
  for (const auto& j : t["rows"]) rows.push_back(ClaimVerdict::from_json(j));
  return rows;
}

std::string ClaimAnalysis::write_tables(const Scenario& sc, const std::vector<nlohmann::json>& cells,
                                        const std::string& dir) const {
  const std::vector<ClaimVerdict> rows = evaluate_claims(sc, cells, dir);
  nlohmann::json j = {{"scenario", sc.name}, {"rows", nlohmann::json::array()}};
  CsvWriter csv({"id", "claim", "source", "paper", "measured", "verdict", "why", "depends_on", "scenario"});
  for (const auto& v : rows) {
    j["rows"].push_back(v.to_json());
    csv.row() << v.spec.id << v.spec.claim << v.spec.source << v.spec.paper << v.measured
              << std::string(to_string(v.standing)) << v.why << v.depends_on << v.scenario;
  }
  write_file_atomically(dir + "/claims.json", j.dump(2) + "\n");
  write_file_atomically(dir + "/claims.csv", csv.text());
  const std::string table = claims_table(rows);
  const std::filesystem::path run_dir = std::filesystem::path(dir).parent_path();
  write_file_atomically((run_dir / "claims.md").string(),
                        "# Claims tested by " + sc.name + "\n\nComputed from this run's tables (docs/claims.md).\n\n" + table);
  return "## Claims of the reference papers tested here\n\nEach row is computed from this run's tables "
         "(tables/claims.json; docs/claims.md has every claim).\n\n" + table + "\n";
}

AnalysisType ClaimAnalysis::type() {
  return {"claims", "the reference papers' claims this scenario tests, with their verdict rows (docs/claims.md)",
          {"claim"}, read_claims_section, no_figures_claims};
}

}  // namespace tierlab
