// The CUDA emulator (emulator.hpp): fibers for the threads of a block, barriers, warp
// collectives, mma.sync, guarded device memory and the runtime calls gpu/cuda makes.
#include "gpu/cuda/emulation/emulator.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace ctx = boost::context;

namespace tierlab_emu {
namespace {

// ---- errors ----------------------------------------------------------------------------

std::mutex g_mutex;               // guards everything below that is not thread_local
cudaError_t g_last = cudaSuccess;  // for cudaGetLastError
cudaError_t g_sticky = cudaSuccess;
std::string g_detail;  // the emulator's words for the last failure

void fail(cudaError_t e, const std::string& detail, bool sticky) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_last == cudaSuccess) g_last = e;
  if (sticky && g_sticky == cudaSuccess) g_sticky = e;
  if (g_detail.empty()) g_detail = detail;
  std::fprintf(stderr, "tierlab CUDA emulator: %s\n", detail.c_str());
}

cudaError_t sticky() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_sticky;
}

// ---- device memory ---------------------------------------------------------------------

// The emulated device's memory: 8 GiB, or TIERLAB_CUDA_EMULATOR_MEMORY_MB (read at each
// call, so that a test can make memory short).
std::size_t total_bytes() {
  const char* env = std::getenv("TIERLAB_CUDA_EMULATOR_MEMORY_MB");
  if (env && *env) return static_cast<std::size_t>(std::strtoull(env, nullptr, 10)) << 20;
  return std::size_t(8) << 30;
}

struct Mapping {
  void* base;
  std::size_t length;  // of the mapping, guard page included
  std::size_t bytes;   // asked for
};
std::map<std::uintptr_t, Mapping> g_device;  // by user pointer
std::size_t g_used = 0;

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// The device allocation holding [p, p + n), or nullptr.
const Mapping* find_device(const void* p, std::size_t n) {
  const auto u = reinterpret_cast<std::uintptr_t>(p);
  auto it = g_device.upper_bound(u);
  if (it == g_device.begin()) return nullptr;
  --it;
  if (u < it->first || u + n > it->first + it->second.bytes) return nullptr;
  return &it->second;
}

// Whether [p, p + n) lies in one device allocation; if not, says so (an error value, not sticky).
bool inside_device(const void* p, std::size_t n, const char* call) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (find_device(p, n)) return true;
  }
  fail(cudaErrorInvalidValue, std::string(call) + " of " + std::to_string(n) + " bytes outside a device allocation",
       false);
  return false;
}

// ---- launches and the kernel that is running (for the fault message) ---------------------

std::map<const void*, int> g_max_dynamic_smem;  // cudaFuncAttributeMaxDynamicSharedMemorySize
constexpr int kDefaultDynamicSmem = 48 * 1024;
constexpr int kMaxSmemPerBlock = 227 * 1024;  // sm_90

char g_running[256];  // written before each launch, read by the fault handler

