// llama2.c checkpoint loader and forward pass (see llama2c.hpp for the maths).
#include "model/llama2c/llama2c.hpp"

#include <unistd.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "model/base/error.hpp"
#include "model/base/sha256.hpp"
#include "model/io/safetensors.hpp"

namespace tierlab {

namespace {

using ConstMatMap = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
using ConstVecMap = Eigen::Map<const Eigen::VectorXf>;
using VecMap = Eigen::Map<Eigen::VectorXf>;

constexpr float kRmsEps = 1e-5f;
// The theta recorded when the tables cannot tell (one pair per head, or seq_len 1).
constexpr double kDefaultRopeTheta = 10000.0;

// y = W x with W (rows x cols) row-major.
inline void matvec(float* y, const float* w, const float* x, int rows, int cols) {
  VecMap(y, rows).noalias() = ConstMatMap(w, rows, cols) * ConstVecMap(x, cols);
}

inline void rmsnorm(float* out, const float* x, const float* weight, int n) {
  float ss = 0.0f;
  for (int j = 0; j < n; ++j) ss += x[j] * x[j];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + kRmsEps);
  for (int j = 0; j < n; ++j) out[j] = weight[j] * (inv * x[j]);
}

// Rotates the pairs (2i, 2i+1) of each of n_heads heads of size hs.
inline void rope_interleaved(float* v, int n_heads, int hs, const float* cos_row, const float* sin_row) {
  for (int h = 0; h < n_heads; ++h) {
    float* p = v + h * hs;
    for (int i = 0; i < hs / 2; ++i) {
      const float a = p[2 * i], b = p[2 * i + 1];
      p[2 * i] = a * cos_row[i] - b * sin_row[i];
      p[2 * i + 1] = a * sin_row[i] + b * cos_row[i];
    }
  }
}

std::string quote(const std::string& path) { return "'" + path + "'"; }

}  // namespace

// ---- configuration ---------------------------------------------------------------

std::uint64_t Llama2cConfig::expected_floats() const {
  const std::uint64_t D = dim, H = hidden_dim, L = n_layers, V = vocab_size, S = seq_len;
  const std::uint64_t hs = static_cast<std::uint64_t>(head_size()), kv = static_cast<std::uint64_t>(kv_dim());
  std::uint64_t n = V * D;        // token embedding
  n += L * D;                     // rms_att
  n += L * D * D;                 // wq (n_heads*hs = dim rows)
  n += 2 * L * kv * D;            // wk, wv
  n += L * D * D;                 // wo
  n += L * D;                     // rms_ffn
  n += 3 * L * H * D;             // w1, w2, w3
  n += D;                         // rms_final
  n += 2 * (S * hs / 2);          // RoPE tables (cos, sin): theta is read from them
  if (!shared_classifier) n += V * D;
  return n;
}

RopeParams llama2c_rope(const Llama2cConfig& config) {
  RopeParams r;
  r.theta = config.rope_theta;
  r.rotary_dim = 0;
  r.style = "interleaved";
  return r;
}

std::string Llama2cConfig::describe() const {
  return "dim=" + std::to_string(dim) + " hidden_dim=" + std::to_string(hidden_dim) +
         " n_layers=" + std::to_string(n_layers) + " n_heads=" + std::to_string(n_heads) +
         " n_kv_heads=" + std::to_string(n_kv_heads) + " vocab_size=" + std::to_string(vocab_size) +
         " seq_len=" + std::to_string(seq_len) + (shared_classifier ? " (shared classifier)" : " (unshared classifier)");
}

namespace {

// RoPE angle of position pos, pair i, in double: pos / theta^(2i/hs).
double rope_angle(double theta, std::size_t pos, std::size_t i, std::size_t hs) {
  return static_cast<double>(pos) / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(hs));
}

// The largest difference tolerated between a stored table entry and cos/sin of the exact
// angle: tables computed in float32 (llama2.c's export) carry an angle error of a few ulp
// of pos, stories260K's at most 2.3e-6 at position 511.
double rope_tolerance(std::size_t pos) { return 1e-5 + 4e-7 * static_cast<double>(pos); }

