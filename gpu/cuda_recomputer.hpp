#pragma once
// The CUDA backend of exact recomputation on the host side (gpu/recompute.hpp,
// gpu/cuda_backend.hpp): the head cache entries and the CudaRecomputer class, shared by
// its two files:
//   cuda_recompute.cpp       creation, the path choice and self-check, the head cache
//                            (uploads, the prepared query sets, release when memory runs short);
//   cuda_recompute_pass.cpp  evaluation: the plan of a call, its passes, their uploads and launches.
// Internal to gpu/: both files are also compiled against the CPU emulator of the CUDA
// runtime (gpu/cuda/emulation), so nothing here names a CUDA header.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda/launch.hpp"
#include "gpu/cuda_backend.hpp"
#include "gpu/recompute.hpp"

namespace tierlab::cuda_detail {

inline constexpr int kMaxHeadDim = 1024;                          // simple path: 4 columns x 256 threads
inline constexpr std::size_t kReserveBytes = std::size_t(256) << 20;  // left free on the device
inline constexpr int kMinChunkTokens = 512;                        // tc path: shortest token chunk
inline constexpr int kTokenPad = 32;                               // tokens per tc step

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Keys, values and key variants of a head on the device.
struct KvEntry {
  const float* k_data = nullptr;
  const float* v_data = nullptr;
  std::vector<const float*> var_data;
  std::uint64_t fp = 0;
  int T = 0, d = 0, nv = 0, T_pad = 0, d_pad = 0, ntw = 0;
  float vscale = 1.0f;
  cuda::DeviceBuffer K, variants, V, Vpk;
  std::uint64_t last_use = 0;
};

// One query set of a head (with its causal limits), prepared (launch.hpp: S, E, P, lse,
// psum, pmax, onorm2).
struct QueryEntry {
  const float* q_data = nullptr;
  std::vector<int> visible;  // HeadProblem::visible (empty: every row sees all T tokens)
  std::uint64_t fp = 0;
  KvEntry* kv = nullptr;
  int nq = 0, nq_pad = 0, row_block = 0;
  cuda::DeviceBuffer S, E, P, lse, psum, pmax, onorm2, vis;
  std::uint64_t last_use = 0;

  cuda::HeadView view() const {
    cuda::HeadView h{};
    h.nq = nq;
    h.nq_pad = nq_pad;
    h.T = kv->T;
    h.T_pad = kv->T_pad;
    h.d = kv->d;
    h.d_pad = kv->d_pad;
    h.nv = kv->nv;
    h.row_block = row_block;
    h.S = S.as<float>();
    h.E = E.as<float>();
    h.P = P.as<float>();
    h.V = kv->V.as<float>();
    h.Vpk = kv->Vpk.data();
    h.lse = lse.as<double>();
    h.psum = psum.as<double>();
    h.pmax = pmax.as<float>();
    h.onorm2 = onorm2.as<double>();
    h.visible = visible.empty() ? nullptr : vis.as<std::int32_t>();
    h.vscale = kv->vscale;
    return h;
  }
};

struct SelRef {
  int batch = 0, index = 0;
};

class CudaRecomputer final : public Recomputer {
 public:
  explicit CudaRecomputer(cuda::DeviceInfo info) : info_(std::move(info)) {}

  // Stream, path choice and the tensor-core self-check. Empty, or why it cannot be used.
  std::string init();

  std::string name() const override { return "cuda"; }
  std::string description() const override;

  EvalResult evaluate(const std::vector<HeadBatch>& batches) override;

 private:
  // ---- cache (cuda_recompute.cpp) ------------------------------------------------------

  void clear_cache();
  bool evict_one();
  std::string make_room(std::size_t bytes);
  std::string allocate(cuda::DeviceBuffer& buf, std::size_t bytes);
  std::string acquire_kv(const HeadProblem& hp, KvEntry** out);
  std::string acquire(const HeadProblem& hp, QueryEntry** out);
  std::string device_step(std::string err);

  // ---- evaluation (cuda_recompute_pass.cpp) --------------------------------------------

  struct Plan {
    bool tc = true;
    std::vector<QueryEntry*> head;  // per batch (null when it has no selections)
    std::vector<int> chunk_len;     // per batch (tc)
    std::vector<int> n_chunks;      // per batch (tc)
  };

  static int n_parts_of(const Plan& plan, int b);
  std::size_t bytes_of_selection(const Plan& plan, int b) const;
  EvalResult run(const std::vector<HeadBatch>& batches, bool tc);

  // Host-side layout of one pass's upload (one copy) and device workspace.
  struct PassLayout {
    std::size_t heads = 0, sels = 0, row_items = 0, delta_items = 0, red_items = 0, flags = 0, codes = 0, total = 0;
    std::size_t w_rows = 0, w_dnorm2 = 0, w_tv = 0, w_logit = 0, w_results = 0, w_zero_end = 0, w_dpart = 0,
                w_total = 0;
  };

  // One pass's heads, selections, blocks and layout (cuda_recompute_pass.cpp).
  struct Pass;
  std::string run_pass(const std::vector<HeadBatch>& batches, const Plan& plan, const std::vector<SelRef>& all,
                       std::size_t i0, std::size_t i1, EvalResult& res);

  // ---- self-check of the tensor-core path (cuda_recompute.cpp) -------------------------

  std::string self_check(std::string* mismatch);

  cuda::DeviceInfo info_;
  cuda::Stream stream_;
  bool use_tc_ = true;
  std::string path_note_;
  std::string broken_;
  int overflow_reruns_ = 0;
  bool rerun_on_overflow_ = true;  // false during the self-check
  int blocks_per_sm_ = 2;  // tc blocks resident per SM (occupancy of the 64-row kernel)
  std::uint64_t clock_ = 0;
  std::vector<std::unique_ptr<KvEntry>> kvs_;
  std::vector<std::unique_ptr<QueryEntry>> queries_;
  cuda::PinnedBuffer upload_host_, results_host_;
  cuda::DeviceBuffer upload_dev_, work_;
};

}  // namespace tierlab::cuda_detail