extern "C" void on_fault(int sig) {
  const char head[] = "tierlab CUDA emulator: kernel ";
  const char tail[] = " touched memory outside its allocations (a device-memory overrun, or a stack overflow)\n";
  ssize_t ignored = write(2, head, sizeof head - 1);
  ignored = write(2, g_running, strnlen(g_running, sizeof g_running));
  ignored = write(2, tail, sizeof tail - 1);
  (void)ignored;
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    static std::vector<char> alt(1 << 16);
    stack_t ss{};
    ss.ss_sp = alt.data();
    ss.ss_size = alt.size();
    sigaltstack(&ss, nullptr);
    struct sigaction sa {};
    sa.sa_handler = on_fault;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

// ---- fibers ------------------------------------------------------------------------------

// Stacks are reused across blocks and launches (one pool per OS thread).
class StackPool {
 public:
  ctx::stack_context allocate() {
    if (!free_.empty()) {
      ctx::stack_context sc = free_.back();
      free_.pop_back();
      return sc;
    }
    return alloc_.allocate();
  }
  void deallocate(ctx::stack_context& sc) noexcept { free_.push_back(sc); }
  ~StackPool() {
    for (auto& sc : free_) alloc_.deallocate(sc);
  }

 private:
  ctx::protected_fixedsize_stack alloc_{256 * 1024};
  std::vector<ctx::stack_context> free_;
};

struct PoolRef {  // the StackAllocator concept over the thread's pool
  StackPool* pool;
  ctx::stack_context allocate() { return pool->allocate(); }
  void deallocate(ctx::stack_context& sc) noexcept { pool->deallocate(sc); }
};

enum class State { Ready, BlockWait, WarpWait, Done };

struct Thread {
  ThreadContext c;
  int linear = 0, warp = 0, lane = 0;
  State state = State::Ready;
  unsigned long wait_gen = 0;
  ctx::fiber fiber, sink;
};

struct Warp {
  int live = 0, arrived = 0;
  unsigned long gen = 0;
  alignas(16) unsigned char slots[2][32][32];
};

struct Block {
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  int live = 0, arrived = 0;
  unsigned long gen = 0;
  std::string error;  // the first error a thread of this block met
};

thread_local Block* t_block = nullptr;
thread_local Thread* t_thread = nullptr;
thread_local std::vector<unsigned char> t_dynamic_smem;
thread_local StackPool t_stacks;

void yield() {
  Thread& t = *t_thread;
  t.sink = std::move(t.sink).resume();
}

void block_error(const std::string& what) {
  if (t_block->error.empty()) t_block->error = what;
}

// TIERLAB_CUDA_EMULATOR_ORDER: forward (default), reverse or shuffle.
std::string schedule_order() {
  const char* env = std::getenv("TIERLAB_CUDA_EMULATOR_ORDER");
  return env ? env : "forward";
}

// Runs one block; returns "" or what went wrong.
std::string run_block(dim3 grid, dim3 block_dim, dim3 block_idx, const std::string& how, const Body& body) {
  const int n = static_cast<int>(block_dim.x * block_dim.y * block_dim.z);
  Block b;
  b.threads.resize(static_cast<std::size_t>(n));
  b.warps.resize(static_cast<std::size_t>((n + 31) / 32));
  b.live = n;
  for (int i = 0; i < n; ++i) {
    Thread& t = b.threads[static_cast<std::size_t>(i)];
    t.linear = i;
    t.warp = i / 32;
    t.lane = i % 32;
    t.c.block_dim = block_dim;
    t.c.grid_dim = grid;
    t.c.block_idx = block_idx;
    t.c.thread_idx = dim3(static_cast<unsigned>(i) % block_dim.x, (static_cast<unsigned>(i) / block_dim.x) % block_dim.y,
                          static_cast<unsigned>(i) / (block_dim.x * block_dim.y));
    ++b.warps[static_cast<std::size_t>(t.warp)].live;
    t.fiber = ctx::fiber(std::allocator_arg, PoolRef{&t_stacks}, [&t, &body](ctx::fiber&& sink) {
      t.sink = std::move(sink);
      body();
      t.state = State::Done;
      return std::move(t.sink);
    });
  }
  Block* outer_block = t_block;
  Thread* outer_thread = t_thread;
  t_block = &b;
  // The order in which ready threads run between synchronisations. A kernel without races
  // gives the same bits in every order (tests compare them).
  std::vector<int> order(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  if (how == "reverse") {
    std::reverse(order.begin(), order.end());
  } else if (how == "shuffle") {
    std::mt19937 rng(block_idx.x * 73856093u ^ block_idx.y * 19349663u ^ block_idx.z * 83492791u);
    std::shuffle(order.begin(), order.end(), rng);
  }
  int remaining = n;
  while (remaining > 0) {
    bool moved = false;
    for (int ti : order) {
      Thread& t = b.threads[static_cast<std::size_t>(ti)];
      if (t.state == State::Done) continue;
      if (t.state == State::BlockWait && b.gen == t.wait_gen) continue;
      if (t.state == State::WarpWait && b.warps[static_cast<std::size_t>(t.warp)].gen == t.wait_gen) continue;
      t.state = State::Ready;
      t_thread = &t;
      t.fiber = std::move(t.fiber).resume();
      moved = true;
      if (t.state != State::Done) continue;
      --remaining;
      // An exited thread no longer holds back the block's barrier; inside a warp
      // collective it would (the hardware's behaviour is undefined there).
      --b.live;
      if (b.arrived > 0 && b.arrived == b.live) {
        b.arrived = 0;
        ++b.gen;
      }
      Warp& w = b.warps[static_cast<std::size_t>(t.warp)];
      --w.live;
      if (w.arrived > 0) block_error("a lane exited while its warp waited in a warp collective");
    }
    if (!moved) {
      int at_block = 0, at_warp = 0;
      for (const Thread& t : b.threads) {
        at_block += t.state == State::BlockWait;
        at_warp += t.state == State::WarpWait;
      }
      block_error("deadlock: " + std::to_string(at_block) + " thread(s) wait at __syncthreads and " +
                  std::to_string(at_warp) + " in warp collectives, " + std::to_string(n - remaining) +
                  " have exited");
      break;
    }
  }
  std::string error = b.error;
  t_block = nullptr;  // unwinding the fibers left suspended (after a deadlock) runs no kernel code
  b.threads.clear();
  t_block = outer_block;
  t_thread = outer_thread;
  return error;
}

}  // namespace

ThreadContext& current() { return t_thread->c; }

int lane_id() { return t_thread->lane; }

void* dynamic_shared() { return t_dynamic_smem.data(); }

void syncthreads() {
  Block& b = *t_block;
  Thread& t = *t_thread;
  t.wait_gen = b.gen;
  if (++b.arrived == b.live) {
    b.arrived = 0;
    ++b.gen;
    return;
  }
  t.state = State::BlockWait;
  yield();
}

const unsigned char* warp_gather(const void* mine, std::size_t bytes, unsigned mask, const char* what) {
  Block& b = *t_block;
  Thread& t = *t_thread;
  Warp& w = b.warps[static_cast<std::size_t>(t.warp)];
  if (mask != 0xffffffffu)
    block_error(std::string(what) + " with a partial mask (the kernels use full masks only)");
  if (w.live != 32) block_error(std::string(what) + " in a warp with fewer than 32 live lanes");
  const unsigned long gen = w.gen;
  std::memcpy(w.slots[gen & 1][t.lane], mine, bytes);
  t.wait_gen = gen;
  if (++w.arrived == w.live) {
    w.arrived = 0;
    ++w.gen;
  } else {
    t.state = State::WarpWait;
    yield();
  }
  return &w.slots[gen & 1][0][0];
}

void mma_m16n8k16(float (&d)[4], const uint4& a, std::uint32_t b0, std::uint32_t b1) {
  struct Frag {
    std::uint32_t a[4], b[2];
  };
  const Frag mine{{a.x, a.y, a.z, a.w}, {b0, b1}};
  const unsigned char* all = warp_gather(&mine, sizeof mine, 0xffffffffu, "mma.sync");
  auto frag = [all](int lane) {
    Frag f;
    std::memcpy(&f, all + 32 * lane, sizeof f);
    return f;
  };
  auto half_of = [](std::uint32_t word, int high) {
    const auto bits = static_cast<std::uint16_t>(high ? word >> 16 : word & 0xffffu);
    _Float16 h;
    std::memcpy(&h, &bits, sizeof h);
    return static_cast<float>(h);
  };
  // PTX ISA, mma.m16n8k16 with .f16 (groupID = lane >> 2, threadID_in_group = lane % 4):
  //   A element (row, col): lane 4 (row % 8) + (col % 8) / 2, register (row >= 8) + 2 (col >= 8),
  //     half col % 2;
  //   B element (k, n): lane 4 n + (k % 8) / 2, register (k >= 8), half k % 2;
  //   C/D element i of a lane: row groupID + 8 (i >= 2), col 2 threadID_in_group + (i % 2).
  auto A = [&](int row, int col) {
    return half_of(frag(4 * (row % 8) + (col % 8) / 2).a[(row >= 8) + 2 * (col >= 8)], col % 2);
  };
  auto B = [&](int k, int n) { return half_of(frag(4 * n + (k % 8) / 2).b[k >= 8], k % 2); };
  const int lane = t_thread->lane, g = lane >> 2, tg = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >= 2), col = 2 * tg + (i % 2);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += A(row, k) * B(k, col);  // the product is exact in fp32
    d[i] = acc;
  }
}

