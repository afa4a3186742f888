#pragma once
// A CPU emulator of the small part of CUDA that gpu/cuda uses, so that the CUDA backend's own
// kernels and host code (not a transcription of them) run and are tested on a machine
// without a GPU. It is test infrastructure: the library built with it
// (tierlab_recompute_emulated) is linked only by tests.
//
// Model of execution. A launch runs its blocks one after another on each OS thread (OpenMP
// shares the blocks among threads); the threads of a block are fibers (Boost.Context) that
// run until they reach __syncthreads, a warp collective (__shfl_*_sync, mma.sync) or their
// end. A barrier releases when every live thread of the block (or lane of the warp) has
// arrived; when no fiber can move, the launch fails with "deadlock" and says where. Warp
// collectives require all 32 lanes (the kernels use full masks only).
//
// What it checks that a GPU would only show as wrong numbers or a crash:
//   - device memory: every cudaMalloc is its own mapping, with an inaccessible page right
//     after the allocation (rounded up to 256 bytes, as cudaMalloc aligns), so an overrun
//     stops the test with a message naming the kernel; new allocations and each block's
//     dynamic shared memory are filled with 0xFF bytes (NaN as float or double), so a read
//     of memory nobody wrote shows up in the results;
//   - copies and memsets must lie inside one device allocation;
//   - launch configurations: block size, grid size, dynamic shared memory against
//     cudaFuncAttributeMaxDynamicSharedMemorySize (48 KiB unless raised) and the 227 KiB
//     limit of sm_90;
//   - deadlocks, and warp collectives with inactive lanes.
// Races: between two synchronisations the threads of a block run one after another, in the
// order TIERLAB_CUDA_EMULATOR_ORDER says (forward, reverse or shuffle); a kernel without races
// gives the same bits in every order, which the tests compare.
// The emulated device (compute capability 9.0, 4 SMs) has 8 GiB of memory, or
// TIERLAB_CUDA_EMULATOR_MEMORY_MB, so that a test can make memory short.
// Numerics: float and double arithmetic are the host's (IEEE, round to nearest; expf and
// friends from glibc, not CUDA's libdevice, so last-bit differences are expected). fp16
// is _Float16. mma.sync m16n8k16 (fp16 in, fp32 accumulate) forms each output as the fp32
// accumulator plus the 16 exact products added one at a time in fp32 (the PTX ISA fixes the
// fragment layout, not the order or precision of the hardware's sum; this is a pessimistic
// model of it).
#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- the language -------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Static shared arrays: one per OS thread, shared by the fibers (threads) of the block it runs.
#define __shared__ static thread_local

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(4) uchar4 {
  unsigned char x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// Device overloads of min and max that CUDA puts in the global namespace.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

namespace tierlab_emu {

struct ThreadContext {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};

// The running emulated thread (valid inside a kernel only).
ThreadContext& current();
void syncthreads();
// Warp collective: deposits `bytes` (at most 32) of this lane, waits for all 32 lanes and
// returns the 32 deposits (32 bytes apart), valid until this lane's next collective.
const unsigned char* warp_gather(const void* mine, std::size_t bytes, unsigned mask, const char* what);
int lane_id();
void* dynamic_shared();
// D = A B + C of mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 for this lane's
// fragments (PTX ISA layout); d holds C on entry.
void mma_m16n8k16(float (&d)[4], const uint4& a, std::uint32_t b0, std::uint32_t b1);

// Forgets a sticky launch failure (as cudaDeviceReset would; for tests of the emulator).
void reset();
// The emulator's words for the first failure since the last reset ("" when none).
std::string last_failure();

using Body = std::function<void()>;
// Runs `body` for every thread of every block; records a launch error for cudaGetLastError.
void run_grid(const char* name, const void* key, dim3 grid, dim3 block, std::size_t smem, const Body& body);

template <class... P>
struct Launch {
  void (*kernel)(P...);
  dim3 grid, block;
  std::size_t smem;
  const char* name;
  template <class... A>
  void operator()(A&&... a) const {
    const std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    auto* k = kernel;
    run_grid(name, reinterpret_cast<const void*>(k), grid, block, smem, [&args, k] { std::apply(k, args); });
  }
};

template <class... P, class S>
Launch<P...> make_launch(dim3 grid, dim3 block, std::size_t smem, S /*stream: work is synchronous*/,
                         const char* name, void (*kernel)(P...)) {
  return Launch<P...>{kernel, grid, block, smem, name};
}

}  // namespace tierlab_emu

#define threadIdx (::tierlab_emu::current().thread_idx)
#define blockIdx (::tierlab_emu::current().block_idx)
#define blockDim (::tierlab_emu::current().block_dim)
#define gridDim (::tierlab_emu::current().grid_dim)

inline void __syncthreads() { ::tierlab_emu::syncthreads(); }

template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta) {
  static_assert(sizeof(T) <= 32 && std::is_trivially_copyable_v<T>);
  const unsigned char* all = ::tierlab_emu::warp_gather(&v, sizeof(T), mask, "__shfl_down_sync");
  const unsigned src = static_cast<unsigned>(::tierlab_emu::lane_id()) + delta;
  if (src < 32) std::memcpy(&v, all + 32 * src, sizeof(T));
  return v;
}

template <class T>
T __ldg(const T* p) {
  return *p;
}

inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
inline int atomicMin(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

// ---- fp16 ----------------------------------------------------------------------------

using __half = _Float16;
struct alignas(4) __half2 {
  __half x, y;  // x is the low half
};
inline __half __float2half_rn(float f) { return static_cast<_Float16>(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half2 __floats2half2_rn(float a, float b) { return {static_cast<_Float16>(a), static_cast<_Float16>(b)}; }
inline float2 __half22float2(__half2 h) { return {static_cast<float>(h.x), static_cast<float>(h.y)}; }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline unsigned short __half_as_ushort(__half h) {
  unsigned short u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}

// ---- the runtime API -----------------------------------------------------------------

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamNonBlocking = 1;

struct CUstream_st;
using cudaStream_t = CUstream_st*;

struct cudaDeviceProp {
  char name[256];
  int major, minor;
  int multiProcessorCount;
  std::size_t totalGlobalMem;
};

const char* cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int*);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int);
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);
cudaError_t cudaMalloc(void**, std::size_t);
cudaError_t cudaFree(void*);
cudaError_t cudaMallocHost(void**, std::size_t);
cudaError_t cudaFreeHost(void*);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t*, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t, cudaStream_t);

namespace tierlab_emu {
cudaError_t set_function_attribute(const void* key, cudaFuncAttribute, int value);
cudaError_t occupancy(int* blocks, const void* key, int block_size, std::size_t smem);
}  // namespace tierlab_emu

template <class F>
cudaError_t cudaFuncSetAttribute(F* f, cudaFuncAttribute attr, int value) {
  return ::tierlab_emu::set_function_attribute(reinterpret_cast<const void*>(f), attr, value);
}
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F* f, int block_size, std::size_t smem) {
  return ::tierlab_emu::occupancy(n, reinterpret_cast<const void*>(f), block_size, smem);
}
