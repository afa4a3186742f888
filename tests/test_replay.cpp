// Compressed-cache replay on the real stories260K model: an exact cache must reproduce
// the full cache bit for bit; a cache that keeps only the last prompt token must not.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/allocation.hpp"
#include "model/base/error.hpp"
#include "model/llama2c/capture.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/quantizers/quantizer.hpp"
#include "scenarios/pipeline/replay.hpp"
#include "solvers/policy.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

const std::string kCheckpoint = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";

const Llama2cModel& stories() {
  static const Llama2cModel model(kCheckpoint);
  return model;
}

ReplayOptions options(int prompt_tokens, int steps) {
  ReplayOptions o;
  o.prompt.generate = prompt_tokens;
  o.decode_steps = steps;
  o.obs_window = 16;
  return o;
}

// Every prompt token evicted in every head but the last one (kept exactly).
Allocation keep_last_only(int T) {
  Allocation a;
  a.ladder = RateLadder::parse("evict,exact");
  a.n_layers = 5;
  a.n_kv_heads = 4;
  a.prompt_len = T;
  a.tiers.assign(20, std::vector<std::uint8_t>(static_cast<std::size_t>(T), 0));
  for (auto& head : a.tiers) head.back() = 1;
  return a;
}

}  // namespace

TEST_CASE("replay with the exact policy agrees on every token with KL 0", "[replay]") {
  for (ReplayMode mode : {ReplayMode::TeacherForced, ReplayMode::FreeRunning}) {
    ReplayOptions o = options(48, 32);
    o.mode = mode;
    const ReplayResult r = replay(stories(), o, KeyCompression::from_policy(UniformPolicy::parse("exact")));
    INFO(to_string(mode));
    CHECK(r.agreement == 1.0);
    CHECK(r.first_divergence == -1);
    CHECK(r.mean_kl < 1e-9);
    CHECK(r.max_kl < 1e-9);
    CHECK(r.ppl_compressed == r.ppl_full);  // bit-identical logits
    CHECK(r.mean_kl == 0.0);
    CHECK(r.key_rate.code_bits == 16.0);
    CHECK(r.evicted_fraction == 0.0);
    CHECK(r.decisions == 1);
    REQUIRE(r.steps.size() == 32u);
    REQUIRE(r.full_continuation.size() == 33u);
    // Greedy from BOS: the prompt and the continuation are FORMAT.md's sequence.
    CHECK(r.prompt[1] == 461);
    CHECK(r.prompt[3] == 401);
    if (mode == ReplayMode::FreeRunning) CHECK(r.continuation_match == 1.0);
  }
}

TEST_CASE("keeping every prompt token through eviction (evict:1) is the exact cache", "[replay]") {
  const ReplayResult r =
      replay(stories(), options(48, 16), KeyCompression::from_policy(UniformPolicy::parse("evict:1")));
  CHECK(r.agreement == 1.0);
  CHECK(r.mean_kl < 1e-9);
  CHECK(r.evicted_fraction == 0.0);
}

TEST_CASE("a cache that keeps only the last prompt token degrades measurably", "[replay]") {
  const int T = 64;
  const ReplayResult r =
      replay(stories(), options(T, 32), KeyCompression::from_allocation(keep_last_only(T), "keep-last"));
  INFO(text_report(r));
  CHECK(r.agreement < 1.0);
  CHECK(r.first_divergence >= 1);
  CHECK(r.mean_kl > 0.01);
  CHECK(r.ppl_compressed > r.ppl_full);
  CHECK(r.evicted_fraction == Approx(1.0 - 1.0 / T));
  CHECK(r.key_rate.code_bits == Approx(16.0 / T));
}

TEST_CASE("2-bit KIVI keys sit between the exact cache and eviction", "[replay]") {
  const int T = 64;
  const auto kivi = replay(stories(), options(T, 32), KeyCompression::from_policy(UniformPolicy::parse("kivi:2:g32:r0")));
  const auto last =
      replay(stories(), options(T, 32), KeyCompression::from_allocation(keep_last_only(T), "keep-last"));
  INFO(text_report(kivi));
  CHECK(kivi.key_rate.code_bits == 2.0);
  CHECK(kivi.mean_kl > 0.0);
  CHECK(kivi.mean_kl < last.mean_kl);
}

TEST_CASE("re-deciding every N steps recomputes the allocation", "[replay]") {
  ReplayOptions o = options(48, 20);
  o.redecide_every = 6;  // before steps 1, 7, 13, 19
  const auto r = replay(stories(), o, KeyCompression::from_policy(UniformPolicy::parse("evict:0.5")));
  CHECK(r.decisions == 4);
  CHECK(r.evicted_fraction == Approx(0.5).margin(0.02));
  CHECK(r.steps.size() == 20u);
  const auto json = to_json(r);
  CHECK(json["decisions"] == 4);
  CHECK(json["steps"].size() == 20u);
}

