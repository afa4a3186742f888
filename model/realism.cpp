// Realism statistics of a trace (realism.hpp): attention entropy, first-token mass, tokens
// holding 90% of the attention, logit margin, 2-bit logit noise and channel spreads, over the
// causal observation queries.
#include "model/realism.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

#include "model/base/error.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/quantizers/tier.hpp"

namespace tierlab {
namespace {

// Median of v (reordered): the middle value, or the mean of the two middle ones.
double median_of(std::vector<double>& v) {
  const std::size_t n = v.size(), m = n / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m), v.end());
  const double hi = v[m];
  if (n % 2 == 1) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(m));
  return 0.5 * (lo + hi);
}

// max_c rms_c / median_c rms_c over the given rows of m.
double channel_spread(const MatrixRM& m, const std::vector<Eigen::Index>& rows) {
  const Eigen::Index d = m.cols();
  std::vector<double> rms(static_cast<std::size_t>(d), 0.0);
  for (Eigen::Index r : rows)
    for (Eigen::Index c = 0; c < d; ++c) rms[c] += static_cast<double>(m(r, c)) * m(r, c);
  for (double& x : rms) x = std::sqrt(x / static_cast<double>(rows.size()));
  const double mx = *std::max_element(rms.begin(), rms.end());
  const double med = median_of(rms);
  return med > 0.0 ? mx / med : std::numeric_limits<double>::infinity();
}

// Linear interpolation between order statistics (numpy's default percentile).
double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return std::nan("");
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const std::size_t i = static_cast<std::size_t>(std::floor(pos));
  const std::size_t j = std::min(i + 1, sorted.size() - 1);
  return sorted[i] + (pos - static_cast<double>(i)) * (sorted[j] - sorted[i]);
}

RealismStat stat_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  RealismStat s;
  s.p10 = percentile(v, 0.1);
  s.median = percentile(v, 0.5);
  s.p90 = percentile(v, 0.9);
  s.mean = v.empty() ? std::nan("") : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return s;
}

std::string num(double x) {
  char buf[32];
  const double a = std::abs(x);
  if (!std::isfinite(x)) return "n/a";
  if (a >= 100) std::snprintf(buf, sizeof buf, "%.0f", x);
  else if (a >= 10) std::snprintf(buf, sizeof buf, "%.1f", x);
  else if (a >= 1) std::snprintf(buf, sizeof buf, "%.2f", x);
  else std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

std::string cell(const RealismStat& s) { return num(s.median) + " [" + num(s.p10) + ", " + num(s.p90) + "]"; }

int window_of(const TraceMeta& meta, const RealismOptions& o) { return o.window > 0 ? o.window : meta.obs_window; }

// Checks that the trace has the query set of length L; returns L (0 -> T).
int checked_length(const TraceMeta& meta, int length, int w) {
  const int T = meta.prompt_len, W = meta.obs_window;
  const int L = length > 0 ? length : T;
  if (W < 1) throw InputError("realism statistics need observation queries; the trace has W = 0.");
  if (w > W)
    throw InputError("realism window = " + std::to_string(w) + " is larger than the trace's observation window W = " +
                     std::to_string(W) + ".");
  if (w > L)
    throw InputError("realism window = " + std::to_string(w) + " is larger than the length L = " + std::to_string(L) +
                     ".");
  if (L > T || L - w < T - W)
    throw InputError("realism length L = " + std::to_string(L) + " needs observation queries at positions " +
                     std::to_string(L - w) + ".." + std::to_string(L - 1) + ", but the trace's are at " +
                     std::to_string(T - W) + ".." + std::to_string(T - 1) + " (lengths " + std::to_string(T - W + w) +
                     ".." + std::to_string(T) + " with window " + std::to_string(w) +
                     "; capture with a longer --obs-window for shorter lengths).");
  return L;
}

}  // namespace

void RealismOptions::validate() const {
  if (bits < 1 || bits > 8) throw InputError("realism option bits = " + std::to_string(bits) + " must be in 1..8.");
  if (group < 1) throw InputError("realism option group = " + std::to_string(group) + " must be positive.");
  if (!(mass > 0.0 && mass <= 1.0))
    throw InputError("realism option mass = " + std::to_string(mass) + " must be in (0, 1].");
  if (window < 0) throw InputError("realism option window = " + std::to_string(window) + " must be >= 0.");
  for (int L : lengths)
    if (L < 1) throw InputError("realism length " + std::to_string(L) + " must be positive.");
}

