// Capturing a trace from the real stories260K model: what the trace holds must be what
// the forward pass attended over. The check recomputes every attention output from the
// trace file's tensors alone (softmax(q k^T / sqrt(d)) V in double precision, written out
// here) and compares it with the outputs the forward pass itself produced.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/llama2c/capture.hpp"
#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/surrogate.hpp"
#include "model/io/trace.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

const std::string kCheckpoint = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";

// o = sum_t softmax_t(q.k_t / sqrt(d)) v_t over the first n rows of K and V, in double.
std::vector<double> attend(const float* q, const std::vector<const float*>& keys,
                           const std::vector<const float*>& values, int d) {
  const std::size_t n = keys.size();
  std::vector<double> s(n);
  double mx = -1e300;
  for (std::size_t t = 0; t < n; ++t) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += double(q[i]) * keys[t][i];
    s[t] = dot / std::sqrt(double(d));
    mx = std::max(mx, s[t]);
  }
  double z = 0;
  for (double& x : s) z += (x = std::exp(x - mx));
  std::vector<double> o(d, 0.0);
  for (std::size_t t = 0; t < n; ++t)
    for (int i = 0; i < d; ++i) o[i] += s[t] / z * values[t][i];
  return o;
}

// Interleaved RoPE in double, written from FORMAT.md: pair (2i, 2i+1) rotated by
// pos / theta^(2i/d).
std::vector<double> rope(const float* x, int d, int pos, double theta) {
  std::vector<double> y(d);
  for (int i = 0; i < d / 2; ++i) {
    const double a = pos / std::pow(theta, 2.0 * i / d);
    y[2 * i] = x[2 * i] * std::cos(a) - x[2 * i + 1] * std::sin(a);
    y[2 * i + 1] = x[2 * i] * std::sin(a) + x[2 * i + 1] * std::cos(a);
  }
  return y;
}

}  // namespace

TEST_CASE("a captured trace's attention, recomputed from the file, equals the forward pass's own", "[capture]") {
  Llama2cModel model(kCheckpoint);
  CaptureOptions opt;
  opt.prompt.generate = 40;  // BOS + 39 greedy tokens
  opt.decode_steps = 12;
  opt.obs_window = 8;
  opt.keep_attention_outputs = true;
  const CaptureResult cap = capture(model, opt);
  const testing::TempDir tmp("capture");
  const std::string path = tmp.file("stories.safetensors");
  write_trace(path, cap);

  TraceReader reader(path);
  const TraceMeta& m = reader.meta();
  const int T = 40, S = 12, W = 8, g = 2, d = 8;
  REQUIRE(m.n_layers == 5);
  REQUIRE(m.n_kv_heads == 4);
  REQUIRE(m.group_size == g);
  REQUIRE(m.head_dim == d);
  REQUIRE(m.prompt_len == T);
  REQUIRE(m.obs_window == W);
  REQUIRE(m.decode_steps == S);
  CHECK(m.has_pre_rope);
  CHECK(m.rope.style == "interleaved");
  CHECK(m.rope.theta == 10000.0);
  REQUIRE(m.token_ids.size() == std::size_t(T + S));
  // Greedy from BOS: FORMAT.md's first tokens.
  const std::vector<std::int32_t> golden = {1, 461, 461, 401, 401, 401, 461, 378, 455, 473, 456};
  CHECK(std::vector<std::int32_t>(m.token_ids.begin(), m.token_ids.begin() + 11) == golden);
  const auto prov = nlohmann::json::parse(m.provenance);
  CHECK(prov["source"] == "captured");
  CHECK(prov["model"] == "stories260K");
  CHECK(prov["sha256"] == "9414d5a285453a7eab631713d171753232c978f6f97654211469aff8be93c8d6");

  double worst = 0, worst_rope = 0;
  int compared = 0;
  for (int l = 0; l < m.n_layers; ++l) {
    for (int h = 0; h < m.n_kv_heads; ++h) {
      const HeadData hd = reader.head(l, h);
      std::vector<const float*> K, V;
      for (int t = 0; t < T; ++t) K.push_back(hd.keys.row(t).data()), V.push_back(hd.values.row(t).data());
      for (int j = 0; j < g; ++j) {
        const int qh = h * g + j;
        // Decode step s attends to the T prompt keys and decode keys 1..s.
        std::vector<const float*> Ks = K, Vs = V;
        for (int s = 1; s <= S; ++s) {
          Ks.push_back(hd.decode_keys.row(s - 1).data());
          Vs.push_back(hd.decode_values.row(s - 1).data());
          const auto o = attend(hd.decode_queries.row(j * S + s - 1).data(), Ks, Vs, d);
          const float* ref = cap.attention_outputs[l].row(T + s - 1).data() + qh * d;
          for (int i = 0; i < d; ++i) worst = std::max(worst, std::abs(o[i] - ref[i]) / (1.0 + std::abs(ref[i])));
          ++compared;
        }
        // Observation query i sits at position T - W + i and attends causally.
        for (int i = 0; i < W; ++i) {
          const int pos = T - W + i;
          std::vector<const float*> Kc(K.begin(), K.begin() + pos + 1), Vc(V.begin(), V.begin() + pos + 1);
          const auto o = attend(hd.obs_queries.row(j * W + i).data(), Kc, Vc, d);
          const float* ref = cap.attention_outputs[l].row(pos).data() + qh * d;
          for (int c = 0; c < d; ++c) worst = std::max(worst, std::abs(o[c] - ref[c]) / (1.0 + std::abs(ref[c])));
          ++compared;
        }
      }
      // Post-RoPE keys are the pre-RoPE keys rotated with the trace's RoPE parameters.
      for (int t = 0; t < T; ++t) {
        const auto r = rope(hd.keys_pre_rope.row(t).data(), d, t, m.rope.theta);
        for (int i = 0; i < d; ++i) worst_rope = std::max(worst_rope, std::abs(r[i] - hd.keys(t, i)));
      }
    }
  }
  CHECK(compared == 5 * 4 * g * (S + W));
  INFO("largest attention-output difference " << worst << ", RoPE difference " << worst_rope);
  CHECK(worst < 2e-6);       // float precision of the forward pass's own accumulation
  CHECK(worst_rope < 5e-6);  // float rotation vs double
}