void run_grid(const char* name, const void* key, dim3 grid, dim3 block, std::size_t smem, const Body& body) {
  install_fault_handler();
  if (sticky() != cudaSuccess) {
    fail(sticky(), std::string("launch of ") + name + " after an earlier kernel failed", false);
    return;
  }
  const unsigned long threads = static_cast<unsigned long>(block.x) * block.y * block.z;
  if (threads < 1 || threads > 1024 || block.z > 64 || grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.y > 65535 ||
      grid.z > 65535 || grid.x > 2147483647u) {
    fail(cudaErrorInvalidConfiguration,
         std::string(name) + ": invalid launch configuration (grid " + std::to_string(grid.x) + "x" +
             std::to_string(grid.y) + "x" + std::to_string(grid.z) + ", block " + std::to_string(block.x) + "x" +
             std::to_string(block.y) + "x" + std::to_string(block.z) + ")",
         false);
    return;
  }
  int max_dynamic = kDefaultDynamicSmem;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_max_dynamic_smem.find(key);
    if (it != g_max_dynamic_smem.end()) max_dynamic = it->second;
  }
  if (smem > static_cast<std::size_t>(max_dynamic)) {
    fail(cudaErrorInvalidValue,
         std::string(name) + ": " + std::to_string(smem) + " bytes of dynamic shared memory, above the " +
             std::to_string(max_dynamic) + " allowed (cudaFuncAttributeMaxDynamicSharedMemorySize)",
         false);
    return;
  }
  std::snprintf(g_running, sizeof g_running, "%s", name);
  const long n_blocks = static_cast<long>(grid.x) * grid.y * grid.z;
  const std::string order = schedule_order();
  std::string first_error;
  long first_block = -1;
