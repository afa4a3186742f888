// Exact recomputation (gpu/recompute.hpp): every backend against a slow, obviously
// correct double-precision implementation written here (loops over queries and
// tokens), plus the closed forms of the edge cases (all exact, one token kept, all
// evicted) and the input checks. One test body runs on every backend; a backend that
// is not available is skipped with its reason.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu/cpu_recompute.hpp"
#include "gpu/recompute.hpp"
#include "model/base/error.hpp"

using namespace tierlab;

namespace {

// ---- the independent reference --------------------------------------------------

// Softmax of x over the entries with keep[t] (all when keep is empty), in double.
std::vector<double> softmax(const std::vector<double>& x, const std::vector<bool>& keep) {
  double m = -INFINITY;
  for (std::size_t t = 0; t < x.size(); ++t)
    if (keep.empty() || keep[t]) m = std::max(m, x[t]);
  std::vector<double> p(x.size(), 0.0);
  double z = 0;
  for (std::size_t t = 0; t < x.size(); ++t)
    if (keep.empty() || keep[t]) z += (p[t] = std::exp(x[t] - m));
  for (double& v : p) v = z > 0 ? v / z : 0.0;
  return p;
}

// docs/model.md section 8 literally: per query, o and o^ from their definitions, then the
// metrics; the head's metrics are the means over the query rows.
ErrorMetrics reference_errors(const HeadProblem& hp, const Selection& sel) {
  const MatrixRM& Q = *hp.queries;
  const MatrixRM& K = *hp.exact_keys;
  const MatrixRM& V = *hp.values;
  const int nq = int(Q.rows()), T = int(K.rows()), d = int(K.cols());
  std::vector<bool> kept(T);
  int n_kept = 0;
  for (int t = 0; t < T; ++t) n_kept += (kept[t] = sel[t] != 0);
  ErrorMetrics sum;
  for (int i = 0; i < nq; ++i) {
    std::vector<double> s(T), sh(T, 0.0);
    for (int t = 0; t < T; ++t) {
      const MatrixRM& kh = sel[t] != 0 ? *hp.variants[sel[t] - 1] : K;
      double dot = 0, doth = 0;
      for (int j = 0; j < d; ++j) {
        dot += double(Q(i, j)) * double(K(t, j));
        doth += double(Q(i, j)) * double(kh(t, j));
      }
      s[t] = dot / std::sqrt(double(d));
      sh[t] = doth / std::sqrt(double(d));
    }
    const std::vector<double> p = softmax(s, {});
    const std::vector<double> ph = n_kept > 0 ? softmax(sh, kept) : std::vector<double>(T, 0.0);
    double diff2 = 0, o2 = 0;
    for (int j = 0; j < d; ++j) {
      double o = 0, oh = 0;
      for (int t = 0; t < T; ++t) {
        o += p[t] * double(V(t, j));
        oh += ph[t] * double(V(t, j));
      }
      diff2 += (oh - o) * (oh - o);
      o2 += o * o;
    }
    double tv = 0, logit = 0;
    for (int t = 0; t < T; ++t) {
      tv += 0.5 * std::abs(ph[t] - p[t]);
      if (kept[t]) logit += (sh[t] - s[t]) * (sh[t] - s[t]);
    }
    sum.rel_error += diff2 / o2;
    sum.abs_error += diff2;
    sum.attn_tv += tv;
    sum.logit_error += n_kept > 0 ? logit / n_kept : 0.0;
  }
  sum.rel_error /= nq;
  sum.abs_error /= nq;
  sum.attn_tv /= nq;
  sum.logit_error /= nq;
  return sum;
}

// ---- random heads -----------------------------------------------------------------

// Keys with d/16 outlier channels (x8), values N(0,1), queries N(0,1) * query_scale;
// variants: the keys plus Gaussian noise of each given scale, then an exact copy.
struct Head {
  MatrixRM q, k, v;
  std::vector<MatrixRM> noisy;  // noisy variants, then the exact copy last
  HeadProblem problem(bool exact_by_pointer = false) const {
    HeadProblem hp{&q, &k, &v, {}, {}};
    for (std::size_t i = 0; i + 1 < noisy.size(); ++i) hp.variants.push_back(&noisy[i]);
    hp.variants.push_back(exact_by_pointer ? &k : &noisy.back());
    return hp;
  }
  int exact_code() const { return int(noisy.size()); }  // selection code of the exact copy
};

Head random_head(std::mt19937& rng, int nq, int T, int d, const std::vector<float>& noise,
                 float query_scale = 2.0f) {
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> chan(d, 1.0f);
  for (int j = 0; j < std::max(1, d / 16); ++j) chan[(j * 7) % d] = 8.0f;
  Head h;
  h.q.resize(nq, d);
  h.k.resize(T, d);
  h.v.resize(T, d);
  for (int i = 0; i < nq; ++i)
    for (int j = 0; j < d; ++j) h.q(i, j) = n01(rng) * query_scale;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < d; ++j) {
      h.k(t, j) = n01(rng) * chan[j];
      h.v(t, j) = n01(rng);
    }
  for (float sc : noise) {
    MatrixRM kv = h.k;
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < d; ++j) kv(t, j) += sc * chan[j] * n01(rng);
    h.noisy.push_back(std::move(kv));
  }
  h.noisy.push_back(h.k);
  return h;
}

