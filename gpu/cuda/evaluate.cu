// Evaluation kernels of the CUDA recomputation backend: per selection, the row
// statistics (c_i, sigma_i), the output change D formed directly (tensor-core or simple
// path) and the per-selection means. launch.hpp states the formulas.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "gpu/cuda/common.cuh"
#include "gpu/cuda/launch.hpp"

namespace tierlab::cuda {

namespace {

using detail::block_max;
using detail::block_sum;
using detail::delta_of;
using detail::expm1_and_exp;
using detail::launch_status;
using detail::needs_double;
using detail::raw;
using detail::warp_maxf;
using detail::warp_sum;

constexpr float kFp16Limit = 65000.0f;  // a scaled value beyond this would not fit fp16

constexpr int kRowStatsThreads = 256;

// One block per (head, query row, up to kRowStatsSels selections): M, A, Pev (launch.hpp),
// the largest |P expm1(E)| over kept tokens and the largest P over evicted ones, and the
// number of kept tokens; then c_i and sigma_i. Threads stride over groups of 4 tokens.
__global__ void __launch_bounds__(kRowStatsThreads) row_stats_kernel(EvalArgs a, const RowItem* __restrict__ items) {
  constexpr int NS = kRowStatsSels;
  constexpr int NW = kRowStatsThreads / 32;
  __shared__ double red_d[NS][3][NW];
  __shared__ float red_f[NS][3][NW];
  __shared__ int red_i[NS][NW];
  __shared__ int slow[NS];
  __shared__ double scratch[32];

  const RowItem it = items[blockIdx.x];
  const HeadView h = a.heads[it.head];
  const int r = it.row;
  const std::size_t row_off = static_cast<std::size_t>(r) * h.T_pad;
  const std::size_t plane = static_cast<std::size_t>(h.nq_pad) * h.T_pad;
  const float* __restrict__ P = h.P + row_off;
  const float* __restrict__ E = h.E + row_off;
  const float* __restrict__ S = h.S + row_off;
  const double lse = h.lse[r];
  const int nv = h.nv;
  const int vis = h.visible ? min(max(h.visible[r], 1), h.T) : h.T;  // tokens the row sees

  const std::uint8_t* codes[NS];
  double M[NS], A[NS], Pev[NS];
  float mxk[NS], mxe[NS], emax[NS];
  int kept[NS];
  bool bad = false;
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    codes[s] = a.codes + a.sels[it.sel0 + min(s, it.nsel - 1)].code_offset;
    M[s] = A[s] = Pev[s] = 0.0;
    mxk[s] = mxe[s] = 0.0f;
    emax[s] = -INFINITY;
    kept[s] = 0;
  }

