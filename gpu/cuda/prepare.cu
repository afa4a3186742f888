// Preparation kernels of the CUDA recomputation backend: what is computed once per head
// and query set (launch.hpp states the formulas). Simple kernels in double precision:
// they run once per cached head, not per selection.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "gpu/cuda/common.cuh"
#include "gpu/cuda/launch.hpp"

namespace tierlab::cuda {

namespace {

using detail::block_max;
using detail::block_sum;
using detail::blocks_for;
using detail::launch_status;
using detail::raw;

constexpr int kLogitTile = 64;  // rows and tokens per block
constexpr int kLogitK = 16;     // head-dimension slice per step

// out[r][t] = fl32(sum_j Q[r][j] (K[t][j] - Km[t][j]) * inv_sqrt_d), double accumulation;
// `masked` past row r's visible limit, 0 on padding.
// 256 threads as 16 x 16, each computing 4 x 4 outputs of the 64 x 64 tile.
__global__ void __launch_bounds__(256) logits_kernel(const float* __restrict__ Q, int nq, const float* __restrict__ K,
                                                     const float* __restrict__ Km, int T, int d, double inv_sqrt_d,
                                                     const std::int32_t* __restrict__ visible, float masked,
                                                     float* __restrict__ out, int nq_pad, int T_pad) {
  __shared__ double qs[kLogitK][kLogitTile + 1];
  __shared__ double ks[kLogitK][kLogitTile + 1];
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int row0 = blockIdx.y * kLogitTile, tok0 = blockIdx.x * kLogitTile;
  double acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;

  for (int k0 = 0; k0 < d; k0 += kLogitK) {
    for (int i = threadIdx.x; i < kLogitTile * kLogitK; i += blockDim.x) {
      const int rr = i / kLogitK, kk = i % kLogitK;
      const int r = row0 + rr, t = tok0 + rr, k = k0 + kk;
      qs[kk][rr] = (r < nq && k < d) ? static_cast<double>(Q[static_cast<std::size_t>(r) * d + k]) : 0.0;
      double kv = 0.0;
      if (t < T && k < d) {
        kv = static_cast<double>(K[static_cast<std::size_t>(t) * d + k]);
        if (Km) kv -= static_cast<double>(Km[static_cast<std::size_t>(t) * d + k]);
      }
      ks[kk][rr] = kv;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kLogitK; ++kk) {
      double a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = qs[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = ks[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = row0 + ty + 16 * i, t = tok0 + tx + 16 * j;
      if (r < nq_pad && t < T_pad) {
        float v = 0.0f;
        if (r < nq && t < T) v = (visible && t >= visible[r]) ? masked : static_cast<float>(acc[i][j] * inv_sqrt_d);
        out[static_cast<std::size_t>(r) * T_pad + t] = v;
      }
    }
}

// One block per row: lse = log sum exp(S) in double, P = fl32(exp(S - lse)), psum, pmax,
// over the tokens the row sees.
__global__ void __launch_bounds__(256) softmax_rows_kernel(const float* __restrict__ S, int nq, int T, int T_pad,
                                                           const std::int32_t* __restrict__ visible,
                                                           float* __restrict__ P, double* __restrict__ lse_out,
                                                           double* __restrict__ psum_out, float* __restrict__ pmax_out) {
  __shared__ double scratch[32];
  const int r = blockIdx.x;
  if (r >= nq) {  // padded row: P stays zero; psum = 1 keeps every division defined
    if (threadIdx.x == 0) {
      lse_out[r] = 0.0;
      psum_out[r] = 1.0;
      pmax_out[r] = 0.0f;
    }
    return;
  }
  const float* s = S + static_cast<std::size_t>(r) * T_pad;
  const int vis = visible ? min(max(visible[r], 1), T) : T;
  double m = -INFINITY;
  for (int t = threadIdx.x; t < vis; t += blockDim.x) m = fmax(m, static_cast<double>(s[t]));
  m = block_max(m, scratch);
  double z = 0.0;
  for (int t = threadIdx.x; t < vis; t += blockDim.x) z += exp(static_cast<double>(s[t]) - m);
  z = block_sum(z, scratch);
  const double lse = m + log(z);
  float* p_row = P + static_cast<std::size_t>(r) * T_pad;
  double ps = 0.0, pm = 0.0;
  for (int t = threadIdx.x; t < T_pad; t += blockDim.x) {
    const float p = t < vis ? static_cast<float>(exp(static_cast<double>(s[t]) - lse)) : 0.0f;
    p_row[t] = p;
    ps += static_cast<double>(p);
    pm = fmax(pm, static_cast<double>(p));
  }
  ps = block_sum(ps, scratch);
  pm = block_max(pm, scratch);
  if (threadIdx.x == 0) {
    lse_out[r] = lse;
    psum_out[r] = ps;
    pmax_out[r] = static_cast<float>(pm);
  }
}

constexpr int kNormRows = 8;  // query rows per block of output_norms_kernel

// onorm2[r] = ||sum_t P[r][t] V[t][:]||^2 / psum[r]^2, double accumulation; threads over
// columns, kNormRows rows per block so that each value is read once per block.
__global__ void __launch_bounds__(128) output_norms_kernel(const float* __restrict__ P, const double* __restrict__ psum,
                                                           const float* __restrict__ V, int nq, int T, int T_pad, int d,
                                                           double* __restrict__ onorm2) {
  __shared__ double scratch[32];
  const int r0 = blockIdx.x * kNormRows;
  const int nr = min(kNormRows, nq - r0);
  double sq[kNormRows];
#pragma unroll
  for (int i = 0; i < kNormRows; ++i) sq[i] = 0.0;
  for (int c0 = 0; c0 < d; c0 += blockDim.x) {
    const int c = c0 + threadIdx.x;
    double o[kNormRows];
#pragma unroll
    for (int i = 0; i < kNormRows; ++i) o[i] = 0.0;
    if (c < d) {
      for (int t = 0; t < T; ++t) {
        const double v = static_cast<double>(V[static_cast<std::size_t>(t) * d + c]);
#pragma unroll
        for (int i = 0; i < kNormRows; ++i)
          if (i < nr) o[i] = fma(static_cast<double>(P[static_cast<std::size_t>(r0 + i) * T_pad + t]), v, o[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kNormRows; ++i) sq[i] += o[i] * o[i];
  }
#pragma unroll
  for (int i = 0; i < kNormRows; ++i) {
    const double total = block_sum(sq[i], scratch);
    if (threadIdx.x == 0 && i < nr) {
      const double ps = psum[r0 + i];
      onorm2[r0 + i] = total / (ps * ps);
    }
  }
}

__device__ __forceinline__ std::uint32_t pack_halves(__half lo, __half hi) {
  return static_cast<std::uint32_t>(__half_as_ushort(lo)) | (static_cast<std::uint32_t>(__half_as_ushort(hi)) << 16);
}

// One thread per (16-token block kb, 8-column tile nt, lane): the B fragment of
// mma.m16n8k16 (b0,b1: tokens 2*(lane%4) + {0,1}; b2,b3: + 8; column lane/4) of
// sigma_v V, split into fp16 hi and lo words: {hi(b0,b1), hi(b2,b3), lo(b0,b1), lo(b2,b3)}.
__global__ void __launch_bounds__(256) pack_values_kernel(const float* __restrict__ V, int T, int d, int T_pad,
                                                          int d_pad, float vscale, uint4* __restrict__ out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int n_tiles = d_pad / 8;
  const std::size_t total = static_cast<std::size_t>(T_pad / 16) * n_tiles * 32;
  if (i >= total) return;
  const int lane = static_cast<int>(i % 32);
  const std::size_t q = i / 32;
  const int nt = static_cast<int>(q % n_tiles);
  const int kb = static_cast<int>(q / n_tiles);
  const int g = lane >> 2, t4 = lane & 3;
  const int c = nt * 8 + g;
  const int base = kb * 16 + 2 * t4;
  const int k[4] = {base, base + 1, base + 8, base + 9};
  __half hi[4], lo[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float x = (k[j] < T && c < d) ? V[static_cast<std::size_t>(k[j]) * d + c] * vscale : 0.0f;
    hi[j] = __float2half_rn(x);
    lo[j] = __float2half_rn(x - __half2float(hi[j]));
  }
  uint4 w;
  w.x = pack_halves(hi[0], hi[1]);
  w.y = pack_halves(hi[2], hi[3]);
  w.z = pack_halves(lo[0], lo[1]);
  w.w = pack_halves(lo[2], lo[3]);
  out[i] = w;
}

}  // namespace

std::string launch_logits(const float* Q, int nq, int nq_pad, const float* K, const float* K_minus, int T, int T_pad,
                          int d, const std::int32_t* visible, float masked, float* out, Stream& s) {
  if (nq < 1 || T < 1 || d < 1 || nq_pad < nq || T_pad < T) return "launch_logits: invalid sizes.";
  const dim3 grid(blocks_for(static_cast<std::size_t>(T_pad), kLogitTile),
                  blocks_for(static_cast<std::size_t>(nq_pad), kLogitTile));
  if (grid.y > 65535u) return "launch_logits: too many query rows for one launch.";
  TIERLAB_LAUNCH(grid, 256, 0, raw(s), logits_kernel)(Q, nq, K, K_minus, T, d, 1.0 / std::sqrt(static_cast<double>(d)),
                                          visible, masked, out, nq_pad, T_pad);
  return launch_status("logits");
}

std::string launch_softmax_rows(const float* S, int nq, int nq_pad, int T, int T_pad, const std::int32_t* visible,
                                float* P, double* lse, double* psum, float* pmax, Stream& s) {
  if (nq < 1 || T < 1 || nq_pad < nq || T_pad < T) return "launch_softmax_rows: invalid sizes.";
  TIERLAB_LAUNCH(static_cast<unsigned>(nq_pad), 256, 0, raw(s), softmax_rows_kernel)(S, nq, T, T_pad, visible, P, lse, psum,
                                                                          pmax);
  return launch_status("softmax_rows");
}

std::string launch_output_norms(const float* P, const double* psum, const float* V, int nq, int T, int T_pad, int d,
                                double* onorm2, Stream& s) {
  if (nq < 1 || T < 1 || d < 1 || T_pad < T) return "launch_output_norms: invalid sizes.";
  TIERLAB_LAUNCH(blocks_for(static_cast<std::size_t>(nq), kNormRows), 128, 0, raw(s), output_norms_kernel)(P, psum, V, nq, T,
                                                                                               T_pad, d, onorm2);
  return launch_status("output_norms");
}

std::string launch_pack_values(const float* V, int T, int d, int T_pad, int d_pad, float vscale, void* Vpk,
                               Stream& s) {
  if (T < 1 || d < 1 || T_pad < T || T_pad % 16 != 0 || d_pad < d || d_pad % 8 != 0)
    return "launch_pack_values: invalid sizes.";
  const std::size_t total = static_cast<std::size_t>(T_pad / 16) * (d_pad / 8) * 32;
  TIERLAB_LAUNCH(blocks_for(total, 256), 256, 0, raw(s), pack_values_kernel)(V, T, d, T_pad, d_pad, vscale,
                                                                   static_cast<uint4*>(Vpk));
  return launch_status("pack_values");
}

}  // namespace tierlab::cuda