// Each token: evicted with probability p_evict, else a uniformly chosen variant code.
Selection random_selection(std::mt19937& rng, int T, int n_variants, double p_evict) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> code(1, n_variants);
  Selection s(T);
  for (int t = 0; t < T; ++t) s[t] = u(rng) < p_evict ? 0 : std::uint8_t(code(rng));
  return s;
}

bool close(double got, double want, double rel, double abs) {
  return std::abs(got - want) <= abs + rel * std::abs(want);
}

void check_close(const ErrorMetrics& got, const ErrorMetrics& want) {
  INFO("rel_error got " << got.rel_error << " want " << want.rel_error);
  INFO("abs_error got " << got.abs_error << " want " << want.abs_error);
  INFO("attn_tv got " << got.attn_tv << " want " << want.attn_tv);
  INFO("logit_error got " << got.logit_error << " want " << want.logit_error);
  CHECK(close(got.rel_error, want.rel_error, 1e-5, 1e-14));
  CHECK(close(got.abs_error, want.abs_error, 1e-5, 1e-14));
  CHECK(close(got.attn_tv, want.attn_tv, 1e-5, 1e-9));
  CHECK(close(got.logit_error, want.logit_error, 1e-5, 1e-12));
}

// Runs body(recomputer) once per backend; a backend that is not there is skipped with
// its reason.
template <class Body>
void on_every_backend(Body&& body) {
  for (const std::string name : {"cpu", "cuda"}) {
    DYNAMIC_SECTION("backend " << name) {
      std::string note;
      std::unique_ptr<Recomputer> rc = make_recomputer(parse_backend(name), &note);
#ifdef TIERLAB_TEST_EMULATED_CUDA
      // The emulated build must run the CUDA case, on the tensor-core path (a failed
      // self-check would fall back to the simple path and say so).
      if (name == "cuda") {
        INFO("no emulated CUDA backend: " << note);
        REQUIRE(rc);
        INFO(rc->description());
        REQUIRE(rc->description().find("CUDA emulator") != std::string::npos);
        REQUIRE(rc->description().find("tensor-core path") != std::string::npos);
        REQUIRE(rc->description().find("failed") == std::string::npos);
      }
#endif
      if (!rc) {
        WARN("SKIPPED: " << note);
        SUCCEED("backend " << name << " skipped: " << note);
        continue;
      }
      REQUIRE(rc->name() == name);
      INFO("backend " << rc->description());
      body(*rc);
      // The tensor-core path's bounds rule out an fp16 overflow; a pass redone on the simple
      // path after one means they are wrong (the numbers above would still pass).
      CHECK(rc->description().find("redone") == std::string::npos);
    }
  }
}

EvalResult evaluate_ok(Recomputer& rc, const std::vector<HeadBatch>& batches) {
  EvalResult r = rc.evaluate(batches);
  INFO(r.message);
  REQUIRE(r.ok);
  REQUIRE(r.errors.size() == batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b) REQUIRE(r.errors[b].size() == batches[b].selections.size());
  return r;
}

}  // namespace

TEST_CASE("recomputation matches a slow double-precision reference on random heads", "[recompute]") {
  on_every_backend([](Recomputer& rc) {
    std::mt19937 rng(20261130);
    struct Size { int nq, T, d; float query_scale; };
    const std::vector<Size> sizes = {{1, 1, 4, 2.0f},    {3, 7, 8, 2.0f},     {5, 100, 16, 2.0f},
                                     {16, 1000, 64, 2.0f}, {33, 300, 128, 2.0f}, {70, 513, 32, 6.0f},
                                     {64, 4096, 128, 2.0f}};
    // noise scales: large (2-bit-like), moderate (4-bit-like), tiny (precision check)
    const std::vector<float> noise = {0.4f, 0.05f, 1e-4f};
    std::vector<Head> heads;
    for (const Size& s : sizes) heads.push_back(random_head(rng, s.nq, s.T, s.d, noise, s.query_scale));
    std::vector<HeadBatch> batches;
    for (std::size_t h = 0; h < heads.size(); ++h) {
      const Head& head = heads[h];
      const int T = int(head.k.rows());
      HeadBatch b{head.problem(/*exact_by_pointer=*/h % 2 == 0), {}};
      const int nv = int(b.problem.variants.size());
      b.selections.push_back(random_selection(rng, T, nv, 0.3));
      b.selections.push_back(random_selection(rng, T, nv, 0.0));
      b.selections.push_back(random_selection(rng, T, nv, 0.9));
      b.selections.push_back(Selection(T, std::uint8_t(3)));  // every key at the tiny noise
      Selection tiny_and_exact(T, std::uint8_t(head.exact_code()));
      for (int t = 0; t < T; t += 3) tiny_and_exact[t] = 3;
      b.selections.push_back(tiny_and_exact);
      b.selections.push_back(Selection(T, std::uint8_t(1)));  // every key at the large noise
      batches.push_back(std::move(b));
    }
    const EvalResult r = evaluate_ok(rc, batches);
    for (std::size_t b = 0; b < batches.size(); ++b)
      for (std::size_t s = 0; s < batches[b].selections.size(); ++s) {
        INFO("head " << b << " (nq " << sizes[b].nq << ", T " << sizes[b].T << ", d " << sizes[b].d
                     << "), selection " << s);
        check_close(r.errors[b][s], reference_errors(batches[b].problem, batches[b].selections[s]));
      }
    // One batch per call: the backend splits the work differently; the numbers stay.
    for (std::size_t b = 0; b < batches.size(); ++b) {
      const EvalResult one = evaluate_ok(rc, {batches[b]});
      for (std::size_t s = 0; s < batches[b].selections.size(); ++s) {
        INFO("head " << b << " alone, selection " << s);
        CHECK(close(one.errors[0][s].rel_error, r.errors[b][s].rel_error, 1e-6, 1e-15));
        CHECK(close(one.errors[0][s].attn_tv, r.errors[b][s].attn_tv, 1e-6, 1e-12));
        CHECK(close(one.errors[0][s].logit_error, r.errors[b][s].logit_error, 1e-12, 0.0));
      }
    }
  });
}

