// KV-COBRA's key quantizer (arXiv 2609.24298, github.com/seonha01/KV-COBRA).
//
// Basis keys K_b: the head's PRE-RoPE keys when the trace has them (basis=auto or pre),
// else the post-RoPE keys (basis=post, or auto without pre-RoPE keys). Per head:
//   V = right singular vectors of K_b (eigenvectors of K_b^T K_b, uncentred);
//   key energy   kv_i = ||K_b v_i||^2 / T;
//   query energy qv_i = E_q[(q . v_i)^2] over the observation queries; for a pre-RoPE basis
//     the queries are post-RoPE, so the RoPE-averaged second moment is used:
//     qv_i = sum over RoPE pairs (a, b) of e_ab (v_ia^2 + v_ib^2), e_ab = E[(q_a^2 + q_b^2)/2]
//     (uniform when the head has no observation queries);
//   the basis is ordered by qv_i * kv_i (descending) and the first r vectors V_r kept;
//   latent Z = K_b V_r (n x r), zero-padded to p = next power of 2 >= r, rotated
//     Z' = Z D H_p (D seeded random signs, H_p orthonormal Walsh-Hadamard);
//   per channel c of Z', groups of G tokens (G = 0: all quantized tokens): KIVI's
//     asymmetric min/max at b bits (scale = (max - min)/(2^b - 1), round half even);
//   K^_b = (Z'^ H_p D)[:, :r] V_r^T, and K^ = RoPE(K^_b, t) for a pre-RoPE basis.
// Rate (bits): codes n p b (the padded latent channels are stored too: p b / d per
// element); fp16 scale + min per latent channel per group (32 p groups); fp16 basis
// V_r (16 d r per head; basis_cost=offline counts 0, for a basis calibrated offline and
// shipped with the model, as the paper does; the default fp16 charges it because here the
// basis is fitted on the prompt itself). The signs come from the seed (0 bits).
// (rank, bits) = auto: for b in {1, 2, 3, 4, 5, 6, 8}, p = the largest power of 2 with
// p b <= budget d (capped at next_pow2(d)), r = min(p, d); the pair with the least
// score_space_error on the observation queries (key MSE without queries) is chosen. With one
// of rank/bits given, the other is the largest that fits the budget. The cross-head
// redistribution of KV-COBRA's allocator is solvers/kvcobra_allocator.hpp (the seed allocator
// "kvcobra"), which calls this quantizer with rank and bits given per head.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"

namespace tierlab {

const KeyQuantizerEntry& kvcobra_key_quantizer_entry();  // defined below, listed in key_quantizer_registry()

namespace {

struct Basis {
  MatrixRMd V;                  // d x d, columns ordered by score
  std::vector<double> weights;  // w_i = qv_i kv_i of column i (descending)
  bool pre = false;
};

// The head's basis, columns ordered by w_i = qv_i * kv_i (descending, stable), and the
// sorted weights (header comment).
Basis kvcobra_basis(const HeadData& head, const RopeParams& rope, const std::string& basis) {
  const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
  const bool have_pre = head.keys_pre_rope.rows() == T && head.keys_pre_rope.cols() == d;
  if (basis == "pre" && !have_pre)
    throw InputError("Key quantizer 'kvcobra': basis = pre but head (layer " + std::to_string(head.layer) +
                     ", kv head " + std::to_string(head.kv_head) + ") has no keys_pre_rope tensor.");
  if (basis != "pre" && basis != "post" && basis != "auto")
    throw InputError("Key quantizer 'kvcobra': basis = '" + basis + "' is not auto, pre or post.");
  Basis B;
  B.pre = basis == "pre" || (basis == "auto" && have_pre);
  const MatrixRMd K = (B.pre ? head.keys_pre_rope : head.keys).cast<double>();
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(K.transpose() * K);
  const Eigen::MatrixXd V = es.eigenvectors();
  const Eigen::VectorXd kv = es.eigenvalues().cwiseMax(0.0) / std::max(1, T);
  Eigen::VectorXd qv = Eigen::VectorXd::Ones(d);
  const MatrixRM& Q = head.obs_queries;
  if (Q.rows() > 0 && Q.cols() == d) {
    const MatrixRMd Qd = Q.cast<double>();
    if (!B.pre) {
      qv = (Qd * V).array().square().colwise().mean().transpose();
    } else {
      Eigen::VectorXd e = Qd.array().square().colwise().mean().transpose();  // E q_j^2
      const int rd = rope.rotary_dim > 0 ? std::min(rope.rotary_dim, d) : d, pairs = rd / 2;
      for (int i = 0; i < pairs; ++i) {
        const int a = rope.style == "half" ? i : 2 * i, b = rope.style == "half" ? i + pairs : 2 * i + 1;
        e(a) = e(b) = 0.5 * (e(a) + e(b));
      }
      qv = (V.array().square().colwise() * e.array()).colwise().sum().transpose();
    }
  }
  std::vector<int> order(d);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return qv(x) * kv(x) > qv(y) * kv(y); });
  B.V.resize(d, d);
  for (int i = 0; i < d; ++i) {
    B.V.col(i) = V.col(order[i]);
    B.weights.push_back(qv(order[i]) * kv(order[i]));
  }
  return B;
}

