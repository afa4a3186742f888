#pragma once
// Launchers of the CUDA recomputation backend (gpu/cuda/*.cu), declared in plain C++:
// no CUDA header reaches anything outside gpu/cuda. A launcher enqueues work on a Stream
// and returns an empty string on success, or one sentence naming the CUDA call that
// failed with cudaGetErrorString's words. Nothing here exits or aborts.
//
// What the kernels compute, in the symbols of docs/model.md section 8 and gpu/recompute.hpp,
// for one head (query rows i, tokens t, key variants v, head dimension d):
//
// Causal limits (HeadProblem::visible): row i sees tokens t < vis_i only (vis_i = T when
// there are none); below, sums over t and "kept"/"evicted" are over the tokens the row
// sees. Past vis_i the stored S is -1e30 and E, P are 0, so no formula picks them up.
//
// Preparation, once per head and query set (cached by gpu/cuda_recompute.cpp, used by cuda_recompute_pass.cpp):
//   S_it   = fl32( q_i.k_t / sqrt(d) )             dot product accumulated in double
//   E_vit  = fl32( q_i.(k^v_t - k_t) / sqrt(d) )   the logit change of variant v, from the
//                                                  key difference in double (keeps its
//                                                  precision when it is small)
//   lse_i  = log sum_t exp(S_it)                   double
//   P_it   = fl32( exp(S_it - lse_i) ),  psum_i = sum_t P_it (double),  pmax_i = max_t P_it
//   onorm2_i = ||o_i||^2  with  o_i = sum_t P_it v_t / psum_i          double
// The realised exact attention is p_it = P_it / psum_i (normalised exactly).
//
// Per selection (code c_t: 0 evicts token t, c >= 1 picks variant c - 1; E_it below is
// E_{c_t - 1, i, t}) and query row i, with u_it = expm1(E_it) (float):
//   A_i   = sum_kept P_it u_it,   Pev_i = sum_evicted P_it,   M_i = sum_kept P_it exp(E_it)
//   ubar_i = (A_i - Pev_i) / psum_i,  so that 1 + ubar_i = M_i / psum_i (the kept mass)
// and, since p^_it = P_it exp(E_it) / M_i on kept tokens,
//   p^_it - p_it = delta''_it / ((1 + ubar_i) psum_i)  with
//   delta''_it = P_it (u_it - ubar_i) (kept),  -P_it (1 + ubar_i) (evicted)     "direct form"
// (sum_t delta''_it = 0 by construction, so an all-exact or uniformly shifted selection
// gives 0 up to rounding). Rows whose kept mass is below 1/64 of the total or whose
// largest kept E exceeds 60 nats use the "shifted form" instead:
//   c_i = log(M_i / psum_i)  (log1p(ubar_i) when |ubar_i| < 1/2; a row whose kept mass
//         underflows, M_i < 1e-20 psum_i, gets c_i in the log domain in double),
//   p^_it - p_it = delta'_it / psum_i,  delta'_it = P_it expm1(E_it - c_i) (kept), -P_it (evicted).
// Where P_it has lost its precision (P < 1e-30 with a large logit rise) or exp would leave
// float's range, P_it exp(.) is formed as exp(S_it - lse_i + E_it [- c_i]) instead (the
// argument in double, the exponential as expf(hi) (1 + lo)).
//   D_i   = sum_t (p^_it - p_it) v_t   (the output change, formed directly)
//   rel_i = ||D_i||^2 / onorm2_i,  abs_i = ||D_i||^2,  tv_i = 1/2 sum_t |p^_it - p_it|,
// and the head's numbers are the means over its nq query rows, except the logit error:
//   logit error = sum_i sum_kept E_it^2 / sum_i n_kept_i.
// A row that keeps none of the tokens it sees has o^ = 0: rel_i = 1, abs_i = ||o_i||^2,
// tv_i = 1/2 (docs/model.md section 8); a selection that keeps nothing has logit error 0.
//
// Two paths form sum_t delta_it v_t (delta = delta'' or delta' of the row's form; the
// factor 1 / ((1 + ubar) psum) or 1 / psum is applied in double at the end):
//   simple  one block per (selection, row): delta in float, the sum in double.
//   tc      tensor cores (mma.sync m16n8k16, fp16 inputs, fp32 accumulation) with an
//           error-compensated split: a = sigma_i delta and b = sigma_v v are powers-of-two
//           scaled so that |a|, |b| <= 2^14, split a = a_hi + a_lo, b = b_hi + b_lo
//           (a_hi = fp16(a), a_lo = fp16(a - a_hi)); each 16-token step forms
//           a_lo b_hi + a_hi b_lo + a_hi b_hi from zero and adds it to an fp32 accumulator;
//           token chunks are summed in double and the scales divided out. The split keeps
//           22 significant bits of every product (the dropped a_lo b_lo is 2^-22 relative).
#include <cstddef>
#include <cstdint>
#include <string>

