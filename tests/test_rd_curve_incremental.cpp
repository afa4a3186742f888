// The rate-distortion curve's fast paths (issue 18) against the slow ones they replace:
// cpu::IncrementalKeptSet (rank-one updates along nested kept sets) against full evaluations
// (cpu::evaluate_selection) over long sweeps, drift included; rd_curve with its parametric
// sweep and incremental E evaluation against the same curve computed point by point.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <omp.h>

#include "gpu/cpu_recompute.hpp"
#include "gpu/recompute.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/rd_curve.hpp"

using namespace tierlab;

namespace {

bool close(double a, double b, double rel = 1e-5, double abs = 1e-12) {
  return std::fabs(a - b) <= abs + rel * std::max(std::fabs(a), std::fabs(b));
}

// One head's decode query set as rd_curve prepares it: T + S tokens, step s sees T + s.
struct DecodeProblem {
  MatrixRM keys, values;
  HeadProblem hp;
  int T = 0;
  explicit DecodeProblem(const HeadData& head) : T(static_cast<int>(head.keys.rows())) {
    const int S = static_cast<int>(head.decode_keys.rows()), d = static_cast<int>(head.keys.cols());
    const int g = static_cast<int>(head.decode_queries.rows() / S);
    keys.resize(T + S, d);
    keys.topRows(T) = head.keys;
    keys.bottomRows(S) = head.decode_keys;
    values.resize(T + S, d);
    values.topRows(T) = head.values;
    values.bottomRows(S) = head.decode_values;
    hp.queries = &head.decode_queries;
    hp.exact_keys = &keys;
    hp.values = &values;
    hp.variants = {&keys};
    for (int j = 0; j < g; ++j)
      for (int s = 1; s <= S; ++s) hp.visible.push_back(T + s);
  }
};

ErrorMetrics full(const cpu::PreparedHead& ph, const std::vector<std::uint8_t>& kept, int total_tokens) {
  Selection sel(static_cast<std::size_t>(total_tokens), 1);  // decode tokens: kept, exact
  for (std::size_t t = 0; t < kept.size(); ++t) sel[t] = kept[t];
  cpu::Workspace ws;
  return cpu::evaluate_selection(ph, sel, ws);
}

}  // namespace