  for (int t = 4 * threadIdx.x; t < h.T_pad; t += 4 * kRowStatsThreads) {
    const float4 p4 = *reinterpret_cast<const float4*>(P + t);
    const float pv[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (s < it.nsel) {
        const uchar4 c4 = *reinterpret_cast<const uchar4*>(codes[s] + t);
        const int cv[4] = {c4.x, c4.y, c4.z, c4.w};
        float m = 0.0f, aa = 0.0f, pe = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float p = pv[j];
          int code = cv[j];
          if (code > nv) {
            bad = true;
            code = nv;  // keeps the read in bounds; the call reports the bad code
          }
          if (code == 0) {
            pe += p;
            mxe[s] = fmaxf(mxe[s], p);
            continue;
          }
          kept[s] += t + j < vis;  // past vis, P = E = 0: nothing else to mask
          const float e = __ldg(E + static_cast<std::size_t>(code - 1) * plane + t + j);
          emax[s] = fmaxf(emax[s], e);
          if (needs_double(e, p)) {
            const double ex = exp(static_cast<double>(__ldg(S + t + j)) - lse + static_cast<double>(e));
            M[s] += ex;
            A[s] += ex - static_cast<double>(p);
            mxk[s] = fmaxf(mxk[s], static_cast<float>(fabs(ex - static_cast<double>(p))));
          } else {
            float ex;
            const float em1 = expm1_and_exp(e, &ex);
            m = fmaf(p, ex, m);
            const float te = p * em1;
            aa += te;
            mxk[s] = fmaxf(mxk[s], fabsf(te));
          }
        }
        M[s] += static_cast<double>(m);
        A[s] += static_cast<double>(aa);
        Pev[s] += static_cast<double>(pe);
      }
    }
  }

  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int s = 0; s < NS; ++s) {
    const double m = warp_sum(M[s]), aa = warp_sum(A[s]), pe = warp_sum(Pev[s]);
    const float fk = warp_maxf(mxk[s]), fe = warp_maxf(mxe[s]), fm = warp_maxf(emax[s]);
    int k = kept[s];
    for (int o = 16; o > 0; o >>= 1) k += __shfl_down_sync(0xffffffffu, k, o);
    if (lane == 0) {
      red_d[s][0][w] = m;
      red_d[s][1][w] = aa;
      red_d[s][2][w] = pe;
      red_f[s][0][w] = fk;
      red_f[s][1][w] = fe;
      red_f[s][2][w] = fm;
      red_i[s][w] = k;
    }
  }
  if (bad) {
    atomicOr(a.flags + 0, 1);
    atomicMin(a.flags + 1, it.sel0);
  }
  __syncthreads();

  const double psum = h.psum[r];
  const double pmax = static_cast<double>(h.pmax[r]);
  RowParams rp{};
  int n_kept = 0;
  const int s_me = threadIdx.x;
  if (s_me < it.nsel) {
    double m = 0, aa = 0, pe = 0;
    float fk = 0, fe = 0, fm = -INFINITY;
    for (int i = 0; i < NW; ++i) {
      m += red_d[s_me][0][i];
      aa += red_d[s_me][1][i];
      pe += red_d[s_me][2][i];
      fk = fmaxf(fk, red_f[s_me][0][i]);
      fe = fmaxf(fe, red_f[s_me][1][i]);
      fm = fmaxf(fm, red_f[s_me][2][i]);
      n_kept += red_i[s_me][i];
    }
    int need_slow = 0;
    rp = detail::row_params(n_kept, m, aa, pe, fk, fe, fm, psum, pmax, &need_slow);
    slow[s_me] = need_slow;
  } else if (s_me < NS) {
    slow[s_me] = 0;
  }
  __syncthreads();

  // Rows whose kept mass underflowed: c = log sum_kept exp(S + E - lse) - log psum in the
  // log domain, in double (block-wide; the branch is uniform).
  for (int s = 0; s < it.nsel; ++s) {
    if (!slow[s]) continue;
    const std::uint8_t* sel_codes = a.codes + a.sels[it.sel0 + s].code_offset;
    double lmax = -INFINITY;
    for (int t = threadIdx.x; t < vis; t += kRowStatsThreads) {
      const int code = min(static_cast<int>(sel_codes[t]), nv);
      if (code == 0) continue;
      const double x = static_cast<double>(S[t]) + static_cast<double>(E[static_cast<std::size_t>(code - 1) * plane + t]);
      lmax = fmax(lmax, x);
    }
    lmax = block_max(lmax, scratch);
    double z = 0.0;
    for (int t = threadIdx.x; t < vis; t += kRowStatsThreads) {
      const int code = min(static_cast<int>(sel_codes[t]), nv);
      if (code == 0) continue;
      const double x = static_cast<double>(S[t]) + static_cast<double>(E[static_cast<std::size_t>(code - 1) * plane + t]);
      z += exp(x - lmax);
    }
    z = block_sum(z, scratch);
    if (threadIdx.x == s) detail::set_shifted_c(&rp, (lmax - lse) + log(z) - log(psum));
  }

  if (s_me < it.nsel) {
    const int sel = it.sel0 + s_me;
    const std::size_t idx = static_cast<std::size_t>(a.sels[sel].row_offset) + r;
    if (n_kept > 0 && !(isfinite(rp.c_fallback) && isfinite(rp.k_hi) && isfinite(rp.w))) {
      atomicOr(a.flags + 2, 1);
      rp = RowParams{};
      rp.opw_hi = 1.0f;
      rp.sigma = 1.0f;
      rp.w = 1.0;
    }
    rp.kept = n_kept;
    a.rows[idx] = rp;
  }
}

// ---- tensor-core path ---------------------------------------------------------------

// D (16x8, fp32) += A (16x16, fp16, row) * B (16x8, fp16, col).
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint4& a, std::uint32_t b0, std::uint32_t b1) {
#ifdef TIERLAB_CUDA_EMULATION
  ::tierlab_emu::mma_m16n8k16(d, a, b0, b1);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
#endif
}

// 16 bytes global -> shared without passing through registers (sm_80+), and the wait
// for all such copies of this thread. (The emulator copies at once.)
#ifdef TIERLAB_CUDA_EMULATION
inline void copy_async_16(void* smem_dst, const void* gmem_src) { std::memcpy(smem_dst, gmem_src, 16); }
inline void copy_async_commit() {}
inline void copy_async_wait_all() {}
#else
__device__ __forceinline__ void copy_async_16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void copy_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
#endif

