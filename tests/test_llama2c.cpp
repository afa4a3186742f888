// The llama2.c loader and forward pass against the real stories260K checkpoint.
// Golden numbers: data/stories260K/FORMAT.md (the llama2.c reference implementation's
// greedy decoding from BOS = 1: token ids 461 461 401 401 401 461 378 455 473 456, maximum
// logits 9.489, 9.543, 9.644, and the file's sha256). They do not come from this code.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "model/base/sha256.hpp"
#include "model/llama2c/llama2c.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

const std::string kCheckpoint = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";
const std::vector<std::int32_t> kGoldenTokens = {461, 461, 401, 401, 401, 461, 378, 455, 473, 456};
const std::vector<float> kGoldenMaxLogits = {9.489f, 9.543f, 9.644f};
const char* kGoldenSha256 = "9414d5a285453a7eab631713d171753232c978f6f97654211469aff8be93c8d6";

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string write_temp(const std::string& name, const std::vector<char>& bytes) {
  const std::string path = tierlab::testing::process_dir("llama2c").file(name + ".bin");
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

void set_header(std::vector<char>& bytes, int field, std::int32_t value) {
  std::memcpy(bytes.data() + 4 * field, &value, 4);
}

std::string load_error(const std::string& path) {
  try {
    Llama2cModel m(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// Greedy decoding from BOS; returns tokens and the maximum logit of each step.
void greedy(const Llama2cModel& model, int steps, std::vector<std::int32_t>& tokens, std::vector<float>& max_logits) {
  Llama2cSession s(model);
  std::int32_t tok = kLlama2cBos;
  for (int pos = 0; pos < steps; ++pos) {
    const float* logits = s.forward(tok, pos);
    tok = argmax(logits, model.config().vocab_size);
    tokens.push_back(tok);
    max_logits.push_back(logits[tok]);
  }
}

}  // namespace

TEST_CASE("stories260K header and identity match FORMAT.md", "[llama2c]") {
  Llama2cModel model(kCheckpoint);
  const Llama2cConfig& c = model.config();
  CHECK(c.dim == 64);
  CHECK(c.hidden_dim == 172);
  CHECK(c.n_layers == 5);
  CHECK(c.n_heads == 8);
  CHECK(c.n_kv_heads == 4);
  CHECK(c.vocab_size == 512);
  CHECK(c.seq_len == 512);
  CHECK(c.shared_classifier);
  CHECK(c.head_size() == 8);
  CHECK(c.group_size() == 2);
  CHECK(c.expected_bytes() == 1056540u);  // FORMAT.md: "File size 1,056,540 bytes"
  CHECK(model.sha256() == kGoldenSha256);
  CHECK(model.name() == "stories260K");
}

TEST_CASE("sha256 of the FIPS 180-4 examples", "[llama2c]") {
  CHECK(sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(sha256_hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("greedy decoding from BOS reproduces FORMAT.md's token ids and maximum logits", "[llama2c]") {
  Llama2cModel model(kCheckpoint);
  std::vector<std::int32_t> tokens;
  std::vector<float> max_logits;
  greedy(model, 10, tokens, max_logits);
  CHECK(tokens == kGoldenTokens);
  for (std::size_t i = 0; i < kGoldenMaxLogits.size(); ++i) {
    INFO("step " << i);
    CHECK(max_logits[i] == Approx(kGoldenMaxLogits[i]).margin(1e-3));
  }
  Sampler greedy_sampler;  // temperature 0
  const auto gen = generate(model, {kLlama2cBos}, 10, greedy_sampler);
  REQUIRE(gen.size() == 11);
  CHECK(std::vector<std::int32_t>(gen.begin() + 1, gen.end()) == kGoldenTokens);
}

TEST_CASE("an unshared classifier (negative vocab_size) is read after the RoPE tables", "[llama2c]") {
  std::vector<char> bytes = read_bytes(kCheckpoint);
  REQUIRE(bytes.size() == 1056540u);
  // Same model with the classifier stored separately: a copy of the embedding table,
  // appended after the RoPE tables as llama2.c expects.
  std::vector<char> unshared = bytes;
  set_header(unshared, 5, -512);
  unshared.insert(unshared.end(), bytes.begin() + 28, bytes.begin() + 28 + 512 * 64 * 4);
  Llama2cModel same(write_temp("unshared", unshared));
  CHECK_FALSE(same.config().shared_classifier);
  std::vector<std::int32_t> tokens;
  std::vector<float> max_logits;
  greedy(same, 10, tokens, max_logits);
  CHECK(tokens == kGoldenTokens);
  CHECK(max_logits[0] == Approx(kGoldenMaxLogits[0]).margin(1e-3));

  // The separate classifier really is used: doubling it doubles every logit.
  std::vector<char> doubled = unshared;
  float* wcls = reinterpret_cast<float*>(doubled.data() + 1056540);
  for (int i = 0; i < 512 * 64; ++i) wcls[i] *= 2.0f;
  Llama2cModel twice(write_temp("unshared_doubled", doubled));
  Llama2cSession a(same), b(twice);
  const float* la = a.forward(kLlama2cBos, 0);
  const float* lb = b.forward(kLlama2cBos, 0);
  for (int i = 0; i < 512; i += 37) CHECK(lb[i] == Approx(2.0f * la[i]).epsilon(1e-5).margin(1e-5));
}

TEST_CASE("the loader rejects truncated files and bad headers with clear messages", "[llama2c]") {
  const std::vector<char> bytes = read_bytes(kCheckpoint);

  SECTION("truncated") {
    std::vector<char> cut(bytes.begin(), bytes.end() - 1000);
    const std::string path = write_temp("truncated", cut);
    const std::string msg = load_error(path);
    CHECK_THAT(msg, Catch::Contains(path));
    CHECK_THAT(msg, Catch::Contains("1055540 bytes"));
    CHECK_THAT(msg, Catch::Contains("exactly 1056540 bytes"));
    CHECK_THAT(msg, Catch::Contains("truncated"));
  }
  SECTION("trailing bytes") {
    std::vector<char> longer = bytes;
    longer.resize(bytes.size() + 4, 0);
    CHECK_THAT(load_error(write_temp("longer", longer)), Catch::Contains("trailing"));
  }
  SECTION("shorter than the header") {
    std::vector<char> tiny(bytes.begin(), bytes.begin() + 10);
    CHECK_THAT(load_error(write_temp("tiny", tiny)), Catch::Contains("shorter than the 28-byte header"));
  }
  SECTION("a field that is not positive") {
    std::vector<char> bad = bytes;
    set_header(bad, 2, 0);
    CHECK_THAT(load_error(write_temp("zero_layers", bad)), Catch::Contains("n_layers = 0 is not positive"));
    set_header(bad, 2, 5);
    set_header(bad, 0, -64);
    CHECK_THAT(load_error(write_temp("negative_dim", bad)), Catch::Contains("dim = -64 is not positive"));
  }
  SECTION("n_heads not a multiple of n_kv_heads") {
    std::vector<char> bad = bytes;
    set_header(bad, 4, 3);
    CHECK_THAT(load_error(write_temp("kv3", bad)), Catch::Contains("n_heads = 8 is not a multiple of n_kv_heads = 3"));
  }
  SECTION("dim not a multiple of n_heads") {
    std::vector<char> bad = bytes;
    set_header(bad, 3, 6);
    set_header(bad, 4, 3);
    CHECK_THAT(load_error(write_temp("heads6", bad)), Catch::Contains("dim = 64 is not a multiple of n_heads = 6"));
  }
  SECTION("a header that disagrees with the file size") {
    std::vector<char> bad = bytes;
    set_header(bad, 1, 173);  // hidden_dim
    const std::string msg = load_error(write_temp("hidden173", bad));
    CHECK_THAT(msg, Catch::Contains("hidden_dim=173"));
    CHECK_THAT(msg, Catch::Contains("is 1056540 bytes"));
  }
  SECTION("a non-finite weight") {
    std::vector<char> bad = bytes;
    const float nan = std::nanf("");
    std::memcpy(bad.data() + 28 + 4 * (512 * 64 + 5), &nan, 4);  // rms_att[5]
    CHECK_THAT(load_error(write_temp("nan", bad)), Catch::Contains("rms_att"));
  }
  SECTION("a missing file") {
    CHECK_THAT(load_error("/nonexistent/stories.bin"), Catch::Contains("cannot be opened"));
  }
}

TEST_CASE("forward() checks the token and the position", "[llama2c]") {
  Llama2cModel model(kCheckpoint);
  Llama2cSession s(model);
  CHECK_THROWS_WITH(s.forward(512, 0), Catch::Contains("token id 512 is out of range"));
  CHECK_THROWS_WITH(s.forward(1, 512), Catch::Contains("position 512 is out of range"));
}

TEST_CASE("evicting a cached token removes it from attention", "[llama2c]") {
  // Evicting every prompt position but the current one in every layer must equal a
  // model whose context is that single token at the same position: attention over
  // {pos} alone returns v_pos whatever came before.
  Llama2cModel model(kCheckpoint);
  Llama2cSession full(model);
  for (int pos = 0; pos < 5; ++pos) full.forward(kGoldenTokens[pos], pos);
  const float* lf = full.forward(kGoldenTokens[5], 5);
  std::vector<float> with_context(lf, lf + 512);

  Llama2cSession evicted(model);
  for (int pos = 0; pos < 5; ++pos) evicted.forward(kGoldenTokens[pos], pos);
  for (int l = 0; l < 5; ++l)
    for (int h = 0; h < 4; ++h)
      for (int pos = 0; pos < 5; ++pos) evicted.set_kept(l, h, pos, false);
  const float* le = evicted.forward(kGoldenTokens[5], 5);
  CHECK(evicted.kept(0, 0, 5));
  CHECK_FALSE(evicted.kept(0, 0, 4));

  Llama2cSession alone(model);  // positions 0..4 filled with a different context
  for (int pos = 0; pos < 5; ++pos) alone.forward(7, pos);
  for (int l = 0; l < 5; ++l)
    for (int h = 0; h < 4; ++h)
      for (int pos = 0; pos < 5; ++pos) alone.set_kept(l, h, pos, false);
  const float* la = alone.forward(kGoldenTokens[5], 5);
  double diff_context = 0, diff_alone = 0;
  for (int i = 0; i < 512; ++i) {
    diff_context = std::max(diff_context, std::abs(double(le[i]) - with_context[i]));
    diff_alone = std::max(diff_alone, std::abs(double(le[i]) - la[i]));
  }
  CHECK(diff_context > 0.1);  // the context mattered
  CHECK(diff_alone == 0.0);   // and eviction removed all of it
}

TEST_CASE("the sampler is greedy at temperature 0, seeded otherwise, and follows softmax(logits / T)", "[llama2c]") {
  const float logits[3] = {1.0f, 2.0f, 0.5f};
  Sampler greedy;
  CHECK(greedy.next(logits, 3) == 1);

  Sampler a(1.0f, 42), b(1.0f, 42), c(1.0f, 43);
  std::vector<int> ra, rb, rc;
  for (int i = 0; i < 64; ++i) {
    ra.push_back(a.next(logits, 3));
    rb.push_back(b.next(logits, 3));
    rc.push_back(c.next(logits, 3));
  }
  CHECK(ra == rb);
  CHECK(ra != rc);

  // Frequencies over 200000 draws at T = 2 against softmax(logits / 2) computed here.
  Sampler s(2.0f, 7);
  int counts[3] = {0, 0, 0};
  const int n = 200000;
  for (int i = 0; i < n; ++i) ++counts[s.next(logits, 3)];
  const double e0 = std::exp(0.5), e1 = std::exp(1.0), e2 = std::exp(0.25), z = e0 + e1 + e2;
  CHECK(counts[0] / double(n) == Approx(e0 / z).margin(0.005));
  CHECK(counts[1] / double(n) == Approx(e1 / z).margin(0.005));
  CHECK(counts[2] / double(n) == Approx(e2 / z).margin(0.005));

  CHECK_THROWS_AS(Sampler(-1.0f), InputError);
}

namespace {

// stories260K with its RoPE tables rewritten for `theta` (cos, then sin, of pos / theta^(2i/8),
// computed here in double): the same weights with another RoPE base.
std::vector<char> with_rope_theta(double theta) {
  std::vector<char> bytes = read_bytes(kCheckpoint);
  const std::size_t S = 512, hs = 8, tables = (1056540 - 28) / 4 - S * hs;  // the tables end the file
  float* cos_table = reinterpret_cast<float*>(bytes.data() + 28) + tables;
  float* sin_table = cos_table + S * hs / 2;
  for (std::size_t pos = 0; pos < S; ++pos) {
    for (std::size_t i = 0; i < hs / 2; ++i) {
      const double angle = static_cast<double>(pos) / std::pow(theta, static_cast<double>(2 * i) / 8.0);
      cos_table[pos * hs / 2 + i] = static_cast<float>(std::cos(angle));
      sin_table[pos * hs / 2 + i] = static_cast<float>(std::sin(angle));
    }
  }
  return bytes;
}

// Captures layer 0's pre- and post-RoPE keys of one forward step.
struct KeyObserver : ForwardObserver {
  std::vector<float> k_pre, k;
  void on_layer(const LayerActivations& a) override {
    if (a.layer != 0) return;
    k_pre.assign(a.k_pre, a.k_pre + 32);  // kv_dim = 4 KV heads x 8
    k.assign(a.k, a.k + 32);
  }
};

}  // namespace

TEST_CASE("the RoPE theta is read from the checkpoint's RoPE tables and used by the forward pass", "[llama2c]") {
  Llama2cModel stories(kCheckpoint);
  CHECK(stories.config().rope_theta == 10000.0);  // exactly: the estimate rounds to 6 digits
  CHECK(llama2c_rope(stories.config()).theta == 10000.0);

  for (double theta : {1e6, 5e5, 12345.6}) {
    INFO("theta " << theta);
    Llama2cModel model(write_temp("theta", with_rope_theta(theta)));
    CHECK(model.config().rope_theta == Approx(theta).epsilon(1e-7));
    CHECK(llama2c_rope(model.config()).theta == model.config().rope_theta);
    // Position 300: the post-RoPE key is the pre-RoPE key with pair (2i, 2i+1) of each head
    // rotated by 300 / theta^(2i/8), computed here independently.
    Llama2cSession s(model);
    KeyObserver obs;
    for (int pos = 0; pos <= 300; ++pos) s.forward(kGoldenTokens[pos % 10], pos, pos == 300 ? &obs : nullptr);
    REQUIRE(obs.k.size() == 32);
    for (int h = 0; h < 4; ++h) {
      for (int i = 0; i < 4; ++i) {
        const double angle = 300.0 / std::pow(theta, 2.0 * i / 8.0);
        const double a = obs.k_pre[h * 8 + 2 * i], b = obs.k_pre[h * 8 + 2 * i + 1];
        CHECK(obs.k[h * 8 + 2 * i] == Approx(a * std::cos(angle) - b * std::sin(angle)).margin(1e-5));
        CHECK(obs.k[h * 8 + 2 * i + 1] == Approx(a * std::sin(angle) + b * std::cos(angle)).margin(1e-5));
      }
    }
  }
  // Another theta changes what the model computes (greedy decoding leaves stories260K's path).
  Llama2cModel far(write_temp("theta_far", with_rope_theta(1e6)));
  std::vector<std::int32_t> tokens;
  std::vector<float> max_logits;
  greedy(far, 10, tokens, max_logits);
  CHECK(max_logits[1] != Approx(kGoldenMaxLogits[1]).margin(1e-3));
}

TEST_CASE("RoPE tables of no single theta are refused, naming the entry", "[llama2c]") {
  std::vector<char> bytes = read_bytes(kCheckpoint);
  const std::size_t tables = (1056540 - 28) / 4 - 512 * 8;
  float* cos_table = reinterpret_cast<float*>(bytes.data() + 28) + tables;
  float* sin_table = cos_table + 512 * 4;

  SECTION("one entry off") {
    std::vector<char> bad = bytes;
    reinterpret_cast<float*>(bad.data() + 28)[tables + 100 * 4 + 2] += 0.01f;  // cos, position 100, pair 2
    const std::string path = write_temp("rope_entry", bad);
    const std::string msg = load_error(path);
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("rope_tables (cos) at position 100, pair 2") &&
                        Catch::Contains("theta = 10000"));
  }
  SECTION("an angle no theta gives") {
    sin_table[4 + 3] = -sin_table[4 + 3];  // position 1, pair 3: a negative angle
    const std::string path = write_temp("rope_negative", bytes);
    CHECK_THAT(load_error(path), Catch::Contains(path) && Catch::Contains("position 1, pair 3") &&
                                     Catch::Contains("angle in (0, 1)"));
  }
  SECTION("tables of zeros") {
    std::fill(cos_table, cos_table + 2 * 512 * 4, 0.0f);
    CHECK_THAT(load_error(write_temp("rope_zeros", bytes)), Catch::Contains("rope_tables"));
  }
}