TEST_CASE("capture with explicit prompt ids records the decoded tokens greedily", "[capture]") {
  Llama2cModel model(kCheckpoint);
  CaptureOptions opt;
  opt.prompt.ids = {1, 461, 461};
  opt.decode_steps = 7;
  const CaptureResult cap = capture(model, opt);
  CHECK(cap.meta.obs_window == 3);  // min(32, T)
  const std::vector<std::int32_t> want = {1, 461, 461, 401, 401, 401, 461, 378, 455, 473};
  CHECK(cap.meta.token_ids == want);
  CHECK(cap.heads.size() == 20u);
  CHECK(cap.heads[7].layer == 1);
  CHECK(cap.heads[7].kv_head == 3);
  CHECK(cap.attention_outputs.empty());
  // The decode keys continue the prompt keys' sequence: a capture with a longer prompt
  // holds the same rows as prompt keys.
  CaptureOptions longer;
  longer.prompt.ids = want;
  const CaptureResult cap2 = capture(model, longer);
  for (int s = 0; s < 7; ++s) {
    CHECK((cap.heads[7].decode_keys.row(s) - cap2.heads[7].keys.row(3 + s)).norm() == 0.0f);
  }
}

TEST_CASE("capture rejects impossible requests with clear messages", "[capture]") {
  Llama2cModel model(kCheckpoint);
  CaptureOptions opt;
  opt.prompt.generate = 500;
  opt.decode_steps = 20;
  CHECK_THROWS_WITH(capture(model, opt), Catch::Contains("exceed stories260K's seq_len = 512"));
  opt.prompt.generate = 10;
  opt.decode_steps = 2;
  opt.obs_window = 11;
  CHECK_THROWS_WITH(capture(model, opt), Catch::Contains("W = 11 is longer than the prompt"));
  CaptureOptions bad_ids;
  bad_ids.prompt.ids = {1, 600};
  CHECK_THROWS_WITH(capture(model, bad_ids), Catch::Contains("token id 600 at index 1 is out of range"));
  CHECK_THROWS_WITH(parse_token_ids("1,x,3"), Catch::Contains("entry 1 = 'x'"));
  CHECK(parse_token_ids(" 1, 2 ,3") == std::vector<std::int32_t>{1, 2, 3});
}

TEST_CASE("a sampled prompt depends on the seed only", "[capture]") {
  Llama2cModel model(kCheckpoint);
  PromptSpec a{{}, 30, 1.0f, 5}, b{{}, 30, 1.0f, 5}, c{{}, 30, 1.0f, 6};
  const auto pa = resolve_prompt(model, a), pb = resolve_prompt(model, b), pc = resolve_prompt(model, c);
  CHECK(pa.size() == 30u);
  CHECK(pa[0] == kLlama2cBos);
  CHECK(pa == pb);
  CHECK(pa != pc);
  CHECK(a.describe() == "sampled 30 from BOS (temperature 1, seed 5)");
}

