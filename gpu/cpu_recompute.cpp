// The reference CPU backend of exact recomputation: Eigen GEMMs (double for the exact
// logits, float32 for the rest), OpenMP over tiles, heads, selections and blocks of
// query rows, sums in double. The formulas are stated in
// cpu_recompute.hpp (the two phases) and recompute.hpp (the metrics).
#include "gpu/cpu_recompute.hpp"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <cstdlib>
#include <cmath>
#include <exception>
#include <limits>
#include <string>

#include "model/base/cancel.hpp"

namespace tierlab {

namespace {
constexpr int kPrepareRowBlock = 64;     // query rows per tile in prepare_head
constexpr int kPrepareTokenBlock = 256;  // tokens per tile in prepare_head
constexpr int kOutputRowBlock = 16;      // query rows per task of the exact output o = p V
constexpr int kEvaluateRowBlock = 64;    // most query rows in one delta GEMM
constexpr int kMinEvaluateTasks = 16;    // row blocks wanted per query set (enough tasks for 8 threads)
constexpr int kTasksPerThread = 4;       // groups of row blocks per thread of a team, at least
constexpr int kFusedVariants = 4;        // up to this many variants are gathered in one pass
constexpr int kSumBlock = 512;           // tv: float partial sums (16 lanes x 32 terms), then double
constexpr double kMaxFastLogitRise = 30.0;  // nats; above, expm1 products leave float's comfort zone
const float kMaxFastRiseU = static_cast<float>(std::expm1(kMaxFastLogitRise));  // the same bound on u = expm1(ds)
constexpr double kMinFastKeptMass = 1e-12;  // below, kept probabilities may have underflowed in float
constexpr double kPreparedBytesBudget = 512.0 * 1024 * 1024;  // per chunk of query rows
constexpr int kMaxChunkRows = 4096;      // and at most this many rows per chunk
}  // namespace

namespace cpu {

namespace {

double sum_double(const float* x, int n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += double(x[i]);
  return s;
}

double squared_norm_double(const float* x, int n) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

double rel_of(double abs, double on2) {
  if (on2 > 0) return abs / on2;
  return abs == 0 ? 0.0 : std::numeric_limits<double>::infinity();
}

// Tokens row `row` of a problem sees: visible[row] with causal limits, else all T.
int row_limit(const HeadProblem& hp, int row) {
  return hp.visible.empty() ? static_cast<int>(hp.exact_keys->rows()) : hp.visible[static_cast<std::size_t>(row)];
}

// One row recomputed directly in double precision from the inputs (the guard path), over
// the tokens it sees (0 .. row_limit - 1).
RowSums direct_row_double(const HeadProblem& hp, const Selection& sel, int row) {
  const MatrixRM& Q = *hp.queries;
  const MatrixRM& K = *hp.exact_keys;
  const MatrixRM& V = *hp.values;
  const int T = row_limit(hp, row), d = static_cast<int>(K.cols());
  const double scale = 1.0 / std::sqrt(double(d));
  const Eigen::VectorXd q = Q.row(row).transpose().cast<double>();
  Eigen::VectorXd s(T), sh(T);
  double m = -std::numeric_limits<double>::infinity(), mh = m;
  for (int t = 0; t < T; ++t) {
    s[t] = K.row(t).cast<double>().dot(q) * scale;
    m = std::max(m, s[t]);
    if (sel[t] != 0) {
      sh[t] = hp.variants[sel[t] - 1]->row(t).cast<double>().dot(q) * scale;
      mh = std::max(mh, sh[t]);
    }
  }
  Eigen::VectorXd p(T), ph(T);
  double z = 0, zh = 0;
  for (int t = 0; t < T; ++t) {
    p[t] = std::exp(s[t] - m);
    z += p[t];
    ph[t] = sel[t] != 0 ? std::exp(sh[t] - mh) : 0.0;
    zh += ph[t];
  }
  p /= z;
  if (zh > 0) ph /= zh;
  Eigen::VectorXd o = Eigen::VectorXd::Zero(d), D = Eigen::VectorXd::Zero(d);
  RowSums r;
  Eigen::VectorXd v(d);  // one buffer for every token's value row in double
  for (int t = 0; t < T; ++t) {
    const double delta = ph[t] - p[t];
    v = V.row(t).transpose().cast<double>();
    o += p[t] * v;
    D += delta * v;
    r.tv += 0.5 * std::abs(delta);
  }
  r.abs = D.squaredNorm();
  r.rel = zh > 0 ? rel_of(r.abs, o.squaredNorm()) : 1.0;
  return r;
}

// The (query rows) x (tokens) tiles of prepare_head and set_variants: blocks of
// kPrepareRowBlock rows and kPrepareTokenBlock tokens, tile = rb * token_blocks + tb.
struct TileGrid {
  int rows, T, row_blocks, token_blocks;
  TileGrid(int rows_, int T_)
      : rows(rows_), T(T_), row_blocks((rows_ + kPrepareRowBlock - 1) / kPrepareRowBlock),
        token_blocks((T_ + kPrepareTokenBlock - 1) / kPrepareTokenBlock) {}
  int count() const { return row_blocks * token_blocks; }
  struct Tile {
    int rb, tb, r0, nr, t0, nt;  // block indices, first row / token and their counts
  };
  Tile at(int tile) const {
    const int rb = tile / token_blocks, tb = tile % token_blocks;
    const int r0 = rb * kPrepareRowBlock, t0 = tb * kPrepareTokenBlock;
    return {rb, tb, r0, std::min(kPrepareRowBlock, rows - r0), t0, std::min(kPrepareTokenBlock, T - t0)};
  }
};

// The threads of the next parallel region (1 inside another one), each with its own scratch
// `make()` gives (a tile's results never depend on which thread computed it).
template <class Make>
auto thread_scratch(int& nthreads, Make make) {
  nthreads = omp_in_parallel() ? 1 : omp_get_max_threads();
  std::vector<decltype(make())> scratch;
  scratch.reserve(static_cast<std::size_t>(nthreads));
  for (int i = 0; i < nthreads; ++i) scratch.push_back(make());
  return scratch;
}

void grow(std::vector<float>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

// ---- D = delta V, one fused multiply-add chain per entry ------------------------------
// D (nb x d, row-major, leading dimension d) = delta (nb x T, leading dimension T) times the
// values V (T x d, row-major): every entry is the chain acc = fma(delta_rt, V_tc, acc) over
// t = 0 .. T-1 in order, starting from 0. How the rows and columns are tiled never changes an
// entry's operations, so a row's D is the same bits in a product of 1 row or of 64, on any
// thread (unlike a BLAS-style product, whose kernel paths depend on the product's shape). Tiles
// of kValueRows rows x kValueCols columns keep their sums in registers over a block of
// kValueTokens tokens (its rows of V stay in the cache for every row tile); no operand is packed.
constexpr int kValueTokens = 512, kValueRows = 8, kValueCols = 32;

template <int R, int C>
void value_tile(const float* delta, int ld_delta, const float* V, int d, float* D, int t0, int t1) {
  float acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = D[std::size_t(r) * d + c];
  for (int t = t0; t < t1; ++t) {
    const float* v = V + std::size_t(t) * d;
    for (int r = 0; r < R; ++r) {
      const float a = delta[std::size_t(r) * ld_delta + t];
#pragma omp simd
      for (int c = 0; c < C; ++c) acc[r][c] = std::fma(a, v[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) D[std::size_t(r) * d + c] = acc[r][c];
}

// Rows [r0, r0 + R) of the product over tokens [t0, t1), columns [0, d): full column tiles,
// then 16-wide, then one column at a time (the same chain per entry in each).
template <int R>
void value_rows(const float* delta, int T, const float* V, int d, float* D, int t0, int t1) {
  int c0 = 0;
  for (; c0 + kValueCols <= d; c0 += kValueCols) value_tile<R, kValueCols>(delta, T, V + c0, d, D + c0, t0, t1);
  for (; c0 + 16 <= d; c0 += 16) value_tile<R, 16>(delta, T, V + c0, d, D + c0, t0, t1);
  for (; c0 < d; ++c0) value_tile<R, 1>(delta, T, V + c0, d, D + c0, t0, t1);
}

void delta_times_values(const float* delta, int nb, int T, const MatrixRM& V, float* D) {
  const int d = static_cast<int>(V.cols());
  std::fill(D, D + std::size_t(nb) * d, 0.0f);
  const float* v = V.data();
  for (int t0 = 0; t0 < T; t0 += kValueTokens) {
    const int t1 = std::min(T, t0 + kValueTokens);
    int r = 0;
    for (; r + kValueRows <= nb; r += kValueRows)
      value_rows<kValueRows>(delta + std::size_t(r) * T, T, v, d, D + std::size_t(r) * d, t0, t1);
    for (; r + 4 <= nb; r += 4) value_rows<4>(delta + std::size_t(r) * T, T, v, d, D + std::size_t(r) * d, t0, t1);
    for (; r < nb; ++r) value_rows<1>(delta + std::size_t(r) * T, T, v, d, D + std::size_t(r) * d, t0, t1);
  }
}

}  // namespace

PreparedHead prepare_head(const HeadProblem& hp, int row_begin, int row_end) {
  const MatrixRM& Q = *hp.queries;
  const MatrixRM& K = *hp.exact_keys;
  const MatrixRM& V = *hp.values;
  const int T = static_cast<int>(K.rows()), d = static_cast<int>(K.cols());
  const int rows = row_end - row_begin;
  const double inv_sqrt_d = 1.0 / std::sqrt(double(d));
  // The calling thread's cancel flag (model/base/cancel.hpp): once set, every remaining tile and
  // row is skipped (every thread still meets every worksharing loop) and Cancelled thrown.
  const std::atomic<bool>* cancel = current_cancel_flag();

  PreparedHead ph;
  ph.problem = hp;
  ph.problem.variants.clear();  // set_variants below records them
  ph.row_begin = row_begin;
  ph.rows = rows;
  ph.T = T;
  ph.d = d;
  ph.p.resize(rows, T);
  ph.p_sum.resize(rows);
  ph.o_norm2.resize(rows);

  // Tiles of (query rows) x (tokens): the exact logits in double (p's precision sets the
  // errors': float logits of sharp heads would cost 1e-6 relative).
  const TileGrid grid(rows, T);
  const MatrixRMd Qd = Q.middleRows(row_begin, rows).cast<double>();
  MatrixRMd logits(rows, T);  // the exact logits in double until the softmax
  struct TileScratch {
    MatrixRMd kd, sd;
  };
  int nthreads = 1;
  std::vector<TileScratch> scratch = thread_scratch(nthreads, [&] {
    return TileScratch{MatrixRMd(kPrepareTokenBlock, d), MatrixRMd(std::min(rows, kPrepareRowBlock), kPrepareTokenBlock)};
  });

#pragma omp parallel num_threads(nthreads)
  {
    TileScratch& sc = scratch[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int tile = 0; tile < grid.count(); ++tile) {
      if (cancel_requested(cancel)) continue;
      const TileGrid::Tile tl = grid.at(tile);
      const int r0 = tl.r0, nr = tl.nr, t0 = tl.t0, nt = tl.nt;
      auto kd = sc.kd.topRows(nt);
      kd = K.middleRows(t0, nt).cast<double>();
      auto sd = sc.sd.topLeftCorner(nr, nt);
      sd.noalias() = Qd.middleRows(r0, nr) * kd.transpose();
      logits.block(r0, t0, nr, nt) = sd * inv_sqrt_d;
      // Causal limits: tokens past a row's limit get p = 0 (logit -inf).
      for (int r = 0; r < nr; ++r) {
        const int lim = row_limit(hp, row_begin + r0 + r);
        if (lim < t0 + nt)
          logits.row(r0 + r).segment(std::max(lim, t0), t0 + nt - std::max(lim, t0)).setConstant(-std::numeric_limits<double>::infinity());
      }
    }

    // Exact softmax per row in double (max-subtracted), stored in float.
#pragma omp for schedule(static)
    for (int r = 0; r < rows; ++r) {
      if (cancel_requested(cancel)) continue;
      auto row = logits.row(r).array();
      const double m = row.maxCoeff();
      row = (row - m).exp();
      const double z = row.sum();
      ph.p.row(r) = (row / z).cast<float>().matrix();
      ph.p_sum[r] = sum_double(ph.p.row(r).data(), T);
    }

    // o = p V / P1 per block of rows, and ||o||^2.
#pragma omp for schedule(dynamic, 1)
    for (int rb = 0; rb < (rows + kOutputRowBlock - 1) / kOutputRowBlock; ++rb) {
      if (cancel_requested(cancel)) continue;
      const int r0 = rb * kOutputRowBlock, nr = std::min(kOutputRowBlock, rows - r0);
      MatrixRM o = ph.p.middleRows(r0, nr) * V;
      for (int r = 0; r < nr; ++r) {
        const double p1 = ph.p_sum[r0 + r];
        ph.o_norm2[r0 + r] = squared_norm_double(o.row(r).data(), d) / (p1 * p1);
      }
    }
  }
  throw_if_cancelled(cancel);
  set_variants(ph, hp.variants);
  return ph;
}

void set_variants(PreparedHead& ph, const std::vector<const MatrixRM*>& variants, const std::vector<std::uint8_t>* differ,
                  const std::vector<std::vector<std::uint8_t>>* read) {
  const HeadProblem& hp = ph.problem;
  const MatrixRM& Q = *hp.queries;
  const MatrixRM& K = *hp.exact_keys;
  const int T = ph.T, d = ph.d, rows = ph.rows, row_begin = ph.row_begin;
  for (const MatrixRM* v : variants)
    if (!v || v->rows() != T || v->cols() != d)
      throw std::invalid_argument("set_variants: a key variant is not " + std::to_string(T) + " x " + std::to_string(d));
  if (differ && static_cast<int>(differ->size()) != T)
    throw std::invalid_argument("set_variants: differ has " + std::to_string(differ->size()) + " entries, not T = " +
                                std::to_string(T));
  if (read && read->size() != variants.size())
    throw std::invalid_argument("set_variants: " + std::to_string(read->size()) + " read masks for " +
                                std::to_string(variants.size()) + " variants");
  if (read)
    for (const auto& m : *read)
      if (static_cast<int>(m.size()) != T)
        throw std::invalid_argument("set_variants: a read mask has " + std::to_string(m.size()) + " entries, not T = " +
                                    std::to_string(T));
  const TileGrid grid(rows, T);
  const int row_blocks = grid.row_blocks, token_blocks = grid.token_blocks;
  const std::atomic<bool>* cancel = current_cancel_flag();  // as in prepare_head
  // With `differ`: the token blocks holding a flagged token (the others equal the exact keys).
  std::vector<std::uint8_t> block_differs;
  bool any_differs = true;
  if (differ) {
    block_differs.assign(static_cast<std::size_t>(token_blocks), 0);
    any_differs = false;
    for (int t = 0; t < T; ++t)
      if ((*differ)[static_cast<std::size_t>(t)]) block_differs[static_cast<std::size_t>(t / kPrepareTokenBlock)] = 1, any_differs = true;
  }
  const int nv = static_cast<int>(variants.size());
  const float scale = static_cast<float>(1.0 / std::sqrt(double(d)));
  ph.problem.variants = variants;
  ph.u.assign(nv, MatrixRM());
  ph.logit_sq.assign(nv, VectorD());
  ph.identical.assign(nv, false);
  ph.read = read ? *read : std::vector<std::vector<std::uint8_t>>();
  // With `read`: per variant, the token blocks holding a read token whose row differs from the
  // exact key (flagged by `differ` where given); a variant with none is identical where it is read.
  std::vector<std::vector<std::uint8_t>> block_work(static_cast<std::size_t>(nv));
  for (int v = 0; v < nv; ++v) {
    ph.identical[v] = variants[v] == hp.exact_keys || (differ && !any_differs);
    if (!ph.identical[v] && read) {
      std::vector<std::uint8_t>& work = block_work[static_cast<std::size_t>(v)];
      work.assign(static_cast<std::size_t>(token_blocks), 0);
      const std::vector<std::uint8_t>& rd = (*read)[static_cast<std::size_t>(v)];
      bool any = false;
      for (int t = 0; t < T; ++t) {
        if (!rd[static_cast<std::size_t>(t)] || (differ && !(*differ)[static_cast<std::size_t>(t)])) continue;
        if (work[static_cast<std::size_t>(t / kPrepareTokenBlock)]) continue;
        if (variants[v]->row(t) != K.row(t)) work[static_cast<std::size_t>(t / kPrepareTokenBlock)] = 1, any = true;
      }
      ph.identical[v] = !any;
    } else if (!ph.identical[v] && !differ) {
      ph.identical[v] = *variants[v] == K;
    }
    if (ph.identical[v]) continue;
    ph.u[v].resize(rows, T);
  }
  // Per tile and variant: ds from the key difference (exact in float when k^ and k are
  // within a factor 2), u = expm1(ds). A tile whose keys equal the exact ones has ds = 0
  // (no product needed).
  // Partial results reduced after the tiles: sum over a row block of ds^2 per token.
  std::vector<std::vector<VectorD>> logit_part(nv);
  for (int v = 0; v < nv; ++v)
    if (!ph.identical[v]) logit_part[v].assign(row_blocks, VectorD(T));
  struct TileScratch {
    MatrixRM kdiff, ds;
  };
  int nthreads = 1;
  std::vector<TileScratch> scratch = thread_scratch(nthreads, [&] {
    return TileScratch{MatrixRM(kPrepareTokenBlock, d), MatrixRM(std::min(rows, kPrepareRowBlock), kPrepareTokenBlock)};
  });

#pragma omp parallel num_threads(nthreads)
  {
    TileScratch& sc = scratch[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int tile = 0; tile < grid.count(); ++tile) {
      if (cancel_requested(cancel)) continue;
      const TileGrid::Tile tl = grid.at(tile);
      const int rb = tl.rb, tb = tl.tb, r0 = tl.r0, nr = tl.nr, t0 = tl.t0, nt = tl.nt;
      const auto kblk = K.middleRows(t0, nt);
      for (int v = 0; v < nv; ++v) {
        if (ph.identical[v]) continue;
        auto kdiff = sc.kdiff.topRows(nt);
        auto ds = sc.ds.topLeftCorner(nr, nt);
        double* lsq = logit_part[v][rb].data() + t0;
        const bool skip = read ? !block_work[static_cast<std::size_t>(v)][static_cast<std::size_t>(tb)]
                               : differ && !block_differs[static_cast<std::size_t>(tb)];
        if (skip && read) {  // no token of the block is read where it differs: ds = u = 0
          std::fill(lsq, lsq + nt, 0.0);
          ph.u[v].block(r0, t0, nr, nt).setZero();
          continue;
        }
        if (!skip) {
          kdiff = variants[v]->middleRows(t0, nt) - kblk;
          if (read) {  // a token not read gets ds = 0 (its column of the product is its row's alone)
            const std::vector<std::uint8_t>& rd = (*read)[static_cast<std::size_t>(v)];
            for (int t = 0; t < nt; ++t)
              if (!rd[static_cast<std::size_t>(t0 + t)]) kdiff.row(t).setZero();
          }
        }
        if (skip || kdiff.isZero(0.0f)) {
          ds.setZero();
        } else {
          ds.noalias() = Q.middleRows(row_begin + r0, nr) * kdiff.transpose();
          ds *= scale;
        }
        for (int r = 0; r < nr; ++r) {
          const int lim = row_limit(hp, row_begin + r0 + r);
          if (lim < t0 + nt) ds.row(r).tail(t0 + nt - std::max(lim, t0)).setZero();
        }
        std::fill(lsq, lsq + nt, 0.0);
        for (int r = 0; r < nr; ++r) {
          const float* x = ds.row(r).data();
#pragma omp simd
          for (int t = 0; t < nt; ++t) lsq[t] += double(x[t]) * double(x[t]);
        }
        ph.u[v].block(r0, t0, nr, nt) = ds.array().expm1().matrix();
      }
    }

    // Sum of ds^2 over all rows, per token.
#pragma omp for schedule(static)
    for (int v = 0; v < nv; ++v) {
      if (ph.identical[v]) continue;
      ph.logit_sq[v] = logit_part[v][0];
      for (int rb = 1; rb < row_blocks; ++rb) ph.logit_sq[v] += logit_part[v][rb];
    }
  }
  throw_if_cancelled(cancel);
}

std::vector<std::vector<std::uint8_t>> read_masks(const HeadBatch& batch) {
  const std::size_t T = static_cast<std::size_t>(batch.problem.exact_keys->rows());
  std::vector<std::vector<std::uint8_t>> read(batch.problem.variants.size(), std::vector<std::uint8_t>(T, 0));
  for (const Selection& sel : batch.selections)
    for (std::size_t t = 0; t < T; ++t)
      if (sel[t] != 0) read[static_cast<std::size_t>(sel[t] - 1)][t] = 1;
  return read;
}

double kept_logit_sq(const PreparedHead& ph, const Selection& sel, double* n_pairs) {
  double s = 0;
  int kept = 0;
  std::vector<int> kept_before;  // with causal limits: kept tokens among 0 .. t-1
  const bool causal = !ph.problem.visible.empty();
  if (causal) kept_before.assign(std::size_t(ph.T) + 1, 0);
  for (int t = 0; t < ph.T; ++t) {
    const int code = sel[t];
    if (causal) kept_before[std::size_t(t)] = kept;
    if (code == 0) continue;
    ++kept;
    if (!ph.identical[code - 1]) s += ph.logit_sq[code - 1][t];
  }
  if (n_pairs) {
    if (!causal) {
      *n_pairs = double(kept) * ph.rows;
    } else {
      kept_before[std::size_t(ph.T)] = kept;
      double pairs = 0;
      for (int r = 0; r < ph.rows; ++r) pairs += kept_before[std::size_t(row_limit(ph.problem, ph.row_begin + r))];
      *n_pairs = pairs;
    }
  }
  return s;
}

RowSums evaluate_rows(const PreparedHead& ph, const Selection& sel, int r0, int r1, Workspace& ws) {
  RowSums sums;
  for (int b0 = r0; b0 < r1; b0 += kEvaluateRowBlock) {  // one GEMM block at a time
    RowSums s;
    evaluate_row_blocks(ph, sel, b0, std::min(r1, b0 + kEvaluateRowBlock), kEvaluateRowBlock, ws, &s);
    sums.rel += s.rel;
    sums.abs += s.abs;
    sums.tv += s.tv;
  }
  return sums;
}

void evaluate_row_blocks(const PreparedHead& ph, const Selection& sel, int r0, int r1, int block, Workspace& ws,
                         RowSums* block_sums) {
  const int T = ph.T, d = ph.d, nb = r1 - r0;
  const int nv = static_cast<int>(ph.identical.size());
  if (nb <= 0) return;
  if (nb > kEvaluateRowBlock || block < 1)
    throw std::invalid_argument("evaluate_row_blocks: " + std::to_string(nb) + " rows in blocks of " +
                                std::to_string(block) + " (at most " + std::to_string(kEvaluateRowBlock) + " rows)");
  const int nblocks = (nb + block - 1) / block;
  for (int k = 0; k < nblocks; ++k) block_sums[k] = RowSums{};
  auto sums_of = [&](int rr) -> RowSums& { return block_sums[rr / block]; };  // rr: row within [r0, r1)

  std::vector<char> used(nv, 0);
  int n_kept = 0;
  for (int t = 0; t < T; ++t)
    if (sel[t] != 0) {
      used[sel[t] - 1] = 1;
      ++n_kept;
    }
  if (!ph.read.empty())  // set_variants formed each variant at its read tokens only
    for (int t = 0; t < T; ++t)
      if (sel[t] != 0 && !ph.read[static_cast<std::size_t>(sel[t] - 1)][static_cast<std::size_t>(t)])
        throw std::invalid_argument("evaluate_rows: the selection uses variant " + std::to_string(sel[t]) + " at token " +
                                    std::to_string(t) + ", where set_variants' read mask says it is not read");
  if (n_kept == 0) {  // o^ = 0: e = 1, abs = ||o||^2, tv = 1/2
    for (int rr = 0; rr < nb; ++rr) {
      RowSums& sums = sums_of(rr);
      sums.rel += 1.0;
      sums.abs += ph.o_norm2[r0 + rr];
      sums.tv += 0.5;
    }
    return;
  }

  grow(ws.u, std::size_t(T));
  grow(ws.zeros, std::size_t(T));  // never written: stays zero
  grow(ws.delta, std::size_t(nb) * T);
  grow(ws.out, std::size_t(nb) * d);
  bool fallback[kEvaluateRowBlock] = {};
  RowSums direct[kEvaluateRowBlock];
  const std::uint8_t* code = sel.data();

  for (int rr = 0; rr < nb; ++rr) {
    const int r = r0 + rr;
    const float* p = ph.p.row(r).data();
    float* u = ws.u.data();
    float* delta = ws.delta.data() + std::size_t(rr) * T;

    // Gather u_t (-1 evicted, 0 for a variant equal to the exact keys), the sums, and the
    // largest u the selection uses: the guard looks at the tokens a selection keeps, not at
    // every token of its variants (an evicted token's variant row is zero, its ds = -s_t can be
    // large, and its u is never read).
    double ub = 0, z = 0;
    float umax = -1.0f;
    if (nv <= kFusedVariants) {
      const float* src[kFusedVariants];
      std::uint8_t cv[kFusedVariants];
      for (int v = 0; v < kFusedVariants; ++v) {
        src[v] = v < nv && !ph.identical[v] ? ph.u[v].row(r).data() : ws.zeros.data();
        cv[v] = v < nv ? static_cast<std::uint8_t>(v + 1) : std::uint8_t(255);  // 255: never selected here
      }
      const float *s0 = src[0], *s1 = src[1], *s2 = src[2], *s3 = src[3];
      const std::uint8_t c0 = cv[0], c1 = cv[1], c2 = cv[2], c3 = cv[3];
#pragma omp simd reduction(+ : ub, z) reduction(max : umax)
      for (int t = 0; t < T; ++t) {
        const std::uint8_t c = code[t];
        float x = -1.0f;
        x = c == c0 ? s0[t] : x;
        x = c == c1 ? s1[t] : x;
        x = c == c2 ? s2[t] : x;
        x = c == c3 ? s3[t] : x;
        u[t] = x;
        umax = std::max(umax, x);
        const double pt = p[t], ut = x;
        ub += pt * ut;
        z += pt * (1.0 + ut);
      }
    } else {
      std::fill(u, u + T, -1.0f);
      for (int v = 0; v < nv; ++v) {
        if (!used[v]) continue;
        const std::uint8_t c = static_cast<std::uint8_t>(v + 1);
        const float* U = ph.identical[v] ? ws.zeros.data() : ph.u[v].row(r).data();
#pragma omp simd
        for (int t = 0; t < T; ++t) u[t] = code[t] == c ? U[t] : u[t];
      }
#pragma omp simd reduction(+ : ub, z) reduction(max : umax)
      for (int t = 0; t < T; ++t) {
        const double pt = p[t], ut = u[t];
        umax = std::max(umax, u[t]);
        ub += pt * ut;
        z += pt * (1.0 + ut);
      }
    }
    // u = expm1(ds): the kept tokens raise a logit by more than kMaxFastLogitRise nats (or u
    // is not a number) -> the double-precision path.
    const bool safe = umax <= kMaxFastRiseU;
    const double p1 = ph.p_sum[r];
    const double ubar = ub / p1, zk = z / p1;
    if (!safe || !(zk >= kMinFastKeptMass)) {
      fallback[rr] = true;
      direct[rr] = direct_row_double(ph.problem, sel, ph.row_begin + r);
      std::fill(delta, delta + T, 0.0f);
      continue;
    }
    const float a = static_cast<float>(1.0 / (zk * p1)), b = static_cast<float>(ubar),
                c = static_cast<float>(1.0 / p1);
    double tv = 0;
    for (int b0 = 0; b0 < T; b0 += kSumBlock) {
      const int b1 = std::min(T, b0 + kSumBlock);
      float ftv = 0;
#pragma omp simd reduction(+ : ftv)
      for (int t = b0; t < b1; ++t) {
        const float dl = code[t] != 0 ? p[t] * (u[t] - b) * a : -p[t] * c;
        delta[t] = dl;
        ftv += std::abs(dl);
      }
      tv += ftv;
    }
    sums_of(rr).tv += 0.5 * tv;
  }

  delta_times_values(ws.delta.data(), nb, T, *ph.problem.values, ws.out.data());
  Eigen::Map<const MatrixRM> D(ws.out.data(), nb, d);
  for (int rr = 0; rr < nb; ++rr) {
    RowSums& sums = sums_of(rr);
    if (fallback[rr]) {
      sums.rel += direct[rr].rel;
      sums.abs += direct[rr].abs;
      sums.tv += direct[rr].tv;
      continue;
    }
    const double n2 = squared_norm_double(D.row(rr).data(), d);
    sums.abs += n2;
    sums.rel += rel_of(n2, ph.o_norm2[r0 + rr]);
  }
}

ErrorMetrics evaluate_selection(const PreparedHead& ph, const Selection& sel, Workspace& ws) {
  const RowSums total = evaluate_rows(ph, sel, 0, ph.rows, ws);
  double n_pairs = 0;
  const double lsq = kept_logit_sq(ph, sel, &n_pairs);
  ErrorMetrics m;
  m.rel_error = total.rel / ph.rows;
  m.abs_error = total.abs / ph.rows;
  m.attn_tv = total.tv / ph.rows;
  m.logit_error = n_pairs > 0 ? lsq / n_pairs : 0.0;
  return m;
}

// ---- incremental recomputation along nested kept sets (cpu_recompute.hpp) ------------

IncrementalKeptSet::IncrementalKeptSet(const HeadProblem& hp, int prompt_tokens) {
  if (!hp.queries || !hp.exact_keys || !hp.values)
    throw std::invalid_argument("IncrementalKeptSet: queries, exact keys and values are needed");
  const MatrixRM& Q = *hp.queries;
  const MatrixRM& K = *hp.exact_keys;
  rows_ = static_cast<int>(Q.rows());
  T_ = static_cast<int>(K.rows());
  d_ = static_cast<int>(K.cols());
  prompt_ = prompt_tokens;
  if (prompt_ < 0 || prompt_ > T_ || hp.values->rows() != T_ || Q.cols() != d_)
    throw std::invalid_argument("IncrementalKeptSet: shapes differ (queries, keys, values, prompt tokens)");
  values_ = hp.values;
  visible_.resize(static_cast<std::size_t>(rows_));
  for (int r = 0; r < rows_; ++r) visible_[static_cast<std::size_t>(r)] = row_limit(hp, r);
  const double scale = 1.0 / std::sqrt(double(d_));
  // s_rt in double, token-major (T x rows: an added token's logits are contiguous), by tiles
  // of tokens in parallel; then the exact softmax weights and o_r = sum_t p_rt v_t in double.
  constexpr int kTile = 256;
  const int tiles = (T_ + kTile - 1) / kTile;
  const MatrixRMd Qd = Q.cast<double>();
  logits_t_.resize(T_, rows_);
#pragma omp parallel for schedule(dynamic, 1) if (!omp_in_parallel())
  for (int b = 0; b < tiles; ++b) {
    const int t0 = b * kTile, nt = std::min(kTile, T_ - t0);
    const MatrixRMd kd = K.middleRows(t0, nt).cast<double>();
    logits_t_.middleRows(t0, nt).noalias() = kd * Qd.transpose();
    logits_t_.middleRows(t0, nt) *= scale;
  }
  global_max_.assign(static_cast<std::size_t>(rows_), -std::numeric_limits<double>::infinity());
  global_z_.assign(static_cast<std::size_t>(rows_), 0.0);
  for (int t = 0; t < T_; ++t)
    for (int r = 0; r < rows_; ++r)
      if (t < visible_[static_cast<std::size_t>(r)]) global_max_[static_cast<std::size_t>(r)] = std::max(global_max_[static_cast<std::size_t>(r)], logits_t_(t, r));
  MatrixRMd w(T_, rows_);  // exp(s_rt - M_r), 0 past a row's limit
  for (int t = 0; t < T_; ++t)
    for (int r = 0; r < rows_; ++r) {
      const double x = t < visible_[static_cast<std::size_t>(r)] ? std::exp(logits_t_(t, r) - global_max_[static_cast<std::size_t>(r)]) : 0.0;
      w(t, r) = x;
      global_z_[static_cast<std::size_t>(r)] += x;
    }
  // Partial sums over a fixed split of the tiles (not one per thread, not in the order threads
  // take them): the same sums in the same order whatever the thread count and scheduling.
  constexpr int kGroups = 16;
  const int groups = std::min(kGroups, tiles);
  std::vector<MatrixRMd> partial(static_cast<std::size_t>(groups), MatrixRMd::Zero(rows_, d_));
#pragma omp parallel for schedule(dynamic, 1) if (!omp_in_parallel())
  for (int g = 0; g < groups; ++g) {
    MatrixRMd& acc = partial[static_cast<std::size_t>(g)];
    for (int b = g * tiles / groups; b < (g + 1) * tiles / groups; ++b) {
      const int t0 = b * kTile, nt = std::min(kTile, T_ - t0);
      const MatrixRMd vd = hp.values->middleRows(t0, nt).cast<double>();
      acc.noalias() += w.middleRows(t0, nt).transpose() * vd;
    }
  }
  out_ = MatrixRMd::Zero(rows_, d_);
  for (const MatrixRMd& a : partial) out_ += a;
  for (int r = 0; r < rows_; ++r) out_.row(r) /= global_z_[static_cast<std::size_t>(r)];
  out_norm2_.resize(static_cast<std::size_t>(rows_));
  for (int r = 0; r < rows_; ++r) out_norm2_[static_cast<std::size_t>(r)] = out_.row(r).squaredNorm();
  reset();
}

void IncrementalKeptSet::reset() {
  mx_.assign(static_cast<std::size_t>(rows_), -std::numeric_limits<double>::infinity());
  z_.assign(static_cast<std::size_t>(rows_), 0.0);
  resid_ = MatrixRMd::Zero(rows_, d_);
  kept_.assign(static_cast<std::size_t>(prompt_), 0);
  kept_count_ = 0;
  std::vector<int> always;
  for (int t = prompt_; t < T_; ++t) always.push_back(t);
  add_rows(always);
}

void IncrementalKeptSet::add(const std::vector<int>& tokens) {
  for (const int t : tokens) {
    if (t < 0 || t >= prompt_ || kept_[static_cast<std::size_t>(t)])
      throw std::invalid_argument("IncrementalKeptSet::add: token " + std::to_string(t) +
                                  " is not an evicted prompt token");
    kept_[static_cast<std::size_t>(t)] = 1;
  }
  kept_count_ += static_cast<int>(tokens.size());
  add_rows(tokens);
  updates_ += static_cast<std::int64_t>(tokens.size());
}

// One batch of tokens B: per row, rescale the running sums to the new running max over B
// (if any token of B raises it), then the weights w_rt = exp(s_rt - mx_r) of B and
//   Z_r += sum_B w_rt,   R_r += sum_B w_rt v_t - (sum_B w_rt) o_r
// (|B| rank-one updates; the cancellation in R is within the batch's own weight, never
// against the whole kept set).
void IncrementalKeptSet::add_rows(const std::vector<int>& tokens) {
  const int nb = static_cast<int>(tokens.size());
  if (nb == 0) return;
  const MatrixRM& V = *values_;
  MatrixRMd vb(nb, d_);
  for (int j = 0; j < nb; ++j) vb.row(j) = V.row(tokens[static_cast<std::size_t>(j)]).cast<double>();
  MatrixRMd wb(rows_, nb);
  std::vector<double> zb(static_cast<std::size_t>(rows_), 0.0);
  for (int r = 0; r < rows_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const int lim = visible_[i];
    double m = mx_[i];
    for (const int t : tokens)
      if (t < lim) m = std::max(m, logits_t_(t, r));
    if (m > mx_[i]) {  // a new maximum: rescale the running sums
      const double f = std::isfinite(mx_[i]) ? std::exp(mx_[i] - m) : 0.0;
      z_[i] *= f;
      resid_.row(r) *= f;
      mx_[i] = m;
    }
    for (int j = 0; j < nb; ++j) {
      const int t = tokens[static_cast<std::size_t>(j)];
      const double x = t < lim ? std::exp(logits_t_(t, r) - mx_[i]) : 0.0;
      wb(r, j) = x;
      zb[i] += x;
    }
    z_[i] += zb[i];
  }
  // The rank-one updates, token by token (a plain loop: a GEMM this small costs more in
  // packing and thread start-up than it saves).
  const int d = d_;
  for (int j = 0; j < nb; ++j) {
    const double* v = vb.row(j).data();
    for (int r = 0; r < rows_; ++r) {
      const double x = wb(r, j);
      if (x == 0.0) continue;
      double* R = resid_.data() + static_cast<std::size_t>(r) * d;
#pragma omp simd
      for (int c = 0; c < d; ++c) R[c] += x * v[c];
    }
  }
  for (int r = 0; r < rows_; ++r) resid_.row(r) -= zb[static_cast<std::size_t>(r)] * out_.row(r);
}

ErrorMetrics IncrementalKeptSet::metrics() const {
  // Every prompt token kept (the decode tokens always are): the keys are the exact keys, and
  // the output is exact by definition (the reference gives 0 exactly; the running sums would
  // give rounding, about 1e-30).
  if (kept_count_ == prompt_) return ErrorMetrics{};
  double rel = 0, abs = 0, tv = 0;
  for (int r = 0; r < rows_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (!(z_[i] > 0)) {  // no kept token in sight: o^ = 0
      abs += out_norm2_[i];
      rel += 1.0;
      tv += 0.5;
      continue;
    }
    const double n2 = resid_.row(r).squaredNorm() / (z_[i] * z_[i]);
    abs += n2;
    rel += rel_of(n2, out_norm2_[i]);
    const double kept_mass = z_[i] * std::exp(mx_[i] - global_max_[i]) / global_z_[i];
    tv += std::max(0.0, 1.0 - kept_mass);
  }
  ErrorMetrics m;
  m.rel_error = rel / rows_;
  m.abs_error = abs / rows_;
  m.attn_tv = tv / rows_;
  m.logit_error = 0.0;
  return m;
}

}  // namespace cpu

namespace {

using cpu::PreparedHead;
using cpu::RowSums;
using cpu::Workspace;

class CpuPreparedSet;

// The exact half of one query set, per chunk of query rows (evaluate_batch's chunks).
struct PreparedChunks {
  int chunk = 0;
  std::vector<PreparedHead> heads;
};

class CpuRecomputer final : public Recomputer {
  friend class CpuPreparedSet;

 public:
  std::unique_ptr<PreparedQuerySet> prepare(const HeadProblem& exact) override;

  std::string name() const override { return "cpu"; }
  bool concurrent_calls() const override { return true; }  // no state between calls
  std::string description() const override {
    const int n = omp_get_max_threads();
    const char* wait = std::getenv("OMP_WAIT_POLICY");  // libgomp's default spins, then sleeps
    return "cpu (" + std::to_string(n) + (n == 1 ? " OpenMP thread" : " OpenMP threads") + ", " +
           (wait && *wait ? std::string(wait) + " wait)" : std::string("default wait)"));
  }

  // With at least two batches per thread, each thread takes whole batches (one parallel
  // region, one barrier: robust when the machine is shared); otherwise the threads share
  // each batch's row blocks and selections.
  // Cancellation: the calling thread's cancel flag (model/base/cancel.hpp current_cancel_flag, set
  // by the Python module during a call) is checked at every tile, row block and selection task;
  // once it is set the remaining work is skipped and evaluate() throws Cancelled, the one
  // exception that leaves a backend (a stop request, not a failure of the call).
  EvalResult evaluate(const std::vector<HeadBatch>& batches) override {
    EvalResult res;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      const std::string why = check_batch(batches[b]);
      if (!why.empty()) {
        res.ok = false;
        res.message = "Batch " + std::to_string(b) + ": " + why;
        return res;
      }
    }
    const int nb = static_cast<int>(batches.size());
    const int nthreads = omp_get_max_threads();
    const std::atomic<bool>* cancel = current_cancel_flag();
    std::vector<std::string> failure(nb);
    try {
      res.errors.resize(nb);
      std::vector<Workspace> ws(nthreads);
      if (nthreads > 1 && nb >= 2 * nthreads) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int b = 0; b < nb; ++b) {
          if (cancel_requested(cancel)) continue;
          const CancelScope scope(cancel);  // this thread's, for prepare_head inside
          try {
            res.errors[b] = evaluate_batch(batches[b], /*threads_inside=*/false, ws[omp_get_thread_num()], ws);
          } catch (const std::exception& e) {
            failure[b] = e.what();
          }
        }
      } else {
        for (int b = 0; b < nb; ++b) res.errors[b] = evaluate_batch(batches[b], nthreads > 1, ws[0], ws);
      }
    } catch (const std::exception& e) {
      failure.push_back(e.what());
    }
    throw_if_cancelled(cancel);  // before any failure: a skipped batch is no failure
    for (const std::string& f : failure)
      if (!f.empty()) {
        res.ok = false;
        res.message = "The cpu backend failed: " + f;
        res.errors.clear();
        break;
      }
    return res;
  }

 private:
  // One batch. threads_inside: share its work among the threads (workspace per thread in
  // `all`); else run on the calling thread with `own`.
  // prepared: the exact half of earlier calls on the same query set (PreparedSet), reused when
  // its chunks are this batch's, else replaced by this batch's; null: prepared here for this call.
  static std::vector<ErrorMetrics> evaluate_batch(const HeadBatch& batch, bool threads_inside, Workspace& own,
                                                  std::vector<Workspace>& all, PreparedChunks* prepared = nullptr) {
    const HeadProblem& hp = batch.problem;
    const int nsel = static_cast<int>(batch.selections.size());
    std::vector<ErrorMetrics> out(nsel);
    if (nsel == 0) return out;
    const int nq = static_cast<int>(hp.queries->rows());
    const int T = static_cast<int>(hp.exact_keys->rows()), d = static_cast<int>(hp.exact_keys->cols());
    const int nv = static_cast<int>(hp.variants.size());

    // Query rows in chunks so that the prepared head (p and one u per variant) stays bounded.
    const double bytes_per_row = double(1 + nv) * T * sizeof(float) + double(T) * sizeof(double);
    // Row blocks of rpb rows depend on the number of query rows only -- not on the selections
    // or variants in the batch, nor on the thread count -- and chunks hold whole blocks: each
    // selection's sums are added in the same order whether it is evaluated alone or in a batch,
    // so batching changes no digit (and OMP_NUM_THREADS none either).
    const int rpb = std::clamp((nq + kMinEvaluateTasks - 1) / kMinEvaluateTasks, 8, kEvaluateRowBlock);
    const int chunk = std::max(rpb, std::clamp(static_cast<int>(kPreparedBytesBudget / bytes_per_row), kEvaluateRowBlock,
                                               kMaxChunkRows) / rpb * rpb);
    std::vector<RowSums> acc(nsel);
    std::vector<double> logit(nsel, 0.0);
    std::vector<double> kept(nsel, 0.0);  // (row, kept token it sees) pairs
    // Kept between calls only when one chunk holds every row: a query set of several chunks
    // holds one at a time, as a call without a prepared set does (bounded memory).
    if (prepared && nq > chunk) prepared = nullptr;
    const bool reuse = prepared && prepared->chunk == chunk && !prepared->heads.empty();
    HeadProblem exact_only = hp;  // the exact half is prepared without variants
    exact_only.variants.clear();
    if (prepared && !reuse) {  // the exact half of every chunk; kept for later calls
      prepared->heads.clear();
      prepared->chunk = chunk;
      for (int c0 = 0; c0 < nq; c0 += chunk)
        prepared->heads.push_back(cpu::prepare_head(exact_only, c0, std::min(nq, c0 + chunk)));
    }
    // Each variant is formed at the tokens the batch's selections read it (set_variants).
    const std::vector<std::vector<std::uint8_t>> read = cpu::read_masks(batch);

    for (int c0 = 0, ci = 0; c0 < nq; c0 += chunk, ++ci) {
      const int c1 = std::min(nq, c0 + chunk);
      PreparedHead local;
      if (!prepared) local = cpu::prepare_head(exact_only, c0, c1);  // threads inside unless in a parallel region
      cpu::set_variants(prepared ? prepared->heads[static_cast<std::size_t>(ci)] : local, hp.variants, nullptr, &read);
      const PreparedHead& ph = prepared ? prepared->heads[static_cast<std::size_t>(ci)] : local;
      const int rows = c1 - c0;
      // The chunk's blocks (above): results are bit-identical whatever OMP_NUM_THREADS is (an
      // MPI rank on a share of a node's cores computes the same cell as a whole-node process)
      // and however many selections share the batch.
      const int nblk = (rows + rpb - 1) / rpb;
      std::vector<RowSums> part(std::size_t(nsel) * nblk);
      // A task is a group of `group` consecutive blocks of one selection, evaluated in one delta
      // GEMM (evaluate_row_blocks: each block's sums the same bits as alone). One thread takes
      // as many blocks per product as fit in kEvaluateRowBlock rows; a team keeps at least
      // kTasksPerThread tasks per thread.
      const int most = std::max(1, kEvaluateRowBlock / rpb);
      int group = most;
      if (threads_inside) {
        const int want = kTasksPerThread * static_cast<int>(all.size());
        while (group > 1 && nsel * ((nblk + group - 1) / group) < want) group = (group + 1) / 2;
      }
      const int ngroups = (nblk + group - 1) / group;
      auto run_task = [&](int task, Workspace& w) {
        const int s = task / ngroups, k0 = (task % ngroups) * group;
        const int r0 = k0 * rpb, r1 = std::min(rows, (k0 + group) * rpb);
        cpu::evaluate_row_blocks(ph, batch.selections[s], r0, r1, rpb, w, &part[std::size_t(s) * nblk + k0]);
      };
      if (threads_inside) {
        for (auto& w : all) reserve(w, T, d, group * rpb);  // no allocation inside the parallel loop
        const std::atomic<bool>* cancel = current_cancel_flag();
#pragma omp parallel for schedule(dynamic, 1)
        for (int task = 0; task < nsel * ngroups; ++task) {
          if (cancel_requested(cancel)) continue;
          run_task(task, all[omp_get_thread_num()]);
        }
      } else {
        reserve(own, T, d, group * rpb);
        for (int task = 0; task < nsel * ngroups; ++task) {
          throw_if_cancelled(current_cancel_flag());
          run_task(task, own);
        }
      }
      throw_if_cancelled(current_cancel_flag());  // skipped tasks left `part` unfinished
      for (int s = 0; s < nsel; ++s) {
        for (int k = 0; k < nblk; ++k) {
          const RowSums& p = part[std::size_t(s) * nblk + k];
          acc[s].rel += p.rel;
          acc[s].abs += p.abs;
          acc[s].tv += p.tv;
        }
        double pairs = 0;
        logit[s] += cpu::kept_logit_sq(ph, batch.selections[s], &pairs);
        kept[s] += pairs;
      }
      if (prepared) {  // the kept chunk holds its exact half only: this call's variants are done
        PreparedHead& kept_ph = prepared->heads[static_cast<std::size_t>(ci)];
        std::vector<MatrixRM>().swap(kept_ph.u);
        std::vector<VectorD>().swap(kept_ph.logit_sq);
        kept_ph.identical.clear();
        std::vector<std::vector<std::uint8_t>>().swap(kept_ph.read);
        kept_ph.problem.variants.clear();
      }
    }
    for (int s = 0; s < nsel; ++s) {
      out[s].rel_error = acc[s].rel / nq;
      out[s].abs_error = acc[s].abs / nq;
      out[s].attn_tv = acc[s].tv / nq;
      out[s].logit_error = kept[s] > 0 ? logit[s] / kept[s] : 0.0;
    }
    return out;
  }

  // One batch on a prepared query set (CpuPreparedSet), on the calling thread's team.
  static std::vector<ErrorMetrics> evaluate_prepared(const HeadBatch& batch, bool threads_inside, std::vector<Workspace>& ws,
                                                     PreparedChunks& prepared) {
    std::vector<ErrorMetrics> out = evaluate_batch(batch, threads_inside, ws[0], ws, &prepared);
    throw_if_cancelled(current_cancel_flag());
    return out;
  }

  static void reserve(Workspace& w, int T, int d, int rows) {
    cpu::grow(w.u, std::size_t(T));
    cpu::grow(w.zeros, std::size_t(T));
    cpu::grow(w.delta, std::size_t(std::min(rows, kEvaluateRowBlock)) * T);
    cpu::grow(w.out, std::size_t(std::min(rows, kEvaluateRowBlock)) * d);
  }
};

// One query set of one head: the exact half prepared by the first call and kept (the chunks of
// query rows depend on the variant count; a call whose chunks differ prepares them again).
class CpuPreparedSet final : public PreparedQuerySet {
 public:
  explicit CpuPreparedSet(const HeadProblem& exact) : exact_(exact) { exact_.variants.clear(); }

