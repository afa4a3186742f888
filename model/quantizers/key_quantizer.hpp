#pragma once
// Published key quantizers as named, stateful components (docs/methods.md
// section 1, "Key quantizers"). Each quantizes one KV head's prompt keys and returns the
// dequantized POST-RoPE keys (what attention sees) with an itemised rate.
//
// Rate accounting (bits per key element over the quantized rows, n tokens x d):
//   code_bits  = bits spent on the codes of the dense representation
//   meta items = every other stored bit, by name (scales, zero points, norms, outliers,
//                pointers, bases, fp16 sink/window rows beyond their code bits, ...)
//   Rate.code_bits = code_bits / (n d);  Rate.total_bits = (code_bits + sum meta) / (n d).
// Bits needed once per head (a basis, a codebook, per-channel calibration) are charged
// to the head's quantized rows, so their share falls as 1/n.
//
// Registered quantizers (one line each here; the full formula opens each source file):
//   kivi, token, quarot, kvquant, turboquant, kvcobra, headq, rdkv-channel.
// Shared helpers below (Walsh-Hadamard, RoPE, Lloyd-Max, score-space error) are the
// building blocks the methods share and the tests check against published figures.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/base/method_info.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

using KeyQuantizerParams = MethodParams;

// One itemised part of the stored bits of a quantized head (total bits, not per element).
struct RateItem {
  std::string name;
  double bits = 0.0;
};

struct QuantizedHeadKeys {
  MatrixRM keys;                // n x d dequantized post-RoPE keys, row i = token tokens[i]
  double code_bits = 0.0;       // total code bits
  std::vector<RateItem> meta;   // total metadata bits, by item
  double meta_bits() const;     // sum of meta
  Rate rate() const;            // per element over keys.rows() x keys.cols()
};

class KeyQuantizer {
 public:
  virtual ~KeyQuantizer() = default;
  virtual std::string name() const = 0;
  virtual KeyQuantizerParams parameters() const = 0;  // the effective parameters
  virtual std::string source() const = 0;
  // Quantize one head's prompt keys: all T tokens when `tokens` is empty, else the
  // listed token indices (strictly ascending; positions for RoPE are the indices).
  // Calibration (ranges, codebooks, bases) uses the whole head, as offline calibration.
  // Throws InputError when the head lacks what the method needs.
  virtual QuantizedHeadKeys quantize(const HeadData& head, const RopeParams& rope,
                                     const std::vector<int>& tokens = {}) const = 0;
};

// ---- the registry --------------------------------------------------------------------
// One entry per key quantizer declares its name, summary, parameters with their defaults,
// source and factory, once. The factory reads each parameter through a ParamReader built
// from its entry, so the default it uses is the declared one (no second literal), and
// make_key_quantizer and `tierlab methods` are both generated from it.

// One declared parameter. `default_value` is the text the factory parses as if the user had
// passed it, so it is also what parameters() reports when the parameter is not given.
// (MethodParam, model/base/method_info.hpp: name, a key in KeyQuantizerParams, "p.*" declaring
// a prefix "p.<key>"; the default, parseable, "" where the empty text is the default; help,
// what it means and its special values in a few words; choices, the allowed values of a
// string parameter, empty for any text.)
using KeyQuantizerParam = MethodParam;

using KeyQuantizerFactory = std::unique_ptr<KeyQuantizer> (*)(const KeyQuantizerParams&);

// info: name, kind "key quantizer", a one-line summary (what it quantizes, its rate), the
// source (arXiv id and repository) and the parameters in the order listed; make validates the
// parameters and throws InputError.
using KeyQuantizerEntry = MethodEntry<KeyQuantizerFactory>;

// Every registered quantizer, in the listed order (kivi, token, quarot, kvquant, turboquant,
// kvcobra, headq, rdkv-channel); names are unique.
const std::vector<KeyQuantizerEntry>& key_quantizer_registry();
// The entry named `name`; throws InputError listing the valid names when there is none.
const KeyQuantizerEntry& key_quantizer_entry(const std::string& name);

// make_key_quantizer("quarot", {{"bits", "4"}}); unknown names or parameters, and
// invalid values, throw InputError listing the valid choices.
std::unique_ptr<KeyQuantizer> make_key_quantizer(const std::string& name, const KeyQuantizerParams& params = {});

// ---- shared helpers ---------------------------------------------------------------

// In-place orthonormal Walsh-Hadamard transform of x[0..n), n a power of 2:
// x <- H_n x / sqrt(n), H_n the Sylvester Hadamard matrix (H_2 = [[1,1],[1,-1]]).
// Self-inverse. Throws InputError when n is not a power of 2.
void walsh_hadamard(float* x, int n);
bool is_power_of_two(int n);
int next_power_of_two(int n);  // smallest power of 2 >= n (n >= 1)