// The first table entry that RoPE with `theta` does not reproduce, or an empty string.
std::string rope_mismatch(const float* cos_table, const float* sin_table, std::size_t S, std::size_t hs, double theta) {
  for (std::size_t pos = 0; pos < S; ++pos) {
    for (std::size_t i = 0; i < hs / 2; ++i) {
      const double angle = rope_angle(theta, pos, i, hs);
      const float stored[2] = {cos_table[pos * hs / 2 + i], sin_table[pos * hs / 2 + i]};
      const double exact[2] = {std::cos(angle), std::sin(angle)};
      for (int t = 0; t < 2; ++t) {
        if (!(std::abs(static_cast<double>(stored[t]) - exact[t]) <= rope_tolerance(pos))) {
          char buf[320];
          std::snprintf(buf, sizeof buf,
                        "field rope_tables (%s) at position %zu, pair %zu is %.9g, but RoPE with theta = %.9g gives "
                        "%.9g (tolerance %.2g)",
                        t == 0 ? "cos" : "sin", pos, i, static_cast<double>(stored[t]), theta, exact[t],
                        rope_tolerance(pos));
          return buf;
        }
      }
    }
  }
  return "";
}

// theta of the checkpoint's RoPE tables (Llama2cConfig::rope_theta); FormatError when the
// tables are not RoPE's for any theta > 1.
double read_rope_theta(const float* cos_table, const float* sin_table, std::size_t S, std::size_t hs,
                       const std::string& file) {
  const std::size_t half = hs / 2;
  double theta = kDefaultRopeTheta;
  std::string where = "the default: these tables are the same for every theta";
  if (half >= 2 && S >= 2) {
    // Position 1, last pair: angle = theta^(-2i/hs) with i = half - 1, the smallest angle,
    // whose sine float32 stores to a relative 6e-8, so theta comes out to about 1e-7.
    const std::size_t i = half - 1;
    const double c = cos_table[half + i], s = sin_table[half + i];
    const double angle = std::atan2(s, c);
    if (!(angle > 0.0 && angle < 1.0)) {
      char buf[400];
      std::snprintf(buf, sizeof buf,
                    "%s: field rope_tables at position 1, pair %zu holds cos = %.9g, sin = %.9g: an angle of %.9g, but "
                    "RoPE with any theta > 1 gives an angle in (0, 1) there; the tables are not llama2.c's RoPE "
                    "(pos / theta^(2i/head_size)).",
                    file.c_str(), i, c, s, angle);
      throw FormatError(buf);
    }
    const double estimate = std::exp(-std::log(angle) * static_cast<double>(hs) / static_cast<double>(2 * i));
    // Round to 6 significant digits (10000, 500000, 1e6 exactly) when that still fits.
    const double unit = std::pow(10.0, std::floor(std::log10(estimate)) - 5.0);
    const double rounded = std::round(estimate / unit) * unit;
    // The estimate itself when only it fits; a mismatch is reported against the rounded value.
    theta = !rope_mismatch(cos_table, sin_table, S, hs, rounded).empty() &&
                    rope_mismatch(cos_table, sin_table, S, hs, estimate).empty()
                ? estimate
                : rounded;
    where = "inferred from position 1, pair " + std::to_string(i);
  }
  const std::string mismatch = rope_mismatch(cos_table, sin_table, S, hs, theta);
  if (!mismatch.empty()) {
    throw FormatError(file + ": " + mismatch + " (theta " + where +
                      "); the tables are not llama2.c's RoPE (pos / theta^(2i/head_size)) for one theta.");
  }
  return theta;
}

}  // namespace

// ---- loading ---------------------------------------------------------------------