__device__ __forceinline__ std::uint32_t as_u32(__half2 h) {
  return static_cast<std::uint32_t>(__half_as_ushort(__low2half(h))) |
         (static_cast<std::uint32_t>(__half_as_ushort(__high2half(h))) << 16);
}

// Split a pair of scaled values (x0 at the lower token) into fp16 hi and lo words.
__device__ __forceinline__ void split_pair(float x0, float x1, std::uint32_t* hi, std::uint32_t* lo) {
  const __half2 h = __floats2half2_rn(x0, x1);  // low half = x0
  const float2 f = __half22float2(h);
  *hi = as_u32(h);
  *lo = as_u32(__floats2half2_rn(x0 - f.x, x1 - f.y));
}

// Shape of the tensor-core block: 8 warps; RB query rows (RB/16 m-tiles), one column
// block of 16*NTW columns (2*NTW n-tiles), WS selections; 32 tokens per step.
template <int RB, int NTW>
struct TcShape {
  static_assert(RB == 16 || RB == 64, "row block is 16 or 64");
  static_assert(NTW == 2 || NTW == 4 || NTW == 8, "n-tiles per warp is 2, 4 or 8");
  static constexpr int MT_W = RB == 64 ? 2 : 1;  // m-tiles per warp
  static constexpr int WR = RB == 64 ? 2 : 1;    // warp rows
  static constexpr int WC = 2;                   // warp columns
  static constexpr int WS = 8 / (WR * WC);       // selections per block: 2 or 4
  static constexpr int NMT = RB / 16;            // m-tiles per block
  static constexpr int NT_CB = WC * NTW;         // n-tiles per block (column block: 8 * NT_CB columns)
  static constexpr int MK = NMT * 2;             // (m-tile, 16-token half) tiles per selection and step
  static constexpr int SPW = WS * MK / 8;        // selections per writing warp
  static constexpr int A_U4 = WS * NMT * 2 * 2 * 32;  // uint4 of delta fragments per stage
  static constexpr int V_U4 = 2 * NT_CB * 32;         // uint4 of value fragments per stage
  static constexpr int V_PER_THREAD = V_U4 / 256;
  static constexpr int RED_BYTES = 8 * SPW * 2 * 8;
  static constexpr int ACC_BYTES = 8 * SPW * 2 * 32 * 8;  // per-lane tv / logit sums (double)
  static constexpr int CONST_BYTES = RB * 8 + WS * RB * 8 + RED_BYTES + ACC_BYTES + 2 * WS * RB * 16;
  static constexpr int SMEM_BYTES = 2 * (A_U4 + V_U4) * 16 + CONST_BYTES;
  static_assert(MT_W * WR * 16 == RB, "warp rows cover the row block");
  static_assert(SPW * 8 == WS * MK, "writing warps cover the tiles");
  static_assert(V_U4 % 256 == 0, "value tile is a whole number of uint4 per thread");
};

__host__ __device__ constexpr int a_index(int nmt, int sel, int mt, int kb, int hl, int lane) {
  return (((sel * nmt + mt) * 2 + kb) * 2 + hl) * 32 + lane;
}