TEST_CASE("on the CPU reference a selection gives the same bits alone as in a batch with others", "[recompute]") {
  // The row blocks depend on the query rows only (gpu/cpu_recompute.cpp), so batching several
  // allocations of one head -- what the interior pass and the granularity analysis do to prepare
  // the head once -- changes no digit of any of them.
  const auto rc = make_recomputer(Backend::Cpu);
  std::mt19937 rng(20261204);
  for (const auto& [nq, T, d] : std::vector<std::array<int, 3>>{{64, 600, 32}, {5, 40, 8}, {300, 257, 16}}) {
    const Head head = random_head(rng, nq, T, d, {0.4f, 0.05f, 1e-4f}, 2.0f);
    HeadBatch all{head.problem(true), {}};
    const int nv = int(all.problem.variants.size());
    for (double evict : {0.0, 0.3, 0.9}) all.selections.push_back(random_selection(rng, T, nv, evict));
    all.selections.push_back(Selection(T, std::uint8_t(2)));
    const EvalResult batched = evaluate_ok(*rc, {all});
    for (std::size_t s = 0; s < all.selections.size(); ++s) {
      INFO("nq " << nq << ", T " << T << ", selection " << s);
      const EvalResult one = evaluate_ok(*rc, {HeadBatch{all.problem, {all.selections[s]}}});
      CHECK(one.errors[0][0].rel_error == batched.errors[0][s].rel_error);
      CHECK(one.errors[0][0].abs_error == batched.errors[0][s].abs_error);
      CHECK(one.errors[0][0].attn_tv == batched.errors[0][s].attn_tv);
      CHECK(one.errors[0][0].logit_error == batched.errors[0][s].logit_error);
    }
  }
}

TEST_CASE("rows evaluated in one product give each block the bits it gives alone", "[recompute]") {
  // cpu::evaluate_row_blocks forms delta V for up to 64 rows in one product and keeps each
  // block's sums apart; the batch evaluation groups blocks that way. A row's D must not depend
  // on how many rows share the product (long T: the product's depth is blocked; a sharp head:
  // some rows take the double-precision guard path; a causal head; widths that leave a tail).
  std::mt19937 rng(20261205);
  struct Case {
    int nq, T, d;
    float query_scale;
    bool causal;
  };
  for (const Case& c : std::vector<Case>{{64, 3000, 128, 2.0f, false}, {61, 700, 32, 12.0f, false},
                                         {64, 900, 64, 2.0f, true}, {24, 5000, 16, 2.0f, false}}) {
    const Head head = random_head(rng, c.nq, c.T, c.d, {0.4f, 0.05f}, c.query_scale);
    HeadProblem hp = head.problem(true);
    if (c.causal)
      for (int r = 0; r < c.nq; ++r) hp.visible.push_back(c.T - c.nq + r + 1);
    const cpu::PreparedHead ph = cpu::prepare_head(hp, 0, c.nq);
    const int nv = int(hp.variants.size());
    for (double evict : {0.0, 0.5}) {
      const Selection sel = random_selection(rng, c.T, nv, evict);
      for (int block : {1, 4, 8, 13}) {
        cpu::Workspace alone_ws, grouped_ws;
        for (int r0 = 0; r0 < c.nq; r0 += 64) {
          const int r1 = std::min(c.nq, r0 + 64);
          std::vector<cpu::RowSums> grouped((r1 - r0 + block - 1) / block);
          cpu::evaluate_row_blocks(ph, sel, r0, r1, block, grouped_ws, grouped.data());
          for (std::size_t k = 0; k < grouped.size(); ++k) {
            const int b0 = r0 + int(k) * block;
            const cpu::RowSums alone = cpu::evaluate_rows(ph, sel, b0, std::min(r1, b0 + block), alone_ws);
            INFO("nq " << c.nq << ", T " << c.T << ", d " << c.d << ", block " << block << " at row " << b0);
            CHECK(alone.rel == grouped[k].rel);
            CHECK(alone.abs == grouped[k].abs);
            CHECK(alone.tv == grouped[k].tv);
          }
        }
      }
    }
  }
}

