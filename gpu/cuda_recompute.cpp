// The CUDA backend of exact recomputation (gpu/recompute.hpp, gpu/cuda_backend.hpp).
// Plain C++: every CUDA call is behind the launchers of gpu/cuda/launch.hpp, which also
// states the formulas the kernels compute.
//
// A head (HeadProblem) is prepared once: its keys, values and key variants are uploaded
// (a "KV entry"), and per query set the logits, their softmax and the output norms are
// computed (a "query entry"). Both are cached across calls, keyed by the matrices' data
// pointers, shapes and a fingerprint of sampled entries, and released least recently
// used first when device memory runs short. A call then evaluates all selections of all
// its heads in a few launches per pass (row statistics, D formed directly on the tensor-
// core or simple path, means).
//
// A CudaRecomputer is not thread-safe (its caches and stream are shared by its calls): use
// one per thread.
//
// Path: TIERLAB_CUDA_PATH=tc (default) or simple. The tensor-core path is checked against
// the simple path on small random heads when the backend is created; if they disagree,
// the simple path is used and description() says why.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda/launch.hpp"
#include "gpu/cuda_backend.hpp"
#include "gpu/recompute.hpp"

namespace tierlab {

namespace {

constexpr int kMaxHeadDim = 1024;                          // simple path: 4 columns x 256 threads
constexpr std::size_t kReserveBytes = std::size_t(256) << 20;  // left free on the device
constexpr int kMinChunkTokens = 512;                        // tc path: shortest token chunk
constexpr int kTokenPad = 32;                               // tokens per tc step

int round_up(int x, int m) { return (x + m - 1) / m * m; }
std::size_t align_up(std::size_t x, std::size_t a = 256) { return (x + a - 1) / a * a; }
std::string mib(std::size_t bytes) { return std::to_string((bytes + (1u << 20) - 1) >> 20) + " MiB"; }

int ntw_for(int d) { return d <= 32 ? 2 : (d <= 64 ? 4 : 8); }
int row_block_for(int nq) { return nq >= 48 ? 64 : 16; }

// A power of two sigma with sigma * maxabs <= 2^14 (1 when maxabs is 0).
float power_of_two_scale(double maxabs) {
  if (!(maxabs > 0.0)) return 1.0f;
  int e = 0;
  std::frexp(16384.0 / maxabs, &e);
  return std::ldexp(1.0f, std::clamp(e - 1, -120, 120));
}

std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Shape and up to 1024 evenly spaced entries: catches a matrix refilled in place between
// calls in all but contrived cases (the cache key also holds the data pointer).
std::uint64_t fingerprint(const MatrixRM& m) {
  std::uint64_t h = 1469598103934665603ull;
  const std::int64_t rows = m.rows(), cols = m.cols(), n = m.size();
  h = fnv1a(h, &rows, sizeof rows);
  h = fnv1a(h, &cols, sizeof cols);
  const float* x = m.data();
  const std::int64_t samples = std::min<std::int64_t>(n, 1024);
  for (std::int64_t i = 0; i < samples; ++i) {
    const std::int64_t at = samples > 1 ? i * (n - 1) / (samples - 1) : 0;
    h = fnv1a(h, x + at, sizeof(float));
  }
  return h;
}

// Empty, or the sentence naming the first non-finite entry of `m`.
std::string check_finite(const MatrixRM& m, const std::string& name) {
  const float* x = m.data();
  const std::int64_t n = m.size();
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      return name + " has a non-finite value (" + std::to_string(x[i]) + ") at row " +
             std::to_string(i / m.cols()) + ", column " + std::to_string(i % m.cols()) + ".";
  return {};
}

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
  std::string init() {
    std::string err = stream_.create();
    if (!err.empty()) return err;
    const char* env = std::getenv("TIERLAB_CUDA_PATH");
    const std::string path = env ? env : "";
    if (path == "simple") {
      use_tc_ = false;
      path_note_ = "simple path (TIERLAB_CUDA_PATH=simple)";
      return {};
    }
    if (!path.empty() && path != "tc")
      return "TIERLAB_CUDA_PATH=\"" + path + "\" is not one of tc, simple";
    blocks_per_sm_ = std::max(1, cuda::tc_blocks_per_sm(64, 8));
    std::string mismatch;
    err = self_check(&mismatch);
    clear_cache();  // the check's heads are gone
    if (!err.empty()) return "the CUDA backend failed its self-check: " + err;
    if (!mismatch.empty()) {
      use_tc_ = false;
      path_note_ = "simple path: the tensor-core path failed its self-check (" + mismatch + ")";
    } else {
      use_tc_ = true;
      path_note_ = "tensor-core path";
    }
    return {};
  }

