// The CUDA backend of exact recomputation (gpu/recompute.hpp, gpu/cuda_backend.hpp).
// Plain C++: every CUDA call is behind the launchers of gpu/cuda/launch.hpp, which also
// states the formulas the kernels compute.
//
// This file: creation (the path choice and the tensor-core self-check) and the head cache;
// the evaluation of a call is in cuda_recompute_pass.cpp (cuda_recomputer.hpp has the class).
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
#include "gpu/cuda_recomputer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace tierlab {

namespace cuda_detail {

namespace {

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

}  // namespace

std::string CudaRecomputer::init() {
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

std::string CudaRecomputer::description() const {
  std::string s = "cuda (" + info_.name + ", " + path_note_;
  if (overflow_reruns_ > 0)
    s += "; " + std::to_string(overflow_reruns_) + " pass(es) redone on the simple path after an fp16 overflow";
  return s + ")";
}

EvalResult CudaRecomputer::evaluate(const std::vector<HeadBatch>& batches) {
  try {
    return run(batches, use_tc_);
  } catch (const std::exception& e) {
    EvalResult res;
    res.ok = false;
    res.message = std::string("The cuda backend failed: ") + e.what();
    return res;
  }
}

// ---- cache ----------------------------------------------------------------------

void CudaRecomputer::clear_cache() {
  queries_.clear();
  kvs_.clear();
}

// Frees the least recently used entry not used by the current call; false if none.
bool CudaRecomputer::evict_one() {
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
std::string CudaRecomputer::make_room(std::size_t bytes) {
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
std::string CudaRecomputer::allocate(cuda::DeviceBuffer& buf, std::size_t bytes) {
  if (bytes <= buf.bytes() && buf.data()) return {};
  buf.reset();
  std::string err = make_room(bytes);
  if (!err.empty()) return err;
  return buf.allocate(bytes);
}

std::string CudaRecomputer::acquire_kv(const HeadProblem& hp, KvEntry** out) {
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

std::string CudaRecomputer::acquire(const HeadProblem& hp, QueryEntry** out) {
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
std::string CudaRecomputer::device_step(std::string err) {
  if (!err.empty() && broken_.empty()) broken_ = err;
  return err;
}

// ---- self-check of the tensor-core path -----------------------------------------------

// Small random heads covering both row blocks, all three column classes, several column
// blocks, token chunks and causal limits, evaluated on both paths. *mismatch names the
// first difference.
std::string CudaRecomputer::self_check(std::string* mismatch) {
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

}  // namespace cuda_detail

using cuda_detail::CudaRecomputer;


bool cuda_device_present(std::string* reason) {
  try {
    return cuda::probe_device(nullptr, reason);
  } catch (const std::exception& e) {
    if (reason) *reason = std::string("no CUDA device: ") + e.what();
    return false;
  }
}

std::string select_cuda_device(int hint, int* device, int* count) {
  std::string why;
  try {
    if (!cuda::select_device(hint, device, count, &why)) return why.empty() ? "no CUDA device" : why;
  } catch (const std::exception& e) {
    return std::string("no CUDA device: ") + e.what();
  }
  return "";
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