TEST_CASE("a variant formed only at the tokens a selection reads gives that selection the same bits", "[recompute]") {
  // set_variants with read masks (what a batch passes: each variant where its selections use
  // it) skips the logit changes elsewhere; the selection's numbers must not move, a variant
  // whose read rows equal the exact keys becomes identical, and a selection that uses a variant
  // where it was not formed is refused.
  std::mt19937 rng(20261205);
  for (const auto& [nq, T, d] : std::vector<std::array<int, 3>>{{64, 1000, 64}, {7, 300, 16}}) {
    Head head = random_head(rng, nq, T, d, {0.4f, 0.05f});
    // Variant 2 (index 1) equals the exact keys on the first half only.
    for (int t = 0; t < T / 2; ++t) head.noisy[1].row(t) = head.k.row(t);
    const HeadProblem hp = head.problem();
    const int nv = int(hp.variants.size());
    Selection sel = random_selection(rng, T, nv, 0.4);
    for (int t = T / 2; t < T; ++t)
      if (sel[t] == 2) sel[t] = 1;  // variant 2 read only where it is exact
    std::vector<std::vector<std::uint8_t>> read(std::size_t(nv), std::vector<std::uint8_t>(std::size_t(T), 0));
    for (int t = 0; t < T; ++t)
      if (sel[t] != 0) read[std::size_t(sel[t] - 1)][std::size_t(t)] = 1;
    HeadProblem exact = hp;
    exact.variants.clear();
    cpu::PreparedHead all = cpu::prepare_head(exact, 0, nq), masked = cpu::prepare_head(exact, 0, nq);
    cpu::set_variants(all, hp.variants);
    cpu::set_variants(masked, hp.variants, nullptr, &read);
    CHECK(masked.identical[1]);
    CHECK_FALSE(all.identical[1]);
    cpu::Workspace ws;
    const ErrorMetrics a = cpu::evaluate_selection(all, sel, ws), m = cpu::evaluate_selection(masked, sel, ws);
    CHECK(a.rel_error == m.rel_error);
    CHECK(a.abs_error == m.abs_error);
    CHECK(a.attn_tv == m.attn_tv);
    CHECK(a.logit_error == m.logit_error);
    Selection elsewhere = sel;
    for (int t = 0; t < T; ++t)
      if (!read[0][std::size_t(t)]) {
        elsewhere[t] = 1;
        break;
      }
    CHECK_THROWS_AS(cpu::evaluate_selection(masked, elsewhere, ws), std::invalid_argument);
  }
}

TEST_CASE("recomputation stays exact where float32 shortcuts would fail", "[recompute]") {
  on_every_backend([](Recomputer& rc) {
    std::mt19937 rng(7);
    // Sharp head: a logit rise of tens of nats under the noisy variant.
    const Head sharp = random_head(rng, 6, 200, 32, {3.0f}, 12.0f);
    // Nearly all mass on token 0, which is evicted: s_0 - s_t is about 60 nats for row 0
    // (kept mass ~1e-24) and about 20 nats for row 1 (kept mass ~1e-7).
    Head peaked = random_head(rng, 2, 50, 16, {0.01f}, 1.0f);
    peaked.q.row(1) = peaked.q.row(0) / 3.0f;
    peaked.k.row(0) = peaked.q.row(0) * (240.0f / peaked.q.row(0).squaredNorm());
    peaked.noisy.back() = peaked.k;
    peaked.noisy[0].row(0) = peaked.k.row(0);
    Selection drop_top(50, 2);
    drop_top[0] = 0;
    Selection drop_top_noisy(50, 1);
    drop_top_noisy[0] = 0;
    std::vector<HeadBatch> batches = {
        {sharp.problem(), {Selection(200, 1), random_selection(rng, 200, 2, 0.5)}},
        {peaked.problem(), {drop_top, drop_top_noisy}}};
    const EvalResult r = evaluate_ok(rc, batches);
    for (std::size_t b = 0; b < batches.size(); ++b)
      for (std::size_t s = 0; s < batches[b].selections.size(); ++s) {
        INFO("batch " << b << " selection " << s);
        check_close(r.errors[b][s], reference_errors(batches[b].problem, batches[b].selections[s]));
      }
  });
}

TEST_CASE("a materialised allocation's evicted rows are zero keys and do not disturb the kept tokens' errors", "[recompute]") {
  // As scenarios materialise an allocation: one variant per allocation, its evicted tokens'
  // rows zero. Tokens with logits far below the others (about -100 nats and less) are evicted,
  // so the zero row would "raise" their logit by tens of nats; that rise is never used (the
  // token is evicted) and must neither spoil the result nor be needed for it.
  on_every_backend([](Recomputer& rc) {
    std::mt19937 rng(11);
    Head h = random_head(rng, 8, 120, 32, {0.05f}, 1.0f);
    std::vector<int> far;
    for (int t = 0; t < 120; t += 7) {  // keys pointing away from every query
      h.k.row(t) = -h.q.colwise().sum().normalized() * 400.0f;  // ds = -s_t: expm1 overflows float
      far.push_back(t);
    }
    h.noisy.back() = h.k;
    MatrixRM alloc = h.k;  // the allocation: noisy keys, far tokens evicted (rows zero)
    for (int t = 0; t < 120; ++t) alloc.row(t) += 0.05f * MatrixRM::Random(1, 32);
    Selection sel(120, 1);
    for (int t : far) alloc.row(t).setZero(), sel[t] = 0;
    HeadProblem hp{&h.q, &h.k, &h.v, {&alloc}, {}};
    const std::vector<HeadBatch> batches = {{hp, {sel}}};
    const EvalResult r = evaluate_ok(rc, batches);
    check_close(r.errors[0][0], reference_errors(hp, sel));
  });
}