  std::string name() const override { return "cuda"; }
  std::string description() const override {
    std::string s = "cuda (" + info_.name + ", " + path_note_;
    if (overflow_reruns_ > 0)
      s += "; " + std::to_string(overflow_reruns_) + " pass(es) redone on the simple path after an fp16 overflow";
    return s + ")";
  }

  EvalResult evaluate(const std::vector<HeadBatch>& batches) override {
    try {
      return run(batches, use_tc_);
    } catch (const std::exception& e) {
      EvalResult res;
      res.ok = false;
      res.message = std::string("The cuda backend failed: ") + e.what();
      return res;
    }
  }

 private:
  // ---- cache ----------------------------------------------------------------------

  void clear_cache() {
    queries_.clear();
    kvs_.clear();
  }

  // Frees the least recently used entry not used by the current call; false if none.
  bool evict_one() {
    auto q = std::min_element(queries_.begin(), queries_.end(),
                              [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    if (q != queries_.end() && (*q)->last_use < clock_) {
      queries_.erase(q);
      return true;
    }
    auto k = std::min_element(kvs_.begin(), kvs_.end(),
                              [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
    if (k != kvs_.end() && (*k)->last_use < clock_) {
      KvEntry* dead = k->get();
      queries_.erase(std::remove_if(queries_.begin(), queries_.end(), [&](const auto& e) { return e->kv == dead; }),
                     queries_.end());
      kvs_.erase(k);
      return true;
    }
    return false;
  }

  // Makes `bytes` (plus a reserve) free on the device, releasing cached heads of earlier calls.
  std::string make_room(std::size_t bytes) {
    for (;;) {
      std::size_t free_b = 0, total_b = 0;
      std::string err = cuda::device_memory(&free_b, &total_b);
      if (!err.empty()) return err;
      if (free_b >= bytes + kReserveBytes) return {};
      if (!evict_one())
        return "the CUDA device has " + mib(free_b) + " free but this call needs " + mib(bytes) + " more plus a " +
               mib(kReserveBytes) + " reserve (only heads of earlier calls can be released)";
    }
  }

  // Grows a workspace buffer (its old contents are not kept).
  std::string allocate(cuda::DeviceBuffer& buf, std::size_t bytes) {
    if (bytes <= buf.bytes() && buf.data()) return {};
    buf.reset();
    std::string err = make_room(bytes);
    if (!err.empty()) return err;
    return buf.allocate(bytes);
  }

  std::string acquire_kv(const HeadProblem& hp, KvEntry** out) {
    const MatrixRM& K = *hp.exact_keys;
    const MatrixRM& V = *hp.values;
    std::vector<const float*> var_data;
    std::uint64_t fp = fingerprint(K) ^ (fingerprint(V) * 31);
    for (const MatrixRM* m : hp.variants) {
      var_data.push_back(m->data());
      fp = fp * 1099511628211ull ^ fingerprint(*m);
    }
    for (auto& e : kvs_)
      if (e->k_data == K.data() && e->v_data == V.data() && e->var_data == var_data && e->fp == fp &&
          e->T == K.rows() && e->d == K.cols()) {
        e->last_use = clock_;
        *out = e.get();
        return {};
      }

    std::string err = check_finite(K, "HeadProblem.exact_keys");
    if (err.empty()) err = check_finite(V, "HeadProblem.values");
    for (std::size_t v = 0; err.empty() && v < hp.variants.size(); ++v)
      err = check_finite(*hp.variants[v], "HeadProblem.variants[" + std::to_string(v) + "]");
    if (!err.empty()) return err;

    auto e = std::make_unique<KvEntry>();
    e->k_data = K.data();
    e->v_data = V.data();
    e->var_data = var_data;
    e->fp = fp;
    e->T = static_cast<int>(K.rows());
    e->d = static_cast<int>(K.cols());
    e->nv = static_cast<int>(hp.variants.size());
    e->T_pad = round_up(e->T, kTokenPad);
    e->ntw = ntw_for(e->d);
    e->d_pad = round_up(e->d, cuda::tc_column_block(e->ntw));
    e->last_use = clock_;
    e->vscale = power_of_two_scale(static_cast<double>(V.cwiseAbs().maxCoeff()));

    const std::size_t td = std::size_t(e->T) * e->d;
    const std::size_t bytes = td * 4 * (1 + std::size_t(e->nv)) + std::size_t(e->T_pad) * e->d * 4 +
                              std::size_t(e->T_pad) * e->d_pad * 4;
    err = make_room(bytes);
    if (err.empty()) err = e->K.allocate(td * 4);
    if (err.empty()) err = e->variants.allocate(td * 4 * e->nv);
    if (err.empty()) err = e->V.allocate(std::size_t(e->T_pad) * e->d * 4);
    if (err.empty()) err = e->Vpk.allocate(std::size_t(e->T_pad) * e->d_pad * 4);
    if (!err.empty()) return err;
    err = device_step(cuda::copy_to_device(e->K.data(), K.data(), td * 4, stream_));
    for (int v = 0; err.empty() && v < e->nv; ++v)
      err = device_step(
          cuda::copy_to_device(e->variants.as<float>() + td * v, hp.variants[v]->data(), td * 4, stream_));
    if (err.empty()) err = device_step(cuda::fill_zero(e->V.data(), e->V.bytes(), stream_));
    if (err.empty()) err = device_step(cuda::copy_to_device(e->V.data(), V.data(), td * 4, stream_));
    if (err.empty())
      err = device_step(
          cuda::launch_pack_values(e->V.as<float>(), e->T, e->d, e->T_pad, e->d_pad, e->vscale, e->Vpk.data(), stream_));
    if (!err.empty()) return err;
    *out = e.get();
    kvs_.push_back(std::move(e));
    return {};
  }

  std::string acquire(const HeadProblem& hp, QueryEntry** out) {
    KvEntry* kv = nullptr;
    std::string err = acquire_kv(hp, &kv);
    if (!err.empty()) return err;
    const MatrixRM& Q = *hp.queries;
    const std::uint64_t fp = fingerprint(Q);
    for (auto& e : queries_)
      if (e->kv == kv && e->q_data == Q.data() && e->fp == fp && e->nq == Q.rows() && e->visible == hp.visible) {
        e->last_use = clock_;
        *out = e.get();
        return {};
      }

    err = check_finite(Q, "HeadProblem.queries");
    if (!err.empty()) return err;
    auto e = std::make_unique<QueryEntry>();
    e->q_data = Q.data();
    e->visible = hp.visible;
    e->fp = fp;
    e->kv = kv;
    e->nq = static_cast<int>(Q.rows());
    e->row_block = row_block_for(e->nq);
    e->nq_pad = round_up(e->nq, e->row_block);
    e->last_use = clock_;

    const std::size_t plane = std::size_t(e->nq_pad) * kv->T_pad;
    const std::size_t rows = std::size_t(e->nq_pad);
    const std::size_t q_bytes = std::size_t(e->nq) * kv->d * 4;
    const std::size_t bytes = plane * 4 * (2 + std::size_t(kv->nv)) + rows * 32 + q_bytes;
    err = make_room(bytes);
    cuda::DeviceBuffer q_dev;
    if (err.empty()) err = q_dev.allocate(q_bytes);
    if (err.empty()) err = e->S.allocate(plane * 4);
    if (err.empty()) err = e->E.allocate(plane * 4 * kv->nv);
    if (err.empty()) err = e->P.allocate(plane * 4);
    if (err.empty()) err = e->lse.allocate(rows * 8);
    if (err.empty()) err = e->psum.allocate(rows * 8);
    if (err.empty()) err = e->pmax.allocate(rows * 4);
    if (err.empty()) err = e->onorm2.allocate(rows * 8);
    if (err.empty() && !e->visible.empty()) err = e->vis.allocate(e->visible.size() * sizeof(std::int32_t));
    if (!err.empty()) return err;
    const std::int32_t* vis = e->visible.empty() ? nullptr : e->vis.as<std::int32_t>();
    static_assert(sizeof(int) == sizeof(std::int32_t), "visible limits are copied as int32");

    const int T = kv->T, T_pad = kv->T_pad, d = kv->d;
    // Past a row's visible limit: S = -1e30 (exp gives 0 even after shifts), E = P = 0.
    err = device_step(cuda::copy_to_device(q_dev.data(), Q.data(), q_bytes, stream_));
    if (err.empty() && vis)
      err = device_step(cuda::copy_to_device(e->vis.data(), e->visible.data(), e->vis.bytes(), stream_));
    if (err.empty())
      err = device_step(cuda::launch_logits(q_dev.as<float>(), e->nq, e->nq_pad, kv->K.as<float>(), nullptr, T, T_pad,
                                            d, vis, -1e30f, e->S.as<float>(), stream_));
    for (int v = 0; err.empty() && v < kv->nv; ++v)
      err = device_step(cuda::launch_logits(q_dev.as<float>(), e->nq, e->nq_pad,
                                            kv->variants.as<float>() + std::size_t(T) * d * v, kv->K.as<float>(), T,
                                            T_pad, d, vis, 0.0f, e->E.as<float>() + plane * v, stream_));
    if (err.empty()) err = device_step(cuda::fill_zero(e->P.data(), e->P.bytes(), stream_));
    if (err.empty())
      err = device_step(cuda::launch_softmax_rows(e->S.as<float>(), e->nq, e->nq_pad, T, T_pad, vis, e->P.as<float>(),
                                                  e->lse.as<double>(), e->psum.as<double>(), e->pmax.as<float>(),
                                                  stream_));
    if (err.empty())
      err = device_step(cuda::launch_output_norms(e->P.as<float>(), e->psum.as<double>(), kv->V.as<float>(), e->nq, T,
                                                  T_pad, d, e->onorm2.as<double>(), stream_));
    if (err.empty()) err = device_step(stream_.synchronize());  // before q_dev is released
    if (!err.empty()) return err;
    *out = e.get();
    queries_.push_back(std::move(e));
    return {};
  }

  // A failed launch, copy or synchronisation leaves the device in an unknown state: the
  // backend refuses further calls.
  std::string device_step(std::string err) {
    if (!err.empty() && broken_.empty()) broken_ = err;
    return err;
  }

  // ---- evaluation ---------------------------------------------------------------------

  struct Plan {
    bool tc = true;
    std::vector<QueryEntry*> head;  // per batch (null when it has no selections)
    std::vector<int> chunk_len;     // per batch (tc)
    std::vector<int> n_chunks;      // per batch (tc)
  };

  int n_parts_of(const Plan& plan, int b) const {
    const QueryEntry* q = plan.head[b];
    return plan.tc ? plan.n_chunks[b] * (q->nq_pad / q->row_block) : q->nq_pad;
  }

  std::size_t bytes_of_selection(const Plan& plan, int b) const {
    const QueryEntry* q = plan.head[b];
    std::size_t bytes = std::size_t(q->kv->T_pad) + std::size_t(q->nq_pad) * (sizeof(cuda::RowParams) + 8) +
                        std::size_t(n_parts_of(plan, b)) * 16 +
                        64 + std::size_t(q->nq) * 16;
    if (plan.tc) bytes += std::size_t(plan.n_chunks[b]) * q->nq_pad * q->kv->d_pad * 4;
    return bytes;
  }

  EvalResult run(const std::vector<HeadBatch>& batches, bool tc) {
    EvalResult res;
    auto fail = [&res](std::string message) {
      res.ok = false;
      res.message = std::move(message);
      res.errors.clear();
      return res;
    };
    if (!broken_.empty())
      return fail("The cuda backend is unusable after an earlier device error: " + broken_);
    const int nb = static_cast<int>(batches.size());

    // Shapes first (without scanning the codes: the device checks those).
    for (int b = 0; b < nb; ++b) {
      const HeadBatch& batch = batches[b];
      const std::string why = check_batch(HeadBatch{batch.problem, {}});
      if (!why.empty()) return fail("Batch " + std::to_string(b) + ": " + why);
      const long T = batch.problem.exact_keys->rows();
      for (const Selection& s : batch.selections)
        if (static_cast<long>(s.size()) != T) return fail("Batch " + std::to_string(b) + ": " + check_batch(batch));
      const long d = batch.problem.queries->cols();
      if (d > kMaxHeadDim)
        return fail("Batch " + std::to_string(b) + ": the head dimension d = " + std::to_string(d) +
                    " exceeds the cuda backend's limit of " + std::to_string(kMaxHeadDim) + ".");
      if (T > (1L << 28) || batch.problem.queries->rows() > (1L << 24))
        return fail("Batch " + std::to_string(b) + ": the head is too large for the cuda backend (T = " +
                    std::to_string(T) + ", nq = " + std::to_string(batch.problem.queries->rows()) + ").");
    }
    res.errors.resize(nb);
    std::vector<SelRef> all;
    for (int b = 0; b < nb; ++b) {
      res.errors[b].resize(batches[b].selections.size());
      for (int s = 0; s < static_cast<int>(batches[b].selections.size()); ++s) all.push_back({b, s});
    }
    if (all.empty()) return res;

    ++clock_;
    Plan plan;
    plan.tc = tc;
    plan.head.assign(nb, nullptr);
    for (int b = 0; b < nb; ++b) {
      if (batches[b].selections.empty()) continue;
      const std::string err = acquire(batches[b].problem, &plan.head[b]);
      if (!err.empty()) return fail("Batch " + std::to_string(b) + ": " + err);
    }

    if (tc) {  // token chunks: enough blocks for about four waves over the device
      long base = 0;
      for (int b = 0; b < nb; ++b) {
        const QueryEntry* q = plan.head[b];
        if (!q) continue;
        const int ws = cuda::tc_selections_per_block(q->row_block);
        const long nsel = static_cast<long>(batches[b].selections.size());
        base += long(q->nq_pad / q->row_block) * ((nsel + ws - 1) / ws) *
                (q->kv->d_pad / cuda::tc_column_block(q->kv->ntw));
      }
      const long slots = long(std::max(1, info_.sm_count)) * blocks_per_sm_;
      const int want = static_cast<int>(std::clamp((4 * slots + base - 1) / std::max(1L, base), 1L, 64L));
      plan.chunk_len.assign(nb, 0);
      plan.n_chunks.assign(nb, 1);
      for (int b = 0; b < nb; ++b) {
        const QueryEntry* q = plan.head[b];
        if (!q) continue;
        const int T_pad = q->kv->T_pad;
        const int chunks = std::clamp(want, 1, std::max(1, T_pad / kMinChunkTokens));
        const int len = round_up((T_pad + chunks - 1) / chunks, kTokenPad);
        plan.chunk_len[b] = len;
        plan.n_chunks[b] = (T_pad + len - 1) / len;
      }
    }

    // Passes: consecutive selections whose buffers fit a budget of the free memory.
    std::size_t free_b = 0, total_b = 0;
    std::string err = cuda::device_memory(&free_b, &total_b);
    if (!err.empty()) return fail("The cuda backend failed: " + device_step(err));
    const std::size_t budget =
        std::clamp<std::size_t>(free_b > kReserveBytes ? (free_b - kReserveBytes) / 3 : 0, std::size_t(64) << 20,
                                std::size_t(4) << 30);
    std::size_t i0 = 0;
    while (i0 < all.size()) {
      std::size_t i1 = i0, bytes = 0;
      while (i1 < all.size()) {
        const std::size_t b = bytes_of_selection(plan, all[i1].batch);
        if (i1 > i0 && bytes + b > budget) break;
        bytes += b;
        ++i1;
      }
      err = run_pass(batches, plan, all, i0, i1, res);
      if (!err.empty()) return fail(err);
      i0 = i1;
    }
    return res;
  }

  // Host-side layout of one pass's upload (one copy) and device workspace.
  struct PassLayout {
    std::size_t heads = 0, sels = 0, row_items = 0, delta_items = 0, red_items = 0, flags = 0, codes = 0, total = 0;
    std::size_t w_rows = 0, w_dnorm2 = 0, w_tv = 0, w_logit = 0, w_results = 0, w_zero_end = 0, w_dpart = 0,
                w_total = 0;
  };

  std::string run_pass(const std::vector<HeadBatch>& batches, const Plan& plan, const std::vector<SelRef>& all,
                       std::size_t i0, std::size_t i1, EvalResult& res) {
    const int nsel = static_cast<int>(i1 - i0);

    // Heads of the pass (one view per batch that has selections in it).
    std::vector<cuda::HeadView> heads;
    std::map<int, int> head_of_batch;
    for (std::size_t i = i0; i < i1; ++i)
      if (!head_of_batch.count(all[i].batch)) {
        head_of_batch[all[i].batch] = static_cast<int>(heads.size());
        heads.push_back(plan.head[all[i].batch]->view());
      }

    // Selections and their offsets.
    std::vector<cuda::SelView> sels(nsel);
    std::int64_t code_off = 0, row_off = 0, dpart_off = 0, part_off = 0;
    for (int j = 0; j < nsel; ++j) {
      const int b = all[i0 + j].batch;
      const QueryEntry* q = plan.head[b];
      cuda::SelView& s = sels[j];
      s = cuda::SelView{};
      s.code_offset = code_off;
      s.row_offset = row_off;
      s.dpart_offset = dpart_off;
      s.part_offset = part_off;
      s.head = head_of_batch[b];
      s.n_parts = n_parts_of(plan, b);
      s.n_chunks = plan.tc ? plan.n_chunks[b] : 1;
      code_off += q->kv->T_pad;
      row_off += q->nq_pad;
      if (plan.tc) dpart_off += std::int64_t(s.n_chunks) * q->nq_pad * q->kv->d_pad;
      part_off += s.n_parts;
    }

    // Blocks: row statistics, D (per tc shape class, or simple), reductions.
    std::vector<cuda::RowItem> row_items, red_items;
    std::map<std::pair<int, int>, std::vector<cuda::DeltaItem>> tc_items;  // (row block, ntw)
    for (int j0 = 0; j0 < nsel;) {
      const int b = all[i0 + j0].batch;
      int j1 = j0;
      while (j1 < nsel && all[i0 + j1].batch == b) ++j1;
      const QueryEntry* q = plan.head[b];
      const int h = head_of_batch[b];
      for (int r = 0; r < q->nq; ++r)
        for (int g0 = j0; g0 < j1; g0 += cuda::kRowStatsSels)
          row_items.push_back({h, r, g0, std::min(cuda::kRowStatsSels, j1 - g0)});
      if (plan.tc) {
        const int rb = q->row_block, ntw = q->kv->ntw, cb = cuda::tc_column_block(ntw);
        const int ws = cuda::tc_selections_per_block(rb);
        const int n_rb = q->nq_pad / rb, n_cb = q->kv->d_pad / cb;
        std::vector<cuda::DeltaItem>& items = tc_items[{rb, ntw}];
        for (int ch = 0; ch < plan.n_chunks[b]; ++ch) {
          const int t_begin = ch * plan.chunk_len[b];
          const int t_end = std::min(q->kv->T_pad, t_begin + plan.chunk_len[b]);
          for (int c = 0; c < n_cb; ++c)
            for (int rbi = 0; rbi < n_rb; ++rbi)
              for (int g0 = j0; g0 < j1; g0 += ws) {
                cuda::DeltaItem it{};
                it.head = h;
                it.sel0 = g0;
                it.nsel = std::min(ws, j1 - g0);
                it.row0 = rbi * rb;
                it.t_begin = t_begin;
                it.t_end = t_end;
                it.chunk = ch;
                it.col0 = c * cb;
                it.part = ch * n_rb + rbi;
                items.push_back(it);
              }
        }
        for (int j = j0; j < j1; ++j)
          for (int r = 0; r < q->nq; r += 8) red_items.push_back({h, r, j, 1});
      } else {
        for (int j = j0; j < j1; ++j)
          for (int r = 0; r < q->nq; ++r) red_items.push_back({h, r, j, 1});  // the simple path's blocks
      }
      j0 = j1;
    }
    std::vector<std::pair<std::pair<int, int>, std::size_t>> tc_ranges;  // shape, first item
    std::vector<cuda::DeltaItem> delta_items;
    for (auto& [shape, items] : tc_items) {
      tc_ranges.push_back({shape, delta_items.size()});
      delta_items.insert(delta_items.end(), items.begin(), items.end());
    }
    if (row_items.size() > std::size_t(INT_MAX) || delta_items.size() > std::size_t(INT_MAX) ||
        red_items.size() > std::size_t(INT_MAX))
      return "The call has too many blocks for one launch; pass fewer selections at a time.";

    // Upload layout.
    PassLayout L;
    std::size_t at = 0;
    auto section = [&at](std::size_t bytes) {
      const std::size_t off = at;
      at = align_up(at + bytes);
      return off;
    };
    L.heads = section(heads.size() * sizeof(cuda::HeadView));
    L.sels = section(sels.size() * sizeof(cuda::SelView));
    L.row_items = section(row_items.size() * sizeof(cuda::RowItem));
    L.delta_items = section(delta_items.size() * sizeof(cuda::DeltaItem));
    L.red_items = section(red_items.size() * sizeof(cuda::RowItem));
    L.flags = section(4 * sizeof(std::int32_t));
    L.codes = section(static_cast<std::size_t>(code_off));
    L.total = at;

    // Device workspace layout (zeroed up to w_zero_end).
    at = 0;
    const std::size_t n_rows = static_cast<std::size_t>(row_off), n_parts = static_cast<std::size_t>(part_off);
    L.w_rows = section(n_rows * sizeof(cuda::RowParams));
    L.w_dnorm2 = section(n_rows * 8);
    L.w_tv = section(n_parts * 8);
    L.w_logit = section(n_parts * 8);
    L.w_results = section(std::size_t(nsel) * 4 * 8);
    L.w_zero_end = at;
    L.w_dpart = section(static_cast<std::size_t>(dpart_off) * 4);
    L.w_total = at;

    std::string err = upload_host_.ensure(L.total);
    if (err.empty()) err = allocate(upload_dev_, L.total);
    if (err.empty()) err = allocate(work_, L.w_total);
    if (err.empty()) err = results_host_.ensure(std::size_t(nsel) * 32 + 16);
    if (!err.empty()) return "The cuda backend could not allocate its workspace: " + err;

    char* host = upload_host_.as<char>();
    std::memcpy(host + L.heads, heads.data(), heads.size() * sizeof(cuda::HeadView));
    std::memcpy(host + L.sels, sels.data(), sels.size() * sizeof(cuda::SelView));
    std::memcpy(host + L.row_items, row_items.data(), row_items.size() * sizeof(cuda::RowItem));
    std::memcpy(host + L.delta_items, delta_items.data(), delta_items.size() * sizeof(cuda::DeltaItem));
    std::memcpy(host + L.red_items, red_items.data(), red_items.size() * sizeof(cuda::RowItem));
    const std::int32_t flags_init[4] = {0, INT_MAX, 0, 0};
    std::memcpy(host + L.flags, flags_init, sizeof flags_init);
    {
      char* codes = host + L.codes;
#pragma omp parallel for schedule(static) if (nsel >= 16)
      for (int j = 0; j < nsel; ++j) {
        const Selection& s = batches[all[i0 + j].batch].selections[all[i0 + j].index];
        const std::size_t T_pad = std::size_t(plan.head[all[i0 + j].batch]->kv->T_pad);
        char* dst = codes + sels[j].code_offset;
        std::memcpy(dst, s.data(), s.size());
        std::memset(dst + s.size(), 0, T_pad - s.size());
      }
    }

    char* dev = upload_dev_.as<char>();
    char* work = work_.as<char>();
    cuda::EvalArgs args{};
    args.heads = reinterpret_cast<const cuda::HeadView*>(dev + L.heads);
    args.sels = reinterpret_cast<const cuda::SelView*>(dev + L.sels);
    args.codes = reinterpret_cast<const std::uint8_t*>(dev + L.codes);
    args.flags = reinterpret_cast<std::int32_t*>(dev + L.flags);
    args.rows = reinterpret_cast<cuda::RowParams*>(work + L.w_rows);
    args.dnorm2 = reinterpret_cast<double*>(work + L.w_dnorm2);
    args.tv_part = reinterpret_cast<double*>(work + L.w_tv);
    args.logit_part = reinterpret_cast<double*>(work + L.w_logit);
    args.results = reinterpret_cast<double*>(work + L.w_results);
    args.dpart = reinterpret_cast<float*>(work + L.w_dpart);
    const auto* d_row_items = reinterpret_cast<const cuda::RowItem*>(dev + L.row_items);
    const auto* d_delta_items = reinterpret_cast<const cuda::DeltaItem*>(dev + L.delta_items);
    const auto* d_red_items = reinterpret_cast<const cuda::RowItem*>(dev + L.red_items);

    err = device_step(cuda::copy_to_device(dev, host, L.total, stream_));
    if (err.empty()) err = device_step(cuda::fill_zero(work, L.w_zero_end, stream_));
    if (err.empty())
      err = device_step(cuda::launch_row_stats(args, d_row_items, static_cast<int>(row_items.size()), stream_));
    if (plan.tc) {
      for (std::size_t k = 0; err.empty() && k < tc_ranges.size(); ++k) {
        const std::size_t first = tc_ranges[k].second;
        const std::size_t last = k + 1 < tc_ranges.size() ? tc_ranges[k + 1].second : delta_items.size();
        err = device_step(cuda::launch_delta_tc(args, d_delta_items + first, static_cast<int>(last - first),
                                                tc_ranges[k].first.first, tc_ranges[k].first.second, stream_));
      }
      if (err.empty())
        err = device_step(cuda::launch_reduce_partials(args, d_red_items, static_cast<int>(red_items.size()), stream_));
    } else if (err.empty()) {
      err = device_step(cuda::launch_delta_simple(args, d_red_items, static_cast<int>(red_items.size()), stream_));
    }
    if (err.empty()) err = device_step(cuda::launch_finish(args, nsel, stream_));
    double* results = results_host_.as<double>();
    auto* flags = reinterpret_cast<std::int32_t*>(results + 4 * std::size_t(nsel));
    if (err.empty())
      err = device_step(cuda::copy_to_host(results, args.results, std::size_t(nsel) * 32, stream_));
    if (err.empty()) err = device_step(cuda::copy_to_host(flags, args.flags, 16, stream_));
    if (err.empty()) err = device_step(stream_.synchronize());
    if (!err.empty()) return "The cuda backend failed: " + err;

    if (flags[0] != 0) {
      const int j = std::clamp(flags[1], 0, nsel - 1);
      const int b = all[i0 + j].batch;
      std::string why = check_batch(batches[b]);
      if (why.empty()) why = "a selection picks a variant code larger than the number of key variants.";
      return "Batch " + std::to_string(b) + ": " + why;
    }
    if (flags[2] != 0)
      return "The cuda backend could not normalise the kept attention of a query row: its logits are not finite "
             "after the variant's change (keys or queries far out of range).";
    if (flags[3] != 0 && plan.tc) {  // cannot happen by the bounds of launch.hpp; redo exactly if it does
      if (!rerun_on_overflow_)  // the self-check: an overflow is a fault of the tensor-core path
        return "the tensor-core path overflowed fp16 (its scale bound sigma_i is wrong, or delta is not finite)";
      ++overflow_reruns_;
      Plan simple = plan;
      simple.tc = false;
      return run_pass(batches, simple, all, i0, i1, res);
    }

    for (int j = 0; j < nsel; ++j) {
      ErrorMetrics& m = res.errors[all[i0 + j].batch][all[i0 + j].index];
      m.rel_error = results[4 * j + 0];
      m.abs_error = results[4 * j + 1];
      m.attn_tv = results[4 * j + 2];
      m.logit_error = results[4 * j + 3];
    }
    return {};
  }

  // ---- self-check of the tensor-core path -----------------------------------------------

  // Small random heads covering both row blocks, all three column classes, several column
  // blocks, token chunks and causal limits, evaluated on both paths. *mismatch names the
  // first difference.
  std::string self_check(std::string* mismatch) {
    struct Head {
      MatrixRM q, k, v;
      std::vector<MatrixRM> noisy;
    };
    std::mt19937 rng(12345);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    const int sizes[4][3] = {{20, 300, 40}, {70, 1100, 128}, {5, 77, 200}, {50, 130, 16}};  // nq, T, d
    std::vector<Head> heads(4);
    std::vector<HeadBatch> batches;
    for (int i = 0; i < 4; ++i) {
      const int nq = sizes[i][0], T = sizes[i][1], d = sizes[i][2];
      Head& h = heads[i];
      h.q.resize(nq, d);
      h.k.resize(T, d);
      h.v.resize(T, d);
      for (int r = 0; r < nq; ++r)
        for (int c = 0; c < d; ++c) h.q(r, c) = 2.0f * n01(rng);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < d; ++c) {
          h.k(t, c) = n01(rng) * (c % 16 == 3 ? 8.0f : 1.0f);
          h.v(t, c) = n01(rng);
        }
      for (float noise : {0.3f, 0.02f}) {
        MatrixRM kv = h.k;
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < d; ++c) kv(t, c) += noise * n01(rng);
        h.noisy.push_back(std::move(kv));
      }
    }
    for (int i = 0; i < 4; ++i) {
      Head& h = heads[i];
      const int T = static_cast<int>(h.k.rows());
      HeadBatch b;
      b.problem.queries = &h.q;
      b.problem.exact_keys = &h.k;
      b.problem.values = &h.v;
      b.problem.variants = {&h.noisy[0], &h.noisy[1], &h.k};
      if (i == 3)  // causal limits, as decode steps have
        for (int r = 0; r < h.q.rows(); ++r) b.problem.visible.push_back(std::min(T, 40 + 2 * r));
      std::uniform_int_distribution<int> code(0, 3), kept(1, 3);
      Selection mixed(T), all_kept(T), few(T, 0), noisy(T, 1);
      for (int t = 0; t < T; ++t) {
        mixed[t] = static_cast<std::uint8_t>(code(rng));
        all_kept[t] = static_cast<std::uint8_t>(kept(rng));
      }
      for (int t = 0; t < T; t += 7) few[t] = 2;
      b.selections = {mixed, all_kept, few, noisy, mixed};
      batches.push_back(std::move(b));
    }
    rerun_on_overflow_ = false;  // a rerun would hide a broken tensor-core path behind the simple one
    const EvalResult tc = run(batches, true);
    rerun_on_overflow_ = true;
    const EvalResult simple = run(batches, false);
    if (!simple.ok) return simple.message;
    if (!tc.ok) {
      *mismatch = tc.message;
      return {};
    }
    const char* names[4] = {"rel_error", "abs_error", "attn_tv", "logit_error"};
    for (std::size_t b = 0; b < batches.size(); ++b)
      for (std::size_t s = 0; s < batches[b].selections.size(); ++s) {
        const ErrorMetrics& x = tc.errors[b][s];
        const ErrorMetrics& y = simple.errors[b][s];
        const double xs[4] = {x.rel_error, x.abs_error, x.attn_tv, x.logit_error};
        const double ys[4] = {y.rel_error, y.abs_error, y.attn_tv, y.logit_error};
        for (int m = 0; m < 4; ++m)
          if (!(std::abs(xs[m] - ys[m]) <= 1e-4 * std::abs(ys[m]) + 1e-12)) {
            *mismatch = std::string(names[m]) + " " + std::to_string(xs[m]) + " against " + std::to_string(ys[m]) +
                        " on check head " + std::to_string(b) + ", selection " + std::to_string(s);
            return {};
          }
      }
    return {};
  }

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

}  // namespace

bool cuda_device_present(std::string* reason) {
  try {
    return cuda::probe_device(nullptr, reason);
  } catch (const std::exception& e) {
    if (reason) *reason = std::string("no CUDA device: ") + e.what();
    return false;
  }
}

std::unique_ptr<Recomputer> make_cuda_recomputer(std::string* reason) {
  try {
    cuda::DeviceInfo info;
    std::string why;
    if (!cuda::probe_device(&info, &why)) {
      if (reason) *reason = why;
      return nullptr;
    }
    auto rc = std::make_unique<CudaRecomputer>(std::move(info));
    why = rc->init();
    if (!why.empty()) {
      if (reason) *reason = why;
      return nullptr;
    }
    return rc;
  } catch (const std::exception& e) {
    if (reason) *reason = std::string("the CUDA backend could not be created: ") + e.what();
    return nullptr;
  }
}

}  // namespace tierlab