class KvcobraKeyQuantizer final : public KeyQuantizer {
 public:
  KvcobraKeyQuantizer(int bits, int rank, double budget, int group, std::uint64_t seed, std::string basis,
                      bool basis_free, KeyQuantizerParams eff)
      : bits_(bits), rank_(rank), budget_(budget), group_(group), seed_(seed), basis_(std::move(basis)),
        basis_free_(basis_free), eff_(std::move(eff)) {}
  std::string name() const override { return kvcobra_key_quantizer_entry().info.name; }
  KeyQuantizerParams parameters() const override { return eff_; }
  std::string source() const override { return kvcobra_key_quantizer_entry().info.source; }

  QuantizedHeadKeys quantize(const HeadData& head, const RopeParams& rope,
                             const std::vector<int>& tokens) const override {
    const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
    const auto rows = resolve_tokens("kvcobra", T, tokens);
    const Basis B = make_basis(head, rope);
    std::vector<std::pair<int, int>> candidates;  // (rank, bits)
    const double cap = budget_ * d;
    auto pow2_fit = [&](int b) {  // largest power of 2 p with p b <= cap, capped at next_pow2(d)
      int p = 0;
      for (int q = 1; q <= next_power_of_two(d) && q * double(b) <= cap + 1e-9; q <<= 1) p = q;
      return p;
    };
    if (rank_ > 0 && bits_ > 0) {
      candidates.emplace_back(rank_, bits_);
    } else if (rank_ > 0) {
      const int b = static_cast<int>(std::floor(cap / next_power_of_two(rank_) + 1e-9));
      if (b < 1)
        throw InputError("Key quantizer 'kvcobra': rank = " + std::to_string(rank_) + " does not fit budget = " +
                         std::to_string(budget_) + " bits per element at even 1 bit.");
      candidates.emplace_back(rank_, std::min(b, 16));
    } else {
      for (int b : (bits_ > 0 ? std::vector<int>{bits_} : std::vector<int>{1, 2, 3, 4, 5, 6, 8})) {
        const int p = pow2_fit(b);
        if (p >= 1) candidates.emplace_back(std::min(p, d), b);
      }
      if (candidates.empty())
        throw InputError("Key quantizer 'kvcobra': budget = " + std::to_string(budget_) +
                         " bits per element is below one latent channel at the given bits.");
    }
    MatrixRM ref(static_cast<Eigen::Index>(rows.size()), d);
    for (std::size_t i = 0; i < rows.size(); ++i) ref.row(static_cast<Eigen::Index>(i)) = head.keys.row(rows[i]);
    QuantizedHeadKeys best;
    double best_err = std::numeric_limits<double>::infinity();
    for (const auto& [r, b] : candidates) {
      QuantizedHeadKeys q = run(head, rope, B, rows, r, b);
      if (candidates.size() == 1) return q;
      const double err = head.obs_queries.rows() > 0 && head.obs_queries.cols() == d
                             ? score_space_error(head.obs_queries, ref, q.keys)
                             : (ref - q.keys).squaredNorm();
      if (err < best_err) {
        best_err = err;
        best = std::move(q);
      }
    }
    return best;
  }

 private:
  Basis make_basis(const HeadData& head, const RopeParams& rope) const { return kvcobra_basis(head, rope, basis_); }

