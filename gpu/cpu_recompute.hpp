#pragma once
// The reference CPU backend of exact recomputation (recompute.hpp), in two phases so
// that the work shared by the selections of one head is done once.
//
// Public API of gpu/ (the CPU reference, single head): make_recomputer() is the way to
// evaluate batches on any backend; the functions in namespace cpu below are for callers
// that evaluate many selections of one prepared head on the calling process's CPU, e.g.
// gui/explorer_core (interactive re-evaluation). They compute exactly what the "cpu"
// backend computes (it is built from them): prepare_head() is phase 1 for a range of query
// rows, evaluate_selection() (or evaluate_rows() + kept_logit_sq()) is phase 2 and gives
// the ErrorMetrics of recompute.hpp, means over the prepared rows. With causal limits
// (HeadProblem::visible) row i sees tokens 0 .. visible[i]-1 only: phase 1 sets p_it = 0
// and ds_vit = 0 past the limit, so the sums below run over the tokens each row sees (the
// same tiles, no separate path). Shapes must have passed check_batch(); a PreparedHead
// keeps pointers to the problem's matrices, which must outlive it.
//
// Phase 1, prepare_head(), per query row i of rows [r0, r1):
//   s_it = q_i.k_t / sqrt(d)  (double GEMM: the precision of p sets the precision of
//          every error below),
//   p_it = softmax_t(s_i)  (double, max-subtracted; stored as float),
//   P1_i = sum_t p_it  (double; the stored p differ from a distribution by rounding),
//   o_i = sum_t p_it v_t / P1_i,  on2_i = ||o_i||^2  (double),
//   per key variant v (float32 GEMMs):
//     ds_vit = q_i.(k^v_t - k_t) / sqrt(d)  (the logit change, from the key difference so
//              that it keeps its precision when it is small),
//     u_vit = expm1(ds_vit)  (so that exp(s^) = exp(s) (1 + u)),
//     L_vt = sum_i ds_vit^2  (for the logit error: O(T) per selection afterwards).
//   A variant equal to the exact keys has u = ds = 0 and stores nothing.
//
// Phase 2, per selection and row (u_t = -1 for an evicted token, so 1 + u_t = 0):
//   Ubar = sum_t p_t u_t / P1,  Z = sum_t p_t (1 + u_t) / P1 = sum_kept p~_t exp(ds_t)
//   (double sums), p^_t = p~_t (1 + u_t) / Z with p~ = p / P1, hence the difference itself
//     delta_t = p^_t - p~_t = p~_t (u_t - Ubar) / Z  (kept),   -p~_t  (evicted),
//   D = delta V  (float32, up to 64 rows per product: (rows x T) (T x d); each entry one fused
//     multiply-add chain over t in order, so a row's D does not depend on the rows beside it),
//   e = ||D||^2 / on2,  abs = ||D||^2,  tv = 1/2 sum_t |delta_t|  (double sums),
//   logit error = sum_kept L_{sel_t, t} / (number of (row, kept token the row sees) pairs;
//   n_kept * rows without causal limits)  (0 when no row sees a kept token).
// Never subtracting two nearly equal outputs keeps e accurate when it is tiny: an
// all-exact selection gives delta = 0 and e = 0 exactly. Measured against a double
// reference (tests/test_recompute.cpp): e within 6e-7 relative, tv within 2e-6.
// Guard: a row on which the selection's KEPT tokens raise some logit by more than 30 nats
// (u = expm1(ds) near float's range; an evicted token's ds is never read, so it does not
// count) or whose kept mass Z < 1e-12 (kept p_t may have underflowed in float) is
// recomputed directly in double from the inputs.
// Every token evicted: o^ = 0, e = 1, abs = ||o||^2, tv = 1/2, logit error 0.
// If ||o|| = 0 (all-zero values), e = 0 when D = 0 and +inf otherwise.
#include <memory>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/base/linalg.hpp"

