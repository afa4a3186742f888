#pragma once
// Helpers shared by the CUDA recomputation sources (private to gpu/cuda).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "gpu/cuda/element.cuh"
#include "gpu/cuda/launch.hpp"

// Kernel launches and dynamic shared memory are written through these two macros so that
// the same sources also build as C++ against the CPU emulator (emulation/emulator.hpp),
// which the tests run where there is no GPU.
//   TIERLAB_LAUNCH(grid, block, shared_bytes, stream, kernel)(arguments...)
//   TIERLAB_DYNAMIC_SHARED(type, name);   // extern __shared__ type name[];
#ifdef TIERLAB_CUDA_EMULATION
#define TIERLAB_LAUNCH(grid, block, smem, stream, ...) \
  ::tierlab_emu::make_launch(grid, block, smem, stream, #__VA_ARGS__, &__VA_ARGS__)
#define TIERLAB_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::tierlab_emu::dynamic_shared())
#else
#define TIERLAB_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#define TIERLAB_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

namespace tierlab::cuda::detail {

inline std::string failed(const char* call, cudaError_t e) {
  return std::string(call) + " failed: " + cudaGetErrorString(e) + ".";
}

// After a kernel launch: the launch error, if any, as a sentence.
inline std::string launch_status(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return {};
  return std::string("Launching the ") + kernel + " kernel failed: " + cudaGetErrorString(e) + ".";
}

inline cudaStream_t raw(const Stream& s) { return static_cast<cudaStream_t>(s.handle()); }

inline unsigned blocks_for(std::size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// ---- reductions (blockDim.x a multiple of 32; every thread of the block must call) ----

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;  // complete in lane 0
}

__device__ __forceinline__ double warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;  // complete in lane 0
}

__device__ __forceinline__ float warp_maxf(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;  // complete in lane 0
}

// Block-wide sum, the same value (summed in the same order) in every thread.
// scratch: 32 doubles of shared memory.
__device__ __forceinline__ double block_sum(double v, double* scratch) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[w] = v;
  __syncthreads();
  double s = 0.0;
  for (int i = 0; i < nw; ++i) s += scratch[i];
  return s;
}

__device__ __forceinline__ double block_max(double v, double* scratch) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[w] = v;
  __syncthreads();
  double s = scratch[0];
  for (int i = 1; i < nw; ++i) s = fmax(s, scratch[i]);
  return s;
}

}  // namespace tierlab::cuda::detail
