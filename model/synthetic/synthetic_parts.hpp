#pragma once
// Shared by the synthetic generator's two sources (model/synthetic/synthetic.cpp: parameters, presets,
// metadata, the head plan; model/synthetic/synthetic_head.cpp: one head's keys, values and queries):
// the generator's constants, its random streams and the head plan. Not part of the API.
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <sstream>
#include <string>
#include <vector>

#include "model/synthetic/synthetic.hpp"

namespace tierlab::synthetic_detail {

// ---- fixed constants of the generator (documented in docs/synthetic.md) ------
constexpr int kSinkTokens = 4;               // spans start at position 4 or later
constexpr double kKeyCorrelation = 0.45;     // rho: lag-1 correlation of the key content
constexpr double kQuerySharpnessSpread = 0.3;  // log-normal sd of the per-query content factor nu_q
constexpr double kQueryInnovation = 0.5;     // epsilon: per-query fresh content, relative to the base
constexpr double kGroupSpread = 0.1;         // query heads of a GQA group: shares x U(0.9, 1.1)
constexpr double kOutlierMeanShare = 0.8;    // outlier channels: mean 0.8 S, sd 0.6 S (RMS S)
constexpr double kOutlierTokenScale = 2.5;   // outlier tokens: key content x 2.5
constexpr double kSinkKeyScale = 2.0;        // first key carries 2 sqrt(d) along the sink direction
constexpr double kSpanKeyScale = 1.5;        // span keys carry 1.5 sqrt(d) nu_t along their direction
constexpr double kLocalKeyShare = 0.5;       // every key carries a_l m, a_l = max(0.5 sqrt(d), 4)
constexpr double kLocalKeyMin = 4.0;
constexpr double kDiffuseContentScale = 0.7;  // diffuse heads: 0.7 lambda
constexpr double kBackgroundSinkMass = 0.2;   // other heads: m_s ~ U(0, 0.2 (0.2 + 0.8 x)) background
constexpr double kBackgroundLocalMass = 0.15;  // other heads: m_l ~ U(0, 0.15 (1 - 0.6 x)) background
constexpr double kMaxStructureMass = 0.95;    // m_s + m_l + m_r <= 0.95 (rescaled)
constexpr double kSpanPreferenceMin = 0.75;   // pi_j ~ U(0.75, 1): how strongly queries seek span j
constexpr double kSpanTokenMin = 0.85;        // nu_t ~ U(0.85, 1): key amplitude of each span token
constexpr double kLocalCenterPeriod = 16.0;   // local kernel centred on omega = 1/16 rad per token
constexpr double kLocalLogWidth = 2.0794415416798357;  // ln 8: its width in log-frequency
constexpr int kLocalWindow = 16;              // the local share: the query's 16 most recent positions
constexpr int kShareReference = 256;          // shares are solved over the 256 most recent positions
constexpr double kMaxKappa = 64.0;            // the share solves search kappa in [0, 64] nats
constexpr int kMaxLayers = 4096, kMaxHeads = 4096, kMaxGroup = 256, kMaxHeadDim = 1024;
constexpr int kMaxPrompt = 1 << 22, kMaxDecode = 1 << 20;
constexpr const char* kGeneratorVersion = "tierlab-synthetic/2";


// ---- random numbers -----------------------------------------------------------
inline std::uint64_t splitmix64_next(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// xoshiro256** (Blackman & Vigna), state filled from splitmix64; normals by Box-Muller.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& w : s_) w = splitmix64_next(sm);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int below(int n) { return static_cast<int>(uniform() * n); }  // [0, n)
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::array<std::uint64_t, 4> s_{};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Independent streams of one head; adding a stream never changes the others.
enum class Stream : std::uint64_t {
  Plan = 1,
  Structure = 2,
  Keys = 3,
  Values = 4,
  Queries = 5,        // per query head: base content, multipliers, observation queries
  DecodeKeys = 6,
  DecodeValues = 7,
  DecodeQueries = 8,  // per query head: decode-query innovations
  Drift = 9,          // per query head: the random walk
};

// Seed of one stream of one head; `index` separates the query heads of a GQA group, so
// that no stream's length depends on W, S or g.
std::uint64_t head_seed(const SynthParams& p, int layer, int kv_head, Stream stream, int index = 0);

// ---- head plan: the cheap, per-head random choices synth_meta needs too ---------
enum class HeadKind { Sink = 0, Local = 1, Retrieval = 2, Diffuse = 3 };
constexpr std::array<const char*, 4> kKindNames = {"sink", "local", "retrieval", "diffuse"};

struct HeadPlan {
  HeadKind kind = HeadKind::Diffuse;
  double depth = 0.5;        // x = (l + 1/2) / L
  double logit_scale = 1.0;  // lambda (nats), diffuse heads already halved
  double sink_mass = 0.0, local_mass = 0.0, span_mass = 0.0;  // target shares
  std::vector<int> outliers;          // sorted channel indices
  std::vector<double> outlier_means;  // signed mean of each outlier channel (same order)
  std::vector<Span> spans;            // retrieval heads only
};

inline int pairs_of(int d) { return d / 2; }
// Outlier channels are drawn from the channels of the slowest quarter of RoPE pairs.
inline int outlier_first_channel(int d) { return d - 2 * ((pairs_of(d) + 3) / 4); }
// Sink and span directions live in the slowest half of the pairs (rotation over a span is small).
inline int structure_first_pair(int d) { return pairs_of(d) - (pairs_of(d) + 1) / 2; }

inline double layer_depth(int layer, int n_layers) { return (layer + 0.5) / n_layers; }


// The cheap per-head random choices (kind, shares, outliers, spans) from the Plan stream.
HeadPlan plan_head(const SynthParams& p, int layer, int kv_head);

template <class T>
std::string str(T v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace tierlab::synthetic_detail