TEST_CASE("closed forms: all exact, one token kept, all evicted", "[recompute]") {
  on_every_backend([](Recomputer& rc) {
    std::mt19937 rng(11);
    const Head head = random_head(rng, 9, 257, 64, {0.3f});
    const int T = 257, ex = head.exact_code();
    const int keep = 101;
    Selection one(T, 0);
    one[keep] = 1;  // the noisy key: its logit changes but it keeps all the mass
    std::vector<HeadBatch> batches = {
        {head.problem(false), {Selection(T, std::uint8_t(ex)), one, Selection(T, 0)}},
        {head.problem(true), {Selection(T, std::uint8_t(ex))}}};
    const EvalResult r = evaluate_ok(rc, batches);

    SECTION("an all-exact selection has zero error") {
      for (const ErrorMetrics& m : {r.errors[0][0], r.errors[1][0]}) {
        CHECK(m.rel_error < 1e-12);
        CHECK(m.abs_error < 1e-12);
        CHECK(m.attn_tv < 1e-7);
        CHECK(m.logit_error < 1e-12);
      }
    }
    SECTION("keeping one token t gives o^ = v_t") {
      // Direct formula, in double: e = mean_i ||v_t - o_i||^2 / ||o_i||^2, tv = mean_i (1 - p_it),
      // logit error = mean_i (q_i.(k^_t - k_t))^2 / d.
      double rel = 0, tv = 0, logit = 0;
      const int d = 64;
      for (int i = 0; i < 9; ++i) {
        std::vector<double> s(T);
        for (int t = 0; t < T; ++t) s[t] = head.q.row(i).cast<double>().dot(head.k.row(t).cast<double>()) / 8.0;
        const std::vector<double> p = softmax(s, {});
        Eigen::VectorXd o = Eigen::VectorXd::Zero(d);
        for (int t = 0; t < T; ++t) o += p[t] * head.v.row(t).transpose().cast<double>();
        rel += (head.v.row(keep).transpose().cast<double>() - o).squaredNorm() / o.squaredNorm();
        tv += 1.0 - p[keep];
        const double ds =
            head.q.row(i).cast<double>().dot((head.noisy[0].row(keep) - head.k.row(keep)).cast<double>()) / 8.0;
        logit += ds * ds;
      }
      const ErrorMetrics& m = r.errors[0][1];
      CHECK(m.rel_error == Approx(rel / 9).epsilon(1e-5));
      CHECK(m.attn_tv == Approx(tv / 9).epsilon(1e-5));
      CHECK(m.logit_error == Approx(logit / 9).epsilon(1e-5));
    }
    SECTION("evicting every token gives e = 1") {
      const ErrorMetrics& m = r.errors[0][2];
      CHECK(m.rel_error == Approx(1.0).epsilon(1e-12));
      CHECK(m.attn_tv == Approx(0.5).epsilon(1e-6));
      CHECK(m.logit_error == 0.0);
      CHECK(m.abs_error == Approx(reference_errors(batches[0].problem, batches[0].selections[2]).abs_error)
                               .epsilon(1e-5));
    }
  });
}

TEST_CASE("a batch with a wrong shape is refused with a sentence", "[recompute]") {
  std::mt19937 rng(3);
  const Head head = random_head(rng, 4, 20, 8, {0.1f});
  const MatrixRM short_values = head.v.topRows(19);
  const MatrixRM narrow_variant = head.k.leftCols(7);

  HeadBatch good{head.problem(), {Selection(20, 1)}};
  CHECK(check_batch(good).empty());

  HeadBatch bad_values = good;
  bad_values.problem.values = &short_values;
  CHECK_THAT(check_batch(bad_values), Catch::Contains("values") && Catch::Contains("19 x 8"));

  HeadBatch bad_variant = good;
  bad_variant.problem.variants[0] = &narrow_variant;
  CHECK_THAT(check_batch(bad_variant), Catch::Contains("variants[0]") && Catch::Contains("20 x 7"));

  HeadBatch bad_length = good;
  bad_length.selections.push_back(Selection(21, 1));
  CHECK_THAT(check_batch(bad_length), Catch::Contains("selections[1]") && Catch::Contains("21"));

  HeadBatch bad_code = good;
  bad_code.selections[0][5] = 3;  // two variants: codes 0..2
  CHECK_THAT(check_batch(bad_code), Catch::Contains("selections[0]") && Catch::Contains("token 5"));

  HeadBatch null_queries = good;
  null_queries.problem.queries = nullptr;
  CHECK_THAT(check_batch(null_queries), Catch::Contains("queries"));

  on_every_backend([&](Recomputer& rc) {
    const EvalResult r = rc.evaluate({good, bad_values});
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.message, Catch::Contains("Batch 1") && Catch::Contains("values"));
  });
}

