// KV-COBRA's low-rank latent quantizer and HeadQ's score-space side code
// (key_quantizer.hpp, model/quantizers/kvcobra.cpp, model/quantizers/headq.cpp), plus what every registered key
// quantizer must do: account its rate, be deterministic, and improve as bits grow.
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
  p.prompt_len = 256;
  p.obs_window = 16;
  return p;
}

double err_of(const KeyQuantizer& q, const HeadData& h, const RopeParams& rope) {
  return score_space_error(h.obs_queries, h.keys, q.quantize(h, rope).keys);
}

}  // namespace

TEST_CASE("KV-COBRA's rate: padded rank x bits / d plus scale/min and basis", "[key_quantizer][kvcobra]") {
  const SynthParams p = small_params();
  const HeadData h = synth_head(p, 0, 0);
  const TraceMeta m = synth_meta(p);
  const int T = p.prompt_len, d = p.head_dim;
  // rank 12 pads to p = 16 latent channels: codes 16*3/32 = 1.5 bits per element;
  // metadata: 32 bits x 16 channels (one group of all T tokens) + fp16 basis 16 x 32 x 12.
  const auto q = make_key_quantizer("kvcobra", {{"rank", "12"}, {"bits", "3"}});
  const Rate r = q->quantize(h, m.rope).rate();
  CHECK(r.code_bits == Approx(1.5));
  CHECK(r.total_bits == Approx(1.5 + (32.0 * 16 + 16.0 * 32 * 12) / (double(T) * d)));
  // An offline basis costs nothing in the cache.
  const auto off = make_key_quantizer("kvcobra", {{"rank", "12"}, {"bits", "3"}, {"basis_cost", "offline"}});
  CHECK(off->quantize(h, m.rope).rate().total_bits == Approx(1.5 + 32.0 * 16 / (double(T) * d)));
  // Groups of 64 tokens: 4 groups of scale/min.
  const auto g = make_key_quantizer("kvcobra", {{"rank", "16"}, {"bits", "2"}, {"group", "64"}});
  CHECK(g->quantize(h, m.rope).rate().total_bits ==
        Approx(1.0 + (32.0 * 16 * 4 + 16.0 * 32 * 16) / (double(T) * d)));
  // Auto (rank, bits) at a budget of 2 code bits per element never exceeds it.
  const auto a = make_key_quantizer("kvcobra", {{"budget", "2"}});
  CHECK(a->quantize(h, m.rope).rate().code_bits <= 2.0 + 1e-12);
}

TEST_CASE("KV-COBRA: full rank at high bits is near exact; truncation costs; auto picks the best pair",
          "[key_quantizer][kvcobra]") {
  const SynthParams p = small_params();
  const HeadData h = synth_head(p, 1, 1);
  const TraceMeta m = synth_meta(p);
  const double full8 = err_of(*make_key_quantizer("kvcobra", {{"rank", "32"}, {"bits", "8"}}), h, m.rope);
  const double rank4 = err_of(*make_key_quantizer("kvcobra", {{"rank", "4"}, {"bits", "8"}}), h, m.rope);
  CHECK(full8 < 1e-3 * rank4);
  double prev = INFINITY;
  for (int b : {1, 2, 3, 4, 6}) {
    const double e = err_of(*make_key_quantizer("kvcobra", {{"rank", "32"}, {"bits", std::to_string(b)}}), h, m.rope);
    CHECK(e < prev);
    prev = e;
  }
  // Auto at budget 2: no worse than every candidate pair it searched (1..8 bits at full padding).
  const double autoe = err_of(*make_key_quantizer("kvcobra", {{"budget", "2"}}), h, m.rope);
  for (const auto& [r, b] : std::vector<std::pair<int, int>>{{32, 2}, {16, 4}, {8, 8}, {32, 1}})
    CHECK(autoe <= err_of(*make_key_quantizer("kvcobra", {{"rank", std::to_string(r)}, {"bits", std::to_string(b)}}),
                          h, m.rope) + 1e-15);
  // The post-RoPE basis works without pre-RoPE keys; basis=pre without them is refused.
  HeadData nopre = h;
  nopre.keys_pre_rope.resize(0, 0);
  CHECK(err_of(*make_key_quantizer("kvcobra", {{"rank", "32"}, {"bits", "8"}}), nopre, m.rope) < 1e-3 * rank4);
  CHECK_THROWS_AS(make_key_quantizer("kvcobra", {{"basis", "pre"}})->quantize(nopre, m.rope), InputError);
}

