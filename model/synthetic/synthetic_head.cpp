// One synthetic head: the structure directions, keys, values and queries of HeadSynth
// (docs/synthetic.md; the logit model opens model/synthetic/synthetic.cpp).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>

#include "model/base/error.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/synthetic/synthetic_parts.hpp"

// Compiled with -ffp-contract=off (model/CMakeLists.txt), as model/synthetic/synthetic.cpp.
namespace tierlab {
using namespace synthetic_detail;
namespace {

// ---- RoPE -------------------------------------------------------------------
std::vector<double> rope_frequencies(int d, double theta) {
  std::vector<double> omega(pairs_of(d));
  for (int i = 0; i < pairs_of(d); ++i) omega[i] = std::pow(theta, -2.0 * i / d);
  return omega;
}

// Interleaved RoPE: pair (2i, 2i+1) rotated by angle pos * omega_i.
void rope_rotate(const double* in, double* out, double pos, const std::vector<double>& omega) {
  for (std::size_t i = 0; i < omega.size(); ++i) {
    const double a = pos * omega[i];
    const double c = std::cos(a), s = std::sin(a);
    const double x = in[2 * i], y = in[2 * i + 1];
    out[2 * i] = x * c - y * s;
    out[2 * i + 1] = x * s + y * c;
  }
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double norm2(const std::vector<double>& v) { return dot(v, v); }

void normalize(std::vector<double>& v) {
  const double n = std::sqrt(norm2(v));
  if (n > 0.0)
    for (double& x : v) x /= n;
}

// A unit Gaussian direction supported on the given channels, orthogonal to `against`
// (Gram-Schmidt, twice) while the subspace has room.
std::vector<double> random_direction(Rng& rng, int d, const std::vector<int>& channels,
                                     const std::vector<std::vector<double>>& against = {}) {
  std::vector<double> v(d, 0.0);
  for (int c : channels) v[c] = rng.normal();
  if (against.size() < channels.size())
    for (int rep = 0; rep < 2; ++rep)
      for (const auto& u : against) {
        const double proj = dot(v, u);
        for (int c = 0; c < d; ++c) v[c] -= proj * u[c];
      }
  normalize(v);
  return v;
}

// The shares one query head aims at (the plan's, times the query head's own factor).
struct Shares {
  double sink = 0.0, local = 0.0, span = 0.0, content = 1.0;
};

// One head's generator in named steps. The constructor fixes the key-content scales and draws
// the structure directions (spans, sink, local) from the Structure stream; generate() then
// draws keys, values and queries, each from its own stream (head_seed), in that order, and
// solves each query's structure on the generated keys (kept in double, channel-major).
class HeadSynth {
 public:
  HeadSynth(const SynthParams& params, int layer_index, int kv_head_index);
  HeadData generate();

 private:
  bool pair_clean(int i) const { return !is_outlier[2 * i] && !is_outlier[2 * i + 1]; }
  void draw_span_structure(Rng& srng);
  void draw_sink_structure(Rng& srng);
  void draw_local_structure(Rng& srng);
  void make_key(Rng& rng, int position, std::vector<double>& state, bool first, double* pre) const;
  void synth_prompt_keys(HeadData& out);
  void synth_decode_keys(HeadData& out);
  void store_key(int position, const std::vector<double>& post);
  void logits(const std::vector<double>& q, const std::vector<int>& positions, std::vector<double>& out) const;
  double solve_share(const std::vector<double>& a, const std::vector<double>& v, const std::vector<char>& in_set,
                     double share) const;
  double solve_sink_beta(const std::vector<double>& a, const std::vector<double>& b, double share) const;
  void fill_values(MatrixRM& m, int rows, Stream stream) const;
  void synth_queries(HeadData& out) const;
  void add_structure(int pos, const Shares& sh, const std::vector<double>& prefs, std::vector<double>& q) const;

  const SynthParams& p;
  const int layer, kv_head;
  const HeadPlan plan;
  const int d, P, T, W, S, g;
  const double sqrt_d;
  const std::vector<double> omega;

  // Key content: mean_c + sigma_c z (z unit AR(1) over positions); outlier channels have
  // mean +-0.8 S and sigma 0.6 S, the others mean 0 and sigma 1.
  std::vector<double> sigma, mean;
  std::vector<bool> is_outlier;
  std::vector<double> pair_var;      // key-content variance averaged over each RoPE pair
  std::vector<double> query_weight;  // query content RMS per channel (query_outlier_strength on outliers)
  std::vector<int> struct_channels;  // sink/span subspace: clean pairs of the slowest half

  std::vector<double> sink_dir;  // u (unit); the first key carries sink_amp u
  double sink_amp = 0.0;
  std::vector<double> local_dir;  // m (unit); every key carries local_amp m
  double local_amp = 0.0;
  std::vector<std::vector<double>> span_dirs;     // v_j (unit), retrieval heads
  std::vector<std::vector<double>> span_targets;  // tau_j (unit, post-RoPE)
  std::vector<double> span_pref;                  // pi_j
  std::vector<double> span_token_amp;             // span_amp nu_t on span tokens, 0 elsewhere
  std::vector<int> span_of;
  double span_amp = 0.0;

  std::vector<double> keys_cm;       // post-RoPE keys of positions 0..T+S-1, channel-major [c * (T + S) + t]
  std::vector<double> last_content;  // the AR state after the last prompt key
};

HeadSynth::HeadSynth(const SynthParams& params, int layer_index, int kv_head_index)
    : p(params),
      layer(layer_index),
      kv_head(kv_head_index),
      plan(plan_head(p, layer, kv_head)),
      d(p.head_dim),
      P(pairs_of(d)),
      T(p.prompt_len),
      W(p.obs_window),
      S(p.decode_steps),
      g(p.group_size),
      sqrt_d(std::sqrt(static_cast<double>(d))),
      omega(rope_frequencies(d, p.rope_theta)),
      sigma(d, 1.0),
      mean(d, 0.0),
      is_outlier(d, false),
      pair_var(P, 1.0),
      query_weight(d, 1.0),
      sink_dir(d, 0.0),
      local_dir(d, 0.0),
      span_token_amp(T, 0.0),
      span_of(T, -1) {
  const double sd_share = std::sqrt(1.0 - kOutlierMeanShare * kOutlierMeanShare);
  for (std::size_t k = 0; k < plan.outliers.size(); ++k) {
    const int c = plan.outliers[k];
    sigma[c] = sd_share * p.outlier_strength;
    mean[c] = plan.outlier_means[k];
    is_outlier[c] = true;
    query_weight[c] = p.query_outlier_strength;
  }
  for (int i = 0; i < P; ++i) pair_var[i] = 0.5 * (sigma[2 * i] * sigma[2 * i] + sigma[2 * i + 1] * sigma[2 * i + 1]);
  for (int i = structure_first_pair(d); i < P; ++i)
    if (pair_clean(i)) {
      struct_channels.push_back(2 * i);
      struct_channels.push_back(2 * i + 1);
    }

  // Structure directions, in this order from one stream: spans, sink, local.
  Rng srng(head_seed(p, layer, kv_head, Stream::Structure));
  if (!plan.spans.empty() && plan.span_mass > 0.0) draw_span_structure(srng);
  if (plan.sink_mass > 0.0) draw_sink_structure(srng);
  if (plan.local_mass > 0.0) draw_local_structure(srng);
}

void HeadSynth::draw_span_structure(Rng& srng) {
  // Span j's tokens get span_amp nu_t v_j (v_j orthonormal while the subspace allows); a query
  // that carries b_j tau_j (tau_j the unit post-RoPE mean of R(t) v_j over the span) then has
  // logit b_j span_amp nu_t (tau_j . R(t) v_j) / sqrt(d) on them.
  span_amp = kSpanKeyScale * sqrt_d;
  for (std::size_t j = 0; j < plan.spans.size(); ++j) {
    std::vector<double> v = random_direction(srng, d, struct_channels, span_dirs);
    span_pref.push_back(srng.uniform(kSpanPreferenceMin, 1.0));
    std::vector<double> target(d, 0.0), rot(d);
    for (int t = plan.spans[j].begin; t < plan.spans[j].end; ++t) {
      span_of[t] = static_cast<int>(j);
      span_token_amp[t] = span_amp * srng.uniform(kSpanTokenMin, 1.0);
      rope_rotate(v.data(), rot.data(), t, omega);
      for (int c = 0; c < d; ++c) target[c] += rot[c];
    }
    normalize(target);
    span_dirs.push_back(v);
    span_targets.push_back(target);
  }
}

void HeadSynth::draw_sink_structure(Rng& srng) {
  // The first key carries sink_amp u (u unit in the slow pairs, orthogonal to the span
  // directions); queries carry beta u, beta solved per query for the first token's logit.
  sink_amp = kSinkKeyScale * sqrt_d;
  sink_dir = random_direction(srng, d, struct_channels, span_dirs);
}

void HeadSynth::draw_local_structure(Rng& srng) {
  // Every key carries local_amp m (a shared pre-RoPE key mean); a query carries beta m before
  // RoPE, so the logit is beta local_amp m^T R(t - p) m / sqrt(d) = kappa_l g(p - t) with
  // g(D) = sum_i h_i cos(omega_i D), sum h_i = 1: RoPE turns the shared direction into a
  // relative-position (recency) kernel.
  local_amp = std::max(kLocalKeyShare * sqrt_d, kLocalKeyMin);
  for (int i = 0; i < P; ++i) {
    if (!pair_clean(i)) continue;
    const double z = std::log(omega[i] * kLocalCenterPeriod) / kLocalLogWidth;
    const double h = std::exp(-0.5 * z * z);
    const double phase = srng.uniform(0.0, 2.0 * std::numbers::pi);
    local_dir[2 * i] = std::sqrt(h) * std::cos(phase);
    local_dir[2 * i + 1] = std::sqrt(h) * std::sin(phase);
  }
  normalize(local_dir);
}

// Pre-RoPE key at `position`: mean + sigma (scale) z_t + structure. z_t is a unit AR(1) over
// positions (state), scale = 3 on outlier tokens (never the first token).
void HeadSynth::make_key(Rng& rng, int position, std::vector<double>& state, bool first, double* pre) const {
  const double innovation = std::sqrt(1.0 - kKeyCorrelation * kKeyCorrelation);
  for (int c = 0; c < d; ++c) {
    const double e = rng.normal();
    state[c] = first ? e : kKeyCorrelation * state[c] + innovation * e;
  }
  const double u = rng.uniform();
  const double scale = (position > 0 && u < p.outlier_token_rate) ? kOutlierTokenScale : 1.0;
  for (int c = 0; c < d; ++c) pre[c] = mean[c] + sigma[c] * scale * state[c] + local_amp * local_dir[c];
  if (position == 0)
    for (int c = 0; c < d; ++c) pre[c] += sink_amp * sink_dir[c];
  if (position < T && span_of[position] >= 0) {
    const auto& v = span_dirs[span_of[position]];
    for (int c = 0; c < d; ++c) pre[c] += span_token_amp[position] * v[c];
  }
}

void HeadSynth::synth_prompt_keys(HeadData& out) {
  out.keys.resize(T, d);
  out.keys_pre_rope.resize(T, d);
  keys_cm.assign(static_cast<std::size_t>(d) * (T + S), 0.0);
  Rng rng(head_seed(p, layer, kv_head, Stream::Keys));
  std::vector<double> pre(d), post(d), state(d, 0.0);
  for (int t = 0; t < T; ++t) {
    make_key(rng, t, state, t == 0, pre.data());
    rope_rotate(pre.data(), post.data(), t, omega);
    store_key(t, post);
    for (int c = 0; c < d; ++c) {
      out.keys_pre_rope(t, c) = static_cast<float>(pre[c]);
      out.keys(t, c) = static_cast<float>(post[c]);
    }
  }
  last_content = state;
}

void HeadSynth::store_key(int position, const std::vector<double>& post) {
  for (int c = 0; c < d; ++c) keys_cm[static_cast<std::size_t>(c) * (T + S) + position] = post[c];
}

void HeadSynth::synth_decode_keys(HeadData& out) {
  // The key content's AR(1) continues from the last prompt key, with its own stream.
  out.decode_keys.resize(S, d);
  Rng rng(head_seed(p, layer, kv_head, Stream::DecodeKeys));
  std::vector<double> pre(d), post(d), state = last_content;
  for (int s = 1; s <= S; ++s) {
    const int pos = T + s - 1;
    make_key(rng, pos, state, false, pre.data());
    rope_rotate(pre.data(), post.data(), pos, omega);
    store_key(pos, post);
    for (int c = 0; c < d; ++c) out.decode_keys(s - 1, c) = static_cast<float>(post[c]);
  }
}

void HeadSynth::fill_values(MatrixRM& m, int rows, Stream stream) const {
  Rng rng(head_seed(p, layer, kv_head, stream));
  m.resize(rows, d);
  for (int t = 0; t < rows; ++t)
    for (int c = 0; c < d; ++c) m(t, c) = static_cast<float>(rng.normal());
}

// out[r] = q . k_t / sqrt(d) for t = positions[r], accumulated channel by channel in double.
// The positions come mostly in runs of consecutive ones (the recent window, each span): each
// run is read as one contiguous stretch of the channel's row (vector loads instead of a gather:
// this was about a third of the generator's time). Every out[r] still gets the same terms in
// the same order, so the bits are those of the element-by-element loop.
void HeadSynth::logits(const std::vector<double>& q, const std::vector<int>& positions, std::vector<double>& out) const {
  const std::size_t n = positions.size();
  out.assign(n, 0.0);
  struct Run {
    std::size_t r0, len;
    int t0;
  };
  std::vector<Run> runs;
  for (std::size_t r = 0; r < n;) {
    std::size_t e = r + 1;
    while (e < n && positions[e] == positions[e - 1] + 1) ++e;
    runs.push_back({r, e - r, positions[r]});
    r = e;
  }
  for (int c = 0; c < d; ++c) {
    const double qc = q[c];
    const double* row = keys_cm.data() + static_cast<std::size_t>(c) * (T + S);
    for (const Run& run : runs) {
      double* o = out.data() + run.r0;
      const double* k = row + run.t0;
      for (std::size_t i = 0; i < run.len; ++i) o[i] += qc * k[i];
    }
  }
  for (double& x : out) x /= sqrt_d;
}

// kappa in [0, 64] for which the entries r >= 1 with in_set[r] hold `share` of the
// softmax of s_r = a_r + kappa v_r over the entries r >= 1:
//   f(kappa) = LSE_in(s) - LSE_out(s) - ln(share / (1 - share)) = 0,
//   f'(kappa) = mean_in(v) - mean_out(v) (softmax-weighted); Newton, kept in a bisection bracket
// found by doubling kappa from 0.5. 0 when the set already holds the share at kappa = 0; when no
// kappa up to 64 reaches it, the doubling step that came closest.
double HeadSynth::solve_share(const std::vector<double>& a, const std::vector<double>& v, const std::vector<char>& in_set,
                              double share) const {
  const std::size_t n = a.size();
  const double target = std::log(share / (1.0 - share));
  auto eval = [&](double kappa, double& slope) {
    double mx_in = -std::numeric_limits<double>::infinity(), mx_out = mx_in;
    for (std::size_t r = 1; r < n; ++r) {
      const double s = a[r] + kappa * v[r];
      if (in_set[r]) mx_in = std::max(mx_in, s);
      else mx_out = std::max(mx_out, s);
    }
    double z_in = 0, z_out = 0, v_in = 0, v_out = 0;
    for (std::size_t r = 1; r < n; ++r) {
      const double s = a[r] + kappa * v[r];
      if (in_set[r]) {
        const double e = std::exp(s - mx_in);
        z_in += e, v_in += e * v[r];
      } else {
        const double e = std::exp(s - mx_out);
        z_out += e, v_out += e * v[r];
      }
    }
    if (z_in <= 0.0) return -std::numeric_limits<double>::infinity();
    if (z_out <= 0.0) return std::numeric_limits<double>::infinity();
    slope = v_in / z_in - v_out / z_out;
    return (mx_in + std::log(z_in)) - (mx_out + std::log(z_out)) - target;
  };
  double slope = 0.0;
  double f = eval(0.0, slope);
  if (!(f < 0.0)) return 0.0;
  // Bracket the root by doubling kappa; where the share cannot be reached (a set whose v never
  // dominates, e.g. RoPE side lobes as high as the window's), keep the kappa that came closest.
  double lo = 0.0, hi = 0.0, best = 0.0, f_best = f, f_lo = f, slope_lo = slope;
  for (double k = 0.5; k <= kMaxKappa; k *= 2.0) {
    double s_k = 0.0;
    const double f_k = eval(k, s_k);
    if (f_k >= 0.0) {
      hi = k;
      break;
    }
    if (f_k > f_best) best = k, f_best = f_k;
    lo = k, f_lo = f_k, slope_lo = s_k;
  }
  if (hi == 0.0) return best;
  double kappa = lo;
  f = f_lo;
  slope = slope_lo;
  for (int it = 0; it < 60 && std::abs(f) > 1e-9; ++it) {
    double next = slope > 0.0 ? kappa - f / slope : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    kappa = next;
    f = eval(kappa, slope);
    (f < 0.0 ? lo : hi) = kappa;
  }
  return kappa;
}

// The sink coefficient beta for which the first token holds `share` of the softmax of
// s_t = a_t + beta b_t over positions 0..n-1: s_0 - ln sum_{t >= 1} e^{s_t} = ln(share / (1 - share)).
// Newton from the estimate that ignores b_t for t > 0 (b_0 ~ 2 sqrt(d) / sqrt(d) = 2 dominates).
double HeadSynth::solve_sink_beta(const std::vector<double>& a, const std::vector<double>& b, double share) const {
  const int n = static_cast<int>(a.size());
  const double target = std::log(share / (1.0 - share));
  auto rest = [&](double beta, double& weighted_b) {  // ln sum_{t >= 1} e^{s_t}, and the softmax mean of b
    double mx = -std::numeric_limits<double>::infinity();
    for (int t = 1; t < n; ++t) mx = std::max(mx, a[t] + beta * b[t]);
    double z = 0.0, zb = 0.0;
    for (int t = 1; t < n; ++t) {
      const double e = std::exp(a[t] + beta * b[t] - mx);
      z += e;
      zb += e * b[t];
    }
    weighted_b = zb / z;
    return mx + std::log(z);
  };
  if (b[0] <= 0.0 || n < 2) return 0.0;
  double wb = 0.0;
  double beta = (target + rest(0.0, wb) - a[0]) / b[0];
  for (int it = 0; it < 12; ++it) {
    const double f = a[0] + beta * b[0] - rest(beta, wb) - target;
    const double slope = b[0] - wb;
    if (!(slope > 1e-9)) break;
    beta -= f / slope;
    if (std::abs(f) < 1e-12) break;
  }
  return beta;
}

// Adds the local, span and sink components to the post-RoPE query q (content and drift) at
// position pos, for the shares sh. Each is solved on the exact logits over the query's
// reference positions: the first token, the spans and the 256 most recent positions (all of
// 0..pos while pos < 256). In that set the first token holds m_s, the spans m_r and the 16
// most recent positions m_l of the rest; the positions older than the reference dilute them,
// so over a longer context attention spreads.
// Order: local (m_l / (1 - m_s - m_r) of the set without the first token, before the spans),
// spans (m_r / (1 - m_s)), then the first token (m_s).
void HeadSynth::add_structure(int pos, const Shares& sh, const std::vector<double>& prefs,
                              std::vector<double>& q) const {
  const int recent = std::max(1, pos - kShareReference + 1);
  std::vector<int> ref = {0};
  if (!span_targets.empty())
    for (const Span& sp : plan.spans)
      for (int t = sp.begin; t < std::min(sp.end, recent); ++t) ref.push_back(t);
  for (int t = recent; t <= pos; ++t) ref.push_back(t);
  const std::size_t n = ref.size();
  std::vector<double> a, v;
  logits(q, ref, a);
  if (sh.local > 0.0) {
    std::vector<double> local_post(d);
    rope_rotate(local_dir.data(), local_post.data(), pos, omega);
    logits(local_post, ref, v);
    for (double& x : v) x *= sqrt_d / local_amp;  // kappa v_t = kappa g(pos - t) + cross terms
    std::vector<char> in_window(n, 0);
    for (std::size_t r = 1; r < n; ++r) in_window[r] = ref[r] > pos - kLocalWindow;
    const double kappa = solve_share(a, v, in_window, sh.local / (1.0 - sh.sink - sh.span));
    const double beta = kappa * sqrt_d / local_amp;
    for (int c = 0; c < d; ++c) q[c] += beta * local_post[c];
    for (std::size_t r = 0; r < n; ++r) a[r] += kappa * v[r];
  }
  if (sh.span > 0.0) {
    std::vector<double> dir(d, 0.0);
    for (std::size_t j = 0; j < span_targets.size(); ++j)
      for (int c = 0; c < d; ++c) dir[c] += sqrt_d * prefs[j] / span_amp * span_targets[j][c];
    logits(dir, ref, v);  // kappa v_t = kappa pi_j nu_t (tau_j . R(t) v_j) on span j's tokens
    std::vector<char> in_span(n, 0);
    for (std::size_t r = 1; r < n; ++r) in_span[r] = ref[r] < T && span_of[ref[r]] >= 0;
    const double kappa = solve_share(a, v, in_span, sh.span / (1.0 - sh.sink));
    for (int c = 0; c < d; ++c) q[c] += kappa * dir[c];
    for (std::size_t r = 0; r < n; ++r) a[r] += kappa * v[r];
  }
  if (sh.sink > 0.0 && sink_amp > 0.0) {
    logits(sink_dir, ref, v);
    const double beta = solve_sink_beta(a, v, sh.sink);
    for (int c = 0; c < d; ++c) q[c] += beta * sink_dir[c];
  }
}

void HeadSynth::synth_queries(HeadData& out) const {
  // Content: nu_q s_q (b_k + eps xi) per channel (times query_outlier_strength on the outlier
  // channels), rotated to the query's position; s_q makes the content logit's standard
  // deviation over the keys lambda: lambda^2 = s_q^2 (1 + eps^2) sum_i |w_i|^2 vbar_i / d.
  double var_unit = 0.0;
  for (int i = 0; i < P; ++i)
    var_unit += (query_weight[2 * i] * query_weight[2 * i] + query_weight[2 * i + 1] * query_weight[2 * i + 1]) *
                pair_var[i];
  var_unit *= (1.0 + kQueryInnovation * kQueryInnovation) / d;
  const double s_q = var_unit > 0.0 ? plan.logit_scale / std::sqrt(var_unit) : 0.0;
  const double nu_shift = 0.5 * kQuerySharpnessSpread * kQuerySharpnessSpread;

  out.obs_queries.resize(static_cast<Eigen::Index>(g) * W, d);
  out.decode_queries.resize(static_cast<Eigen::Index>(g) * S, d);
  std::vector<double> base(d), pre(d), post(d), drift(d);
  for (int k = 0; k < g; ++k) {
    Rng qrng(head_seed(p, layer, kv_head, Stream::Queries, k));
    Rng decode_rng(head_seed(p, layer, kv_head, Stream::DecodeQueries, k));
    Rng drng(head_seed(p, layer, kv_head, Stream::Drift, k));
    // Query head k: base content b_k, share multiplier mu_k, span preferences.
    for (int c = 0; c < d; ++c) base[c] = s_q * query_weight[c] * qrng.normal();
    const double mu = qrng.uniform(1.0 - kGroupSpread, 1.0 + kGroupSpread);
    std::vector<double> prefs(span_pref.size());
    for (std::size_t j = 0; j < prefs.size(); ++j)
      prefs[j] = span_pref[j] * qrng.uniform(1.0 - kGroupSpread, 1.0 + kGroupSpread);
    Shares sh;
    sh.sink = mu * plan.sink_mass;
    sh.local = mu * plan.local_mass;
    sh.span = span_targets.empty() ? 0.0 : mu * plan.span_mass;
    const double structure = sh.sink + sh.local + sh.span;
    if (structure > kMaxStructureMass) {
      const double f = kMaxStructureMass / structure;
      sh.sink *= f, sh.local *= f, sh.span *= f;
    }
    sh.content = 1.0 - sh.sink - sh.local - sh.span;
    const double q0_norm = std::sqrt(norm2(base));

    // One query at position pos: content nu (b_k + eps xi), RoPE, drift, then the structure.
    auto make_query = [&](Rng& rng, int pos, const std::vector<double>* extra, float* row) {
      const double nu = std::exp(kQuerySharpnessSpread * rng.normal() - nu_shift);
      for (int c = 0; c < d; ++c) pre[c] = nu * (base[c] + kQueryInnovation * s_q * query_weight[c] * rng.normal());
      rope_rotate(pre.data(), post.data(), pos, omega);
      if (extra)
        for (int c = 0; c < d; ++c) post[c] += (*extra)[c];
      for (const auto& tau : span_targets) {  // no content along the span directions
        const double along = dot(post, tau);
        for (int c = 0; c < d; ++c) post[c] -= along * tau[c];
      }
      std::vector<double> q = post;
      add_structure(pos, sh, prefs, q);
      for (int c = 0; c < d; ++c) row[c] = static_cast<float>(q[c]);
    };
    for (int i = 0; i < W; ++i)
      make_query(qrng, T - W + i, nullptr, &out.obs_queries(static_cast<Eigen::Index>(k) * W + i, 0));
    // Decode: z_s = (1 - r) z_{s-1} + query_drift * |s_q b_k| / sqrt(d) * N(0, I_d), post-RoPE;
    // r = query_drift_reversion (0: the unbounded random walk, the same bits as before r existed).
    std::fill(drift.begin(), drift.end(), 0.0);
    const double step = p.query_drift * q0_norm / sqrt_d;
    const double keep = 1.0 - p.query_drift_reversion;
    for (int s = 1; s <= S; ++s) {
      if (keep != 1.0)
        for (int c = 0; c < d; ++c) drift[c] *= keep;
      for (int c = 0; c < d; ++c) drift[c] += step * drng.normal();
      make_query(decode_rng, T + s - 1, &drift, &out.decode_queries(DecodeQueries::row_of(k, s, S), 0));
    }
  }
}

HeadData HeadSynth::generate() {
  HeadData out;
  out.layer = layer;
  out.kv_head = kv_head;
  out.spans = plan.spans;
  synth_prompt_keys(out);
  synth_decode_keys(out);
  fill_values(out.values, T, Stream::Values);
  fill_values(out.decode_values, S, Stream::DecodeValues);
  synth_queries(out);
  return out;
}

}  // namespace

HeadData synth_head(const SynthParams& p, int layer, int kv_head) {
  p.validate();
  if (layer < 0 || layer >= p.n_layers)
    throw InputError("synthetic head layer = " + str(layer) + " is out of range [0, " + str(p.n_layers) + ").");
  if (kv_head < 0 || kv_head >= p.n_kv_heads)
    throw InputError("synthetic head kv_head = " + str(kv_head) + " is out of range [0, " + str(p.n_kv_heads) + ").");
  HeadData head = HeadSynth(p, layer, kv_head).generate();
  head.group_size = p.group_size;
  return head;
}

}  // namespace tierlab