// One block per DeltaItem. Each 32-token step: every warp forms the delta fragments of
// its (m-tile, 16-token half) tile for its selections (scaled by sigma_i, split into fp16
// hi/lo, stored in mma A-fragment order) and loads the value fragments; after one
// barrier each warp multiplies its selection's fragments for its rows and columns.
template <int RB, int NTW>
__global__ void __launch_bounds__(256, 2) delta_tc_kernel(EvalArgs a, const DeltaItem* __restrict__ items) {
  using Sh = TcShape<RB, NTW>;
  TIERLAB_DYNAMIC_SHARED(uint4, smem);
  uint4* sA = smem;                                                   // [2][A_U4]
  uint4* sV = smem + 2 * Sh::A_U4;                                    // [2][V_U4]
  double* sLse = reinterpret_cast<double*>(sV + 2 * Sh::V_U4);        // [RB]: lse (fallback)
  double* sCd = sLse + RB;                                            // [WS][RB]: c_fallback
  double* sRed = sCd + Sh::WS * RB;                                   // [8][SPW][2]
  double* sAcc = sRed + 8 * Sh::SPW * 2;                              // [8][SPW][2][32]: this lane's sums
  float4* sC = reinterpret_cast<float4*>(sAcc + 8 * Sh::SPW * 2 * 32);  // [WS][RB]: k_hi, k_lo, sigma, tv_factor
  float4* sO = sC + Sh::WS * RB;                                      // [WS][RB]: opw_hi, opw_lo, direct, -

  const DeltaItem it = items[blockIdx.x];
  const HeadView h = a.heads[it.head];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t4 = lane & 3;

  for (int i = threadIdx.x; i < Sh::WS * RB; i += 256) {
    const int s = i / RB, rr = i % RB;
    RowParams rp{};  // unused selections: delta = -P opw = 0 is never formed
    if (s < it.nsel) rp = a.rows[static_cast<std::size_t>(a.sels[it.sel0 + s].row_offset) + it.row0 + rr];
    sC[i] = make_float4(rp.k_hi, rp.k_lo, rp.sigma, rp.tv_factor);
    sO[i] = make_float4(rp.opw_hi, rp.opw_lo, rp.direct ? 1.0f : 0.0f, 0.0f);
    sCd[i] = rp.c_fallback;
  }
  for (int i = threadIdx.x; i < RB; i += 256) sLse[i] = h.lse[it.row0 + i];
  __syncthreads();

  // Writer role: tile (wmt, wkb), selections ws0 .. ws0 + SPW - 1.
  const int mk = warp % Sh::MK;
  const int wmt = mk >> 1, wkb = mk & 1;
  const int ws0 = (warp / Sh::MK) * Sh::SPW;
  const int rA = wmt * 16 + g, rB = rA + 8;  // local rows of this lane's elements
  const std::size_t offA = static_cast<std::size_t>(it.row0 + rA) * h.T_pad;
  const std::size_t offB = static_cast<std::size_t>(it.row0 + rB) * h.T_pad;
  const std::size_t plane = static_cast<std::size_t>(h.nq_pad) * h.T_pad;
  const float* __restrict__ Pg = h.P;
  // This lane's running tv and logit sums per selection live in shared memory (registers
  // are the accumulators' budget): tv at sAcc[((warp * SPW + k) * 2 + 0) * 32 + lane].
  double* my_acc = sAcc + warp * Sh::SPW * 2 * 32 + lane;
#pragma unroll
  for (int k = 0; k < Sh::SPW; ++k) {
    my_acc[(k * 2 + 0) * 32] = 0.0;
    my_acc[(k * 2 + 1) * 32] = 0.0;
  }
  bool fp16_ok = true;

  // Multiplier role: selection ws, m-tiles wr*MT_W.., n-tiles wc*NTW..
  const int ws = warp / (Sh::WR * Sh::WC);
  const int wr = (warp / Sh::WC) % Sh::WR;
  const int wc = warp % Sh::WC;
  const bool mma_active = ws < it.nsel;
  float acc[Sh::MT_W][NTW][4];
#pragma unroll
  for (int i = 0; i < Sh::MT_W; ++i)
#pragma unroll
    for (int j = 0; j < NTW; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

  const uint4* __restrict__ vsrc = static_cast<const uint4*>(h.Vpk);
  const int nt_total = h.d_pad / 8;
  const int nt0 = it.col0 / 8;

  int buf = 0;
  for (int t0 = it.t_begin; t0 < it.t_end; t0 += 32, buf ^= 1) {
    // Value fragments of this step: asynchronous copies, waited for before the barrier.
    // (buffer `buf` was last read by step - 2's products, which every warp finished
    // before it passed step - 1's barrier)
#pragma unroll
    for (int j = 0; j < Sh::V_PER_THREAD; ++j) {
      const int i = threadIdx.x + j * 256;
      const int kb = i / (Sh::NT_CB * 32), rem = i % (Sh::NT_CB * 32);
      copy_async_16(sV + buf * Sh::V_U4 + i, vsrc + (static_cast<std::size_t>(t0 / 16 + kb) * nt_total + nt0) * 32 + rem);
    }
    copy_async_commit();

    // delta fragments: lane elements (rA|rB) x (tok0, tok0+1, tok0+8, tok0+9).
    const int tok0 = t0 + wkb * 16 + 2 * t4;
    const float2 pA0 = __ldg(reinterpret_cast<const float2*>(Pg + offA + tok0));
    const float2 pB0 = __ldg(reinterpret_cast<const float2*>(Pg + offB + tok0));
    const float2 pA1 = __ldg(reinterpret_cast<const float2*>(Pg + offA + tok0 + 8));
    const float2 pB1 = __ldg(reinterpret_cast<const float2*>(Pg + offB + tok0 + 8));
#pragma unroll
    for (int k = 0; k < Sh::SPW; ++k) {
      const int s = ws0 + k;
      if (s < it.nsel) {
        const std::uint8_t* sel_codes = a.codes + a.sels[it.sel0 + s].code_offset;
        const std::uint16_t c01 = *reinterpret_cast<const std::uint16_t*>(sel_codes + tok0);
        const std::uint16_t c89 = *reinterpret_cast<const std::uint16_t*>(sel_codes + tok0 + 8);
        const int code[4] = {min(c01 & 0xff, h.nv), min(c01 >> 8, h.nv), min(c89 & 0xff, h.nv),
                             min(c89 >> 8, h.nv)};
        const float4 cA = sC[s * RB + rA], cB = sC[s * RB + rB];
        const float4 oA = sO[s * RB + rA], oB = sO[s * RB + rB];
        const detail::RowForm fA{cA.x, cA.y, oA.x, oA.y, oA.z != 0.0f};
        const detail::RowForm fB{cB.x, cB.y, oB.x, oB.y, oB.z != 0.0f};
        const double* cdA = sCd + s * RB + rA;
        const double* cdB = sCd + s * RB + rB;
        const double* lseA = sLse + rA;
        const double* lseB = sLse + rB;
        float tv = 0.0f, le = 0.0f;
        uint4 hi, lo;
        // One fragment register (two consecutive tokens of one row) at a time:
        // x = hi (rA; tok0, +1), y = (rB; tok0, +1), z = (rA; tok0 + 8, +9), w = (rB; tok0 + 8, +9).
        auto pair = [&](int code0, int code1, float2 p, std::size_t off, int t, const detail::RowForm& f, float4 cst,
                        const double* cd, const double* lse_row, std::uint32_t* h_word, std::uint32_t* l_word) {
          float e2a, e2b;
          const float d0 = delta_of(code0, p.x, h.E + off, plane, h.S + off, t, f, lse_row, cd, &e2a);
          const float d1 = delta_of(code1, p.y, h.E + off, plane, h.S + off, t + 1, f, lse_row, cd, &e2b);
          tv = fmaf(fabsf(d0) + fabsf(d1), cst.w, tv);
          le += e2a + e2b;
          const float x0 = d0 * cst.z, x1 = d1 * cst.z;
          fp16_ok = fp16_ok && fabsf(x0) < kFp16Limit && fabsf(x1) < kFp16Limit;
          split_pair(x0, x1, h_word, l_word);
        };
        pair(code[0], code[1], pA0, offA, tok0, fA, cA, cdA, lseA, &hi.x, &lo.x);
        pair(code[0], code[1], pB0, offB, tok0, fB, cB, cdB, lseB, &hi.y, &lo.y);
        pair(code[2], code[3], pA1, offA, tok0 + 8, fA, cA, cdA, lseA, &hi.z, &lo.z);
        pair(code[2], code[3], pB1, offB, tok0 + 8, fB, cB, cdB, lseB, &hi.w, &lo.w);
        my_acc[(k * 2 + 0) * 32] += static_cast<double>(tv);
        my_acc[(k * 2 + 1) * 32] += static_cast<double>(le);
        uint4* dst = sA + buf * Sh::A_U4;
        dst[a_index(Sh::NMT, s, wmt, wkb, 0, lane)] = hi;
        dst[a_index(Sh::NMT, s, wmt, wkb, 1, lane)] = lo;
      }
    }
    copy_async_wait_all();
    __syncthreads();

    if (mma_active) {
      const uint4* As = sA + buf * Sh::A_U4;
      const uint4* Vs = sV + buf * Sh::V_U4;
#pragma unroll
      for (int kb = 0; kb < 2; ++kb) {
        uint4 ahi[Sh::MT_W], alo[Sh::MT_W];
#pragma unroll
        for (int i = 0; i < Sh::MT_W; ++i) {
          const int mt = wr * Sh::MT_W + i;
          ahi[i] = As[a_index(Sh::NMT, ws, mt, kb, 0, lane)];
          alo[i] = As[a_index(Sh::NMT, ws, mt, kb, 1, lane)];
        }
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
          const uint4 b = Vs[(kb * Sh::NT_CB + wc * NTW + j) * 32 + lane];  // hi: x,y; lo: z,w
#pragma unroll
          for (int i = 0; i < Sh::MT_W; ++i) {
            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_16816(t, alo[i], b.x, b.y);  // a_lo b_hi
            mma_16816(t, ahi[i], b.z, b.w);  // a_hi b_lo
            mma_16816(t, ahi[i], b.x, b.y);  // a_hi b_hi
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] += t[q];
          }
        }
      }
    }
  }

  if (mma_active) {
    const SelView sv = a.sels[it.sel0 + ws];
    float* out = a.dpart + sv.dpart_offset + static_cast<std::size_t>(it.chunk) * h.nq_pad * h.d_pad;
#pragma unroll
    for (int i = 0; i < Sh::MT_W; ++i)
#pragma unroll
      for (int j = 0; j < NTW; ++j) {
        const int row = it.row0 + (wr * Sh::MT_W + i) * 16 + g;
        const int col = it.col0 + (wc * NTW + j) * 8 + 2 * t4;
        *reinterpret_cast<float2*>(out + static_cast<std::size_t>(row) * h.d_pad + col) =
            make_float2(acc[i][j][0], acc[i][j][1]);
        *reinterpret_cast<float2*>(out + static_cast<std::size_t>(row + 8) * h.d_pad + col) =
            make_float2(acc[i][j][2], acc[i][j][3]);
      }
  }
  if (!fp16_ok) atomicOr(a.flags + 3, 1);

  if (it.col0 == 0) {  // uniform over the block; other column blocks repeat the same sums
#pragma unroll
    for (int k = 0; k < Sh::SPW; ++k) {
      const double tv = warp_sum(my_acc[(k * 2 + 0) * 32]);
      const double le = warp_sum(my_acc[(k * 2 + 1) * 32]);
      if (lane == 0) {
        sRed[(warp * Sh::SPW + k) * 2 + 0] = tv;
        sRed[(warp * Sh::SPW + k) * 2 + 1] = le;
      }
    }
    __syncthreads();
    if (threadIdx.x < it.nsel) {
      const int s = threadIdx.x;
      double tv = 0.0, le = 0.0;
      for (int w = 0; w < 8; ++w)
        for (int k = 0; k < Sh::SPW; ++k)
          if ((w / Sh::MK) * Sh::SPW + k == s) {
            tv += sRed[(w * Sh::SPW + k) * 2 + 0];
            le += sRed[(w * Sh::SPW + k) * 2 + 1];
          }
      const SelView sv = a.sels[it.sel0 + s];
      a.tv_part[sv.part_offset + it.part] = tv;
      a.logit_part[sv.part_offset + it.part] = le;
    }
  }
}