TEST_CASE("backends are chosen at run time and their absence is a sentence", "[recompute]") {
  CHECK(parse_backend("auto") == Backend::Auto);
  CHECK(parse_backend("cpu") == Backend::Cpu);
  CHECK(parse_backend("cuda") == Backend::Cuda);
  CHECK_THROWS_AS(parse_backend("gpu"), InputError);

  std::string note = "stale";
  const auto cpu = make_recomputer(Backend::Cpu, &note);
  REQUIRE(cpu);
  CHECK(cpu->name() == "cpu");
  CHECK_THAT(cpu->description(), Catch::StartsWith("cpu ("));
  CHECK(note.empty());

  std::string reason;
  const bool have_cuda = cuda_available(&reason);
  const auto any = make_recomputer(Backend::Auto, &note);
  REQUIRE(any);
  if (have_cuda) {
    CHECK(any->name() == "cuda");
    CHECK(note.empty());
  } else {
    INFO("reason: " << reason << " / note: " << note);
    CHECK_FALSE(reason.empty());
    CHECK(any->name() == "cpu");
    CHECK_THAT(note, Catch::Contains(reason));
    std::string why;
    CHECK(make_recomputer(Backend::Cuda, &why) == nullptr);
    CHECK_THAT(why, Catch::Contains(reason));
  }
#ifndef TIERLAB_TEST_EXPECT_CUDA
  // The CPU-only build states why there is no CUDA.
  if (!have_cuda && reason.find("built without CUDA") != std::string::npos)
    CHECK(reason == "tierlab was built without CUDA (nvcc not found or TIERLAB_CUDA=OFF)");
#endif
}

namespace {

// docs/model.md section 8 with causal limits: row i sees tokens 0 .. visible[i]-1 only (exact and
// approximate alike); the logit error is the mean over the (row, kept visible token) pairs.
ErrorMetrics reference_errors_causal(const HeadProblem& hp, const Selection& sel) {
  const MatrixRM& Q = *hp.queries;
  const MatrixRM& K = *hp.exact_keys;
  const MatrixRM& V = *hp.values;
  const int nq = int(Q.rows()), d = int(K.cols());
  ErrorMetrics sum;
  double logit = 0;
  long pairs = 0;
  for (int i = 0; i < nq; ++i) {
    const int T = hp.visible[i];
    std::vector<double> s(T), sh(T, 0.0);
    std::vector<bool> kept(T);
    int n_kept = 0;
    for (int t = 0; t < T; ++t) {
      n_kept += (kept[t] = sel[t] != 0);
      const MatrixRM& kh = sel[t] != 0 ? *hp.variants[sel[t] - 1] : K;
      double dot = 0, doth = 0;
      for (int j = 0; j < d; ++j) {
        dot += double(Q(i, j)) * double(K(t, j));
        doth += double(Q(i, j)) * double(kh(t, j));
      }
      s[t] = dot / std::sqrt(double(d));
      sh[t] = doth / std::sqrt(double(d));
      if (kept[t]) logit += (sh[t] - s[t]) * (sh[t] - s[t]), ++pairs;
    }
    const std::vector<double> p = softmax(s, {});
    const std::vector<double> ph = n_kept > 0 ? softmax(sh, kept) : std::vector<double>(T, 0.0);
    double diff2 = 0, o2 = 0, tv = 0;
    for (int j = 0; j < d; ++j) {
      double o = 0, oh = 0;
      for (int t = 0; t < T; ++t) o += p[t] * double(V(t, j)), oh += ph[t] * double(V(t, j));
      diff2 += (oh - o) * (oh - o);
      o2 += o * o;
    }
    for (int t = 0; t < T; ++t) tv += 0.5 * std::abs(ph[t] - p[t]);
    sum.rel_error += diff2 / o2 / nq;
    sum.abs_error += diff2 / nq;
    sum.attn_tv += tv / nq;
  }
  sum.logit_error = pairs > 0 ? logit / double(pairs) : 0.0;
  return sum;
}

}  // namespace

TEST_CASE("causal limits (decode steps): each row sees only its first visible tokens", "[recompute]") {
  on_every_backend([](Recomputer& rc) {
    std::mt19937 rng(7);
    struct Size { int nq, T, d; };
    const std::vector<Size> sizes = {{4, 40, 8}, {12, 300, 64}, {8, 1100, 128}};
    const std::vector<float> noise = {0.4f, 0.05f, 1e-4f};
    std::vector<Head> heads;
    for (const Size& s : sizes) heads.push_back(random_head(rng, s.nq, s.T, s.d, noise, 2.0f));
    std::vector<HeadBatch> batches;
    for (const Head& head : heads) {
      const int T = int(head.k.rows()), nq = int(head.q.rows());
      HeadBatch b{head.problem(), {}};
      // Like decode: the last nq tokens are appended one per row, row r sees T - nq + r + 1.
      for (int r = 0; r < nq; ++r) b.problem.visible.push_back(T - nq + r + 1);
      const int nv = int(b.problem.variants.size());
      b.selections.push_back(random_selection(rng, T, nv, 0.3));
      b.selections.push_back(random_selection(rng, T, nv, 0.8));
      b.selections.push_back(Selection(T, std::uint8_t(head.exact_code())));
      batches.push_back(std::move(b));
    }
    const EvalResult r = evaluate_ok(rc, batches);
    for (std::size_t b = 0; b < batches.size(); ++b)
      for (std::size_t s = 0; s < batches[b].selections.size(); ++s) {
        INFO("head " << b << ", selection " << s);
        check_close(r.errors[b][s], reference_errors_causal(batches[b].problem, batches[b].selections[s]));
      }
    // A limit outside 1..T is refused with a sentence.
    HeadBatch bad = batches[0];
    bad.problem.visible[0] = int(heads[0].k.rows()) + 1;
    const std::string why = check_batch(bad);
    CHECK(why.find("visible[0]") != std::string::npos);
    CHECK_FALSE(rc.evaluate({bad}).ok);
  });
}

