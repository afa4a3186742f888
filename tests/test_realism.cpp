// Realism statistics (model/realism.hpp): hand-computed values on a hand-made trace (causal
// mask included), prefixes equal truncated traces, percentiles, errors, and a stories260K
// capture against an independent NumPy computation (golden numbers below).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "model/llama2c/capture.hpp"
#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/realism.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"

using namespace tierlab;

namespace {

// T = 4 keys of d = 2, one query head, W = 2 observation queries at positions 2 and 3:
//   keys  k_0 = (0, 0), k_1 = (1, 0), k_2 = (2, 0.4), k_3 = (3, 3)
//   query at position 2: (sqrt(2) ln 2, 0)  -> logits s_t = ln 2 * k_t0 = (0, ln 2, 2 ln 2) over t <= 2
//   query at position 3: (0, sqrt(2))       -> logits s_t = k_t1 = (0, 0, 0.4, 3) over t <= 3
// KIVI 2-bit, one group of 4: channel 0 (0, 1, 2, 3) is on its grid (scale 1), channel 1
// (0, 0, 0.4, 3) has scale 1 and 0.4 rounds to 0: error -0.4 on k_2's channel 1 only.
struct HandTrace {
  TraceMeta meta;
  HeadData head;
};

HandTrace hand_trace() {
  HandTrace h;
  h.meta.n_layers = 1;
  h.meta.n_kv_heads = 1;
  h.meta.group_size = 1;
  h.meta.head_dim = 2;
  h.meta.prompt_len = 4;
  h.meta.obs_window = 2;
  h.meta.decode_steps = 1;
  h.head.keys.resize(4, 2);
  h.head.keys << 0.0f, 0.0f, 1.0f, 0.0f, 2.0f, 0.4f, 3.0f, 3.0f;
  h.head.values = MatrixRM::Ones(4, 2);
  h.head.obs_queries.resize(2, 2);
  h.head.obs_queries << static_cast<float>(std::sqrt(2.0) * std::log(2.0)), 0.0f, 0.0f,
      static_cast<float>(std::sqrt(2.0));
  h.head.decode_queries = MatrixRM::Ones(1, 2);
  h.head.decode_keys = MatrixRM::Ones(1, 2);
  h.head.decode_values = MatrixRM::Ones(1, 2);
  return h;
}

double entropy_of(const std::vector<double>& w) {
  double z = 0.0, h = 0.0;
  for (double x : w) z += x;
  for (double x : w) h -= x / z * std::log(x / z);
  return h;
}

}  // namespace

TEST_CASE("realism statistics of a hand-made trace are the hand-computed ones, causal mask included", "[realism]") {
  const HandTrace t = hand_trace();
  const HeadRealism r = head_realism(t.head, t.meta, 0, RealismOptions{});
  const double ln2 = std::log(2.0), x = static_cast<double>(0.4f);
  const double q_sq = static_cast<double>(static_cast<float>(std::sqrt(2.0)));  // the stored sqrt(2)

  // Query at position 2 sees keys 0..2 only: weights 1 : 2 : 4 (k_3 would add 8).
  const double h0 = std::log(7.0) - 10.0 / 7.0 * ln2;
  const double m0_first = 1.0 / 7.0;  // not 1/15
  const int n90_first = 3;            // 4/7 + 2/7 = 0.857 < 0.9
  const double margin_first = ln2;    // max 2 ln 2, median ln 2
  const double noise_first = 0.0;     // channel 0 is on its grid
  // Query at position 3 sees keys 0..3: weights 1, 1, e^0.4, e^3.
  const double s_scale = q_sq / std::sqrt(2.0);  // 1 up to float rounding
  const std::vector<double> w1 = {1.0, 1.0, std::exp(s_scale * x), std::exp(s_scale * 3.0)};
  const double h1 = entropy_of(w1);
  const double m0_second = 1.0 / (w1[0] + w1[1] + w1[2] + w1[3]);
  const int n90_second = 2;                         // 0.852 + 0.063 >= 0.9
  const double margin_second = s_scale * (3.0 - 0.5 * (0.0 + x));  // median of (0, 0, 0.4, 3) = 0.2
  const double noise_second = (q_sq * x) * (q_sq * x) / 2.0 / 4.0;  // (q.(k^ - k))^2 / d at t = 2, mean over 4

  CHECK(r.length == 4);
  CHECK(r.n_queries == 2);
  CHECK(r.entropy == Approx((h0 + h1) / 2).epsilon(1e-6));
  CHECK(r.norm_entropy == Approx((h0 / std::log(3.0) + h1 / std::log(4.0)) / 2).epsilon(1e-6));
  CHECK(r.first_token_mass == Approx((m0_first + m0_second) / 2).epsilon(1e-6));
  CHECK(r.first_token_mass > (1.0 / 15.0 + m0_second) / 2 + 0.03);  // a later token got no weight
  CHECK(r.n90 == Approx((n90_first + n90_second) / 2.0));
  CHECK(r.margin == Approx((margin_first + margin_second) / 2).epsilon(1e-6));
  CHECK(r.noise == Approx((noise_first + noise_second) / 2).epsilon(1e-5));
  // Channel RMS of the keys: sqrt(14 / 4) and sqrt((0.16 + 9) / 4); of the queries: ln 2 and 1.
  const double k0 = std::sqrt(14.0 / 4.0), k1 = std::sqrt((x * x + 9.0) / 4.0);
  CHECK(r.key_spread == Approx(std::max(k0, k1) / ((k0 + k1) / 2)).epsilon(1e-6));
  CHECK(r.query_spread == Approx(1.0 / ((1.0 + ln2) / 2)).epsilon(1e-5));
}

