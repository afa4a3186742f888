#pragma once
// A llama2.c checkpoint (the legacy format of data/stories260K/FORMAT.md) and its
// forward pass: the real model behind captured traces and end-to-end replays.
//
// File: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
// vocab_size, seq_len), then float32 arrays in this order, matrices row-major (out, in):
// token_embedding (V, dim), rms_att (L, dim), wq (L, n_heads*hs, dim),
// wk (L, n_kv_heads*hs, dim), wv (L, n_kv_heads*hs, dim), wo (L, dim, n_heads*hs),
// rms_ffn (L, dim), w1 (L, hidden, dim), w2 (L, dim, hidden), w3 (L, hidden, dim),
// rms_final (dim), two RoPE tables of seq_len*hs/2 floats (cos, then sin, of the angle
// pos / theta^(2i/hs) at [pos * hs/2 + i]), and, only when the header's vocab_size is
// negative (llama2.c's convention for an unshared classifier), wcls (V, dim). hs = dim /
// n_heads is the head size. The format stores no theta: the loader reads it from the RoPE
// tables (Llama2cConfig::rope_theta), so checkpoints trained with theta 1e6 (tierlab's zoo,
// data/zoo/) run with their own RoPE.
//
// Forward pass for token x at position pos (float32, one token at a time, KV cache):
//   h = E[x]
//   for each layer l:
//     u = rmsnorm(h) * w_att,            rmsnorm(z) = z / sqrt(mean(z^2) + 1e-5)
//     q = Wq u (n_heads x hs), k = Wk u, v = Wv u (n_kv_heads x hs)
//     RoPE on q and k: within each head, the pair (2i, 2i+1) is rotated by the angle
//       pos / theta^(2i/hs), theta from the RoPE tables      ("interleaved" style)
//     query head j uses KV head j / g, g = n_heads / n_kv_heads (GQA);
//       a_j = sum_{t <= pos, t kept} softmax_t(q_j . k_t / sqrt(hs)) v_t
//     h += Wo a
//     u = rmsnorm(h) * w_ffn;  h += W2 (silu(W1 u) * (W3 u)),  silu(z) = z / (1 + e^-z)
//   logits = Wcls (rmsnorm(h) * w_final),  Wcls = E unless the classifier is unshared.
// A position is "kept" unless a caller evicted it from one (layer, KV head) with
// Llama2cSession::set_kept (compressed-cache replay); every token starts kept.
#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "model/io/trace.hpp"

namespace tierlab {

// Float buffers aligned for Eigen's vector instructions. Alignment also fixes how Eigen
// splits a reduction, so two sessions fed the same tokens compute bit-identical logits.
using AlignedFloats = std::vector<float, Eigen::aligned_allocator<float>>;

struct Llama2cConfig {
  int dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;  // header vocab_size > 0
  // RoPE base, read from the checkpoint's RoPE tables at load time: the estimate from the
  // angle of (position 1, last pair), rounded to 6 significant digits when the rounded value
  // reproduces every table entry (10000 for stories260K). With one pair per head or a
  // one-position context every theta gives the same tables and 10000 is recorded.
  double rope_theta = 10000.0;

  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_size(); }
  int group_size() const { return n_heads / n_kv_heads; }  // g: query heads per KV head
  // float32 values after the header, RoPE tables and (unshared) classifier included.
  std::uint64_t expected_floats() const;
  std::uint64_t expected_bytes() const { return 28 + 4 * expected_floats(); }
  std::string describe() const;  // "dim=64 hidden_dim=172 ... (shared classifier)"
};

// A checkpoint's RoPE as a trace records it (TraceMeta::rope): the config's theta on every
// channel (rotary_dim 0 = the whole head), interleaved pairs (2i, 2i + 1).
RopeParams llama2c_rope(const Llama2cConfig& config);

// The first token of every llama2.c sequence.
inline constexpr std::int32_t kLlama2cBos = 1;

// A loaded checkpoint (weights in memory, read-only). Construction validates the header
// (every field positive, dim % n_heads == 0, n_heads % n_kv_heads == 0, even head size),
// the exact file size, that every weight is finite and that the RoPE tables are RoPE's
// for one theta (every entry within 1e-5 + 4e-7 pos of cos/sin(pos / theta^(2i/hs)): the
// float32 rounding of tables computed in float32, as llama2.c's export does); failures are
// InputError/FormatError naming the file, the field and the value.
class Llama2cModel {
 public:
  explicit Llama2cModel(const std::string& path);

  const Llama2cConfig& config() const { return cfg_; }
  const std::string& path() const { return path_; }
  const std::string& sha256() const { return sha256_; }  // hex digest of the file's bytes
  std::string name() const;                              // file name without ".bin"