#pragma omp parallel
  {
    if (t_dynamic_smem.size() < smem + 16) t_dynamic_smem.resize(smem + 16);
#pragma omp for schedule(dynamic, 1)
    for (long i = 0; i < n_blocks; ++i) {
      std::memset(t_dynamic_smem.data(), 0xff, t_dynamic_smem.size());
      const dim3 idx(static_cast<unsigned>(i % grid.x), static_cast<unsigned>((i / grid.x) % grid.y),
                     static_cast<unsigned>(i / (static_cast<long>(grid.x) * grid.y)));
      std::string e = run_block(grid, block, idx, order, body);
      if (!e.empty()) {
        std::lock_guard<std::mutex> lock(g_mutex);
        if (first_block < 0 || i < first_block) {
          first_block = i;
          first_error = e;
        }
      }
    }
  }
  if (first_block >= 0)
    fail(cudaErrorLaunchFailure, std::string(name) + ", block " + std::to_string(first_block) + ": " + first_error,
         true);
}

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_last = g_sticky = cudaSuccess;
  g_detail.clear();
}

std::string last_failure() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_detail;
}

cudaError_t set_function_attribute(const void* key, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > kMaxSmemPerBlock) {
    fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: value " + std::to_string(value) + " out of range", false);
    return cudaErrorInvalidValue;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_max_dynamic_smem[key] = value;
  return cudaSuccess;
}

// sm_90: 2048 threads, 32 blocks and 228 KiB of shared memory per SM (1 KiB reserved per block).
cudaError_t occupancy(int* blocks, const void* /*key*/, int block_size, std::size_t smem) {
  if (block_size < 1 || block_size > 1024) return cudaErrorInvalidValue;
  const long by_threads = 2048 / block_size;
  const long by_smem = static_cast<long>((228 * 1024) / (smem + 1024));
  long n = by_threads < by_smem ? by_threads : by_smem;
  *blocks = static_cast<int>(n < 32 ? n : 32);
  return cudaSuccess;
}

}  // namespace tierlab_emu

using tierlab_emu::fail;

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  std::lock_guard<std::mutex> lock(tierlab_emu::g_mutex);
  const cudaError_t e = tierlab_emu::g_last;
  tierlab_emu::g_last = tierlab_emu::g_sticky;
  return e;
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return cudaErrorInvalidValue;
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "%s", "tierlab CUDA emulator on the CPU, not a GPU");
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 4;
  p->totalGlobalMem = tierlab_emu::total_bytes();
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard<std::mutex> lock(tierlab_emu::g_mutex);
  const std::size_t total = tierlab_emu::total_bytes();
  *free_bytes = total > tierlab_emu::g_used ? total - tierlab_emu::g_used : 0;
  *total_bytes = total;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** out, std::size_t bytes) {
  using namespace tierlab_emu;
  *out = nullptr;
  const std::size_t page = page_size();
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (bytes == 0 || g_used + rounded > total_bytes()) return cudaErrorMemoryAllocation;
  }
  const std::size_t data_pages = (rounded + page - 1) / page * page;
  const std::size_t length = data_pages + page;
  void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return cudaErrorMemoryAllocation;
  unsigned char* guard = static_cast<unsigned char*>(base) + data_pages;
  mprotect(guard, page, PROT_NONE);
  unsigned char* user = guard - rounded;  // 256-byte aligned; the guard page follows the rounded size
  std::memset(user, 0xff, rounded);        // NaN in every float and double nobody wrote
  std::lock_guard<std::mutex> lock(g_mutex);
  g_device[reinterpret_cast<std::uintptr_t>(user)] = Mapping{base, length, bytes};
  g_used += rounded;
  *out = user;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  using namespace tierlab_emu;
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_device.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g_device.end()) return cudaErrorInvalidValue;
  munmap(it->second.base, it->second.length);
  g_used -= (it->second.bytes + 255) / 256 * 256;
  g_device.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** out, std::size_t bytes) {
  *out = std::malloc(bytes);
  return *out ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

struct CUstream_st {
  int id;
};

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned /*flags*/) {
  *s = new CUstream_st{1};
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (!s) return cudaErrorInvalidResourceHandle;
  return tierlab_emu::sticky();
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  if (!s) return cudaErrorInvalidResourceHandle;
  if (!tierlab_emu::inside_device(kind == cudaMemcpyHostToDevice ? dst : src, bytes, "cudaMemcpyAsync"))
    return cudaErrorInvalidValue;
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes, cudaStream_t s) {
  if (!s) return cudaErrorInvalidResourceHandle;
  if (!tierlab_emu::inside_device(dst, bytes, "cudaMemsetAsync")) return cudaErrorInvalidValue;
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