TEST_CASE("a later key changes nothing an earlier query sees", "[realism]") {
  // Query 2 weighs channel 0 only and query 3 channel 1 only: making k_3's channel 0 huge
  // would swamp query 2 without the causal mask. Groups of one token: no quantization error.
  HandTrace t = hand_trace();
  RealismOptions opt;
  opt.group = 1;
  const HeadRealism before = head_realism(t.head, t.meta, 0, opt);
  t.head.keys(3, 0) = 1000.0f;
  const HeadRealism after = head_realism(t.head, t.meta, 0, opt);
  CHECK(after.entropy == before.entropy);
  CHECK(after.first_token_mass == before.first_token_mass);
  CHECK(after.n90 == before.n90);
  CHECK(after.margin == before.margin);
  CHECK(after.noise == 0.0);
}

TEST_CASE("statistics at a prefix length equal those of the trace cut to that length", "[realism]") {
  SynthParams p = synth_preset("tiny");
  p.obs_window = 32;  // queries at positions 32..63
  const TraceMeta meta = synth_meta(p);
  const HeadData head = synth_head(p, 1, 0);
  RealismOptions opt;
  opt.window = 8;
  const HeadRealism at48 = head_realism(head, meta, 48, opt);

  // The same head cut by hand: keys 0..47, queries at positions 40..47 (rows 8..15 per query head).
  TraceMeta cut = meta;
  cut.prompt_len = 48;
  cut.obs_window = 8;
  HeadData h = head;
  h.keys = head.keys.topRows(48);
  h.obs_queries.resize(2 * 8, p.head_dim);
  for (int j = 0; j < 2; ++j) h.obs_queries.middleRows(j * 8, 8) = head.obs_queries.middleRows(j * 32 + 8, 8);
  const HeadRealism direct = head_realism(h, cut, 0, RealismOptions{});
  CHECK(at48.length == 48);
  CHECK(at48.n_queries == 16);
  CHECK(at48.entropy == direct.entropy);
  CHECK(at48.first_token_mass == direct.first_token_mass);
  CHECK(at48.n90 == direct.n90);
  CHECK(at48.margin == direct.margin);
  CHECK(at48.noise == direct.noise);
  CHECK(at48.key_spread == direct.key_spread);
  CHECK(at48.query_spread == direct.query_spread);

  // Lengths the window cannot reach are refused with the positions the trace has.
  CHECK_THROWS_WITH(head_realism(head, meta, 39, opt), Catch::Contains("positions 31..38") && Catch::Contains("32..63"));
  CHECK_THROWS_AS(head_realism(head, meta, 65, opt), InputError);
  opt.window = 33;
  CHECK_THROWS_WITH(head_realism(head, meta, 0, opt), Catch::Contains("window = 33"));
}