TEST_CASE("buffers reused in place between calls give the new numbers (the CUDA head cache)", "[recompute]") {
  on_every_backend([](Recomputer& rc) {
    std::mt19937 rng(41);
    const int nq = 10, T = 700, d = 32;
    Head h = random_head(rng, nq, T, d, {0.3f, 0.02f});
    HeadBatch b{h.problem(), {random_selection(rng, T, 3, 0.3), random_selection(rng, T, 3, 0.6)}};
    const EvalResult first = evaluate_ok(rc, {b});
    for (std::size_t s = 0; s < b.selections.size(); ++s)
      check_close(first.errors[0][s], reference_errors(b.problem, b.selections[s]));
    // The same matrices (same storage, same shapes) now hold another head.
    const Head other = random_head(rng, nq, T, d, {0.3f, 0.02f}, 3.0f);
    h.q = other.q;
    h.k = other.k;
    h.v = other.v;
    for (std::size_t i = 0; i < h.noisy.size(); ++i) h.noisy[i] = other.noisy[i];
    REQUIRE(b.problem.exact_keys->data() == h.k.data());
    const EvalResult second = evaluate_ok(rc, {b});
    for (std::size_t s = 0; s < b.selections.size(); ++s) {
      INFO("selection " << s);
      check_close(second.errors[0][s], reference_errors(b.problem, b.selections[s]));
      CHECK(second.errors[0][s].rel_error != first.errors[0][s].rel_error);
    }
  });
}

#ifdef TIERLAB_TEST_EMULATED_CUDA
// Only the emulator lets a test make device memory short: 300 MiB, of which the backend
// keeps 256 MiB in reserve, leaves room for about three of these heads at a time.
TEST_CASE("the CUDA head cache gives memory back when the device runs short", "[recompute]") {
  setenv("TIERLAB_CUDA_EMULATOR_MEMORY_MB", "300", 1);
  std::string note;
  std::unique_ptr<Recomputer> rc = make_recomputer(Backend::Cuda, &note);
  INFO(note);
  REQUIRE(rc);
  std::unique_ptr<Recomputer> cpu = make_recomputer(Backend::Cpu);
  std::mt19937 rng(5);
  const int nq = 16, T = 8192, d = 64;
  std::vector<Head> heads;
  for (int i = 0; i < 8; ++i) heads.push_back(random_head(rng, nq, T, d, {0.3f, 0.05f}));
  std::vector<Selection> sels = {random_selection(rng, T, 3, 0.3), random_selection(rng, T, 3, 0.7)};
  auto batches_of = [&](std::vector<int> which) {
    std::vector<HeadBatch> out;
    for (int i : which) out.push_back(HeadBatch{heads[i].problem(), sels});
    return out;
  };
  auto check_against_cpu = [&](const std::vector<HeadBatch>& batches) {
    const EvalResult got = evaluate_ok(*rc, batches);
    const EvalResult want = evaluate_ok(*cpu, batches);
    for (std::size_t b = 0; b < batches.size(); ++b)
      for (std::size_t s = 0; s < sels.size(); ++s) check_close(got.errors[b][s], want.errors[b][s]);
  };
  // Each call fits; together they do not: later calls release the heads of earlier ones.
  check_against_cpu(batches_of({0, 1}));
  check_against_cpu(batches_of({2, 3}));
  check_against_cpu(batches_of({4, 5}));
  check_against_cpu(batches_of({0, 1}));  // prepared again after being released
  // One call that cannot fit is refused with a sentence, and the backend still works.
  const EvalResult too_big = rc->evaluate(batches_of({0, 1, 2, 3, 4, 5, 6, 7}));
  CHECK_FALSE(too_big.ok);
  CHECK_THAT(too_big.message, Catch::Contains("free but this call needs"));
  check_against_cpu(batches_of({6, 7}));
  CHECK(rc->description().find("redone") == std::string::npos);
  unsetenv("TIERLAB_CUDA_EMULATOR_MEMORY_MB");
}

