// QuaRot's key quantizer, the shared helpers (Walsh-Hadamard, RoPE) and the registry
// (key_quantizer.hpp). Expected numbers are worked out by hand in the comments.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/synthetic/synthetic.hpp"

using namespace tierlab;

namespace {

HeadData head_of(const MatrixRM& keys) {
  HeadData h;
  h.keys = keys;
  return h;
}

}  // namespace

TEST_CASE("Walsh-Hadamard of length 4 is the Sylvester matrix over 2 and self-inverse", "[key_quantizer]") {
  // H4 rows (1,1,1,1), (1,-1,1,-1), (1,1,-1,-1), (1,-1,-1,1); x = (2,0,1,-1)
  // H4 x / 2 = (2+0+1-1, 2-0+1+1, 2+0-1+1, 2-0-1-1)/2 = (1, 2, 1, 0)
  float x[4] = {2, 0, 1, -1};
  walsh_hadamard(x, 4);
  CHECK(x[0] == Approx(1.0f));
  CHECK(x[1] == Approx(2.0f));
  CHECK(x[2] == Approx(1.0f));
  CHECK(x[3] == Approx(0.0f).margin(1e-7));
  walsh_hadamard(x, 4);
  CHECK(x[0] == Approx(2.0f));
  CHECK(x[3] == Approx(-1.0f));
  float y[3] = {1, 2, 3};
  CHECK_THROWS_AS(walsh_hadamard(y, 3), InputError);
}

TEST_CASE("QuaRot on a hand-computed 4-dim head at 2 bits", "[key_quantizer][quarot]") {
  // d = 4, group = min(128, 4) = 4, b = 2 (maxq = 3), clip 0.95.
  // Token 0: k = (2,0,1,-1) -> y = (1,2,1,0); xmax = 0.95*2 = 1.9, xmin = 0.95*min(0,0) = 0
  //   scale = 1.9/3 = 0.633333, zero = round(0) = 0
  //   y/scale = 1.5789, 3.1579, 1.5789, 0 -> round 2, 3, 2, 0 -> y^ = (1.266667, 1.9, 1.266667, 0)
  //   k^ = H4 y^ / 2 = ((1.266667+1.9+1.266667)/2, (1.266667-1.9+1.266667)/2,
  //                     (1.266667+1.9-1.266667)/2, (1.266667-1.9-1.266667)/2)
  //      = (2.216667, 0.316667, 0.95, -0.95)
  // Token 1: k = (0,2,-1,-1) -> y = (0,-1,2,-1); xmax = 1.9, xmin = -0.95, scale = 2.85/3 = 0.95
  //   zero = round(0.95/0.95) = 1; round(y/scale) + 1 = (1, 0, 3, 0) (2.105 -> 2, -1.05 -> -1)
  //   y^ = 0.95*(q - 1) = (0, -0.95, 1.9, -0.95) -> k^ = (0, 1.9, -0.95, -0.95)
  // Token 2: k = 0 -> range [-1, 1]: scale = 2/3, zero = round(1.5) = 2 (half to even),
  //   q = round(0) + 2 = 2 -> y^ = 0 -> k^ = 0.
  MatrixRM k(3, 4);
  k << 2, 0, 1, -1,  //
      0, 2, -1, -1,  //
      0, 0, 0, 0;
  const auto q = make_key_quantizer("quarot", {{"bits", "2"}});
  const QuantizedHeadKeys out = q->quantize(head_of(k), RopeParams{});
  const float expect[3][4] = {{2.216667f, 0.316667f, 0.95f, -0.95f}, {0, 1.9f, -0.95f, -0.95f}, {0, 0, 0, 0}};
  for (int t = 0; t < 3; ++t)
    for (int j = 0; j < 4; ++j) CHECK(out.keys(t, j) == Approx(expect[t][j]).margin(1e-5));
  // Rate: b + 32/group = 2 + 32/4 = 10 bits per element (scale + zero itemised).
  CHECK(out.rate().code_bits == Approx(2.0));
  CHECK(out.rate().total_bits == Approx(10.0));
  REQUIRE(out.meta.size() == 2);
  CHECK(out.meta[0].bits == Approx(16.0 * 3));
}