TEST_CASE("on a captured trace the observation queries give no weight to later tokens, as the model did",
          "[capture][causal]") {
  Llama2cModel model(kCheckpoint);
  CaptureOptions opt;
  opt.prompt.generate = 48;
  opt.decode_steps = 2;
  opt.obs_window = 16;
  opt.keep_attention_outputs = true;
  const CaptureResult cap = capture(model, opt);
  const int T = 48, W = 16, g = cap.meta.group_size, d = cap.meta.head_dim;
  double worst_causal = 0, worst_unmasked = 0, later_weight = 0;
  for (const HeadData& hd : cap.heads) {
    const CausalQueries obs = observation_queries(hd);
    REQUIRE(obs.visible.size() == std::size_t(g * W));
    for (int j = 0; j < g; ++j)
      for (int i = 0; i < W; ++i) {
        const int r = j * W + i, pos = T - W + i;
        CHECK(obs.visible[std::size_t(r)] == pos + 1);  // the model's own causal limit
        // One query at a time: the surrogate's attention is that query's p_t.
        const MatrixRM one = hd.obs_queries.row(r);
        CausalQueries qs{&one, {obs.visible[std::size_t(r)]}};
        const TokenWeights w = token_weights(hd.keys, hd.values, qs);
        const TokenWeights u = token_weights(hd.keys, hd.values, all_visible(one, T));
        for (int t = pos + 1; t < T; ++t) later_weight = std::max(later_weight, w.attention[t]);
        const float* ref = cap.attention_outputs[std::size_t(hd.layer)].row(pos).data() + (hd.kv_head * g + j) * d;
        for (int c = 0; c < d; ++c) {
          double oc = 0, ou = 0;
          for (int t = 0; t < T; ++t) oc += w.attention[t] * hd.values(t, c), ou += u.attention[t] * hd.values(t, c);
          worst_causal = std::max(worst_causal, std::abs(oc - ref[c]) / (1.0 + std::abs(ref[c])));
          worst_unmasked = std::max(worst_unmasked, std::abs(ou - ref[c]) / (1.0 + std::abs(ref[c])));
        }
      }
  }
  INFO("causal " << worst_causal << ", unmasked " << worst_unmasked);
  CHECK(later_weight == 0.0);
  CHECK(worst_causal < 2e-6);     // the forward pass's own output, to float precision
  CHECK(worst_unmasked > 1e-2);   // seeing the future would not be what the model computed
}

namespace {

// stories260K with layer 0's attention RMSNorm weights set to `scale`: every weight is finite.
std::string checkpoint_with_attention_norm(float scale, const std::string& name) {
  std::ifstream in(kCheckpoint, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::int32_t h[7];
  std::memcpy(h, bytes.data(), sizeof h);
  const std::size_t D = h[0], V = std::abs(h[5]);
  const std::size_t rms_att = V * D;  // after the token embedding table
  for (std::size_t i = 0; i < D; ++i) std::memcpy(bytes.data() + 28 + 4 * (rms_att + i), &scale, 4);
  const std::string path = testing::process_dir("capture").file(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace

TEST_CASE("capture of a checkpoint whose finite weights overflow the forward pass blames the checkpoint, not the trace",
          "[capture][reliability]") {
  CaptureOptions opt;
  opt.prompt.generate = 12;
  opt.decode_steps = 2;
  // 3e38: layer 0's queries and keys overflow to infinity; 1e30: they stay finite but their
  // logits would overflow float32 (docs/model.md convention 10).
  const std::string inf_path = checkpoint_with_attention_norm(3e38f, "test_capture_overflow.bin");
  const std::string inf_error = testing::error_of<InputError>([&] { capture(Llama2cModel(inf_path), opt); });
  CHECK_THAT(inf_error, Catch::StartsWith("checkpoint '" + inf_path + "': the forward pass overflows float32") &&
                            Catch::Contains("layer 0, KV head 0"));
  const std::string big_path = checkpoint_with_attention_norm(1e30f, "test_capture_large.bin");
  const std::string big_error = testing::error_of<InputError>([&] { capture(Llama2cModel(big_path), opt); });
  CHECK_THAT(big_error, Catch::StartsWith("checkpoint '" + big_path + "': the forward pass gives layer 0, KV head 0 beyond") &&
                            Catch::Contains("convention 10"));
}