// RoPE on one key of dimension d at position pos, in place: pairs (a, b) are rotated
// by angle sign * pos * theta^(-2i / rd), rd = rotary_dim (0 -> d); pairs are
// (2i, 2i+1) for style "interleaved", (i, i + rd/2) for "half"; channels >= rd untouched.
// sign = +1 applies RoPE, -1 removes it. Computed in double, stored in float.
void apply_rope(float* x, int d, double pos, const RopeParams& rope, int sign = +1);

// The Lloyd-Max quantizer for N(0,1) at `bits` (1..8), computed by Lloyd's algorithm on
// the density (cell means (phi(a) - phi(b)) / (Phi(b) - Phi(a)), thresholds the midpoints),
// iterated to convergence from the Panter-Dite (N(0,3)-quantile) start; computed once per
// bits and cached. mse = E[(X - Q(X))^2] by the closed-form cell integrals.
struct LloydMaxCodebook {
  std::vector<double> levels;      // 2^bits ascending
  std::vector<double> thresholds;  // 2^bits - 1 ascending
  double mse = 0.0;
};
LloydMaxCodebook lloyd_max_gaussian(int bits);

// Score-space key error (HeadQ; modulo constant shifts): for each query q (row of Q),
// e_t = q . (k_t - k^_t) / sqrt(d), err_q = mean_t (e_t - mean_t e)^2; returns mean_q err_q.
double score_space_error(const MatrixRM& queries, const MatrixRM& keys, const MatrixRM& dequant);