 private:
  friend class Llama2cSession;
  std::string path_, sha256_;
  Llama2cConfig cfg_;
  AlignedFloats w_;  // every float after the header
  // Offsets into w_.
  std::size_t tok_emb_ = 0, rms_att_ = 0, wq_ = 0, wk_ = 0, wv_ = 0, wo_ = 0, rms_ffn_ = 0, w1_ = 0, w2_ = 0,
              w3_ = 0, rms_final_ = 0, wcls_ = 0;
  std::vector<float> rope_cos_, rope_sin_;  // [pos * hs/2 + i], angle pos / theta^(2i/hs) (double, rounded)
};

// What one layer of one forward step exposes to an observer (capture); the pointers are
// valid during the call only.
struct LayerActivations {
  int layer = 0, pos = 0;
  const float* q = nullptr;         // n_heads * hs, post-RoPE (head j at j*hs)
  const float* k_pre = nullptr;     // kv_dim, pre-RoPE
  const float* k = nullptr;         // kv_dim, post-RoPE (what the cache holds)
  const float* v = nullptr;         // kv_dim
  const float* attn_out = nullptr;  // n_heads * hs: a_j of every query head, before Wo
};

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  virtual void on_layer(const LayerActivations&) = 0;
};

// One sequence being decoded: activations and the KV cache (post-RoPE keys, values) of
// every layer, like llama2.c's RunState. Copyable (a copy continues the same sequence).
// No allocation per token.
class Llama2cSession {
 public:
  explicit Llama2cSession(const Llama2cModel& model);

  // Runs token `token` at position `pos` (0 <= pos < seq_len; positions are fed in
  // order) and returns the vocab_size logits (valid until the next call). An observer,
  // when given, sees every layer's activations.
  const float* forward(std::int32_t token, int pos, ForwardObserver* observer = nullptr);
  const float* logits() const { return logits_.data(); }

  // The cache row of one (layer, position): kv_dim floats, KV head h at h*hs.
  const float* key(int layer, int pos) const { return &key_cache_[index(layer, pos)]; }
  const float* value(int layer, int pos) const { return &value_cache_[index(layer, pos)]; }
  // Replace the cached (post-RoPE) key of one (layer, KV head, position) by hs floats
  // (a quantized key, in compressed-cache replay).
  void set_key(int layer, int kv_head, int pos, const float* key);

  // Evict (kept = false) or restore one cached token of one (layer, KV head): attention
  // then renormalises over the kept positions. forward() marks the position it writes kept.
  void set_kept(int layer, int kv_head, int pos, bool kept);
  bool kept(int layer, int kv_head, int pos) const;

  const Llama2cModel& model() const { return *model_; }

 private:
  std::size_t index(int layer, int pos) const {
    return (static_cast<std::size_t>(layer) * cfg_.seq_len + pos) * cfg_.kv_dim();
  }
  // Start of the channel-major key block of one (layer, KV head): hs rows of seq_len.
  std::size_t index_t(int layer, int kv_head) const {
    return (static_cast<std::size_t>(layer) * cfg_.n_kv_heads + kv_head) * cfg_.head_size() * cfg_.seq_len;
  }
  void store_kv_t(int layer, int pos);
  void attention(int layer, int pos);

  const Llama2cModel* model_;
  Llama2cConfig cfg_;
  AlignedFloats x_, xb_, xb2_, hb_, hb2_, q_, k_pre_, att_, logits_;
  AlignedFloats key_cache_, value_cache_;  // [layer][pos][kv_dim]
  // [layer][kv_head][channel][pos]: keys and values again, channel-major, so that the
  // scores q.k_t and the output sum_t p_t v_t vectorise over positions.
  AlignedFloats keys_t_, values_t_;
  std::vector<std::uint8_t> kept_;              // [layer][kv_head][pos]
  std::size_t n_evicted_ = 0;                   // entries of kept_ that are 0
};

// The index of the largest logit (the first one on ties).
std::int32_t argmax(const float* logits, int n);

// Picks the next token. temperature 0: argmax. Otherwise p = softmax(logits / temperature)
// (in double) and the token is the first i with u < sum_{j<=i} p_j, u uniform in [0, 1)
// from SplitMix64 (state += 0x9E3779B97F4A7C15, then the SplitMix64 finaliser; u = top
// 53 bits / 2^53), seeded by `seed`: the same seed gives the same tokens on any machine.
class Sampler {
 public:
  explicit Sampler(float temperature = 0.0f, std::uint64_t seed = 0);
  std::int32_t next(const float* logits, int n);
  double uniform();  // the next u in [0, 1)

 private:
  float temperature_;
  std::uint64_t state_;
  std::vector<double> probs_;
};

// prompt followed by n_new tokens drawn from the model with `sampler`.
std::vector<std::int32_t> generate(const Llama2cModel& model, const std::vector<std::int32_t>& prompt, int n_new,
                                   Sampler& sampler);


}  // namespace tierlab