namespace tierlab::cuda {

// ---- device, memory, stream ------------------------------------------------------

struct DeviceInfo {
  int device = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  std::size_t total_bytes = 0;
};

// Is a usable device there (compute capability 9.0 or newer, which this build targets)?
// When not, *reason gets one sentence ("no CUDA device: <cudaGetErrorString>").
bool probe_device(DeviceInfo* info, std::string* reason);

// Makes device (hint mod count) the calling thread's current device (MPI ranks: hint = the
// rank's index on its node). Returns the device chosen and the count, or false with a reason.
bool select_device(int hint, int* device, int* count, std::string* reason);

// Free and total bytes of the current device.
std::string device_memory(std::size_t* free_bytes, std::size_t* total_bytes);

// An owning device allocation (move-only). allocate() frees the previous one.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::string allocate(std::size_t bytes);
  std::string ensure(std::size_t bytes);  // grows (never shrinks); contents are not kept
  void reset();
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory (for asynchronous copies), move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::string ensure(std::size_t bytes);  // grows (never shrinks); contents are not kept
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// One CUDA stream; all work of a Recomputer is ordered on it.
class Stream {
 public:
  Stream() = default;
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  std::string create();
  std::string synchronize();
  void* handle() const { return handle_; }  // a cudaStream_t