HeadRealism head_realism(const HeadData& head, const TraceMeta& meta, int length, const RealismOptions& o) {
  o.validate();
  const int w = window_of(meta, o);
  const int L = checked_length(meta, length, w);
  const int T = meta.prompt_len, W = meta.obs_window, g = meta.group_size, d = meta.head_dim;
  const MatrixRM keys = head.keys.topRows(L);
  const MatrixRM quantized = dense_tier_keys(keys, Tier(QuantizerKind::KiviPerChannel, o.bits, o.group));
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));

  HeadRealism r;
  r.layer = head.layer;
  r.kv_head = head.kv_head;
  r.length = L;
  std::vector<Eigen::Index> query_rows;
  std::vector<double> s, a;
  for (int j = 0; j < g; ++j)
    for (int pos = L - w; pos < L; ++pos) {
      const Eigen::Index row = static_cast<Eigen::Index>(j) * W + (pos - (T - W));
      query_rows.push_back(row);
      const float* q = &head.obs_queries(row, 0);
      const int n = pos + 1;  // causal: keys 0..pos
      s.assign(n, 0.0);
      double noise = 0.0, mx = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < n; ++t) {
        double dot = 0.0, err = 0.0;
        for (int c = 0; c < d; ++c) {
          dot += static_cast<double>(q[c]) * keys(t, c);
          err += static_cast<double>(q[c]) * (static_cast<double>(quantized(t, c)) - keys(t, c));
        }
        s[t] = dot * inv_sqrt_d;
        noise += err * err / d;
        mx = std::max(mx, s[t]);
      }
      a.resize(n);
      double z = 0.0;
      for (int t = 0; t < n; ++t) z += (a[t] = std::exp(s[t] - mx));
      double h = 0.0;
      for (int t = 0; t < n; ++t) {
        a[t] /= z;
        if (a[t] > 0.0) h -= a[t] * std::log(a[t]);
      }
      r.entropy += h;
      r.norm_entropy += n > 1 ? h / std::log(static_cast<double>(n)) : 0.0;
      r.first_token_mass += a[0];
      r.noise += noise / n;
      std::sort(a.begin(), a.end(), std::greater<>());
      double acc = 0.0;
      int count = 0;
      while (count < n && acc < o.mass) acc += a[count++];
      r.n90 += count;
      r.margin += mx - median_of(s);
    }
  r.n_queries = static_cast<int>(query_rows.size());
  const double nq = static_cast<double>(r.n_queries);
  r.entropy /= nq;
  r.norm_entropy /= nq;
  r.first_token_mass /= nq;
  r.n90 /= nq;
  r.margin /= nq;
  r.noise /= nq;
  std::vector<Eigen::Index> key_rows(static_cast<std::size_t>(L));
  std::iota(key_rows.begin(), key_rows.end(), Eigen::Index{0});
  r.key_spread = channel_spread(keys, key_rows);
  r.query_spread = channel_spread(head.obs_queries, query_rows);
  return r;
}

RealismSummary summarize_realism(const std::vector<HeadRealism>& heads) {
  RealismSummary s;
  s.n_heads = static_cast<int>(heads.size());
  if (!heads.empty()) s.length = heads.front().length;
  auto collect = [&](double HeadRealism::*field) {
    std::vector<double> v;
    for (const auto& h : heads) v.push_back(h.*field);
    return stat_of(std::move(v));
  };
  s.entropy = collect(&HeadRealism::entropy);
  s.norm_entropy = collect(&HeadRealism::norm_entropy);
  s.first_token_mass = collect(&HeadRealism::first_token_mass);
  s.n90 = collect(&HeadRealism::n90);
  s.margin = collect(&HeadRealism::margin);
  s.noise = collect(&HeadRealism::noise);
  s.key_spread = collect(&HeadRealism::key_spread);
  s.query_spread = collect(&HeadRealism::query_spread);
  return s;
}

RealismReport trace_realism(const TraceMeta& meta, const HeadSource& head_of, const RealismOptions& options,
                            const Progress& progress) {
  options.validate();
  RealismReport rep;
  rep.options = options;
  if (rep.options.lengths.empty()) rep.options.lengths = {meta.prompt_len};
  const int w = window_of(meta, options);
  for (int L : rep.options.lengths) checked_length(meta, L, w);  // fail before the work
  const std::size_t n_len = rep.options.lengths.size();
  std::vector<std::vector<HeadRealism>> by_length(n_len);
  const int total = meta.n_heads();
  int done = 0;
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) {
      const HeadData head = head_of(l, h);
      for (std::size_t k = 0; k < n_len; ++k)
        by_length[k].push_back(head_realism(head, meta, rep.options.lengths[k], options));
      if (progress) progress(++done, total);
    }
  for (std::size_t k = 0; k < n_len; ++k) {
    rep.summaries.push_back(summarize_realism(by_length[k]));
    rep.summaries.back().window = w;
    rep.heads.insert(rep.heads.end(), by_length[k].begin(), by_length[k].end());
  }
  return rep;
}

RealismReport trace_realism(const TraceReader& reader, const RealismOptions& options, const Progress& progress) {
  return trace_realism(reader.meta(), [&](int l, int h) { return reader.head(l, h); }, options, progress);
}

std::string RealismReport::table(const std::string& label) const {
  const std::string name = label.empty() ? "-" : label;
  const int width = std::max(10, static_cast<int>(name.size()));
  std::ostringstream os;
  char line[1024];
  auto row = [&](const std::string& a, const std::string& b, const std::string& c, const std::vector<std::string>& cells) {
    std::snprintf(line, sizeof line, "%-*s %6s %5s", width, a.c_str(), b.c_str(), c.c_str());
    os << line;
    for (const auto& x : cells) {
      std::snprintf(line, sizeof line, "  %-22s", x.c_str());
      os << line;
    }
    os << "\n";
  };
  row("trace", "T", "heads",
      {"entropy (nats)", "norm. entropy", "first-token mass", "n90 (tokens)", "margin (nats)", "2-bit noise (nat^2)",
       "key spread", "query spread"});
  for (const RealismSummary& s : summaries)
    row(name, std::to_string(s.length), std::to_string(s.n_heads),
        {cell(s.entropy), cell(s.norm_entropy), cell(s.first_token_mass), cell(s.n90), cell(s.margin), cell(s.noise),
         cell(s.key_spread), cell(s.query_spread)});
  return os.str();
}

}  // namespace tierlab
