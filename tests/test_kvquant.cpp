// KVQuant's key quantizer (key_quantizer.hpp, model/quantizers/kvquant.cpp): the paper's average-bit
// band, the accounting of a quantized head, sparse outliers and sink kept exact, and the
// pre-RoPE requirement.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/synthetic/synthetic.hpp"

using namespace tierlab;

namespace {

SynthParams small_params() {
  SynthParams p = synth_preset("tiny");
  p.head_dim = 32;
  p.prompt_len = 400;
  p.obs_window = 16;
  return p;
}

double item(const QuantizedHeadKeys& q, const std::string& prefix) {
  for (const auto& m : q.meta)
    if (m.name.rfind(prefix, 0) == 0) return m.bits;
  FAIL("no rate item " << prefix);
  return 0.0;
}

}  // namespace

TEST_CASE("KVQuant's accounting gives the paper's 2.32-2.35 / 3.32-3.35 / 4.32-4.35 band", "[key_quantizer][kvquant]") {
  // The paper's configuration: LLaMA-7B, d = 128 per head, the sparse CSR matrix stored per
  // layer (row pointer shared by 32 heads x 128 = 4096 elements), 1% outliers.
  // Per element: b + 0.01*32 (outliers) + 32/4096 (pointer) + 32/T (scale + offset per channel)
  // + (16 - b)/T (fp16 sink) + 16 2^b/(128 T) (codebook). At T = 4096, b = 2:
  // 2 + 0.32 + 0.0078125 + 0.0078125 + 0.00341797 + 0.00012207 = 2.33916504.
  // The band's upper end 2.35 is reached at T ~ 2.1K; as T -> inf it tends to b + 0.3278.
  CHECK(kvquant_average_bits(2, 0.01, 4096, 128, 4096) == Approx(2.33916504).epsilon(1e-7));
  for (int b : {2, 3, 4})
    for (int T : {2200, 4096, 32768, 131072}) {
      const double bits = kvquant_average_bits(b, 0.01, T, 128, 4096);
      CHECK(bits >= b + 0.32);
      CHECK(bits <= b + 0.35);
    }
  // Counting the row pointer per head instead (32/128 = 0.25) would leave the band.
  CHECK(kvquant_average_bits(2, 0.01, 4096, 128, 128) > 2.5);
}

TEST_CASE("KVQuant's itemised rate of a quantized head matches the formula", "[key_quantizer][kvquant]") {
  const SynthParams p = small_params();
  const HeadData h = synth_head(p, 0, 1);
  const TraceMeta m = synth_meta(p);
  const int T = p.prompt_len, d = p.head_dim;
  for (int b : {2, 3, 4}) {
    const auto q = make_key_quantizer("kvquant", {{"bits", std::to_string(b)}});
    const QuantizedHeadKeys out = q->quantize(h, m.rope);
    const double n_out = item(out, "sparse outliers") / 32.0;
    // 0.5 / 99.5 percentiles over T - 1 = 399 non-sink tokens: pos 0.005 * 398 = 1.99, so per
    // channel the 2 smallest and 2 largest values lie strictly outside: 4 outliers x 32 channels.
    CHECK(n_out == 4 * d);
    const double f = n_out / (double(T) * d);
    CHECK(out.rate().code_bits == Approx(b));
    CHECK(out.rate().total_bits == Approx(kvquant_average_bits(b, f, T, d, 4096)).epsilon(1e-12));
  }
}

TEST_CASE("KVQuant keeps outliers and the sink exact and re-applies RoPE", "[key_quantizer][kvquant]") {
  const SynthParams p = small_params();
  HeadData h = synth_head(p, 0, 0);
  const TraceMeta m = synth_meta(p);
  const int d = p.head_dim;
  // Plant an outlier at token 100, channel 5, in the pre-RoPE keys (and the post-RoPE keys).
  h.keys_pre_rope(100, 5) = 50.0f;
  std::vector<float> x(h.keys_pre_rope.row(100).data(), h.keys_pre_rope.row(100).data() + d);
  apply_rope(x.data(), d, 100, m.rope, +1);
  for (int j = 0; j < d; ++j) h.keys(100, j) = x[j];
  const auto q = make_key_quantizer("kvquant", {{"bits", "2"}});
  const QuantizedHeadKeys out = q->quantize(h, m.rope);
  for (int j = 0; j < d; ++j) CHECK(out.keys(0, j) == h.keys(0, j));  // fp16 sink: exact
  std::vector<float> back(out.keys.row(100).data(), out.keys.row(100).data() + d);
  apply_rope(back.data(), d, 100, m.rope, -1);
  CHECK(back[5] == Approx(50.0f).epsilon(1e-5));
  // A token subset: the rows come back in the subset's order, same values as the full run.
  const QuantizedHeadKeys sub = q->quantize(h, m.rope, {3, 100, 250});
  REQUIRE(sub.keys.rows() == 3);
  for (int j = 0; j < d; ++j) CHECK(sub.keys(1, j) == out.keys(100, j));
}

TEST_CASE("KVQuant needs pre-RoPE keys and gets closer to the keys as bits grow", "[key_quantizer][kvquant]") {
  const SynthParams p = small_params();
  HeadData h = synth_head(p, 1, 1);
  const TraceMeta m = synth_meta(p);
  double prev = INFINITY;
  for (int b : {1, 2, 3, 4, 6}) {
    for (const char* w : {"uniform", "query"}) {
      const auto q = make_key_quantizer("kvquant", {{"bits", std::to_string(b)}, {"weighting", w}});
      const double err = score_space_error(h.obs_queries, h.keys, q->quantize(h, m.rope).keys);
      if (std::string(w) == "uniform") {
        CHECK(err < prev);
        prev = err;
      }
    }
  }
  h.keys_pre_rope.resize(0, 0);
  const auto q = make_key_quantizer("kvquant");
  try {
    q->quantize(h, m.rope);
    FAIL("no exception");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("keys_pre_rope") != std::string::npos);
  }
}