template <int RB, int NTW>
std::string launch_tc(const EvalArgs& a, const DeltaItem* items, int n_items, Stream& s) {
  using Sh = TcShape<RB, NTW>;
  const cudaError_t e =
      cudaFuncSetAttribute(delta_tc_kernel<RB, NTW>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::SMEM_BYTES);
  if (e != cudaSuccess) return detail::failed("cudaFuncSetAttribute (delta_tc shared memory)", e);
  TIERLAB_LAUNCH(static_cast<unsigned>(n_items), 256, Sh::SMEM_BYTES, raw(s), delta_tc_kernel<RB, NTW>)(a, items);
  return launch_status("delta_tc");
}

template <int RB, int NTW>
int blocks_per_sm() {
  using Sh = TcShape<RB, NTW>;
  if (cudaFuncSetAttribute(delta_tc_kernel<RB, NTW>, cudaFuncAttributeMaxDynamicSharedMemorySize, Sh::SMEM_BYTES) !=
      cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, delta_tc_kernel<RB, NTW>, 256, Sh::SMEM_BYTES) !=
      cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return n > 0 ? n : 1;
}

// ---- simple path and the reductions ------------------------------------------------

constexpr int kSimpleThreads = 256;
constexpr int kSimpleCols = 4;  // columns per thread: d <= 1024

