// The zoo's shipped models (data/zoo/, trained by tools/train_zoo.py): every checkpoint is
// read and captured, and its forward pass reproduces what the training code's own forward
// pass (PyTorch) recorded in config.json when it wrote the checkpoint: the mean next-byte
// loss on the shipped held-out sample, the logits of its last position and 32 greedy bytes
// from BOS. Golden numbers from the training code, not from the code under test; no torch
// needed here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/llama2c/capture.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/io/trace.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {

const fs::path kZoo = fs::path(TIERLAB_SOURCE_DIR) / "data" / "zoo";

// Every model folder of the zoo (a folder holding config.json), sorted by name.
std::vector<fs::path> zoo_models() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(kZoo))
    if (e.is_directory() && fs::exists(e.path() / "config.json")) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

std::vector<std::int32_t> read_byte_ids(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<std::int32_t> ids;
  for (char c; in.get(c);) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

double log_sum_exp(const float* x, int n) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(s);
}

}  // namespace

TEST_CASE("the zoo ships at least five models that differ in depth, KV heads, head size, RoPE theta and context",
          "[zoo]") {
  const auto models = zoo_models();
  REQUIRE(models.size() >= 5);
  std::vector<int> layers, kv_groups, head_dims, contexts;
  std::vector<double> thetas;
  for (const auto& dir : models) {
    const nlohmann::json arch = read_json(dir / "config.json")["architecture"];
    layers.push_back(arch["n_layers"]);
    kv_groups.push_back(arch["n_heads"].get<int>() / arch["n_kv_heads"].get<int>());
    head_dims.push_back(arch["head_dim"]);
    contexts.push_back(arch["seq_len"]);
    thetas.push_back(arch["rope_theta"]);
  }
  auto distinct = [](auto v) {
    std::sort(v.begin(), v.end());
    return std::unique(v.begin(), v.end()) - v.begin();
  };
  CHECK(distinct(layers) >= 3);
  CHECK(distinct(kv_groups) >= 3);  // g = 1 (multi-head), 2, 4
  CHECK(distinct(head_dims) >= 3);
  CHECK(distinct(thetas) >= 2);
  CHECK(distinct(contexts) >= 2);
}

TEST_CASE("every zoo model is read as its config says and reproduces the training code's logits", "[zoo]") {
  for (const auto& dir : zoo_models()) {
    const std::string name = dir.filename().string();
    INFO("model " << name);
    const nlohmann::json cfg = read_json(dir / "config.json");
    const nlohmann::json& arch = cfg["architecture"];
    const Llama2cModel model((dir / (name + ".bin")).string());
    const Llama2cConfig& c = model.config();
    CHECK(c.dim == arch["dim"].get<int>());
    CHECK(c.hidden_dim == arch["hidden_dim"].get<int>());
    CHECK(c.n_layers == arch["n_layers"].get<int>());
    CHECK(c.n_heads == arch["n_heads"].get<int>());
    CHECK(c.n_kv_heads == arch["n_kv_heads"].get<int>());
    CHECK(c.head_size() == arch["head_dim"].get<int>());
    CHECK(c.vocab_size == 256);
    CHECK(c.seq_len == arch["seq_len"].get<int>());
    CHECK(c.rope_theta == arch["rope_theta"].get<double>());  // exactly: 1e4, 5e5, 1e6
    CHECK(model.sha256() == cfg["checkpoint"]["sha256"].get<std::string>());

    // The held-out sample, fed after BOS: mean next-byte loss and the last logits.
    const nlohmann::json& ref = cfg["reference"];
    const std::vector<std::int32_t> sample = read_byte_ids(dir / ref["sample"].get<std::string>());
    REQUIRE(static_cast<int>(sample.size()) == ref["sample_bytes"].get<int>());
    Llama2cSession s(model);
    double nll = 0;
    const float* logits = nullptr;
    for (std::size_t pos = 0; pos < sample.size(); ++pos) {
      logits = s.forward(pos == 0 ? kLlama2cBos : sample[pos - 1], static_cast<int>(pos));
      nll += log_sum_exp(logits, 256) - logits[sample[pos]];
    }
    CHECK(nll / static_cast<double>(sample.size()) ==
          Approx(ref["sample_loss_nats_per_byte"].get<double>()).margin(1e-4));
    const std::vector<double> last = ref["last_logits"];
    REQUIRE(last.size() == 256);
    double worst = 0;
    for (int i = 0; i < 256; ++i) worst = std::max(worst, std::abs(logits[i] - last[i]) / (1.0 + std::abs(last[i])));
    CHECK(worst < 1e-4);

    // Greedy decoding from BOS gives the training code's bytes.
    Sampler greedy;
    const std::vector<std::int32_t> gen = generate(model, {kLlama2cBos}, 32, greedy);
    CHECK(std::vector<std::int32_t>(gen.begin() + 1, gen.end()) == ref["greedy_from_bos"].get<std::vector<std::int32_t>>());
  }
}

TEST_CASE("tierlab capture records every zoo model with the model's RoPE theta", "[zoo]") {
  for (const auto& dir : zoo_models()) {
    const std::string name = dir.filename().string();
    INFO("model " << name);
    const Llama2cModel model((dir / (name + ".bin")).string());
    const nlohmann::json cfg = read_json(dir / "config.json");
    const std::vector<std::int32_t> sample = read_byte_ids(dir / cfg["reference"]["sample"].get<std::string>());
    CaptureOptions opt;
    opt.prompt.ids = {kLlama2cBos};
    opt.prompt.ids.insert(opt.prompt.ids.end(), sample.begin(), sample.begin() + 63);  // T = 64 text bytes
    opt.decode_steps = 16;
    opt.obs_window = 16;
    const CaptureResult r = capture(model, opt);
    CHECK(r.meta.rope.theta == cfg["architecture"]["rope_theta"].get<double>());
    CHECK(r.meta.n_layers == model.config().n_layers);
    CHECK(r.meta.n_kv_heads == model.config().n_kv_heads);
    CHECK(r.meta.group_size == model.config().group_size());
    REQUIRE(r.heads.size() == static_cast<std::size_t>(model.config().n_layers * model.config().n_kv_heads));
    for (const HeadData& h : r.heads) {
      CHECK(h.keys.rows() == 64);
      CHECK(h.keys.allFinite());
      CHECK(h.values.allFinite());
    }
    CHECK(r.meta.token_ids.size() == 80u);
  }
}