TEST_CASE("summaries are percentiles over heads, interpolated between order statistics", "[realism]") {
  std::vector<HeadRealism> heads(5);
  for (int i = 0; i < 5; ++i) {
    heads[i].length = 100;
    heads[i].entropy = 5 - i;  // 5, 4, 3, 2, 1 (order does not matter)
    heads[i].n90 = 10.0 * (i + 1);
  }
  const RealismSummary s = summarize_realism(heads);
  CHECK(s.n_heads == 5);
  CHECK(s.length == 100);
  CHECK(s.entropy.p10 == Approx(1.4));
  CHECK(s.entropy.median == Approx(3.0));
  CHECK(s.entropy.p90 == Approx(4.6));
  CHECK(s.entropy.mean == Approx(3.0));
  CHECK(s.n90.p90 == Approx(46.0));
}

TEST_CASE("a trace's realism is the same read from its file as generated in memory, one row per length", "[realism]") {
  SynthParams p = synth_preset("tiny");
  p.obs_window = 40;
  const std::string path = std::string(TIERLAB_BINARY_DIR) + "/test_realism_tiny.safetensors";
  write_synthetic_trace(p, path);
  RealismOptions opt;
  opt.lengths = {32, 48, 64};
  opt.window = 8;
  std::vector<std::pair<int, int>> calls;
  const TraceReader reader(path);
  const RealismReport file = trace_realism(reader, opt, [&](int d, int t) { calls.emplace_back(d, t); });
  const RealismReport memory =
      trace_realism(synth_meta(p), [&](int l, int h) { return synth_head(p, l, h); }, opt);
  REQUIRE(file.summaries.size() == 3u);
  REQUIRE(file.heads.size() == 12u);
  CHECK(calls.back() == std::make_pair(4, 4));
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(file.summaries[k].length == opt.lengths[k]);
    CHECK(file.summaries[k].window == 8);
    CHECK(file.summaries[k].n_heads == 4);
    CHECK(file.summaries[k].n90.median == memory.summaries[k].n90.median);
    CHECK(file.summaries[k].noise.mean == memory.summaries[k].noise.mean);
  }
  const std::string table = file.table("tiny");
  CHECK_THAT(table, Catch::Contains("n90 (tokens)") && Catch::Contains("first-token mass") && Catch::Contains("tiny"));
  std::filesystem::remove(path);

  RealismOptions bad;
  bad.mass = 0.0;
  CHECK_THROWS_WITH(bad.validate(), Catch::Contains("mass"));
  bad = RealismOptions{};
  bad.lengths = {0};
  CHECK_THROWS_AS(trace_realism(reader, bad), InputError);
}

TEST_CASE("realism of a stories260K capture matches an independent NumPy computation", "[realism][golden]") {
  // Golden numbers: tierlab capture --prompt-greedy 64 --decode-steps 32 (W = 32), then the statistics
  // recomputed in NumPy (float64 softmax over the causal prefix, KIVI 2-bit groups of 32 in
  // float32), percentiles over the 20 heads with numpy.percentile.
  Llama2cModel model(std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin");
  CaptureOptions opt;
  opt.prompt.generate = 64;
  opt.decode_steps = 32;
  const CaptureResult cap = capture(model, opt);
  const RealismReport r =
      trace_realism(cap.meta, [&](int l, int h) { return cap.heads[static_cast<std::size_t>(l * 4 + h)]; }, {});
  REQUIRE(r.summaries.size() == 1u);
  const RealismSummary& s = r.summaries[0];
  CHECK(s.n_heads == 20);
  CHECK(s.entropy.median == Approx(1.4812891819120613).epsilon(1e-4));
  CHECK(s.entropy.p10 == Approx(1.1749514182957652).epsilon(1e-4));
  CHECK(s.entropy.p90 == Approx(2.3088902087597387).epsilon(1e-4));
  CHECK(s.first_token_mass.median == Approx(0.02312245624694648).epsilon(1e-3));
  CHECK(s.first_token_mass.mean == Approx(0.033122342279101005).epsilon(1e-3));
  CHECK(s.n90.median == Approx(7.015625).epsilon(1e-6));
  CHECK(s.n90.mean == Approx(8.0703125).epsilon(1e-6));
  CHECK(s.margin.median == Approx(8.635119540724379).epsilon(1e-4));
  CHECK(s.noise.median == Approx(2.319940300229878).epsilon(1e-3));
  CHECK(s.noise.mean == Approx(2.627264806660253).epsilon(1e-3));
  CHECK(s.key_spread.median == Approx(1.3501955581616096).epsilon(1e-4));
  CHECK(s.query_spread.median == Approx(1.226203777149823).epsilon(1e-4));
}
