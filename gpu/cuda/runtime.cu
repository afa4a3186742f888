// Device discovery, memory, streams and copies for the CUDA recomputation backend
// (launch.hpp). Every CUDA error becomes a sentence; nothing exits.
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "gpu/cuda/common.cuh"
#include "gpu/cuda/launch.hpp"

namespace tierlab::cuda {

using detail::failed;
using detail::raw;

bool probe_device(DeviceInfo* info, std::string* reason) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    if (reason) *reason = std::string("no CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (count < 1) {
    if (reason) *reason = "no CUDA device: cudaGetDeviceCount found none";
    return false;
  }
  int dev = 0;
  cudaError_t g = cudaGetDevice(&dev);
  if (g != cudaSuccess) {
    if (reason) *reason = std::string("no CUDA device: ") + cudaGetErrorString(g);
    return false;
  }
  cudaDeviceProp prop{};
  g = cudaGetDeviceProperties(&prop, dev);
  if (g != cudaSuccess) {
    if (reason) *reason = std::string("no CUDA device: ") + cudaGetErrorString(g);
    return false;
  }
  if (prop.major < 9) {
    if (reason)
      *reason = std::string("no usable CUDA device: ") + prop.name + " has compute capability " +
                std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                " but this build targets 9.0 (CMAKE_CUDA_ARCHITECTURES 90)";
    return false;
  }
  if (info) {
    info->device = dev;
    info->name = prop.name;
    info->sm_count = prop.multiProcessorCount;
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->total_bytes = prop.totalGlobalMem;
  }
  return true;
}

bool select_device(int hint, int* device, int* count, std::string* reason) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    cudaGetLastError();
    if (reason) *reason = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e) : "no CUDA device";
    return false;
  }
  const int d = (hint % n + n) % n;
  e = cudaSetDevice(d);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = "cudaSetDevice(" + std::to_string(d) + "): " + cudaGetErrorString(e);
    return false;
  }
  if (device) *device = d;
  if (count) *count = n;
  return true;
}

std::string device_memory(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::size_t f = 0, t = 0;
  const cudaError_t e = cudaMemGetInfo(&f, &t);
  if (e != cudaSuccess) return failed("cudaMemGetInfo", e);
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  return {};
}

// ---- DeviceBuffer -----------------------------------------------------------------

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

std::string DeviceBuffer::allocate(std::size_t bytes) {
  reset();
  if (bytes == 0) return {};
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    return "cudaMalloc of " + std::to_string(bytes >> 20) + " MiB failed: " + cudaGetErrorString(e) + ".";
  }
  ptr_ = p;
  bytes_ = bytes;
  return {};
}

std::string DeviceBuffer::ensure(std::size_t bytes) {
  if (bytes <= bytes_ && ptr_) return {};
  return allocate(bytes);
}

void DeviceBuffer::reset() {
  if (ptr_) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- PinnedBuffer -----------------------------------------------------------------

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

std::string PinnedBuffer::ensure(std::size_t bytes) {
  if (bytes <= bytes_ && ptr_) return {};
  if (ptr_) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
  if (bytes == 0) return {};
  // Grow geometrically: page-locking is slow, and the sizes of successive calls vary.
  const std::size_t want = bytes + bytes / 2;
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, want);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return "cudaMallocHost of " + std::to_string(want >> 20) + " MiB failed: " + cudaGetErrorString(e) + ".";
  }
  ptr_ = p;
  bytes_ = want;
  return {};
}

// ---- Stream -----------------------------------------------------------------------

Stream::~Stream() {
  if (handle_) cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
}

std::string Stream::create() {
  if (handle_) return {};
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return failed("cudaStreamCreateWithFlags", e);
  handle_ = s;
  return {};
}

std::string Stream::synchronize() {
  const cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(handle_));
  if (e != cudaSuccess) return failed("cudaStreamSynchronize", e);
  return {};
}

// ---- copies -----------------------------------------------------------------------

std::string copy_to_device(void* dst, const void* src, std::size_t bytes, Stream& s) {
  if (bytes == 0) return {};
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, raw(s));
  if (e != cudaSuccess) return failed("cudaMemcpyAsync (host to device)", e);
  return {};
}

std::string copy_to_host(void* dst, const void* src, std::size_t bytes, Stream& s) {
  if (bytes == 0) return {};
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, raw(s));
  if (e != cudaSuccess) return failed("cudaMemcpyAsync (device to host)", e);
  return {};
}

std::string fill_zero(void* dst, std::size_t bytes, Stream& s) {
  if (bytes == 0) return {};
  const cudaError_t e = cudaMemsetAsync(dst, 0, bytes, raw(s));
  if (e != cudaSuccess) return failed("cudaMemsetAsync", e);
  return {};
}

}  // namespace tierlab::cuda