// The emulator runs the threads of a block one after another between synchronisations; a
// kernel that reads what another thread writes without a barrier in between would give
// different bits when that order changes.
TEST_CASE("the CUDA kernels have no races the order of threads would show", "[recompute]") {
  std::mt19937 rng(8);
  struct Size {
    int nq, T, d;
  };
  std::vector<Head> heads;
  for (const Size& s : std::vector<Size>{{70, 900, 128}, {12, 333, 40}, {50, 600, 16}})
    heads.push_back(random_head(rng, s.nq, s.T, s.d, {0.4f, 0.01f}));
  std::vector<HeadBatch> batches;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const int T = int(heads[i].k.rows());
    HeadBatch b{heads[i].problem(), {}};
    for (double p : {0.0, 0.3, 0.9}) b.selections.push_back(random_selection(rng, T, 3, p));
    if (i == 2)
      for (int r = 0; r < heads[i].q.rows(); ++r) b.problem.visible.push_back(std::min(T, 100 + 9 * r));
    batches.push_back(std::move(b));
  }
  std::vector<EvalResult> results;
  for (const char* order : {"forward", "reverse", "shuffle"}) {
    setenv("TIERLAB_CUDA_EMULATOR_ORDER", order, 1);
    std::string note;
    std::unique_ptr<Recomputer> rc = make_recomputer(Backend::Cuda, &note);
    INFO(order << ": " << note);
    REQUIRE(rc);
    REQUIRE(rc->description().find("tensor-core path") != std::string::npos);
    results.push_back(evaluate_ok(*rc, batches));
    CHECK(rc->description().find("redone") == std::string::npos);
  }
  unsetenv("TIERLAB_CUDA_EMULATOR_ORDER");
  for (std::size_t k = 1; k < results.size(); ++k)
    for (std::size_t b = 0; b < batches.size(); ++b)
      for (std::size_t s = 0; s < batches[b].selections.size(); ++s) {
        INFO("order " << k << ", head " << b << ", selection " << s);
        const ErrorMetrics& x = results[k].errors[b][s];
        const ErrorMetrics& y = results[0].errors[b][s];
        CHECK(x.rel_error == y.rel_error);
        CHECK(x.abs_error == y.abs_error);
        CHECK(x.attn_tv == y.attn_tv);
        CHECK(x.logit_error == y.logit_error);
      }
}
#endif

TEST_CASE("a prepared query set gives every call the numbers of a call on the backend alone", "[recompute]") {
  // Recomputer::prepare keeps the exact half (logits, softmax, output) between calls that bring
  // different variants, as a cell's budgets do; each call must still equal evaluate({batch})
  // bit for bit on the CPU (its work is the same, in the same order) and within the backend's
  // tolerance elsewhere, whatever variants the calls before it brought.
  on_every_backend([](Recomputer& rc) {
    std::mt19937 rng(20261205);
    for (const auto& [nq, T, d] : std::vector<std::array<int, 3>>{{64, 600, 32}, {5, 40, 8}, {12, 1100, 128}}) {
      std::vector<Head> groups;  // three calls, each with its own variants of the same head
      const Head base = random_head(rng, nq, T, d, {0.4f, 0.05f, 1e-4f}, 2.0f);
      HeadProblem exact{&base.q, &base.k, &base.v, {}, {}};
      if (nq == 12)
        for (int r = 0; r < nq; ++r) exact.visible.push_back(T - nq + r + 1);
      const std::unique_ptr<PreparedQuerySet> set = rc.prepare(exact);
      std::vector<std::vector<MatrixRM>> variants;
      for (int call = 0; call < 3; ++call) {
        variants.emplace_back();
        for (int v = 0; v < 1 + call; ++v) {
          MatrixRM kv = base.k;
          std::normal_distribution<float> n01(0.0f, 1.0f);
          for (int i = 0; i < kv.size(); ++i) kv.data()[i] += (0.3f / (1 + v)) * n01(rng);
          variants.back().push_back(kv);
        }
      }
      for (int call = 0; call < 3; ++call) {
        HeadBatch b{exact, {}};
        for (const MatrixRM& kv : variants[static_cast<std::size_t>(call)]) b.problem.variants.push_back(&kv);
        const int nv = int(b.problem.variants.size());
        b.selections.push_back(random_selection(rng, T, nv, 0.3));
        b.selections.push_back(random_selection(rng, T, nv, 0.0));
        const EvalResult alone = evaluate_ok(rc, {b});
        const EvalResult prepared = set->evaluate(b);
        INFO("nq " << nq << ", T " << T << ", call " << call << ": " << prepared.message);
        REQUIRE(prepared.ok);
        REQUIRE(prepared.errors.size() == 1);
        for (std::size_t s = 0; s < b.selections.size(); ++s) {
          const ErrorMetrics& x = prepared.errors[0][s];
          const ErrorMetrics& y = alone.errors[0][s];
          if (rc.name() == "cpu") {
            CHECK(x.rel_error == y.rel_error);
            CHECK(x.abs_error == y.abs_error);
            CHECK(x.attn_tv == y.attn_tv);
            CHECK(x.logit_error == y.logit_error);
          } else {
            check_close(x, y);
          }
        }
      }
      // Another query set's batch is refused with a sentence, and nothing is computed.
      const Head other = random_head(rng, nq, T, d, {0.1f}, 2.0f);
      HeadBatch foreign{other.problem(), {Selection(T, std::uint8_t(1))}};
      foreign.problem.visible = exact.visible;
      const EvalResult refused = set->evaluate(foreign);
      if (rc.name() == "cpu") {
        CHECK_FALSE(refused.ok);
        CHECK(refused.message.find("not the prepared query set's") != std::string::npos);
      }
    }
  });
}