  QuantizedHeadKeys run(const HeadData& head, const RopeParams& rope, const Basis& B, const std::vector<int>& rows,
                        int r, int b) const {
    const int d = static_cast<int>(head.keys.cols());
    if (r < 1 || r > d)
      throw InputError("Key quantizer 'kvcobra': rank = " + std::to_string(r) + " must be in [1, " +
                       std::to_string(d) + "].");
    const int p = next_power_of_two(r);
    const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
    const MatrixRM& Kb = B.pre ? head.keys_pre_rope : head.keys;
    const MatrixRMd Vr = B.V.leftCols(r);
    std::vector<float> sign(p);
    SeededNormal rng(seed_);
    for (int c = 0; c < p; ++c) sign[c] = (rng.next_u64() >> 63) ? -1.0f : 1.0f;
    MatrixRM Z = MatrixRM::Zero(n, p);
    for (Eigen::Index i = 0; i < n; ++i) {
      const Eigen::RowVectorXd z = Kb.row(rows[i]).cast<double>() * Vr;
      for (int c = 0; c < r; ++c) Z(i, c) = static_cast<float>(z(c)) * sign[c];
      walsh_hadamard(Z.row(i).data(), p);
    }
    const int G = group_ > 0 ? group_ : std::max<int>(1, static_cast<int>(n));
    const float maxq = float((1 << b) - 1);
    long long groups = 0;
    for (Eigen::Index i0 = 0; i0 < n; i0 += G, ++groups) {
      const Eigen::Index m = std::min<Eigen::Index>(G, n - i0);
      for (int c = 0; c < p; ++c) {
        float mn = Z(i0, c), mx = Z(i0, c);
        for (Eigen::Index i = i0; i < i0 + m; ++i) {
          mn = std::min(mn, Z(i, c));
          mx = std::max(mx, Z(i, c));
        }
        const float scale = (mx - mn) / maxq;
        if (scale == 0.0f) continue;
        for (Eigen::Index i = i0; i < i0 + m; ++i) {
          const float code = std::nearbyint(std::clamp((Z(i, c) - mn) / scale, 0.0f, maxq));
          const float prod = code * scale;
          Z(i, c) = prod + mn;
        }
      }
    }
    QuantizedHeadKeys out;
    out.keys.resize(n, d);
    std::vector<float> x(d);
    for (Eigen::Index i = 0; i < n; ++i) {
      walsh_hadamard(Z.row(i).data(), p);
      Eigen::VectorXd z(r);
      for (int c = 0; c < r; ++c) z(c) = double(Z(i, c)) * sign[c];
      const Eigen::VectorXd k = Vr * z;
      for (int j = 0; j < d; ++j) x[j] = static_cast<float>(k(j));
      if (B.pre) apply_rope(x.data(), d, double(rows[i]), rope, +1);
      std::copy(x.begin(), x.end(), out.keys.row(i).data());
    }
    out.code_bits = double(n) * p * b;
    out.meta = {{"fp16 scale + min per latent channel per group (rank " + std::to_string(r) + ", " +
                     std::to_string(b) + " bits, padded to " + std::to_string(p) + ")",
                 32.0 * p * double(groups)},
                {basis_free_ ? "basis V_r (offline, not stored with the cache)" : "fp16 basis V_r",
                 basis_free_ ? 0.0 : 16.0 * d * r}};
    return out;
  }

  int bits_, rank_;
  double budget_;
  int group_;
  std::uint64_t seed_;
  std::string basis_;
  bool basis_free_;
  KeyQuantizerParams eff_;
};

}  // namespace

std::vector<double> kvcobra_direction_weights(const HeadData& head, const RopeParams& rope, const std::string& basis) {
  return kvcobra_basis(head, rope, basis).weights;
}

const KeyQuantizerEntry& kvcobra_key_quantizer_entry() {
  static const KeyQuantizerEntry entry{{"kvcobra", "key quantizer",
       "rank-r key SVD latent, random Hadamard, per-channel quantization; pad(r) b / d + metadata",
       "arXiv 2609.24298, github.com/seonha01/KV-COBRA",
       {{"bits", "0", "latent code bits (0 = auto, at the budget)"},
       {"rank", "0", "latent rank r (0 = auto, at the budget)"},
       {"budget", "2", "code bits per key element the auto (rank, bits) meet"},
       {"group", "0", "tokens per quantization group (0 = all tokens)"},
       {"seed", "0", "random-sign Hadamard seed"},
       {"basis", "auto", "keys the SVD basis is fitted on (auto = pre-RoPE if present)", {"auto", "pre", "post"}},
       {"basis_cost", "fp16", "fp16 = the basis is charged; offline = part of the model", {"fp16", "offline"}}}},
      &make_kvcobra_quantizer};
  return entry;
}

std::unique_ptr<KeyQuantizer> make_kvcobra_quantizer(const KeyQuantizerParams& params) {
  ParamReader r(kvcobra_key_quantizer_entry(), params);
  const int bits = r.get_int("bits", 0, 16);
  const int rank = r.get_int("rank", 0, 1 << 16);
  const double budget = r.get_double("budget", 1e-3, 64.0);
  const int group = r.get_int("group", 0, 1 << 24);
  const std::uint64_t seed = r.get_seed("seed");
  const std::string basis = r.get_string("basis");
  const std::string cost = r.get_string("basis_cost");
  r.finish();
  return std::make_unique<KvcobraKeyQuantizer>(bits, rank, budget, group, seed, basis, cost == "offline",
                                               r.effective());
}

}  // namespace tierlab
