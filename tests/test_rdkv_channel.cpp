// RDKV per key channel (model/quantizers/rdkv_channel.cpp): the reflect-padded pool, the argmin rule
// with the least lambda meeting the budget, and the whole quantizer on a small head whose
// expected codes, keys and bits come from an independent numpy implementation of the
// released formula (scale, integer zero point, clamp, round).
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "tests/support.hpp"

using namespace tierlab;

TEST_CASE("RDKV smoothing: reflect padding without edge repeat, kernel shrunk for short inputs", "[rdkv]") {
  // x = 1..6, kernel 5: padded 3 2 | 1 2 3 4 5 6 | 5 4 (zero padding would give 6/5 at the edge).
  const std::vector<double> y = reflect_average_pool({1, 2, 3, 4, 5, 6}, 5);
  const std::vector<double> want = {11.0 / 5, 12.0 / 5, 3.0, 4.0, 23.0 / 5, 24.0 / 5};
  REQUIRE(y.size() == want.size());
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(want[i]).epsilon(1e-14));
  // n = 2: effective kernel min(5, 2n - 1) = 3; padded 3 | 1 3 | 1.
  const std::vector<double> s = reflect_average_pool({1, 3}, 5);
  CHECK(s[0] == Approx(7.0 / 3));
  CHECK(s[1] == Approx(5.0 / 3));
  CHECK(reflect_average_pool({4, 5, 6}, 1) == std::vector<double>{4, 5, 6});
  CHECK_THROWS_AS(reflect_average_pool({1, 2, 3}, 4), InputError);
}

TEST_CASE("RDKV per channel: argmin s eps(b) + lambda b with the least lambda that meets the budget", "[rdkv]") {
  // Two channels, s = (100, 1), bits {0, 2, 4}, eps {1, 1/4, 1/16}.
  // Channel 1 leaves 4 for 2 at lambda = 1 (1/4 - 1/16) / 2 = 0.09375 (a tie, to the lower
  // bits), and 2 for 0 at lambda = 1 (1 - 1/4) / 2 = 0.375; channel 0 leaves 4 at 9.375.
  const std::vector<double> s = {100, 1};
  const std::vector<int> opts = {0, 2, 4};
  const std::vector<double> eps = {1, 0.25, 0.0625};
  const auto a = rdkv_allocate_channels(s, opts, eps, 3.0);
  CHECK(a.bits == std::vector<int>{4, 2});
  CHECK(a.lambda == Approx(0.09375).epsilon(1e-9));
  CHECK(a.mean_bits == 3.0);
  const auto b = rdkv_allocate_channels(s, opts, eps, 2.0);
  CHECK(b.bits == std::vector<int>{4, 0});
  CHECK(b.lambda == Approx(0.375).epsilon(1e-9));
  const auto c = rdkv_allocate_channels(s, opts, eps, 4.0);  // every channel at its best fits
  CHECK(c.bits == std::vector<int>{4, 4});
  CHECK(c.lambda == 0.0);
  const auto e = rdkv_allocate_channels(s, opts, eps, 0.0);
  CHECK(e.bits == std::vector<int>{0, 0});
  CHECK_THROWS_AS(rdkv_allocate_channels(s, {2, 4}, {0.25, 0.0625}, 1.0), InputError);  // below the least option

  // Many channels, paper eps: the budget is met and any smaller lambda exceeds it.
  std::vector<double> many;
  for (int c = 0; c < 64; ++c) many.push_back(std::exp(std::sin(1.7 * c) * 3.0));
  const std::vector<int> paper = {0, 2, 4, 8, 16};
  const std::vector<double> peps = {1, 0.0955, 4.02e-3, 1.40e-5, 0};
  for (double B : {1.0, 2.0, 3.0, 4.5, 8.0}) {
    const auto r = rdkv_allocate_channels(many, paper, peps, B);
    INFO("budget " << B);
    CHECK(r.mean_bits <= B + 1e-12);
    REQUIRE(r.lambda > 0);
    double below = 0;  // mean bits at lambda (1 - 1e-9): the argmin rule, written out again
    for (double x : many) {
      int best = 0;
      double bv = x * peps[0];
      for (int j = 1; j < 5; ++j) {
        const double v = x * peps[j] + r.lambda * (1 - 1e-9) * paper[j];
        if (v < bv) bv = v, best = j;
      }
      below += paper[best];
    }
    CHECK(below / 64 > B);
  }
}