// One block per (selection, row): delta of 256 tokens at a time into shared memory, then
// each thread accumulates its columns of sum_t delta v in double.
__global__ void __launch_bounds__(kSimpleThreads) delta_simple_kernel(EvalArgs a, const RowItem* __restrict__ items) {
  __shared__ float dl[kSimpleThreads];
  __shared__ double scratch[32];
  const RowItem it = items[blockIdx.x];
  const HeadView h = a.heads[it.head];
  const SelView sv = a.sels[it.sel0];
  const int r = it.row;
  const std::size_t row_off = static_cast<std::size_t>(r) * h.T_pad;
  const std::size_t plane = static_cast<std::size_t>(h.nq_pad) * h.T_pad;
  const std::size_t idx = static_cast<std::size_t>(sv.row_offset) + r;
  const RowParams rp = a.rows[idx];
  const detail::RowForm form{rp.k_hi, rp.k_lo, rp.opw_hi, rp.opw_lo, rp.direct != 0};
  const double* lse = h.lse + r;
  const std::uint8_t* codes = a.codes + sv.code_offset;

  double acc[kSimpleCols];
#pragma unroll
  for (int j = 0; j < kSimpleCols; ++j) acc[j] = 0.0;
  double tv = 0.0, le = 0.0;
  for (int t0 = 0; t0 < h.T; t0 += kSimpleThreads) {
    const int t = t0 + threadIdx.x;
    float dv = 0.0f;
    if (t < h.T) {
      float e2 = 0.0f;
      dv = delta_of(min(static_cast<int>(codes[t]), h.nv), h.P[row_off + t], h.E + row_off, plane, h.S + row_off, t,
                    form, lse, &a.rows[idx].c_fallback, &e2);
      tv += fabs(static_cast<double>(dv));
      le += static_cast<double>(e2);
    }
    __syncthreads();  // the previous tile is no longer read
    dl[threadIdx.x] = dv;
    __syncthreads();
    const int n = min(kSimpleThreads, h.T - t0);
#pragma unroll
    for (int j = 0; j < kSimpleCols; ++j) {
      const int c = threadIdx.x + j * kSimpleThreads;
      if (c < h.d) {
        double s = 0.0;
        for (int k = 0; k < n; ++k)
          s = fma(static_cast<double>(dl[k]), static_cast<double>(h.V[static_cast<std::size_t>(t0 + k) * h.d + c]), s);
        acc[j] += s;
      }
    }
  }
  double n2 = 0.0;
#pragma unroll
  for (int j = 0; j < kSimpleCols; ++j) n2 += acc[j] * acc[j];
  n2 = block_sum(n2, scratch);
  tv = block_sum(tv, scratch);
  le = block_sum(le, scratch);
  if (threadIdx.x == 0) {
    const double f = rp.w / h.psum[r];  // D = f sum_t delta v,  |p^ - p| = f |delta|
    a.dnorm2[idx] = n2 * f * f;
    a.tv_part[sv.part_offset + r] = tv * f;
    a.logit_part[sv.part_offset + r] = le;
  }
}