TEST_CASE("Incremental kept-set updates equal full evaluations after thousands of updates", "[rd_curve][incremental]") {
  SynthParams sp = synth_preset("tiny");
  sp.seed = 21;
  sp.prompt_len = 4096;
  const HeadData head = synth_head(sp, 0, 0);
  const auto order_kind = GENERATE(0, 1, 2);  // random order; increasing logit (a new max each step); decreasing
  SECTION("decode queries") {
    const DecodeProblem dp(head);
    const cpu::PreparedHead ph = cpu::prepare_head(dp.hp, 0, static_cast<int>(dp.hp.queries->rows()));
    cpu::IncrementalKeptSet inc(dp.hp, dp.T);
    std::vector<int> order(static_cast<std::size_t>(dp.T));
    std::iota(order.begin(), order.end(), 0);
    if (order_kind == 0) {
      std::mt19937_64 rng(5);
      std::shuffle(order.begin(), order.end(), rng);
    } else {  // by the first query's logit: increasing makes every step a new running max
      const Eigen::VectorXf s = dp.keys.topRows(dp.T) * dp.hp.queries->row(0).transpose();
      std::sort(order.begin(), order.end(), [&](int a, int b) { return order_kind == 1 ? s[a] < s[b] : s[a] > s[b]; });
    }
    // Nothing kept but the decode tokens.
    ErrorMetrics want = full(ph, inc.kept(), static_cast<int>(dp.keys.rows()));
    ErrorMetrics got = inc.metrics();
    CHECK(close(got.rel_error, want.rel_error));
    CHECK(close(got.attn_tv, want.attn_tv));
    int checked = 0;
    std::size_t pos = 0;
    for (int step = 1; pos < order.size(); ++step) {
      const std::size_t n = std::min<std::size_t>(order.size() - pos, static_cast<std::size_t>(1 + step % 7));  // 1-7 tokens per point
      inc.add(std::vector<int>(order.begin() + static_cast<std::ptrdiff_t>(pos), order.begin() + static_cast<std::ptrdiff_t>(pos + n)));
      pos += n;
      if (step % 53 != 0 && pos < order.size()) continue;
      want = full(ph, inc.kept(), static_cast<int>(dp.keys.rows()));
      got = inc.metrics();
      INFO("order " << order_kind << ", " << pos << " tokens kept after " << inc.updates() << " updates");
      CHECK(close(got.rel_error, want.rel_error));
      CHECK(close(got.abs_error, want.abs_error));
      CHECK(close(got.attn_tv, want.attn_tv, 1e-5, 1e-7));
      CHECK(got.logit_error == want.logit_error);
      ++checked;
    }
    CHECK(inc.updates() == dp.T);
    CHECK(checked >= 20);
    // All kept: the output is exact (to rounding).
    CHECK(got.rel_error < 1e-20);
    // reset() starts over; the same additions give the same numbers.
    inc.reset();
    CHECK(std::none_of(inc.kept().begin(), inc.kept().end(), [](std::uint8_t k) { return k != 0; }));
    CHECK_THROWS(inc.add({dp.T}));
  }
  SECTION("observation queries (causal: a row sees only the tokens before it)") {
    MatrixRM K = head.keys, V = head.values;
    HeadProblem hp;
    hp.queries = &head.obs_queries;
    hp.exact_keys = &K;
    hp.values = &V;
    hp.variants = {&K};
    hp.visible = observation_queries(head).visible;
    const cpu::PreparedHead ph = cpu::prepare_head(hp, 0, static_cast<int>(hp.queries->rows()));
    const int T = static_cast<int>(K.rows());
    cpu::IncrementalKeptSet inc(hp, T);
    const ErrorMetrics none = inc.metrics();  // nothing kept: o^ = 0
    CHECK(none.rel_error == Approx(1.0));
    CHECK(none.attn_tv == Approx(0.5));
    std::vector<int> order(static_cast<std::size_t>(T));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(17 + order_kind);
    std::shuffle(order.begin(), order.end(), rng);
    int checked = 0;
    for (std::size_t pos = 0; pos < order.size(); pos += 64) {
      inc.add(std::vector<int>(order.begin() + static_cast<std::ptrdiff_t>(pos),
                               order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), pos + 64))));
      const ErrorMetrics want = full(ph, inc.kept(), T);
      const ErrorMetrics got = inc.metrics();
      INFO(pos + 64 << " of " << T << " tokens kept");
      CHECK(close(got.rel_error, want.rel_error));
      CHECK(close(got.attn_tv, want.attn_tv, 1e-5, 1e-7));
      ++checked;
    }
    CHECK(checked == 64);
  }
}

