// The CPU emulator of CUDA (gpu/cuda/emulation) that the tests run the CUDA backend on:
// its barriers, warp collectives and mma.sync against plain computations, and the checks
// it makes (deadlock, launch configuration, copies outside an allocation, memory nobody
// wrote). If these hold, a kernel that passes on the emulator fails on a GPU only through
// timing, the hardware's own rounding, or a race the emulator's fixed order hides.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gpu/cuda/emulation/emulator.hpp"

namespace {

// Block-wide sum through shared memory and two barriers: thread i contributes i + 1.
__global__ void block_sum_kernel(int* out) {
  __shared__ int partial[1024];
  partial[threadIdx.x] = static_cast<int>(threadIdx.x) + 1;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// Lane l holds l * l; __shfl_down_sync's tree leaves the warp's sum in lane 0.
__global__ void warp_sum_kernel(double* out) {
  double v = static_cast<double>(threadIdx.x % 32) * static_cast<double>(threadIdx.x % 32);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = v;
}

// One warp: D = A B + C with the fragments loaded per the PTX ISA's m16n8k16 tables,
// written here from the ISA text (rows of A: groupID and groupID + 8; columns 2 t, 2 t + 1
// and + 8; B by column groupID).
__global__ void mma_kernel(const float* A, const float* B, const float* C, float* D) {
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane & 3;
  auto pack = [](float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return static_cast<std::uint32_t>(__half_as_ushort(__low2half(h))) |
           (static_cast<std::uint32_t>(__half_as_ushort(__high2half(h))) << 16);
  };
  uint4 a;
  a.x = pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
  a.y = pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
  a.z = pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
  a.w = pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
  const std::uint32_t b0 = pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
  const std::uint32_t b1 = pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
  float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  ::tierlab_emu::mma_m16n8k16(d, a, b0, b1);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// Half of the warp waits in a shuffle, the other half at the block barrier: neither can finish.
__global__ void deadlock_kernel(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1, 1);
  else __syncthreads();
}

__global__ void copy_kernel(const float* in, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i];
}

__global__ void dynamic_shared_kernel(float* out) {
  float* s = static_cast<float*>(::tierlab_emu::dynamic_shared());
  out[threadIdx.x] = s[threadIdx.x];  // nobody wrote it
}

template <class T>
T* device_array(std::size_t n) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return static_cast<T*>(p);
}

}  // namespace

// Launches kernel(out) with `n` device values of T in `out` and returns them.
template <class T>
std::vector<T> launch_and_read(dim3 grid, dim3 block, const char* name, void (*kernel)(T*), std::size_t n) {
  T* out = device_array<T>(n);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  tierlab_emu::make_launch(grid, block, 0, s, name, kernel)(out);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<T> host(n);
  REQUIRE(cudaMemcpyAsync(host.data(), out, n * sizeof(T), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  cudaFree(out);
  cudaStreamDestroy(s);
  return host;
}

TEST_CASE("barriers and shared memory: a tree reduction per block", "[cuda-emulator]") {
  tierlab_emu::reset();
  for (int v : launch_and_read<int>(dim3(3), dim3(512), "block_sum_kernel", block_sum_kernel, 3))
    CHECK(v == 512 * 513 / 2);
}

TEST_CASE("warp shuffles: a tree sum per warp", "[cuda-emulator]") {
  tierlab_emu::reset();
  for (double v : launch_and_read<double>(dim3(1), dim3(128), "warp_sum_kernel", warp_sum_kernel, 4))
    CHECK(v == 31.0 * 32.0 * 63.0 / 6.0);  // sum of l^2, l < 32
}

TEST_CASE("mma.sync m16n8k16: the fragments of the PTX layout multiply like matrices", "[cuda-emulator]") {
  tierlab_emu::reset();
  // Small integers and halves: exact in fp16, and every sum is exact in fp32.
  std::vector<float> A(16 * 16), B(16 * 8), C(16 * 8), want(16 * 8);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) A[r * 16 + k] = static_cast<float>((r * 7 + k * 3) % 11 - 5) * 0.5f;
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) B[k * 8 + n] = static_cast<float>((k * 5 + n * 13) % 9 - 4);
  for (int i = 0; i < 16 * 8; ++i) C[i] = static_cast<float>(i % 5) - 2.0f;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double s = C[r * 8 + n];
      for (int k = 0; k < 16; ++k) s += double(A[r * 16 + k]) * double(B[k * 8 + n]);
      want[r * 8 + n] = static_cast<float>(s);
    }
  std::vector<float> D(16 * 8, NAN);
  // Host memory is fine here: the kernel runs on the CPU.
  tierlab_emu::make_launch(dim3(1), dim3(32), 0, nullptr, "mma_kernel", mma_kernel)(A.data(), B.data(), C.data(),
                                                                                   D.data());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  for (int i = 0; i < 16 * 8; ++i) {
    INFO("row " << i / 8 << " column " << i % 8);
    CHECK(D[i] == want[i]);
  }
}