TEST_CASE("replay rejects what it cannot do, with clear messages", "[replay]") {
  const int T = 32;
  ReplayOptions o = options(T, 8);
  const auto fixed = KeyCompression::from_allocation(keep_last_only(T), "allocation a.safetensors");
  ReplayOptions redecide = o;
  redecide.redecide_every = 4;
  CHECK_THROWS_WITH(replay(stories(), redecide, fixed), Catch::Contains("cannot be re-decided"));
  ReplayOptions other_prompt = options(T + 1, 8);
  CHECK_THROWS_WITH(replay(stories(), other_prompt, fixed), Catch::Contains("33"));
  ReplayOptions too_long = options(500, 20);
  CHECK_THROWS_WITH(replay(stories(), too_long, KeyCompression::from_policy(UniformPolicy::parse("exact"))),
                    Catch::Contains("seq_len = 512"));
  ReplayOptions wide = options(8, 4);
  wide.obs_window = 9;
  CHECK_THROWS_WITH(replay(stories(), wide, KeyCompression::from_policy(UniformPolicy::parse("exact"))),
                    Catch::Contains("W = 9 is longer than the prompt"));
  CHECK_THROWS_AS(parse_replay_mode("greedy"), InputError);
  ReplayOptions short_prompt = options(8, 4);
  short_prompt.obs_window = -1;  // the default: min(32, T)
  CHECK(replay(stories(), short_prompt, KeyCompression::from_policy(UniformPolicy::parse("exact"))).obs_window == 8);
}

TEST_CASE("a checkpoint whose finite weights overflow the forward pass is an error naming the step and never a NaN KL",
          "[replay][reliability]") {
  // stories260K with the final RMSNorm weights at 3e38: every weight is finite, the logits are not.
  std::ifstream in(kCheckpoint, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::int32_t h[7];
  std::memcpy(h, bytes.data(), sizeof h);
  const std::size_t D = h[0], H = h[1], L = h[2], heads = h[3], kv = h[4], V = std::abs(h[5]);
  const std::size_t kvd = D / heads * kv;
  const std::size_t rms_final = V * D + L * D + L * D * D + 2 * L * kvd * D + L * D * D + L * D + 3 * L * H * D;
  for (std::size_t i = 0; i < D; ++i) {
    const float big = 3e38f;
    std::memcpy(bytes.data() + 28 + 4 * (rms_final + i), &big, 4);
  }
  const tierlab::testing::TempDir tmp("replay-overflow");
  const std::string path = tmp.file("overflow.bin");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const Llama2cModel model(path);  // loads: every weight is finite
  try {
    replay(model, options(16, 4), KeyCompression::from_policy(UniformPolicy::parse("kivi:2")));
    FAIL("replay reported numbers for logits that overflow");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains(path) && Catch::Contains("decode step 1") &&
                             Catch::Contains("overflow the float32 forward pass"));
  }
}

TEST_CASE("an allocation solved for another prompt is refused by replay, naming both prompts", "[replay]") {
  const int T = 16;
  Allocation a = keep_last_only(T);
  a.trace_tokens = "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16";  // not the greedy prompt from BOS
  try {
    replay(stories(), options(T, 4), KeyCompression::from_allocation(a, "allocation a.st"));
    FAIL("replay accepted an allocation of another prompt");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::Contains("was solved for another prompt") && Catch::Contains("1,2,3,4"));
  }
  // The same prompt passes.
  ReplayOptions o = options(T, 4);
  o.prompt.generate = 0;
  o.prompt.ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  CHECK_NOTHROW(replay(stories(), o, KeyCompression::from_allocation(a, "allocation a.st")));
}

TEST_CASE("an allocation on a ladder with kvquant and kvcobra tiers replays, at the key rate measured on the captured trace",
          "[replay]") {
  // The tiers that need the head (pre-RoPE keys, observation queries, RoPE) were refused by
  // replay's key-only materialisation; now it gives them the head as a trace has it.
  const int T = 48, S = 4;
  const RateLadder ladder = RateLadder::parse("evict,kvquant2,kvcobra3,exact");
  Allocation a;
  a.ladder = ladder;
  a.n_layers = 5;
  a.n_kv_heads = 4;
  a.prompt_len = T;
  a.tiers.assign(20, std::vector<std::uint8_t>(static_cast<std::size_t>(T), 0));
  for (auto& head : a.tiers)
    for (int t = 0; t < T; ++t) head[static_cast<std::size_t>(t)] = static_cast<std::uint8_t>((t * 7 + 3) % 4);
  const ReplayOptions o = options(T, S);
  const ReplayResult r = replay(stories(), o, KeyCompression::from_allocation(a, "allocation a.st"));
  // Independently: the capture of the same prompt (its heads, pre-RoPE keys and RoPE as a
  // trace records them), each head's allocation materialised there.
  CaptureOptions co;
  co.prompt = o.prompt;
  co.decode_steps = S;
  co.obs_window = o.obs_window;
  const CaptureResult cap = capture(stories(), co);
  REQUIRE(cap.heads.size() == 20);
  Rate want;
  for (const HeadData& h : cap.heads) {
    const MaterializedKeys mk = materialize(h, cap.meta.rope, ladder, a.head(h.layer, h.kv_head));
    want.code_bits += mk.rate.code_bits / 20;
    want.total_bits += mk.rate.total_bits / 20;
  }
  CHECK(r.key_rate.code_bits == Approx(want.code_bits).epsilon(1e-9));
  CHECK(r.key_rate.total_bits == Approx(want.total_bits).epsilon(1e-9));
  CHECK(r.mean_kl > 0);
  CHECK(std::isfinite(r.max_kl));
}