TEST_CASE("The curve's sweep and incremental paths equal the point-by-point curve", "[rd_curve][incremental]") {
  SynthParams sp = synth_preset("tiny");
  sp.seed = 8;
  sp.prompt_len = 2048;
  const TraceMeta meta = synth_meta(sp);
  const HeadData h0 = synth_head(sp, 0, 0), h1 = synth_head(sp, 0, 1);
  const std::vector<const HeadData*> heads{&h0, &h1};
  const auto kind = GENERATE(RateKind::Code, RateKind::Total);
  const auto queries = GENERATE(RdQueries::Decode, RdQueries::Obs);
  // Pooled (the two heads share B): E and M are one knapsack each, swept too.
  const auto scope = GENERATE(Scope::Head, Scope::Model);
  RdCurveOptions o;
  o.budgets = parse_budget_grid("0:16:0.125");
  o.solve.rate_kind = kind;
  o.solve.scope = scope;
  o.queries = queries;
  const RdCurve fast = rd_curve(heads, meta.rope, o);
  o.sweep = false;
  o.incremental = false;
  const RdCurve slow = rd_curve(heads, meta.rope, o);
  INFO(to_string(kind) << " " << to_string(queries) << " " << to_string(scope));
  CHECK(fast.swept_points > (scope == Scope::Head ? 0 : static_cast<int>(o.budgets.size())));
  CHECK(slow.swept_points == 0);
  CHECK(fast.incremental_points > 0);
  CHECK(slow.incremental_points == 0);
  // E's kept sets along this sweep: nested except where the integer repair swaps a token
  // (then the step is a full pass; counted, and the numbers are still equal).
  CHECK(fast.incremental_resets <= fast.incremental_points);
  REQUIRE(fast.points.size() == slow.points.size());
  int differ = 0;
  for (std::size_t p = 0; p < fast.points.size(); ++p) {
    const RdPoint& a = fast.points[p];
    const RdPoint& b = slow.points[p];
    INFO(to_string(a.family) << " B = " << a.budget);
    REQUIRE(a.feasible == b.feasible);
    if (!a.feasible) continue;
    CHECK(close(a.surrogate, b.surrogate, 1e-12, 1e-300));
    CHECK(a.rate.code_bits == Approx(b.rate.code_bits).epsilon(1e-12));
    CHECK(a.rate.total_bits == Approx(b.rate.total_bits).epsilon(1e-12));
    CHECK(a.family_share == b.family_share);
    differ += a.x != b.x;
    CHECK(close(a.error.rel_error, b.error.rel_error));
    CHECK(close(a.error.abs_error, b.error.abs_error));
    CHECK(close(a.error.attn_tv, b.error.attn_tv, 1e-5, 1e-7));
    for (std::size_t i = 0; i < a.head_error.size(); ++i) CHECK(close(a.head_error[i], b.head_error[i]));
  }
  CHECK(differ == 0);  // the same allocations (the same measured rates)
}

TEST_CASE("The thread count changes no bit: the CPU backend's and the incremental kept set's numbers are the "
          "same on 1, 2 and 3 OpenMP threads",
          "[rd_curve][incremental][threads]") {
  // An MPI rank on a share of a node (1 thread) must compute what a whole-node process does
  // (docs/cluster.md): sums are split by fixed blocks, never by thread.
  SynthParams sp = synth_preset("tiny");
  sp.seed = 8;
  sp.prompt_len = 3000;  // 12 tiles of 256 tokens: more than one group per thread
  const HeadData head = synth_head(sp, 0, 1);
  const DecodeProblem dp(head);
  std::vector<std::uint8_t> kept(static_cast<std::size_t>(dp.T), 0);
  std::vector<int> add;
  for (int t = 0; t < dp.T; t += 3) kept[static_cast<std::size_t>(t)] = 1, add.push_back(t);
  const int before = omp_get_max_threads();
  std::vector<ErrorMetrics> fulls, incs;
  for (const int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    // The backend every scenario cell and CLI command recomputes on (its sums are split by
    // fixed row blocks; the GEMMs inside run on one thread each).
    HeadBatch batch;
    batch.problem = dp.hp;
    Selection sel(static_cast<std::size_t>(dp.keys.rows()), 1);
    for (std::size_t t = 0; t < kept.size(); ++t) sel[t] = kept[t];
    batch.selections = {sel};
    const auto backend = make_cpu_recomputer();
    fulls.push_back(recompute(*backend, {batch})[0][0]);
    cpu::IncrementalKeptSet inc(dp.hp, dp.T);
    inc.add(add);
    incs.push_back(inc.metrics());
  }
  omp_set_num_threads(before);
  for (std::size_t k = 1; k < fulls.size(); ++k) {
    INFO((k + 1) << " threads against 1");
    CHECK(fulls[k].rel_error == fulls[0].rel_error);
    CHECK(fulls[k].abs_error == fulls[0].abs_error);
    CHECK(fulls[k].attn_tv == fulls[0].attn_tv);
    CHECK(incs[k].rel_error == incs[0].rel_error);
    CHECK(incs[k].abs_error == incs[0].abs_error);
    CHECK(incs[k].attn_tv == incs[0].attn_tv);
  }
}