 private:
  void* handle_ = nullptr;
};

std::string copy_to_device(void* dst, const void* src, std::size_t bytes, Stream&);
std::string copy_to_host(void* dst, const void* src, std::size_t bytes, Stream&);
std::string fill_zero(void* dst, std::size_t bytes, Stream&);

// ---- views shared by host and device (trivially copyable, fixed layout) ----------

// One head (one query set) as the evaluation kernels read it. Rows are padded to
// nq_pad (a multiple of row_block), tokens to T_pad (a multiple of 32), columns of the
// packed values to d_pad (a multiple of the tc column block). Padding is zero, except
// psum = 1 on padded rows.
struct HeadView {
  std::int32_t nq, nq_pad, T, T_pad, d, d_pad, nv, row_block;
  const float* S;         // nq_pad x T_pad     logits S_it
  const float* E;         // nv x nq_pad x T_pad  logit changes E_vit
  const float* P;         // nq_pad x T_pad     P_it
  const float* V;         // T_pad x d          values (fp32)
  const void* Vpk;        // (T_pad/16) x (d_pad/8) x 32 lanes x 16 bytes: fp16 hi/lo mma fragments of sigma_v V
  const double* lse;      // nq_pad
  const double* psum;     // nq_pad
  const float* pmax;      // nq_pad
  const double* onorm2;   // nq_pad
  const std::int32_t* visible;  // nq: row i sees tokens t < visible[i]; null: all T
  float vscale;           // sigma_v, a power of two
  std::int32_t pad_;
};

// One selection of one evaluation pass. Offsets index the pass's buffers.
struct SelView {
  std::int64_t code_offset;   // byte offset of its T_pad codes (zero past T)
  std::int64_t row_offset;    // index of its row 0 in the per-(selection,row) arrays (nq_pad rows)
  std::int64_t dpart_offset;  // float offset of its D partials: n_chunks x nq_pad x d_pad (tc)
  std::int64_t part_offset;   // offset of its n_parts tv / logit-error partial sums
  std::int32_t head;          // index into the pass's HeadView array
  std::int32_t n_parts;
  std::int32_t n_chunks;
  std::int32_t pad_;
};

// A block of the row statistics (and of the simple path): one query row, up to
// kRowStatsSels selections of one head (the simple path and the partial reduction
// use nsel = 1; the reduction covers 8 rows from `row`).
struct RowItem {
  std::int32_t head, row, sel0, nsel;
};
constexpr int kRowStatsSels = 8;

// A block of the tensor-core path: row_block rows, one column block, one token chunk
// [t_begin, t_end) (multiples of 32), up to WS selections (2 for row_block 64, 4 for 16).
struct DeltaItem {
  std::int32_t head, sel0, nsel, row0;
  std::int32_t t_begin, t_end, chunk, col0;
  std::int32_t part;  // index of its tv / logit-error partial (chunk x n_rowblocks + rowblock)
  std::int32_t pad_;
};

// How delta is formed for one (selection, row); written by the row statistics.
struct RowParams {
  float k_hi, k_lo;      // direct form: ubar; shifted form: c (as hi + lo floats)
  float opw_hi, opw_lo;  // direct form: 1 + ubar; shifted form: 1 (evicted tokens: delta = -P opw)
  float sigma;           // tc path: power-of-two scale of delta (sigma |delta| <= 2^14)
  float tv_factor;       // w / psum: turns |delta| into |p^ - p|
  std::int32_t direct;   // 1: direct form, 0: shifted form
  std::int32_t kept;     // kept tokens among those the row sees
  double c_fallback;     // subtracted from S - lse + E where P exp(.) is formed from the logits (0 or c)
  double w;              // direct form: 1 / (1 + ubar); shifted form: 1
};

// Device pointers of one evaluation pass.
struct EvalArgs {
  const HeadView* heads;
  const SelView* sels;
  const std::uint8_t* codes;
  RowParams* rows;      // per (selection,row)
  float* dpart;         // tc: D partials (scaled by sigma_i sigma_v, without w / psum)
  double* tv_part;      // partial sums of |p^ - p|
  double* logit_part;   // partial sums of E^2 over kept tokens
  double* dnorm2;       // per (selection,row): ||D_i||^2
  double* results;      // per selection: rel, abs, tv, logit error
  std::int32_t* flags;  // [0] a code > nv was seen, [1] the first such selection,
                        // [2] a row's kept mass could not be normalised,
                        // [3] the tc path saw a value beyond fp16's range
};

static_assert(sizeof(HeadView) == 120 && sizeof(SelView) == 48 && sizeof(RowItem) == 16 &&
                  sizeof(DeltaItem) == 40 && sizeof(RowParams) == 48,
              "host and device views must have the same fixed layout");

// ---- preparation launchers -------------------------------------------------------

// out (nq_pad x T_pad) = fl32(Q (K - K_minus)^T / sqrt(d)) with double accumulation;
// K_minus may be null. Tokens past a row's visible limit get `masked`; padding gets 0.
// visible: nq entries on the device, or null (every row sees all T tokens).
std::string launch_logits(const float* Q, int nq, int nq_pad, const float* K, const float* K_minus, int T,
                          int T_pad, int d, const std::int32_t* visible, float masked, float* out, Stream&);
// P, lse, psum, pmax from S over the tokens each row sees (P must be zeroed beforehand).
std::string launch_softmax_rows(const float* S, int nq, int nq_pad, int T, int T_pad, const std::int32_t* visible,
                                float* P, double* lse, double* psum, float* pmax, Stream&);
// onorm2_i = ||sum_t P_it v_t||^2 / psum_i^2.
std::string launch_output_norms(const float* P, const double* psum, const float* V, int nq, int T, int T_pad,
                                int d, double* onorm2, Stream&);
// The tc path's value fragments (see HeadView::Vpk).
std::string launch_pack_values(const float* V, int T, int d, int T_pad, int d_pad, float vscale, void* Vpk,
                               Stream&);

// ---- evaluation launchers --------------------------------------------------------

// RowParams per (selection,row).
std::string launch_row_stats(const EvalArgs&, const RowItem* items, int n_items, Stream&);
// tc path for heads of one shape class (row_block 16 or 64, ntw 2, 4 or 8 n-tiles per warp:
// column blocks of 16 * ntw).
std::string launch_delta_tc(const EvalArgs&, const DeltaItem* items, int n_items, int row_block, int ntw,
                            Stream&);
// Column block and selections per block of the tc path, and how many blocks fit on an SM.
int tc_column_block(int ntw);
int tc_selections_per_block(int row_block);
int tc_blocks_per_sm(int row_block, int ntw);
// ||D_i||^2 from the tc partials (items: 8 rows from `row`, nsel = 1).
std::string launch_reduce_partials(const EvalArgs&, const RowItem* items, int n_items, Stream&);
// simple path: dnorm2, tv and logit partials per (selection,row) (items: one row, nsel = 1).
std::string launch_delta_simple(const EvalArgs&, const RowItem* items, int n_items, Stream&);
// results per selection (means over the rows).
std::string launch_finish(const EvalArgs&, int n_sels, Stream&);

}  // namespace tierlab::cuda