Llama2cModel::Llama2cModel(const std::string& path) : path_(path) {
  const std::string file = "llama2.c checkpoint " + quote(path);
  // A regular file only (a FIFO or a device would be read forever), and no more than the
  // largest checkpoint the header bounds allow: the size is checked against the header
  // before the weights are read.
  const OpenRegularFile opened(path, "llama2.c checkpoint");
  const int fd = opened.fd();
  const std::uint64_t file_size = opened.size();
  auto read_exact = [&](char* dst, std::size_t n, std::size_t offset) {
    std::size_t at = 0;
    while (at < n) {
      const ssize_t r = ::pread(fd, dst + at, n - at, static_cast<off_t>(offset + at));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw InputError(file + " could not be read: " + std::strerror(errno) + ".");
      if (r == 0) throw FormatError(file + " ended after " + std::to_string(offset + at) + " bytes while reading it (it shrank?).");
      at += static_cast<std::size_t>(r);
    }
  };
  std::vector<char> bytes(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, 28)));
  read_exact(bytes.data(), bytes.size(), 0);
  if (bytes.size() < 28) {
    throw FormatError(file + " is " + std::to_string(bytes.size()) +
                      " bytes, shorter than the 28-byte header (7 int32: dim, hidden_dim, n_layers, n_heads, "
                      "n_kv_heads, vocab_size, seq_len).");
  }
  std::int32_t header[7];
  std::memcpy(header, bytes.data(), sizeof header);
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  // Fields are bounded so that every size below fits comfortably in 64 bits.
  constexpr std::int64_t kMaxField = 1 << 20;
  for (int i = 0; i < 7; ++i) {
    const std::int64_t v = i == 5 ? std::abs(static_cast<std::int64_t>(header[i])) : header[i];
    if (v <= 0 || v > kMaxField) {
      throw FormatError(file + ": header field " + names[i] + " = " + std::to_string(header[i]) + " is " +
                        (v <= 0 ? std::string(i == 5 ? "zero" : "not positive")
                                : "larger than " + std::to_string(kMaxField)) +
                        (i == 5 ? " (a negative vocab_size means an unshared classifier)." : "."));
    }
  }
  cfg_.dim = header[0];
  cfg_.hidden_dim = header[1];
  cfg_.n_layers = header[2];
  cfg_.n_heads = header[3];
  cfg_.n_kv_heads = header[4];
  cfg_.shared_classifier = header[5] > 0;
  cfg_.vocab_size = std::abs(header[5]);
  cfg_.seq_len = header[6];
  if (cfg_.dim % cfg_.n_heads != 0) {
    throw FormatError(file + ": header field dim = " + std::to_string(cfg_.dim) + " is not a multiple of n_heads = " +
                      std::to_string(cfg_.n_heads) + ".");
  }
  if (cfg_.n_heads % cfg_.n_kv_heads != 0) {
    throw FormatError(file + ": header field n_heads = " + std::to_string(cfg_.n_heads) +
                      " is not a multiple of n_kv_heads = " + std::to_string(cfg_.n_kv_heads) + ".");
  }
  if (cfg_.head_size() % 2 != 0) {
    throw FormatError(file + ": head size dim / n_heads = " + std::to_string(cfg_.head_size()) +
                      " is odd (RoPE rotates pairs of channels).");
  }
  const std::uint64_t want = cfg_.expected_bytes();
  if (file_size != want) {
    throw FormatError(file + " is " + std::to_string(file_size) + " bytes, but its header (" + cfg_.describe() +
                      ") needs exactly " + std::to_string(want) + " bytes (28-byte header + " +
                      std::to_string(cfg_.expected_floats()) + " float32 weights, RoPE tables included)" +
                      (file_size < want ? "; the file is truncated." : "; the file has trailing bytes."));
  }
  bytes.resize(static_cast<std::size_t>(want));
  read_exact(bytes.data() + 28, bytes.size() - 28, 28);
  sha256_ = sha256_hex(bytes.data(), bytes.size());
  w_.resize(cfg_.expected_floats());
  std::memcpy(w_.data(), bytes.data() + 28, w_.size() * sizeof(float));

  const std::size_t D = cfg_.dim, H = cfg_.hidden_dim, L = cfg_.n_layers, V = cfg_.vocab_size;
  const std::size_t hs = cfg_.head_size(), kv = cfg_.kv_dim(), S = cfg_.seq_len;
  struct Array {
    const char* name;
    std::size_t* offset;
    std::size_t count;
  };
  std::size_t rope = 0;
  std::vector<Array> arrays = {{"token_embedding", &tok_emb_, V * D}, {"rms_att", &rms_att_, L * D},
                               {"wq", &wq_, L * D * D},               {"wk", &wk_, L * kv * D},
                               {"wv", &wv_, L * kv * D},              {"wo", &wo_, L * D * D},
                               {"rms_ffn", &rms_ffn_, L * D},         {"w1", &w1_, L * H * D},
                               {"w2", &w2_, L * D * H},               {"w3", &w3_, L * H * D},
                               {"rms_final", &rms_final_, D},         {"rope_tables", &rope, S * hs}};
  if (!cfg_.shared_classifier) arrays.push_back({"wcls", &wcls_, V * D});
  std::size_t at = 0;
  for (const Array& a : arrays) {
    *a.offset = at;
    if (std::string(a.name) != "rope_tables") {
      for (std::size_t i = 0; i < a.count; ++i) {
        if (!std::isfinite(w_[at + i])) {
          throw FormatError(file + ": weight array " + a.name + " holds a non-finite value (" +
                            std::to_string(w_[at + i]) + ") at flat index " + std::to_string(i) + ".");
        }
      }
    }
    at += a.count;
  }
  if (cfg_.shared_classifier) wcls_ = tok_emb_;

  // RoPE angles pos / theta^(2i/hs), theta read from the stored tables, computed in double
  // (FORMAT.md's formula): the forward pass uses these, not the stored float32 tables.
  cfg_.rope_theta = read_rope_theta(&w_[rope], &w_[rope + S * hs / 2], S, hs, file);
  rope_cos_.resize(S * hs / 2);
  rope_sin_.resize(S * hs / 2);
  for (std::size_t pos = 0; pos < S; ++pos) {
    for (std::size_t i = 0; i < hs / 2; ++i) {
      const double angle = rope_angle(cfg_.rope_theta, pos, i, hs);
      rope_cos_[pos * hs / 2 + i] = static_cast<float>(std::cos(angle));
      rope_sin_[pos * hs / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
}

std::string Llama2cModel::name() const {
  std::string base = path_.substr(path_.find_last_of('/') == std::string::npos ? 0 : path_.find_last_of('/') + 1);
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".bin") == 0) base.resize(base.size() - 4);
  return base;
}