TEST_CASE("QuaRot's rate is b + 0.25 at d = group = 128; non-power-of-2 d is refused", "[key_quantizer][quarot]") {
  SynthParams p = synth_preset("tiny");
  p.head_dim = 128;
  p.prompt_len = 32;
  const HeadData h = synth_head(p, 0, 0);
  for (int b : {2, 3, 4, 8}) {
    const auto q = make_key_quantizer("quarot", {{"bits", std::to_string(b)}});
    const Rate r = q->quantize(h, RopeParams{}).rate();
    CHECK(r.code_bits == Approx(b));
    CHECK(r.total_bits == Approx(b + 0.25));
  }
  HeadData odd;
  odd.keys = MatrixRM::Ones(2, 6);
  const auto q = make_key_quantizer("quarot");
  CHECK_THROWS_AS(q->quantize(odd, RopeParams{}), InputError);
}

TEST_CASE("RoPE re-applied to the synthetic pre-RoPE keys gives the post-RoPE keys", "[key_quantizer]") {
  const SynthParams p = synth_preset("tiny");
  const HeadData h = synth_head(p, 1, 0);
  const TraceMeta m = synth_meta(p);
  for (int t = 0; t < h.keys.rows(); t += 7) {
    std::vector<float> x(h.keys_pre_rope.row(t).data(), h.keys_pre_rope.row(t).data() + h.keys.cols());
    apply_rope(x.data(), static_cast<int>(x.size()), t, m.rope, +1);
    for (std::size_t j = 0; j < x.size(); ++j) CHECK(x[j] == Approx(h.keys(t, j)).margin(1e-4));
    apply_rope(x.data(), static_cast<int>(x.size()), t, m.rope, -1);
    for (std::size_t j = 0; j < x.size(); ++j) CHECK(x[j] == Approx(h.keys_pre_rope(t, j)).margin(1e-4));
  }
  // "half" style pairs (i, i + d/2): x = e_0 at position 1, theta irrelevant for pair 0
  // (angle = pos * theta^0 = 1 rad): e_0 -> (cos 1) e_0 + (sin 1) e_{d/2}.
  float e[4] = {1, 0, 0, 0};
  RopeParams half;
  half.style = "half";
  apply_rope(e, 4, 1.0, half, +1);
  CHECK(e[0] == Approx(std::cos(1.0)));
  CHECK(e[2] == Approx(std::sin(1.0)));
  CHECK(e[1] == 0.0f);
}

TEST_CASE("The registry lists every key quantizer and rejects unknown names and parameters", "[key_quantizer]") {
  const auto& all = key_quantizer_registry();
  REQUIRE(all.size() == 8);
  for (const KeyQuantizerEntry& info : all) {
    CHECK_FALSE(info.info.source.empty());
    const auto q = make_key_quantizer(info.info.name);
    CHECK(q->name() == info.info.name);
    // The listed parameters are exactly the effective ones (headq: base.* expands).
    const KeyQuantizerParams eff = q->parameters();
    for (const KeyQuantizerParam& p : info.info.params)
      if (p.name != "base.*") CHECK(eff.count(p.name) == 1);
    for (const auto& [key, value] : eff) {
      bool listed = key.rfind("base.", 0) == 0;
      for (const KeyQuantizerParam& p : info.info.params) listed = listed || p.name == key;
      INFO(info.info.name << ": " << key);
      CHECK(listed);
    }
  }
  try {
    make_key_quantizer("nope");
    FAIL("no exception");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("turboquant") != std::string::npos);
  }
  try {
    make_key_quantizer("quarot", {{"bitz", "2"}});
    FAIL("no exception");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("bitz") != std::string::npos);
    CHECK(std::string(e.what()).find("clip") != std::string::npos);
  }
  CHECK_THROWS_AS(make_key_quantizer("quarot", {{"bits", "two"}}), InputError);
  CHECK_THROWS_AS(make_key_quantizer("kivi", {{"bits", "0"}}), InputError);
  CHECK(make_key_quantizer("kivi", {{"bits", "4"}})->parameters().at("bits") == "4");
}