// tc path: ||D_i||^2 = ||sum_chunks partial||^2 (w_i / (sigma_i sigma_v psum_i))^2; a warp per row.
__global__ void __launch_bounds__(256) reduce_partials_kernel(EvalArgs a, const RowItem* __restrict__ items) {
  const RowItem it = items[blockIdx.x];
  const HeadView h = a.heads[it.head];
  const SelView sv = a.sels[it.sel0];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r = it.row + warp;
  if (r >= h.nq) return;  // whole warps only; no block barrier below
  const float* base = a.dpart + sv.dpart_offset + static_cast<std::size_t>(r) * h.d_pad;
  const std::size_t chunk_stride = static_cast<std::size_t>(h.nq_pad) * h.d_pad;
  double s2 = 0.0;
  for (int c = lane; c < h.d; c += 32) {
    double x = 0.0;
    for (int ch = 0; ch < sv.n_chunks; ++ch) x += static_cast<double>(base[ch * chunk_stride + c]);
    s2 += x * x;
  }
  s2 = warp_sum(s2);
  if (lane == 0) {
    const std::size_t idx = static_cast<std::size_t>(sv.row_offset) + r;
    const RowParams& rp = a.rows[idx];
    const double f = rp.w / (static_cast<double>(rp.sigma) * static_cast<double>(h.vscale) * h.psum[r]);
    a.dnorm2[idx] = s2 * f * f;
  }
}

__device__ __forceinline__ double rel_of(double abs, double on2) {
  if (on2 > 0.0) return abs / on2;
  return abs == 0.0 ? 0.0 : INFINITY;
}