  EvalResult evaluate(const HeadBatch& batch) override {
    EvalResult res;
    const HeadProblem& hp = batch.problem;
    std::string why = check_batch(batch);
    if (why.empty() && (hp.queries != exact_.queries || hp.exact_keys != exact_.exact_keys || hp.values != exact_.values ||
                        hp.visible != exact_.visible))
      why = "the batch's queries, exact keys, values or visible limits are not the prepared query set's.";
    if (!why.empty()) {
      res.ok = false;
      res.message = "Prepared query set: " + why;
      return res;
    }
    const int nthreads = omp_get_max_threads();
    std::vector<Workspace> ws(nthreads);
    try {
      res.errors.push_back(CpuRecomputer::evaluate_prepared(batch, nthreads > 1, ws, chunks_));
    } catch (const Cancelled&) {
      chunks_ = PreparedChunks{};  // a chunk may be half prepared
      throw;
    } catch (const std::exception& e) {
      chunks_ = PreparedChunks{};
      res.ok = false;
      res.message = std::string("The cpu backend failed: ") + e.what();
      res.errors.clear();
    }
    return res;
  }

 private:
  HeadProblem exact_;
  PreparedChunks chunks_;
};

std::unique_ptr<PreparedQuerySet> CpuRecomputer::prepare(const HeadProblem& exact) {
  return std::make_unique<CpuPreparedSet>(exact);
}

}  // namespace

std::unique_ptr<Recomputer> make_cpu_recomputer() { return std::make_unique<CpuRecomputer>(); }

}  // namespace tierlab
