// Pooled scores (solvers/smoothing.hpp) on tiny vectors, expected values worked out by
// hand, and span truncation on a hand-made allocation.
#include <catch2/catch.hpp>

#include "model/base/error.hpp"
#include "solvers/smoothing.hpp"

using namespace tierlab;

namespace {

SmoothingOptions opts(PoolKind pool, int k, Padding pad) {
  SmoothingOptions o;
  o.pool = pool;
  o.kernel = k;
  o.padding = pad;
  return o;
}

void check_equal(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("position " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-14));
  }
}

const std::vector<double> x{1, 4, 2, 8, 5};

}  // namespace

TEST_CASE("average pooling, kernel 3, every padding", "[smoothing]") {
  // Interior: (1+4+2)/3 = 7/3, (4+2+8)/3 = 14/3, (2+8+5)/3 = 5.
  // zero:      ends (0+1+4)/3 = 5/3 and (8+5+0)/3 = 13/3
  check_equal(smooth_scores(x, opts(PoolKind::Avg, 3, Padding::Zero)), {5.0 / 3, 7.0 / 3, 14.0 / 3, 5, 13.0 / 3});
  // reflect:   x~_{-1} = x_1 = 4, x~_5 = x_3 = 8: (4+1+4)/3 = 3, (8+5+8)/3 = 7
  check_equal(smooth_scores(x, opts(PoolKind::Avg, 3, Padding::Reflect)), {3, 7.0 / 3, 14.0 / 3, 5, 7});
  // replicate: x~_{-1} = 1, x~_5 = 5: (1+1+4)/3 = 2, (8+5+5)/3 = 6
  check_equal(smooth_scores(x, opts(PoolKind::Avg, 3, Padding::Replicate)), {2, 7.0 / 3, 14.0 / 3, 5, 6});
  // none:      shrinking window (1+4)/2 = 2.5, (8+5)/2 = 6.5
  check_equal(smooth_scores(x, opts(PoolKind::Avg, 3, Padding::None)), {2.5, 7.0 / 3, 14.0 / 3, 5, 6.5});
}

TEST_CASE("average pooling, kernel 5 (the default), reflect and none", "[smoothing]") {
  // reflect, windows of indices: t=0: 2,1,0,1,2 -> 2+4+1+4+2 = 13; t=1: 1,0,1,2,3 -> 4+1+4+2+8 = 19;
  // t=2: 1+4+2+8+5 = 20; t=3: 4,2,8,5,x~_5 = x_3 = 8 -> 27; t=4: 2,8,5,8,2 -> 25.
  const SmoothingOptions def;
  CHECK(def.pool == PoolKind::Avg);
  CHECK(def.kernel == 5);
  CHECK(def.padding == Padding::Reflect);
  CHECK(def.name() == "avg5-reflect");
  check_equal(smooth_scores(x, def), {13.0 / 5, 19.0 / 5, 20.0 / 5, 27.0 / 5, 25.0 / 5});
  // none: t=0: (1+4+2)/3, t=1: (1+4+2+8)/4, t=2: 20/5, t=3: (4+2+8+5)/4, t=4: (2+8+5)/3
  check_equal(smooth_scores(x, opts(PoolKind::Avg, 5, Padding::None)), {7.0 / 3, 15.0 / 4, 4, 19.0 / 4, 5});
}

TEST_CASE("max pooling, kernel 3, every padding", "[smoothing]") {
  const std::vector<double> y{-1, -4, -2, -8, -5};
  // interior: max(-1,-4,-2) = -1, max(-4,-2,-8) = -2, max(-2,-8,-5) = -2
  check_equal(smooth_scores(y, opts(PoolKind::Max, 3, Padding::Zero)), {0, -1, -2, -2, 0});         // pad 0 wins
  check_equal(smooth_scores(y, opts(PoolKind::Max, 3, Padding::Reflect)), {-1, -1, -2, -2, -5});    // x~_5 = -8
  check_equal(smooth_scores(y, opts(PoolKind::Max, 3, Padding::Replicate)), {-1, -1, -2, -2, -5});
  check_equal(smooth_scores(y, opts(PoolKind::Max, 3, Padding::None)), {-1, -1, -2, -2, -5});
  check_equal(smooth_scores(x, opts(PoolKind::Max, 3, Padding::Reflect)), {4, 4, 8, 8, 8});
}

TEST_CASE("kernel 1 is the identity; even kernels and bad names are input errors", "[smoothing]") {
  check_equal(smooth_scores(x, opts(PoolKind::Avg, 1, Padding::Zero)), x);
  check_equal(smooth_scores(x, opts(PoolKind::Max, 1, Padding::Reflect)), x);
  CHECK_THROWS_AS(smooth_scores(x, opts(PoolKind::Avg, 4, Padding::Zero)), InputError);
  CHECK_THROWS_AS(parse_padding("mirror"), InputError);
  CHECK_THROWS_AS(parse_pool_kind("median"), InputError);
  CHECK(parse_padding("replicate") == Padding::Replicate);
}

TEST_CASE("reflect padding on a row shorter than the kernel repeats the reflection", "[smoothing]") {
  // Row {1, 3}, kernel 5, reflect: period 2; x~ at -2..3 = 1,3,1,3,1,3.
  // t=0: indices -2..2 -> 1,3,1,3,1 = 9/5; t=1: -1..3 -> 3,1,3,1,3 = 11/5.
  check_equal(smooth_scores({1, 3}, opts(PoolKind::Avg, 5, Padding::Reflect)), {9.0 / 5, 11.0 / 5});
  // A single token: every padded position is the token itself.
  check_equal(smooth_scores({7}, opts(PoolKind::Avg, 5, Padding::Reflect)), {7});
}

TEST_CASE("smooth_costs pools every tier row and keeps the exact row zero", "[smoothing]") {
  MatrixRMd c(2, 5);
  c.row(0) << 1, 4, 2, 8, 5;
  c.row(1).setZero();
  const MatrixRMd s = smooth_costs(c, opts(PoolKind::Avg, 3, Padding::Replicate));
  CHECK(s(0, 0) == Approx(2.0));
  CHECK(s(0, 4) == Approx(6.0));
  CHECK(s.row(1).isZero(0));
}

TEST_CASE("span truncation counts spans partly evicted", "[smoothing]") {
  // Tiers of 12 tokens (0 = evicted).
  const std::vector<std::uint8_t> tiers{4, 4, 0, 4, 0, 0, 0, 2, 2, 0, 4, 4};
  const std::vector<Span> spans{{0, 2},    // kept whole
                                {1, 4},    // tokens 1,2,3: 2 evicted -> truncated
                                {4, 7},    // all evicted
                                {6, 9},    // 6 evicted, 7, 8 quantized -> truncated
                                {10, 12}}; // kept
  const SpanTruncation s = span_truncation(spans, tiers);
  CHECK(s.spans == 5);
  CHECK(s.truncated == 2);
  CHECK(s.fully_evicted == 1);
  CHECK(s.rate() == Approx(0.4));
  CHECK_THROWS_AS(span_truncation({{10, 13}}, tiers), InputError);
  CHECK_THROWS_AS(span_truncation({{3, 3}}, tiers), InputError);
  CHECK(span_truncation({}, tiers).rate() == 0.0);
}