// ---- session ---------------------------------------------------------------------

Llama2cSession::Llama2cSession(const Llama2cModel& model) : model_(&model), cfg_(model.config()) {
  const std::size_t D = cfg_.dim, H = cfg_.hidden_dim;
  x_.assign(D, 0.0f);
  xb_.assign(D, 0.0f);
  xb2_.assign(D, 0.0f);
  hb_.assign(H, 0.0f);
  hb2_.assign(H, 0.0f);
  q_.assign(D, 0.0f);
  k_pre_.assign(cfg_.kv_dim(), 0.0f);
  att_.assign(static_cast<std::size_t>(cfg_.seq_len), 0.0f);
  logits_.assign(cfg_.vocab_size, 0.0f);
  const std::size_t cache = static_cast<std::size_t>(cfg_.n_layers) * cfg_.seq_len * cfg_.kv_dim();
  key_cache_.assign(cache, 0.0f);
  value_cache_.assign(cache, 0.0f);
  keys_t_.assign(cache, 0.0f);
  values_t_.assign(cache, 0.0f);
  kept_.assign(static_cast<std::size_t>(cfg_.n_layers) * cfg_.n_kv_heads * cfg_.seq_len, 1);
}

void Llama2cSession::set_kept(int layer, int kv_head, int pos, bool kept) {
  if (layer < 0 || layer >= cfg_.n_layers || kv_head < 0 || kv_head >= cfg_.n_kv_heads || pos < 0 ||
      pos >= cfg_.seq_len) {
    throw InputError("Llama2cSession::set_kept: (layer " + std::to_string(layer) + ", KV head " +
                     std::to_string(kv_head) + ", position " + std::to_string(pos) + ") is out of range.");
  }
  std::uint8_t& k = kept_[(static_cast<std::size_t>(layer) * cfg_.n_kv_heads + kv_head) * cfg_.seq_len + pos];
  const std::uint8_t want = kept ? 1 : 0;
  if (k == want) return;
  if (want) --n_evicted_; else ++n_evicted_;
  k = want;
}

bool Llama2cSession::kept(int layer, int kv_head, int pos) const {
  return kept_[(static_cast<std::size_t>(layer) * cfg_.n_kv_heads + kv_head) * cfg_.seq_len + pos] != 0;
}

void Llama2cSession::set_key(int layer, int kv_head, int pos, const float* k) {
  if (layer < 0 || layer >= cfg_.n_layers || kv_head < 0 || kv_head >= cfg_.n_kv_heads || pos < 0 ||
      pos >= cfg_.seq_len) {
    throw InputError("Llama2cSession::set_key: (layer " + std::to_string(layer) + ", KV head " +
                     std::to_string(kv_head) + ", position " + std::to_string(pos) + ") is out of range.");
  }
  const int hs = cfg_.head_size();
  std::memcpy(&key_cache_[index(layer, pos) + static_cast<std::size_t>(kv_head) * hs], k, hs * sizeof(float));
  float* kt = &keys_t_[index_t(layer, kv_head)];
  for (int i = 0; i < hs; ++i) kt[static_cast<std::size_t>(i) * cfg_.seq_len + pos] = k[i];
}