TEST_CASE("a deadlock fails the launch, stickily, and says where", "[cuda-emulator]") {
  tierlab_emu::reset();
  std::vector<int> out(32, 0);
  tierlab_emu::make_launch(dim3(1), dim3(32), 0, nullptr, "deadlock_kernel", deadlock_kernel)(out.data());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK_THAT(tierlab_emu::last_failure(), Catch::Contains("deadlock_kernel") && Catch::Contains("deadlock"));
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);  // sticky, as on a device
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaErrorLaunchFailure);
  cudaStreamDestroy(s);
  tierlab_emu::reset();
  CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("launch configurations are checked as on sm_90", "[cuda-emulator]") {
  tierlab_emu::reset();
  float* out = device_array<float>(1024);
  // More than 1024 threads per block.
  tierlab_emu::make_launch(dim3(1), dim3(2048), 0, nullptr, "copy_kernel", copy_kernel)(out, out, 0);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  // 64 KiB of dynamic shared memory needs the attribute raised first.
  tierlab_emu::make_launch(dim3(1), dim3(32), 64 * 1024, nullptr, "dynamic_shared_kernel", dynamic_shared_kernel)(out);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
        cudaErrorInvalidValue);  // above sm_90's 227 KiB
  cudaGetLastError();
  REQUIRE(cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) ==
          cudaSuccess);
  tierlab_emu::make_launch(dim3(1), dim3(32), 64 * 1024, nullptr, "dynamic_shared_kernel", dynamic_shared_kernel)(out);
  CHECK(cudaGetLastError() == cudaSuccess);
  // Dynamic shared memory nobody wrote reads as NaN.
  CHECK(std::isnan(out[0]));
  CHECK(std::isnan(out[31]));
  int blocks = 0;
  REQUIRE(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, dynamic_shared_kernel, 256, 100 * 1024) ==
          cudaSuccess);
  CHECK(blocks == 2);  // 228 KiB per SM, 1 KiB reserved per block
  cudaFree(out);
}

TEST_CASE("device memory: unwritten reads as NaN; copies must stay inside an allocation", "[cuda-emulator]") {
  tierlab_emu::reset();
  float* in = device_array<float>(100);
  float* out = device_array<float>(100);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<float> host(100);
  for (int i = 0; i < 100; ++i) host[i] = float(i);
  REQUIRE(cudaMemcpyAsync(in, host.data(), 50 * sizeof(float), cudaMemcpyHostToDevice, s) == cudaSuccess);
  tierlab_emu::make_launch(dim3(4), dim3(32), 0, s, "copy_kernel", copy_kernel)(in, out, 100);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<float> back(100);
  REQUIRE(cudaMemcpyAsync(back.data(), out, 100 * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
  CHECK(back[49] == 49.0f);
  CHECK(std::isnan(back[50]));  // never uploaded
  CHECK(cudaMemcpyAsync(in, host.data(), 101 * sizeof(float), cudaMemcpyHostToDevice, s) == cudaErrorInvalidValue);
  CHECK(cudaMemcpyAsync(back.data(), out + 1, 100 * sizeof(float), cudaMemcpyDeviceToHost, s) ==
        cudaErrorInvalidValue);
  CHECK(cudaMemsetAsync(in + 90, 0, 11 * sizeof(float), s) == cudaErrorInvalidValue);
  CHECK(cudaMemsetAsync(in + 90, 0, 10 * sizeof(float), s) == cudaSuccess);
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  CHECK(free_bytes <= total - 2 * 512);  // two allocations of 400 bytes, 256-byte granules
  cudaFree(in);
  cudaFree(out);
  cudaStreamDestroy(s);
}