TEST_CASE("rdkv-channel quantizes a small head as the independent reference does, with its rate", "[rdkv]") {
  HeadData h;
  h.keys.resize(6, 4);
  h.keys << 1.0f, 0.5f, -2.0f, 0.10f,  //
      2.0f, -0.5f, 1.0f, 0.20f,        //
      -1.5f, 0.25f, 3.0f, -0.10f,      //
      0.5f, 0.75f, -1.0f, 0.05f,       //
      3.0f, -0.25f, 0.5f, 0.00f,       //
      -2.5f, 0.0f, 2.0f, -0.20f;
  h.obs_queries.resize(2, 4);
  h.obs_queries << 1.0f, 2.0f, 0.5f, 1.0f, 0.0f, -2.0f, 1.5f, 3.0f;
  // s_c = mean q_c^2 * mean k_c^2 (numpy: 1.8958333, 0.7916667, 4.0104167, 0.0854167).
  const auto s = rdkv_channel_scores(h);
  CHECK(s[0] == Approx(0.5 * (22.75 / 6)).epsilon(1e-6));
  CHECK(s[1] == Approx(4.0 * (1.1875 / 6)).epsilon(1e-6));
  const auto q = make_key_quantizer("rdkv-channel", {{"budget", "6"}, {"kernel", "1"}});
  const QuantizedHeadKeys out = q->quantize(h, RopeParams{});
  // Bits {8, 4, 8, 4}: lambda = s_1 (eps(4) - eps(8)) / (8 - 4), channel 1 leaving 8 bits.
  const float want[6][4] = {{0.99215686f, 0.5f, -2.0f, 0.10666667f},        {2.0058825f, -0.5f, 1.0f, 0.18666667f},
                            {-1.509804f, 0.25f, 3.0f, -0.10666667f},       {0.49607843f, 0.75f, -1.0f, 0.053333335f},
                            {2.9980392f, -0.25f, 0.50980395f, 0.0f},       {-2.5019608f, 0.0f, 2.0f, -0.21333334f}};
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 4; ++c) {
      INFO("row " << i << " channel " << c);
      CHECK(out.keys(i, c) == Approx(want[i][c]).margin(2e-6));
    }
  CHECK(out.code_bits == 6 * 24.0);
  CHECK(out.meta_bits() == 32.0 * 4 + 3.0 * 4);  // 4 quantized channels x 1 group, 3-bit map
  CHECK(out.rate().total_bits == Approx((144.0 + 140.0) / 24));
  CHECK(out.rate().code_bits == Approx(6.0));

  // Budget 0: every channel evicted (zero keys, zero code bits).
  const auto z = make_key_quantizer("rdkv-channel", {{"budget", "0"}})->quantize(h, RopeParams{});
  CHECK(z.keys.isZero());
  CHECK(z.code_bits == 0.0);
  // Budget 16: every channel kept exact.
  const auto x = make_key_quantizer("rdkv-channel", {{"budget", "16"}})->quantize(h, RopeParams{});
  CHECK(x.keys == h.keys);
  CHECK(x.rate().code_bits == 16.0);

  const std::string bad = testing::error_of<InputError>([] { make_key_quantizer("rdkv-channel", {{"eps", "1,0.1"}}); });
  CHECK(bad.find("eps") != std::string::npos);
  CHECK_THROWS_AS(make_key_quantizer("rdkv-channel", {{"options", "0,3,16"}}), InputError);  // no paper eps for 3
  CHECK_THROWS_AS(make_key_quantizer("rdkv-channel", {{"kernel", "4"}}), InputError);
}