// Copies the key and value rows of (layer, pos) into the channel-major blocks.
void Llama2cSession::store_kv_t(int layer, int pos) {
  const int hs = cfg_.head_size();
  const float* k = &key_cache_[index(layer, pos)];
  const float* v = &value_cache_[index(layer, pos)];
  for (int h = 0; h < cfg_.n_kv_heads; ++h) {
    float* kt = &keys_t_[index_t(layer, h)];
    float* vt = &values_t_[index_t(layer, h)];
    for (int i = 0; i < hs; ++i) {
      kt[static_cast<std::size_t>(i) * cfg_.seq_len + pos] = k[h * hs + i];
      vt[static_cast<std::size_t>(i) * cfg_.seq_len + pos] = v[h * hs + i];
    }
  }
}

// xb_ = a_j of every query head j over positions 0..pos (kept ones only).
void Llama2cSession::attention(int layer, int pos) {
  const int hs = cfg_.head_size(), g = cfg_.group_size(), n = pos + 1;
  const std::size_t seq = static_cast<std::size_t>(cfg_.seq_len);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* att = att_.data();
  Eigen::Map<Eigen::ArrayXf> a(att, n);
  for (int j = 0; j < cfg_.n_heads; ++j) {
    const int h = j / g;
    const float* q = &q_[static_cast<std::size_t>(j) * hs];
    const float* kt = &keys_t_[index_t(layer, h)];
    // s_t = q . k_t / sqrt(hs), channel by channel over contiguous positions.
    for (int t = 0; t < n; ++t) att[t] = q[0] * kt[t];
    for (int i = 1; i < hs; ++i) {
      const float qi = q[i];
      const float* row = kt + i * seq;
      for (int t = 0; t < n; ++t) att[t] += qi * row[t];
    }
    const std::uint8_t* keep =
        n_evicted_ ? &kept_[(static_cast<std::size_t>(layer) * cfg_.n_kv_heads + h) * seq] : nullptr;
    if (keep) {
      for (int t = 0; t < n; ++t) {
        if (!keep[t]) att[t] = -std::numeric_limits<float>::infinity();
      }
    }
    const float mx = a.maxCoeff();  // finite: position pos is always kept
    a = ((a - mx) * scale).exp();
    if (keep) {
      for (int t = 0; t < n; ++t) {
        if (!keep[t]) att[t] = 0.0f;  // exactly removed
      }
    }
    const float inv = 1.0f / a.sum();
    // a_j = V^T p: hs dot products over contiguous positions.
    const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0,
                     Eigen::OuterStride<>>
        vt(&values_t_[index_t(layer, h)], hs, n, Eigen::OuterStride<>(cfg_.seq_len));
    VecMap(&xb_[static_cast<std::size_t>(j) * hs], hs).noalias() = (vt * a.matrix()) * inv;
  }
}

