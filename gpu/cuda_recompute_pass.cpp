// The CUDA backend's evaluation of a call (cuda_recomputer.hpp, gpu/cuda_recompute.cpp): the
// plan (the prepared head of each batch, token chunks on the tensor-core path), passes of
// consecutive selections that fit the free memory, and per pass one upload, the launches
// (row statistics, D on the tensor-core or simple path, reductions, means) and one copy back.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpu/cuda_recomputer.hpp"

namespace tierlab::cuda_detail {

namespace {

std::size_t align_up(std::size_t x, std::size_t a = 256) { return (x + a - 1) / a * a; }

}  // namespace

// One pass's work laid out on the host: its heads and selections with their offsets, the
// blocks of each launch (row statistics, D per tensor-core shape class or simple,
// reductions), and the layout of its upload and device workspace.
struct CudaRecomputer::Pass {
  const std::vector<HeadBatch>& batches;
  const Plan& plan;
  const std::vector<SelRef>& all;
  const std::size_t i0, i1;
  const int nsel = static_cast<int>(i1 - i0);
  std::vector<cuda::HeadView> heads{};
  std::map<int, int> head_of_batch{};
  std::vector<cuda::SelView> sels{};
  std::int64_t code_off = 0, row_off = 0, dpart_off = 0, part_off = 0;
  std::vector<cuda::RowItem> row_items{}, red_items{};
  std::vector<std::pair<std::pair<int, int>, std::size_t>> tc_ranges{};  // shape, first item
  std::vector<cuda::DeltaItem> delta_items{};
  PassLayout L{};

  void gather_heads_and_selections();
  std::string build_blocks();
  void lay_out();
  void fill_upload(char* host) const;
};

void CudaRecomputer::Pass::gather_heads_and_selections() {
  // Heads of the pass (one view per batch that has selections in it).
  for (std::size_t i = i0; i < i1; ++i)
    if (!head_of_batch.count(all[i].batch)) {
      head_of_batch[all[i].batch] = static_cast<int>(heads.size());
      heads.push_back(plan.head[all[i].batch]->view());
    }

  // Selections and their offsets.
  sels.resize(nsel);
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
}

// Empty, or why the pass cannot be launched.
std::string CudaRecomputer::Pass::build_blocks() {
  // Blocks: row statistics, D (per tc shape class, or simple), reductions.
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
  for (auto& [shape, items] : tc_items) {
    tc_ranges.push_back({shape, delta_items.size()});
    delta_items.insert(delta_items.end(), items.begin(), items.end());
  }
  if (row_items.size() > std::size_t(INT_MAX) || delta_items.size() > std::size_t(INT_MAX) ||
      red_items.size() > std::size_t(INT_MAX))
    return "The call has too many blocks for one launch; pass fewer selections at a time.";
  return {};
}

void CudaRecomputer::Pass::lay_out() {
  // Upload layout.
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
}

// The upload: heads, selections, blocks, flags and the selections' codes (zero-padded).
void CudaRecomputer::Pass::fill_upload(char* host) const {
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
}

int CudaRecomputer::n_parts_of(const Plan& plan, int b) {
  const QueryEntry* q = plan.head[b];
  return plan.tc ? plan.n_chunks[b] * (q->nq_pad / q->row_block) : q->nq_pad;
}

std::size_t CudaRecomputer::bytes_of_selection(const Plan& plan, int b) const {
  const QueryEntry* q = plan.head[b];
  std::size_t bytes = std::size_t(q->kv->T_pad) + std::size_t(q->nq_pad) * (sizeof(cuda::RowParams) + 8) +
                      std::size_t(n_parts_of(plan, b)) * 16 +
                      64 + std::size_t(q->nq) * 16;
  if (plan.tc) bytes += std::size_t(plan.n_chunks[b]) * q->nq_pad * q->kv->d_pad * 4;
  return bytes;
}

EvalResult CudaRecomputer::run(const std::vector<HeadBatch>& batches, bool tc) {
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

std::string CudaRecomputer::run_pass(const std::vector<HeadBatch>& batches, const Plan& plan,
                                     const std::vector<SelRef>& all, std::size_t i0, std::size_t i1,
                                     EvalResult& res) {
  Pass pass{.batches = batches, .plan = plan, .all = all, .i0 = i0, .i1 = i1};
  pass.gather_heads_and_selections();
  if (std::string why = pass.build_blocks(); !why.empty()) return why;
  pass.lay_out();
  const int nsel = pass.nsel;
  const PassLayout& L = pass.L;
  const auto& row_items = pass.row_items;
  const auto& red_items = pass.red_items;
  const auto& delta_items = pass.delta_items;
  const auto& tc_ranges = pass.tc_ranges;

  std::string err = upload_host_.ensure(L.total);
  if (err.empty()) err = allocate(upload_dev_, L.total);
  if (err.empty()) err = allocate(work_, L.w_total);
  if (err.empty()) err = results_host_.ensure(std::size_t(nsel) * 32 + 16);
  if (!err.empty()) return "The cuda backend could not allocate its workspace: " + err;

  char* host = upload_host_.as<char>();
  pass.fill_upload(host);

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

}  // namespace tierlab::cuda_detail