TEST_CASE("HeadQ's side code reduces the base's score-space error at its stated rate", "[key_quantizer][headq]") {
  const SynthParams p = small_params();
  const HeadData h = synth_head(p, 0, 1);
  const TraceMeta m = synth_meta(p);
  const int T = p.prompt_len, d = p.head_dim;
  const auto base = make_key_quantizer("kivi", {{"bits", "2"}, {"residual", "0"}});
  const auto hq = make_key_quantizer("headq", {{"base", "kivi"}, {"base.bits", "2"}, {"base.residual", "0"},
                                               {"rank", "4"}, {"side_bits", "4"}});
  const Rate rb = base->quantize(h, m.rope).rate();
  const QuantizedHeadKeys out = hq->quantize(h, m.rope);
  // rate = base + r b_s / d (codes) + (32 r + 16 d r) / (T d) (side scale/min and basis).
  CHECK(out.rate().code_bits == Approx(rb.code_bits + 4.0 * 4 / d));
  CHECK(out.rate().total_bits == Approx(rb.total_bits + 4.0 * 4 / d + (32.0 * 4 + 16.0 * d * 4) / (double(T) * d)));
  const double eb = err_of(*base, h, m.rope), eh = err_of(*hq, h, m.rope);
  CHECK(eh < 0.8 * eb);
  // Full rank at 12 side bits leaves almost no score-space error.
  const auto full = make_key_quantizer("headq", {{"base.bits", "2"}, {"rank", "32"}, {"side_bits", "12"}});
  CHECK(err_of(*full, h, m.rope) < 1e-4 * eb);
  CHECK(hq->parameters().at("base.bits") == "2");
  const auto hq_off = make_key_quantizer("headq", {{"base.bits", "2"}, {"base.residual", "0"}, {"rank", "4"},
                                                   {"basis_cost", "offline"}});
  CHECK(hq_off->quantize(h, m.rope).rate().total_bits == Approx(rb.total_bits + 4.0 * 4 / d + 32.0 * 4 / (double(T) * d)));
  CHECK_THROWS_AS(make_key_quantizer("headq", {{"base", "headq"}}), InputError);
  HeadData noq = h;
  noq.obs_queries.resize(0, 0);
  CHECK_THROWS_AS(hq->quantize(noq, m.rope), InputError);
}

TEST_CASE("KIVI through the registry: group 32 with a 128-token fp16 window", "[key_quantizer]") {
  // T = 200 tokens: 200 - 200 mod 128 = 128 quantized (4 groups of 32), 72 in the fp16 window.
  // Per element: (128 (2 + 32/32) + 72 x 16) / 200 = (384 + 1152) / 200 = 7.68; codes
  // (128 x 2 + 72 x 2) / 200 = 2.
  SynthParams p = synth_preset("tiny");
  p.prompt_len = 200;
  const HeadData h = synth_head(p, 0, 0);
  const auto q = make_key_quantizer("kivi", {{"bits", "2"}});
  const QuantizedHeadKeys out = q->quantize(h, RopeParams{});
  CHECK(out.rate().code_bits == Approx(2.0));
  CHECK(out.rate().total_bits == Approx(7.68));
  for (int t = 128; t < 200; ++t) CHECK(out.keys.row(t) == h.keys.row(t));
  // Per-token at d = 16: group 0 (= d) -> 3 + 32/16 = 5; group 5 -> ceil(16/5) = 4 groups,
  // 3 + 4 x 32/16 = 11.
  const HeadData& hh = h;
  CHECK(make_key_quantizer("token", {{"bits", "3"}})->quantize(hh, RopeParams{}).rate().total_bits == Approx(5.0));
  CHECK(make_key_quantizer("token", {{"bits", "3"}, {"group", "5"}})->quantize(hh, RopeParams{}).rate().total_bits ==
        Approx(11.0));
}

TEST_CASE("Every key quantizer is deterministic and improves as bits grow", "[key_quantizer]") {
  const SynthParams p = small_params();
  const HeadData h = synth_head(p, 1, 0);
  const TraceMeta m = synth_meta(p);
  struct Case {
    std::string name, bits_key;
    KeyQuantizerParams fixed;
  };
  const std::vector<Case> cases = {
      {"kivi", "bits", {{"residual", "0"}}},
      {"token", "bits", {}},
      {"quarot", "bits", {}},
      {"kvquant", "bits", {}},
      {"turboquant", "bits", {{"seed", "3"}}},
      {"kvcobra", "bits", {{"rank", "32"}, {"seed", "3"}}},
      {"headq", "base.bits", {{"base", "quarot"}}},
  };
  for (const auto& c : cases) {
    double prev = INFINITY;
    for (int b : {2, 3, 4, 8}) {
      KeyQuantizerParams params = c.fixed;
      params[c.bits_key] = std::to_string(b);
      const auto q = make_key_quantizer(c.name, params);
      const QuantizedHeadKeys x = q->quantize(h, m.rope), y = q->quantize(h, m.rope);
      CHECK((x.keys - y.keys).cwiseAbs().maxCoeff() == 0.0f);
      const double e = score_space_error(h.obs_queries, h.keys, x.keys);
      INFO(c.name << " at " << b << " bits: score-space error " << e);
      CHECK(e < prev);
      CHECK(x.rate().total_bits > x.rate().code_bits);
      prev = e;
    }
  }
}