const float* Llama2cSession::forward(std::int32_t token, int pos, ForwardObserver* observer) {
  if (token < 0 || token >= cfg_.vocab_size) {
    throw InputError("llama2.c forward pass: token id " + std::to_string(token) + " is out of range (vocab_size = " +
                     std::to_string(cfg_.vocab_size) + ").");
  }
  if (pos < 0 || pos >= cfg_.seq_len) {
    throw InputError("llama2.c forward pass: position " + std::to_string(pos) + " is out of range (seq_len = " +
                     std::to_string(cfg_.seq_len) + ").");
  }
  const Llama2cModel& m = *model_;
  const float* w = m.w_.data();
  const int D = cfg_.dim, H = cfg_.hidden_dim, hs = cfg_.head_size(), kv = cfg_.kv_dim();
  const std::size_t DD = static_cast<std::size_t>(D) * D, KD = static_cast<std::size_t>(kv) * D,
                    HD = static_cast<std::size_t>(H) * D;
  const float* cos_row = &m.rope_cos_[static_cast<std::size_t>(pos) * hs / 2];
  const float* sin_row = &m.rope_sin_[static_cast<std::size_t>(pos) * hs / 2];
  float* x = x_.data();
  std::memcpy(x, w + m.tok_emb_ + static_cast<std::size_t>(token) * D, D * sizeof(float));

  for (int l = 0; l < cfg_.n_layers; ++l) {
    // A new token at pos replaces whatever was evicted there before.
    if (n_evicted_) {
      for (int h = 0; h < cfg_.n_kv_heads; ++h) set_kept(l, h, pos, true);
    }

    rmsnorm(xb_.data(), x, w + m.rms_att_ + static_cast<std::size_t>(l) * D, D);
    float* kc = &key_cache_[index(l, pos)];
    float* vc = &value_cache_[index(l, pos)];
    matvec(q_.data(), w + m.wq_ + l * DD, xb_.data(), D, D);
    matvec(kc, w + m.wk_ + l * KD, xb_.data(), kv, D);
    matvec(vc, w + m.wv_ + l * KD, xb_.data(), kv, D);
    if (observer) std::memcpy(k_pre_.data(), kc, kv * sizeof(float));
    rope_interleaved(q_.data(), cfg_.n_heads, hs, cos_row, sin_row);
    rope_interleaved(kc, cfg_.n_kv_heads, hs, cos_row, sin_row);
    store_kv_t(l, pos);

    attention(l, pos);  // xb_ = per-head attention outputs
    if (observer) {
      observer->on_layer(LayerActivations{l, pos, q_.data(), k_pre_.data(), kc, vc, xb_.data()});
    }
    matvec(xb2_.data(), w + m.wo_ + l * DD, xb_.data(), D, D);
    for (int i = 0; i < D; ++i) x[i] += xb2_[i];

    rmsnorm(xb_.data(), x, w + m.rms_ffn_ + static_cast<std::size_t>(l) * D, D);
    matvec(hb_.data(), w + m.w1_ + l * HD, xb_.data(), H, D);
    matvec(hb2_.data(), w + m.w3_ + l * HD, xb_.data(), H, D);
    {
      Eigen::Map<Eigen::ArrayXf> z(hb_.data(), H);
      z = z / (1.0f + (-z).exp()) * Eigen::Map<const Eigen::ArrayXf>(hb2_.data(), H);  // silu(w1 u) * w3 u
    }
    matvec(xb_.data(), w + m.w2_ + l * HD, hb_.data(), D, H);
    for (int i = 0; i < D; ++i) x[i] += xb_[i];
  }
  rmsnorm(x, x, w + m.rms_final_, D);
  matvec(logits_.data(), w + m.wcls_, x, cfg_.vocab_size, D);
  return logits_.data();
}

// ---- sampling --------------------------------------------------------------------

std::int32_t argmax(const float* logits, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

Sampler::Sampler(float temperature, std::uint64_t seed) : temperature_(temperature), state_(seed) {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    throw InputError("sampler: temperature " + std::to_string(temperature) + " is not a number >= 0.");
  }
}

double Sampler::uniform() {
  state_ += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

std::int32_t Sampler::next(const float* logits, int n) {
  if (temperature_ == 0.0f) return argmax(logits, n);
  probs_.resize(static_cast<std::size_t>(n));
  const double mx = logits[argmax(logits, n)];
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    probs_[i] = std::exp((static_cast<double>(logits[i]) - mx) / temperature_);
    sum += probs_[i];
  }
  const double u = uniform() * sum;
  double cdf = 0.0;
  for (int i = 0; i < n; ++i) {
    cdf += probs_[i];
    if (u < cdf) return i;
  }
  return n - 1;  // rounding
}

std::vector<std::int32_t> generate(const Llama2cModel& model, const std::vector<std::int32_t>& prompt, int n_new,
                                   Sampler& sampler) {
  const Llama2cConfig& c = model.config();
  if (prompt.empty()) throw InputError("generate: the prompt is empty (start it with BOS = 1).");
  if (n_new < 0 || static_cast<long long>(prompt.size()) + n_new > c.seq_len) {
    throw InputError("generate: " + std::to_string(prompt.size()) + " prompt tokens + " + std::to_string(n_new) +
                     " new tokens exceed the model's seq_len = " + std::to_string(c.seq_len) + ".");
  }
  std::vector<std::int32_t> out = prompt;
  out.reserve(prompt.size() + n_new);
  Llama2cSession session(model);
  const float* logits = nullptr;
  int pos = 0;
  for (; pos < static_cast<int>(prompt.size()); ++pos) logits = session.forward(prompt[pos], pos);
  for (int i = 0; i < n_new; ++i) {
    out.push_back(sampler.next(logits, c.vocab_size));
    if (i + 1 < n_new) logits = session.forward(out.back(), pos++);
  }
  return out;
}

}  // namespace tierlab