namespace tierlab {

std::unique_ptr<Recomputer> make_cpu_recomputer();

namespace cpu {

// What prepare_head() computes for rows [row_begin, row_end) of one HeadProblem.
struct PreparedHead {
  HeadProblem problem;          // the inputs (pointers), for the double-precision fallback
  int row_begin = 0, rows = 0;  // query rows covered
  int T = 0, d = 0;
  MatrixRM p;                   // rows x T, float softmax of the exact logits
  VectorD p_sum;                // rows: P1 = sum_t p_t
  VectorD o_norm2;              // rows: ||o||^2
  std::vector<MatrixRM> u;      // per variant: rows x T, expm1(ds); empty when identical
  std::vector<VectorD> logit_sq;  // per variant: T, sum over the rows of ds^2; empty when identical
  std::vector<bool> identical;  // variant v equals the exact keys (where it is read, with read masks)
  std::vector<std::vector<std::uint8_t>> read;  // set_variants' read masks, or empty (all read)
};

// Phase 1 for query rows [row_begin, row_end). Uses OpenMP threads when called outside a
// parallel region. Shapes must have passed check_batch().
PreparedHead prepare_head(const HeadProblem&, int row_begin, int row_end);

// Replaces the key variants of a prepared head (phase 1's per-variant part: ds, u and L) and
// leaves the exact part (p, P1, o) as it is: the selections of
// one head under many materialised allocations (a rate-distortion curve) share the exact
// part. Each variant is T x d and must outlive ph; a token block whose keys equal the exact
// keys costs no product. `differ` (optional, T entries): the caller's statement that a
// variant's row t may differ from the exact key only where differ[t] != 0 (rows elsewhere are
// not read: blocks without a flagged token cost no pass at all, and a variant is identical
// when no token is flagged). `read` (optional, one mask of T entries per variant): the tokens at
// which the selections to be evaluated use each variant (code v + 1). ds, u and L are then
// formed at those tokens only (0 elsewhere): a block with no read token whose row differs from
// the exact key costs no product, and a variant whose read rows all equal the exact keys is
// identical. The read tokens' numbers are the same bits as without masks (a token's ds is its
// own row's product). evaluate_rows refuses a selection that uses a variant where it is not read.
// Uses OpenMP threads when called outside a parallel region.
void set_variants(PreparedHead& ph, const std::vector<const MatrixRM*>& variants,
                  const std::vector<std::uint8_t>* differ = nullptr,
                  const std::vector<std::vector<std::uint8_t>>* read = nullptr);

// The read masks of a batch for set_variants: mask v holds the tokens at which some selection
// of the batch uses variant v (code v + 1).
std::vector<std::vector<std::uint8_t>> read_masks(const HeadBatch& batch);

// Scratch space of one thread (grown on demand, reused across calls).
struct Workspace {
  std::vector<float> u, zeros, delta, out;
};

// Sums over the rows [r0, r1) (indices into the prepared rows) of e, abs and tv.
struct RowSums {
  double rel = 0, abs = 0, tv = 0;
};
RowSums evaluate_rows(const PreparedHead&, const Selection&, int r0, int r1, Workspace&);
// The same for rows [r0, r1) (at most 64) in one delta GEMM, their sums kept per block of
// `block` rows: block_sums[k] covers rows r0 + k block .. (ceil((r1 - r0) / block) entries),
// each summed in row order, bit for bit what evaluate_rows gives for that block alone (a row's
// D = delta V is one chain per entry, whatever rows share the product; tests/test_recompute.cpp
// checks it). Fewer, larger products read the values V once per product.
void evaluate_row_blocks(const PreparedHead&, const Selection&, int r0, int r1, int block, Workspace&,
                         RowSums* block_sums);

// sum over kept tokens of L_{sel_t, t}, and the number of (prepared row, kept token the row
// sees) pairs: the logit error's denominator.
double kept_logit_sq(const PreparedHead&, const Selection&, double* n_pairs);

// All rows of a prepared head for one selection, on the calling thread: the metrics'
// means over the prepared rows.
ErrorMetrics evaluate_selection(const PreparedHead&, const Selection&, Workspace&);

// Incremental recomputation along nested kept sets of EXACT keys: the eviction family E of a
// rate-distortion curve, whose kept sets grow with the budget (issue 18). Tokens
// [prompt_tokens, T) of the problem (the decode steps' own tokens) are always kept; prompt
// tokens start evicted and are added one at a time. Per query row r (over the tokens it sees,
// HeadProblem::visible), with s_rt = q_r.k_t / sqrt(d) in double and the exact output
// o_r = sum_t p_rt v_t computed once in double, the running state over the kept set K is
//   mx_r = max_{t in K} s_rt,   Z_r = sum_{t in K} exp(s_rt - mx_r),
//   R_r = sum_{t in K} exp(s_rt - mx_r) (v_t - o_r)          (d doubles)
// and adding token t is a rank-one update: if s_rt > mx_r, Z_r and R_r are rescaled by
// exp(mx_r - s_rt) and mx_r = s_rt; then Z_r += w, R_r += w (v_t - o_r) with w = exp(s_rt - mx_r)
// (O(d) per row, never a pass over the kept set; the tokens of one add() go as one batch: the
// rescale to the batch's max first, then the batch's rank-one updates). The
// metrics of recompute.hpp follow:
//   o^_r - o_r = R_r / Z_r,  abs = ||R_r / Z_r||^2,  e = abs / ||o_r||^2,
//   tv = 1 - P_r with the kept mass P_r = Z_r exp(mx_r - M_r) / sum_t exp(s_rt - M_r)
//   (p^ = p / P on the kept tokens), logit error 0 (exact keys);
// a row that sees no kept token has o^ = 0: e = 1, abs = ||o||^2, tv = 1/2 (as the reference);
// every prompt token kept is the exact output (all metrics 0, as the reference).
// Accumulating R around o keeps the difference accurate without subtracting two outputs.
// Equal to evaluate_selection on the same selection within 1e-5 relative after thousands of
// updates (tests/test_rd_curve_incremental.cpp: drift over a whole sweep). Memory: rows x T
// doubles of logits and rows x d of state.
class IncrementalKeptSet {
 public:
  // hp: queries, exact_keys, values, visible (variants are not read); prompt_tokens <= T.
  IncrementalKeptSet(const HeadProblem& hp, int prompt_tokens);
  void reset();                          // no prompt token kept
  void add(const std::vector<int>& tokens);  // prompt tokens, not yet kept (InputError otherwise)
  ErrorMetrics metrics() const;          // means over the rows
  const std::vector<std::uint8_t>& kept() const { return kept_; }  // prompt tokens: 1 = kept
  std::int64_t updates() const { return updates_; }  // tokens added since construction

 private:
  int rows_ = 0, T_ = 0, d_ = 0, prompt_ = 0;
  const MatrixRM* values_ = nullptr;
  std::vector<int> visible_;
  MatrixRMd logits_t_;          // T x rows, s_rt (token-major)
  MatrixRMd out_;               // rows x d, o_r
  std::vector<double> global_max_, global_z_, out_norm2_;
  std::vector<double> mx_, z_;  // running state per row
  MatrixRMd resid_;             // rows x d, R_r
  std::vector<std::uint8_t> kept_;
  int kept_count_ = 0;
  std::int64_t updates_ = 0;
  void add_rows(const std::vector<int>& tokens);
};

}  // namespace cpu
}  // namespace tierlab