// One block per selection: the means over the rows (launch.hpp). A row that keeps none of
// the tokens it sees has o^ = 0: e = 1 and abs = ||o||^2 exactly.
__global__ void __launch_bounds__(256) finish_kernel(EvalArgs a) {
  __shared__ double scratch[32];
  const int sel = blockIdx.x;
  const SelView sv = a.sels[sel];
  const HeadView h = a.heads[sv.head];
  double rel = 0.0, ab = 0.0, tv = 0.0, le = 0.0, kept = 0.0;
  for (int r = threadIdx.x; r < h.nq; r += blockDim.x) {
    const std::size_t idx = static_cast<std::size_t>(sv.row_offset) + r;
    const double d2 = a.dnorm2[idx];
    const double o2 = h.onorm2[r];
    const int k = a.rows[idx].kept;
    rel += k > 0 ? rel_of(d2, o2) : 1.0;
    ab += k > 0 ? d2 : o2;
    kept += static_cast<double>(k);
  }
  for (int k = threadIdx.x; k < sv.n_parts; k += blockDim.x) {
    tv += a.tv_part[sv.part_offset + k];
    le += a.logit_part[sv.part_offset + k];
  }
  rel = block_sum(rel, scratch);
  ab = block_sum(ab, scratch);
  tv = block_sum(tv, scratch);
  le = block_sum(le, scratch);
  kept = block_sum(kept, scratch);
  if (threadIdx.x == 0) {
    const double nq = static_cast<double>(h.nq);
    double* out = a.results + 4 * static_cast<std::size_t>(sel);
    out[0] = rel / nq;
    out[1] = ab / nq;
    out[2] = kept > 0.0 ? 0.5 * tv / nq : 0.5;  // nothing kept anywhere: tv = 1/2 exactly
    out[3] = kept > 0.0 ? le / kept : 0.0;
  }
}

}  // namespace

std::string launch_row_stats(const EvalArgs& a, const RowItem* items, int n_items, Stream& s) {
  if (n_items <= 0) return {};
  TIERLAB_LAUNCH(static_cast<unsigned>(n_items), kRowStatsThreads, 0, raw(s), row_stats_kernel)(a, items);
  return launch_status("row_stats");
}

std::string launch_delta_tc(const EvalArgs& a, const DeltaItem* items, int n_items, int row_block, int ntw,
                            Stream& s) {
  if (n_items <= 0) return {};
  if (row_block == 64) {
    if (ntw == 8) return launch_tc<64, 8>(a, items, n_items, s);
    if (ntw == 4) return launch_tc<64, 4>(a, items, n_items, s);
    if (ntw == 2) return launch_tc<64, 2>(a, items, n_items, s);
  } else if (row_block == 16) {
    if (ntw == 8) return launch_tc<16, 8>(a, items, n_items, s);
    if (ntw == 4) return launch_tc<16, 4>(a, items, n_items, s);
    if (ntw == 2) return launch_tc<16, 2>(a, items, n_items, s);
  }
  return "launch_delta_tc: no kernel for row block " + std::to_string(row_block) + " and " + std::to_string(ntw) +
         " n-tiles per warp.";
}

int tc_column_block(int ntw) { return 16 * ntw; }

int tc_selections_per_block(int row_block) { return row_block == 64 ? TcShape<64, 8>::WS : TcShape<16, 8>::WS; }

int tc_blocks_per_sm(int row_block, int ntw) {
  if (row_block == 64) {
    if (ntw == 8) return blocks_per_sm<64, 8>();
    if (ntw == 4) return blocks_per_sm<64, 4>();
    return blocks_per_sm<64, 2>();
  }
  if (ntw == 8) return blocks_per_sm<16, 8>();
  if (ntw == 4) return blocks_per_sm<16, 4>();
  return blocks_per_sm<16, 2>();
}

std::string launch_reduce_partials(const EvalArgs& a, const RowItem* items, int n_items, Stream& s) {
  if (n_items <= 0) return {};
  TIERLAB_LAUNCH(static_cast<unsigned>(n_items), 256, 0, raw(s), reduce_partials_kernel)(a, items);
  return launch_status("reduce_partials");
}

std::string launch_delta_simple(const EvalArgs& a, const RowItem* items, int n_items, Stream& s) {
  if (n_items <= 0) return {};
  TIERLAB_LAUNCH(static_cast<unsigned>(n_items), kSimpleThreads, 0, raw(s), delta_simple_kernel)(a, items);
  return launch_status("delta_simple");
}

std::string launch_finish(const EvalArgs& a, int n_sels, Stream& s) {
  if (n_sels <= 0) return {};
  TIERLAB_LAUNCH(static_cast<unsigned>(n_sels), 256, 0, raw(s), finish_kernel)(a);
  return launch_status("finish");
}

}  // namespace tierlab::cuda