// Deterministic seeded generator for rotations and sketches (splitmix64 + Box-Muller),
// identical on every platform (no std:: distributions).
class SeededNormal {
 public:
  explicit SeededNormal(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64();
  double uniform();  // in (0, 1)
  double normal();   // N(0, 1)
 private:
  std::uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Random orthogonal d x d matrix: Q of the QR of a seeded Gaussian matrix, column signs
// fixed so that diag(R) > 0 (Haar distributed).
MatrixRMd random_orthogonal(int d, std::uint64_t seed);

// KVQuant's average bits per element (docs/methods.md section 1): b per code, plus per outlier a 16-bit
// value and 16-bit index (32 * outlier_fraction), a 32-bit row pointer per token shared by
// `pointer_elems` elements (32 / pointer_elems), fp16 scale + offset per channel over T
// tokens (32 / T), the fp16 sink token ((16 - b) / T), and the fp16 codebook of the head
// (16 * 2^b / (T d)).
double kvquant_average_bits(int bits, double outlier_fraction, int T, int d, int pointer_elems);

// TurboQuant's channel split of a fractional rate: n_high = round((b - floor b) * d)
// rotated coordinates at ceil(b) bits, the rest at floor(b).
struct ChannelSplit {
  int low_bits = 0, high_bits = 0, n_high = 0;
};
ChannelSplit turboquant_split(double bits, int d);

// ---- registry entries and factories -------------------------------------------------
// Each quantizer's entry is defined in its own source file, next to the factory that reads
// the parameters, so a parameter's declaration and its use are read together; the registry
// (key_quantizer.cpp) declares and lists these entries, so a new quantizer is its own file and
// one line there (docs/extending.md). Parameters arrive as strings; each factory reads them
// with ParamReader(its entry, params) and throws InputError for unknown keys, naming the
// declared ones.
// kivi: quantize_block per channel, groups of G, fp16 window of n mod R rows; b + 32/G.
std::unique_ptr<KeyQuantizer> make_kivi_quantizer(const KeyQuantizerParams&);
// token: quantize_block per token, channel groups of n; b + 32 ceil(d/n)/d.
std::unique_ptr<KeyQuantizer> make_token_quantizer(const KeyQuantizerParams&);
// quarot (model/quantizers/quarot.cpp): y = Hk/sqrt(d); per group, range [clip min(y,0), clip max(y,0)],
// scale = (xmax-xmin)/(2^b-1), zero = round(-xmin/scale), c = clamp(round(y/scale)+zero, 0, 2^b-1),
// y^ = scale (c - zero), k^ = H y^/sqrt(d); b + 32/group.
std::unique_ptr<KeyQuantizer> make_quarot_quantizer(const KeyQuantizerParams&);
// kvquant (model/quantizers/kvquant.cpp): pre-RoPE per channel, percentile range, sparse exact outliers,
// k-means codebook in [-1,1], fp16 sink, RoPE re-applied; kvquant_average_bits().
std::unique_ptr<KeyQuantizer> make_kvquant_quantizer(const KeyQuantizerParams&);
// turboquant (model/quantizers/turboquant.cpp): k^ = ||k|| R^T LM(R k/||k||) (+ QJL residual for prod);
// b + 16/d (prod b + 32/d).
std::unique_ptr<KeyQuantizer> make_turboquant_quantizer(const KeyQuantizerParams&);
// kvcobra (model/quantizers/kvcobra.cpp): K^ = Q_b(K V_r D H) H D V_r^T (RoPE re-applied for a pre-RoPE
// basis); pad(r) b/d + scale/min + basis.
std::unique_ptr<KeyQuantizer> make_kvcobra_quantizer(const KeyQuantizerParams&);
// headq (model/quantizers/headq.cpp): k^ = k^0 + U Q_bs(U^T (k - k^0)); base + r b_s/d + metadata.
std::unique_ptr<KeyQuantizer> make_headq_quantizer(const KeyQuantizerParams&);
// rdkv-channel (model/quantizers/rdkv_channel.cpp): RDKV's per-channel key allocation; channel c at
// b_c = argmin_b s~_c eps(b) + lambda b over {0,2,4,8,16}, s_c = mean_q q_c^2 mean_t k_c^2
// reflect-avg-pooled, lambda the least meeting mean_c b_c <= budget; sum_c b_c / d + metadata.
std::unique_ptr<KeyQuantizer> make_rdkv_channel_quantizer(const KeyQuantizerParams&);

// ---- RDKV per-channel building blocks (model/quantizers/rdkv_channel.cpp) -----------------------
// RDKV's calibrated key NMSE eps(b) on Llama-3.1-8B (docs/methods.md section 1): eps(0) = 1, eps(2) = 0.0955,
// eps(4) = 4.02e-3, eps(8) = 1.40e-5, eps(16) = 0; NaN for any other bit width.
double rdkv_paper_key_nmse(int bits);
// Average pool of odd kernel k with reflect padding (PyTorch F.pad mode "reflect": the edge
// is not repeated, x[-i] = x[i]), effective kernel min(k, 2n - 1) as the released code:
//   y_i = (1 / k') sum_{j = i - k'/2}^{i + k'/2} x_reflect(j).  kernel = 1 returns x.
std::vector<double> reflect_average_pool(const std::vector<double>& x, int kernel);
// s_c = mean over obs-query rows of q_c^2 times mean over all T keys of k_c^2 (ThinK score);
// the query factor is 1 when the head has no observation queries.
std::vector<double> rdkv_channel_scores(const HeadData& head);
// b_c = argmin_j scores_c eps_j + lambda options_j (ties to the lower option), lambda >= 0
// the least value with mean_c b_c <= budget (0 when the unconstrained choice fits).
struct RdkvChannelAllocation {
  std::vector<int> bits;   // per channel, one of options
  double lambda = 0.0;
  double mean_bits = 0.0;  // mean_c b_c
};
RdkvChannelAllocation rdkv_allocate_channels(const std::vector<double>& scores, const std::vector<int>& options,
                                             const std::vector<double>& eps, double budget);

// ---- KV-COBRA building blocks (model/quantizers/kvcobra.cpp) --------------------------------------
// One head's KV-COBRA basis weights, as its quantizer orders them: w_i = qv_i kv_i
// (query energy times key energy along basis vector v_i, kvcobra.cpp), sorted descending;
// basis = auto | pre | post as the quantizer's parameter.
std::vector<double> kvcobra_direction_weights(const HeadData& head, const RopeParams& rope,
                                              const std::string& basis = "auto");

// Reads typed parameters of one registered quantizer from a KeyQuantizerParams; a parameter
// not given takes its entry's declared default, parsed and checked as a given value would be.
// A given value that does not parse or lies outside [lo, hi] / the declared choices throws
// InputError; a declared default that does so, or a key the entry does not declare, is a
// programming error (std::logic_error naming quantizer and parameter). finish() throws
// InputError for keys never asked for, listing the declared parameters, and logic_error for
// a declared parameter the factory never read.
// The one reader (MethodParamReader, model/base/method_info.hpp) over a quantizer's entry; its
// messages name "Key quantizer 'NAME'".
class ParamReader : public MethodParamReader {
 public:
  ParamReader(const KeyQuantizerEntry& entry, const KeyQuantizerParams& params)
      : MethodParamReader("Key quantizer '" + entry.info.name + "'", entry.info.params, params) {}
};

// Token rows to quantize: `tokens` checked (ascending, in range), or 0..T-1 when empty.
std::vector<int> resolve_tokens(const std::string& quantizer, int T, const std::vector<int>& tokens);

}  // namespace tierlab
