// Synthetic traces (model/synthetic/synthetic.hpp). The attention shapes, RoPE and statistics are
// checked with an independent double-precision causal softmax / RoPE written here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "model/realism.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"
#include "tests/support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {

// ---- independent reference helpers -------------------------------------------

// softmax(q . k_t / sqrt(d)) over the given key rows, in double.
std::vector<double> attention(const float* q, const std::vector<const float*>& keys, int d) {
  std::vector<double> s(keys.size());
  double mx = -1e300;
  for (std::size_t t = 0; t < keys.size(); ++t) {
    double dot = 0.0;
    for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * keys[t][c];
    s[t] = dot / std::sqrt(static_cast<double>(d));
    mx = std::max(mx, s[t]);
  }
  double z = 0.0;
  for (double& x : s) z += (x = std::exp(x - mx));
  for (double& x : s) x /= z;
  return s;
}

double entropy(const std::vector<double>& p) {
  double h = 0.0;
  for (double x : p)
    if (x > 0.0) h -= x * std::log(x);
  return h;
}

// Interleaved RoPE in double: pair (2i, 2i+1) rotated by pos / theta^(2i/d).
std::vector<double> rope(const float* x, int d, double pos, double theta) {
  std::vector<double> out(d);
  for (int i = 0; i < d / 2; ++i) {
    const double a = pos / std::pow(theta, 2.0 * i / d);
    out[2 * i] = x[2 * i] * std::cos(a) - x[2 * i + 1] * std::sin(a);
    out[2 * i + 1] = x[2 * i] * std::sin(a) + x[2 * i + 1] * std::cos(a);
  }
  return out;
}

bool same_bits(const MatrixRM& a, const MatrixRM& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::equal(a.data(), a.data() + a.size(), b.data());
}

bool same_head(const HeadData& a, const HeadData& b) {
  return same_bits(a.keys, b.keys) && same_bits(a.keys_pre_rope, b.keys_pre_rope) && same_bits(a.values, b.values) &&
         same_bits(a.obs_queries, b.obs_queries) && same_bits(a.decode_queries, b.decode_queries) &&
         same_bits(a.decode_keys, b.decode_keys) && same_bits(a.decode_values, b.decode_values);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string temp_path(const std::string& name) {
  return tierlab::testing::process_dir("synthetic").file(name);
}

// The parameters' JSON text (from the trace's provenance), for comparing two SynthParams.
std::string params_text(const SynthParams& p) {
  return nlohmann::json::parse(synth_meta(p).provenance).at("params").dump();
}

// A mid-size geometry on which the attention shapes are measured; one dominant kind, and
// (background = 0) no secondary sink or local share unless a test asks for it.
SynthParams one_kind(const std::string& kind, double background = 0.0) {
  SynthParams p;
  p.preset = "test-" + kind;
  p.seed = 12345;
  p.n_layers = 1;
  p.n_kv_heads = 4;
  p.group_size = 2;
  p.head_dim = 64;
  p.prompt_len = 1024;
  p.obs_window = 16;
  p.decode_steps = 16;
  p.mix_sink = kind == "sink";
  p.mix_local = kind == "local";
  p.mix_retrieval = kind == "retrieval";
  p.mix_diffuse = kind == "diffuse";
  p.logit_scale_min = 0.6;
  p.logit_scale_max = 2.0;
  p.background = background;
  p.outlier_channels = 4;
  p.outlier_strength = 8.0;
  p.outlier_token_rate = 0.0;
  p.spans_per_head = 4;
  p.span_len = 8;
  p.query_drift = 0.05;
  return p;
}

// Attention statistics of one head, averaged over its queries.
struct Shape {
  double sink_mass = 0;      // on position 0
  double min_sink_ratio = 1e300, max_sink_ratio = 0;  // first-token mass / target, over the queries
  double local_mass = 0;     // on positions within 64 of the query position
  double span_mass = 0;      // on the planted spans
  double norm_entropy = 0;   // H / ln(number of keys)
  double peak_near = 0;      // share of the queries whose most attended position is within 64 of theirs
};

// Causal (docs/model.md section 12, convention 4): observation query i attends the prompt keys 0..T-W+i; decode
// query s attends the T prompt keys and the decode keys of steps 1..s. `every` subsamples
// the queries (1 = all). `sink_target` is the head's drawn first-token share (0: none).
Shape measure(const HeadData& h, const TraceMeta& m, bool decode, int every = 1, double sink_target = 0) {
  const int d = m.head_dim, T = m.prompt_len, W = m.obs_window, S = m.decode_steps, g = m.group_size;
  std::vector<bool> in_span(T, false);
  for (const Span& sp : h.spans)
    for (int t = sp.begin; t < sp.end; ++t) in_span[t] = true;
  Shape out;
  int n = 0;
  for (int k = 0; k < g; ++k) {
    const int count = decode ? S : W;
    for (int i = 0; i < count; ++i) {
      if (i % every != 0 && i != count - 1) continue;
      const int pos = decode ? T + i : T - W + i;
      const float* q = decode ? &h.decode_queries(static_cast<Eigen::Index>(k) * S + i, 0)
                              : &h.obs_queries(static_cast<Eigen::Index>(k) * W + i, 0);
      std::vector<const float*> ks;
      for (int t = 0; t <= std::min(pos, T - 1); ++t) ks.push_back(&h.keys(t, 0));
      if (decode)
        for (int s = 0; s <= i; ++s) ks.push_back(&h.decode_keys(s, 0));
      const std::vector<double> a = attention(q, ks, d);
      std::size_t best = 0;
      for (std::size_t t = 0; t < a.size(); ++t) {
        if (std::abs(static_cast<int>(t) - pos) <= 64) out.local_mass += a[t];
        if (t < static_cast<std::size_t>(T) && in_span[t]) out.span_mass += a[t];
        if (a[t] > a[best]) best = t;
      }
      out.sink_mass += a[0];
      if (sink_target > 0) {
        out.min_sink_ratio = std::min(out.min_sink_ratio, a[0] / sink_target);
        out.max_sink_ratio = std::max(out.max_sink_ratio, a[0] / sink_target);
      }
      out.norm_entropy += entropy(a) / std::log(static_cast<double>(a.size()));
      out.peak_near += std::abs(pos - static_cast<int>(best)) <= 64 ? 1.0 : 0.0;
      ++n;
    }
  }
  out.sink_mass /= n;
  out.local_mass /= n;
  out.span_mass /= n;
  out.norm_entropy /= n;
  out.peak_near /= n;
  return out;
}

nlohmann::json head_plans(const TraceMeta& m) { return nlohmann::json::parse(m.provenance).at("heads"); }

std::vector<std::string> head_kinds(const TraceMeta& m) {
  std::vector<std::string> kinds;
  for (const auto& h : head_plans(m)) kinds.push_back(h.at("kind").get<std::string>());
  return kinds;
}

// Median over heads of a realism statistic (model/realism.hpp) of the preset at length T.
double median_over_heads(SynthParams p, int T, double HeadRealism::*field) {
  p.prompt_len = T;
  const RealismReport r = trace_realism(synth_meta(p), [&](int l, int h) { return synth_head(p, l, h); }, {});
  return field == &HeadRealism::n90 ? r.summaries.at(0).n90.median
         : field == &HeadRealism::entropy ? r.summaries.at(0).entropy.median
         : field == &HeadRealism::first_token_mass ? r.summaries.at(0).first_token_mass.median
         : field == &HeadRealism::margin ? r.summaries.at(0).margin.median
                                          : r.summaries.at(0).noise.median;
}

}  // namespace

// ---- presets and validation ------------------------------------------------------

TEST_CASE("the presets exist and validate, and the -like names are 4-layer versions of the full presets", "[synthetic]") {
  const auto names = synth_preset_names();
  REQUIRE(names == std::vector<std::string>{"tiny", "llama-like", "mistral-like", "qwen-like", "llama-3.1-8b",
                                            "mistral-7b", "qwen3-8b"});
  for (const auto& n : names) {
    const SynthParams p = synth_preset(n);
    CHECK(p.preset == n);
    CHECK_NOTHROW(p.validate());
  }
  const SynthParams tiny = synth_preset("tiny");
  CHECK(tiny.n_layers == 2);
  CHECK(tiny.n_kv_heads == 2);
  CHECK(tiny.group_size == 2);
  CHECK(tiny.head_dim == 16);
  CHECK(tiny.prompt_len == 64);
  CHECK(tiny.obs_window == 8);
  CHECK(tiny.decode_steps == 8);
  for (const auto& [small, full] : std::vector<std::pair<std::string, std::string>>{
           {"llama-like", "llama-3.1-8b"}, {"mistral-like", "mistral-7b"}, {"qwen-like", "qwen3-8b"}}) {
    SynthParams s = synth_preset(small);
    const SynthParams f = synth_preset(full);
    INFO(small);
    CHECK(s.n_layers == 4);
    s.n_layers = f.n_layers;
    s.preset = f.preset;
    CHECK(params_text(s) == params_text(f));  // everything else is the full preset's
  }
  try {
    synth_preset("gpt-like");
    FAIL("an unknown preset must throw");
  } catch (const InputError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("gpt-like") != std::string::npos);
    for (const auto& n : names) CHECK(msg.find(n) != std::string::npos);
  }
}

TEST_CASE("the full presets have the shapes of the published config.json files", "[synthetic]") {
  // Llama-3.1-8B: num_hidden_layers 32, num_attention_heads 32, num_key_value_heads 8,
  // hidden_size 4096 (head_dim 128), rope_theta 500000.0.
  const SynthParams llama = synth_preset("llama-3.1-8b");
  CHECK(llama.n_layers == 32);
  CHECK(llama.n_kv_heads == 8);
  CHECK(llama.group_size == 32 / 8);
  CHECK(llama.head_dim == 4096 / 32);
  CHECK(llama.rope_theta == 500000.0);
  // Mistral-7B v0.2 / v0.3: 32 layers, 32 heads, 8 KV heads, head_dim 128, rope_theta 1e6.
  const SynthParams mistral = synth_preset("mistral-7b");
  CHECK(mistral.n_layers == 32);
  CHECK(mistral.n_kv_heads == 8);
  CHECK(mistral.group_size == 4);
  CHECK(mistral.head_dim == 128);
  CHECK(mistral.rope_theta == 1000000.0);
  // Qwen3-8B: num_hidden_layers 36, num_attention_heads 32, num_key_value_heads 8, head_dim 128,
  // rope_theta 1000000; QK-Norm: no outlier tokens.
  const SynthParams qwen = synth_preset("qwen3-8b");
  CHECK(qwen.n_layers == 36);
  CHECK(qwen.n_kv_heads == 8);
  CHECK(qwen.group_size == 4);
  CHECK(qwen.head_dim == 128);
  CHECK(qwen.rope_theta == 1000000.0);
  CHECK(qwen.outlier_token_rate == 0.0);
  for (const SynthParams* p : {&llama, &mistral, &qwen}) {
    CHECK(p->mix_retrieval < 0.05);  // retrieval heads: under 5% (Wu et al. 2024)
    const TraceMeta m = synth_meta(*p);
    CHECK(m.n_heads() == p->n_layers * 8);
    CHECK(m.rope.theta == p->rope_theta);
  }
}

TEST_CASE("synthetic validate names the parameter and its value", "[synthetic]") {
  struct Bad {
    std::string needle;
    std::function<void(SynthParams&)> edit;
  };
  const std::vector<Bad> cases = {
      {"n_layers = 0", [](SynthParams& p) { p.n_layers = 0; }},
      {"n_kv_heads = -1", [](SynthParams& p) { p.n_kv_heads = -1; }},
      {"group_size = 0", [](SynthParams& p) { p.group_size = 0; }},
      {"head_dim = 15", [](SynthParams& p) { p.head_dim = 15; }},
      {"head_dim = 4", [](SynthParams& p) { p.head_dim = 4; }},
      {"obs_window = 0", [](SynthParams& p) { p.obs_window = 0; }},
      {"prompt_len = 10", [](SynthParams& p) { p.prompt_len = 10; }},
      {"decode_steps = 0", [](SynthParams& p) { p.decode_steps = 0; }},
      {"mix_local = -1", [](SynthParams& p) { p.mix_local = -1; }},
      {"mix_sink = nan", [](SynthParams& p) { p.mix_sink = std::nan(""); }},
      {"mix_sink + mix_local", [](SynthParams& p) { p.mix_sink = p.mix_local = p.mix_retrieval = p.mix_diffuse = 0; }},
      {"logit_scale_min = 0", [](SynthParams& p) { p.logit_scale_min = 0; }},
      {"logit_scale_max = 0.5", [](SynthParams& p) { p.logit_scale_min = 1; p.logit_scale_max = 0.5; }},
      {"sink_mass_min = -0.1", [](SynthParams& p) { p.sink_mass_min = -0.1; }},
      {"sink_mass_max = 0.2", [](SynthParams& p) { p.sink_mass_min = 0.3; p.sink_mass_max = 0.2; }},
      {"local_mass_max = 0.99", [](SynthParams& p) { p.local_mass_max = 0.99; }},
      {"span_mass_min = nan", [](SynthParams& p) { p.span_mass_min = std::nan(""); }},
      {"background = -1", [](SynthParams& p) { p.background = -1; }},
      {"outlier_channels = 5", [](SynthParams& p) { p.outlier_channels = 5; }},  // tiny: d/4 = 4
      {"outlier_strength = 0.5", [](SynthParams& p) { p.outlier_strength = 0.5; }},
      {"query_outlier_strength = -2", [](SynthParams& p) { p.query_outlier_strength = -2; }},
      {"outlier_token_rate = 0.6", [](SynthParams& p) { p.outlier_token_rate = 0.6; }},
      {"span_len = 0", [](SynthParams& p) { p.span_len = 0; }},
      {"spans_per_head = 0", [](SynthParams& p) { p.spans_per_head = 0; }},
      {"spans_per_head * span_len = 6 * 8", [](SynthParams& p) { p.spans_per_head = 6; p.span_len = 8; }},
      {"query_drift = -0.1", [](SynthParams& p) { p.query_drift = -0.1; }},
      {"rope_theta = 1", [](SynthParams& p) { p.rope_theta = 1; }},
      {"storage = I32", [](SynthParams& p) { p.storage = DType::I32; }},
  };
  for (const auto& c : cases) {
    SynthParams p = synth_preset("tiny");
    c.edit(p);
    INFO(c.needle);
    try {
      p.validate();
      FAIL("validate() accepted " + c.needle);
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(c.needle) != std::string::npos);
    }
    CHECK_THROWS_AS(synth_meta(p), InputError);
  }
  // Tiny's largest fitting span layout: 52 positions between the first 4 tokens and the window.
  SynthParams p = synth_preset("tiny");
  p.spans_per_head = 5;
  p.span_len = 9;  // 5 * 9 + 4 gaps = 49 <= 52
  CHECK_NOTHROW(p.validate());
  p.mix_retrieval = 0;
  p.spans_per_head = 0;  // no retrieval heads: no spans needed
  CHECK_NOTHROW(p.validate());
  CHECK_THROWS_AS(synth_head(synth_preset("tiny"), 2, 0), InputError);
  CHECK_THROWS_AS(synth_head(synth_preset("tiny"), 0, -1), InputError);
}

// ---- metadata -------------------------------------------------------------------------

TEST_CASE("synth_meta describes the trace and plants spans only in retrieval heads", "[synthetic]") {
  SynthParams p = synth_preset("llama-like");
  p.seed = 7;
  p.storage = DType::BF16;
  p.mix_retrieval = 0.25;  // enough retrieval heads in 32 to see their spans
  const TraceMeta m = synth_meta(p);
  CHECK(m.n_layers == 4);
  CHECK(m.n_kv_heads == 8);
  CHECK(m.group_size == 4);
  CHECK(m.head_dim == 128);
  CHECK(m.prompt_len == 2048);
  CHECK(m.obs_window == 32);
  CHECK(m.decode_steps == 64);
  CHECK(m.has_pre_rope);
  CHECK(m.rope.theta == 500000.0);
  CHECK(m.rope.style == "interleaved");
  CHECK(m.storage == DType::BF16);
  CHECK(m.token_ids.empty());
  REQUIRE(m.spans.size() == 32u);

  const auto prov = nlohmann::json::parse(m.provenance);
  CHECK(prov.at("source") == "synthetic");
  CHECK(prov.at("generator") == "tierlab-synthetic/2");
  CHECK(prov.at("preset") == "llama-like");
  CHECK(prov.at("seed").get<std::uint64_t>() == 7u);
  const auto& params = prov.at("params");
  CHECK(params.at("n_layers") == 4);
  CHECK(params.at("head_dim") == 128);
  CHECK(params.at("mix_sink").get<double>() == p.mix_sink);
  CHECK(params.at("logit_scale_max").get<double>() == p.logit_scale_max);
  CHECK(params.at("outlier_strength").get<double>() == p.outlier_strength);
  CHECK(params.at("sink_mass_max").get<double>() == p.sink_mass_max);
  CHECK(params.at("span_len") == 8);
  CHECK(params.at("query_drift").get<double>() == p.query_drift);
  CHECK(params.at("rope_theta").get<double>() == p.rope_theta);
  CHECK(params.at("storage") == "BF16");
  for (const char* key : {"preset", "seed", "n_layers", "n_kv_heads", "group_size", "head_dim", "prompt_len",
                          "obs_window", "decode_steps", "mix_sink", "mix_local", "mix_retrieval", "mix_diffuse",
                          "logit_scale_min", "logit_scale_max", "sink_mass_min", "sink_mass_max", "local_mass_min",
                          "local_mass_max", "span_mass_min", "span_mass_max", "background", "outlier_channels",
                          "outlier_strength", "query_outlier_strength", "outlier_token_rate", "spans_per_head",
                          "span_len", "query_drift", "rope_theta", "storage"})
    CHECK(params.contains(key));

  const auto kinds = head_kinds(m);
  REQUIRE(kinds.size() == 32u);
  std::set<std::string> seen(kinds.begin(), kinds.end());
  CHECK(seen == std::set<std::string>{"sink", "local", "retrieval", "diffuse"});
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    const auto& spans = m.spans[i];
    const auto& plan = prov.at("heads")[i];
    const double scale = plan.at("logit_scale").get<double>();
    const double lo = kinds[i] == "diffuse" ? 0.7 * p.logit_scale_min : p.logit_scale_min;
    const double hi = kinds[i] == "diffuse" ? 0.7 * p.logit_scale_max : p.logit_scale_max;
    CHECK(scale >= lo * (1 - 1e-12));
    CHECK(scale <= hi * (1 + 1e-12));
    const double shares = plan.at("sink_mass").get<double>() + plan.at("local_mass").get<double>() +
                          plan.at("span_mass").get<double>();
    CHECK(shares <= 0.95 + 1e-12);
    if (kinds[i] != "retrieval") {
      CHECK(spans.empty());
      CHECK(plan.at("span_mass").get<double>() == 0.0);
      continue;
    }
    REQUIRE(spans.size() == 4u);
    for (std::size_t j = 0; j < spans.size(); ++j) {
      CHECK(spans[j].end - spans[j].begin == 8);
      CHECK(spans[j].begin >= 4);                         // not on the first tokens
      CHECK(spans[j].end <= p.prompt_len - p.obs_window);  // not in the observation window
      if (j > 0) CHECK(spans[j].begin > spans[j - 1].end);  // ordered, disjoint, one token apart
    }
  }
}

TEST_CASE("synth_meta spans are the spans synth_head plants", "[synthetic]") {
  SynthParams p = synth_preset("tiny");
  p.n_layers = 3;
  p.n_kv_heads = 4;
  p.seed = 99;
  p.mix_local = p.mix_diffuse = 0.0;  // sink and retrieval heads only
  const TraceMeta m = synth_meta(p);
  int retrieval = 0;
  for (int l = 0; l < p.n_layers; ++l)
    for (int h = 0; h < p.n_kv_heads; ++h) {
      const HeadData hd = synth_head(p, l, h);
      const auto& expect = m.spans[static_cast<std::size_t>(l) * p.n_kv_heads + h];
      REQUIRE(hd.spans.size() == expect.size());
      for (std::size_t j = 0; j < expect.size(); ++j) {
        CHECK(hd.spans[j].begin == expect[j].begin);
        CHECK(hd.spans[j].end == expect[j].end);
      }
      retrieval += !expect.empty();
    }
  CHECK(retrieval > 0);
  CHECK(retrieval < p.n_layers * p.n_kv_heads);
}

TEST_CASE("most heads give the first token some attention, sink heads gather late, retrieval heads are a few percent",
          "[synthetic]") {
  // The plans of the full presets (cheap: no data): 256 and 288 heads.
  for (const char* name : {"llama-3.1-8b", "qwen3-8b"}) {
    const SynthParams p = synth_preset(name);
    const auto plans = head_plans(synth_meta(p));
    int with_sink = 0, retrieval = 0, sink_early = 0, sink_late = 0, local_early = 0, local_late = 0;
    const int L = p.n_layers, quarter = L / 4;
    for (const auto& h : plans) {
      const int l = h.at("layer").get<int>();
      const std::string kind = h.at("kind").get<std::string>();
      with_sink += h.at("sink_mass").get<double>() > 0.001;
      retrieval += kind == "retrieval";
      if (l < quarter) sink_early += kind == "sink", local_early += kind == "local";
      if (l >= L - quarter) sink_late += kind == "sink", local_late += kind == "local";
    }
    const double n = static_cast<double>(plans.size());
    INFO(name << ": " << with_sink << " with a sink share, " << retrieval << " retrieval");
    CHECK(with_sink / n > 0.9);
    CHECK(retrieval / n > 0.005);
    CHECK(retrieval / n < 0.08);
    CHECK(sink_late > 2 * sink_early);
    CHECK(local_early > 2 * local_late);
  }
}

// ---- head data ------------------------------------------------------------------------

TEST_CASE("synth_head has the trace shapes and finite values", "[synthetic]") {
  const SynthParams p = synth_preset("tiny");
  const HeadData h = synth_head(p, 1, 1);
  CHECK(h.layer == 1);
  CHECK(h.kv_head == 1);
  CHECK((h.keys.rows() == 64 && h.keys.cols() == 16));
  CHECK((h.keys_pre_rope.rows() == 64 && h.keys_pre_rope.cols() == 16));
  CHECK((h.values.rows() == 64 && h.values.cols() == 16));
  CHECK((h.obs_queries.rows() == 2 * 8 && h.obs_queries.cols() == 16));
  CHECK((h.decode_queries.rows() == 2 * 8 && h.decode_queries.cols() == 16));
  CHECK((h.decode_keys.rows() == 8 && h.decode_keys.cols() == 16));
  CHECK((h.decode_values.rows() == 8 && h.decode_values.cols() == 16));
  for (const MatrixRM* m : {&h.keys, &h.keys_pre_rope, &h.values, &h.obs_queries, &h.decode_queries, &h.decode_keys,
                            &h.decode_values})
    CHECK(m->allFinite());
}

TEST_CASE("synth_head is deterministic and a head does not depend on the others", "[synthetic]") {
  SynthParams p = synth_preset("tiny");
  p.seed = 2024;
  const HeadData a = synth_head(p, 1, 0);
  CHECK(same_head(a, synth_head(p, 1, 0)));  // same call, same bits

  // Other heads generated in between change nothing, nor does the number of KV heads. (The
  // number of layers does: a head's depth (l + 1/2) / L sets its kind weights.)
  (void)synth_head(p, 0, 1);
  SynthParams wider = p;
  wider.n_kv_heads = 3;
  CHECK(same_head(a, synth_head(wider, 1, 0)));

  // The prompt does not depend on the number of decode steps.
  SynthParams longer = p;
  longer.decode_steps = 20;
  const HeadData b = synth_head(longer, 1, 0);
  CHECK(same_bits(a.keys, b.keys));
  CHECK(same_bits(a.values, b.values));
  CHECK(same_bits(a.obs_queries, b.obs_queries));
  CHECK(same_bits(a.decode_keys, b.decode_keys.topRows(p.decode_steps)));
  CHECK(same_bits(a.decode_values, b.decode_values.topRows(p.decode_steps)));
  for (int k = 0; k < p.group_size; ++k)  // decode step s is the same in both
    CHECK(same_bits(a.decode_queries.middleRows(k * p.decode_steps, p.decode_steps),
                    b.decode_queries.middleRows(k * longer.decode_steps, p.decode_steps)));

  // Different seed or head: different data.
  SynthParams other = p;
  other.seed = 2025;
  CHECK_FALSE(same_bits(a.keys, synth_head(other, 1, 0).keys));
  CHECK_FALSE(same_bits(a.keys, synth_head(p, 1, 1).keys));
  CHECK_FALSE(same_bits(a.keys, synth_head(p, 0, 0).keys));
}

TEST_CASE("different presets with one seed give different heads", "[synthetic]") {
  // The preset's name is part of every head's seed: the same parameters under another name
  // are an independent draw, and so are llama-3.1-8b and mistral-7b (which differ only in theta).
  SynthParams a = synth_preset("tiny"), b = a;
  b.preset = "tiny-copy";
  CHECK_FALSE(same_bits(synth_head(a, 0, 0).keys, synth_head(b, 0, 0).keys));
  CHECK_FALSE(same_bits(synth_head(a, 1, 1).values, synth_head(b, 1, 1).values));

  const auto plans_of = [](const std::string& name) { return head_plans(synth_meta(synth_preset(name))); };
  const auto llama = plans_of("llama-3.1-8b"), mistral = plans_of("mistral-7b"), llama_small = plans_of("llama-like");
  int same_kind = 0, same_scale = 0;
  for (std::size_t i = 0; i < llama.size(); ++i) {
    same_kind += llama[i].at("kind") == mistral[i].at("kind");
    same_scale += llama[i].at("logit_scale") == mistral[i].at("logit_scale");
  }
  CHECK(same_scale == 0);
  CHECK(same_kind < static_cast<int>(llama.size()) * 3 / 4);  // independent draws agree by chance only
  for (std::size_t i = 0; i < llama_small.size(); ++i)
    CHECK(llama_small[i].at("logit_scale") != llama[i].at("logit_scale"));
}

TEST_CASE("synthetic keys are RoPE of the pre-RoPE keys at positions 0..T-1", "[synthetic]") {
  for (const char* preset : {"tiny", "qwen-like"}) {
    SynthParams p = synth_preset(preset);
    p.n_layers = 1;
    p.n_kv_heads = 2;
    const HeadData h = synth_head(p, 0, 1);
    double worst = 0.0, scale = 0.0;
    for (int t = 0; t < p.prompt_len; ++t) {
      const std::vector<double> r = rope(&h.keys_pre_rope(t, 0), p.head_dim, t, p.rope_theta);
      for (int c = 0; c < p.head_dim; ++c) {
        worst = std::max(worst, std::abs(r[c] - h.keys(t, c)));
        scale = std::max(scale, std::abs(r[c]));
      }
    }
    INFO(preset);
    CHECK(worst <= 4e-6 * scale);
    // RoPE preserves each pair's norm, so the key norms match too.
    CHECK(h.keys.rowwise().norm().isApprox(h.keys_pre_rope.rowwise().norm(), 1e-5f));
  }
}

TEST_CASE("synthetic values are standard normal", "[synthetic]") {
  SynthParams p = one_kind("diffuse");
  const HeadData h = synth_head(p, 0, 2);
  const Eigen::ArrayXf v = Eigen::Map<const Eigen::ArrayXf>(h.values.data(), h.values.size());
  const double n = static_cast<double>(v.size());  // 65536
  const double mean = v.cast<double>().mean();
  const double var = (v.cast<double>() - mean).square().mean();
  const double within1 = (v.abs() < 1.0f).cast<double>().mean();
  const double within2 = (v.abs() < 2.0f).cast<double>().mean();
  CHECK(std::abs(mean) < 5.0 / std::sqrt(n));
  CHECK(std::abs(var - 1.0) < 5.0 * std::sqrt(2.0 / n));
  CHECK(std::abs(within1 - 0.682689) < 5.0 * std::sqrt(0.68 * 0.32 / n));  // Phi(1) - Phi(-1)
  CHECK(std::abs(within2 - 0.954500) < 5.0 * std::sqrt(0.95 * 0.05 / n));
}

TEST_CASE("synthetic keys have outlier_channels channels of RMS outlier_strength, mostly a fixed offset", "[synthetic]") {
  SynthParams p = one_kind("diffuse");  // background 0: no key mean, no sink key; no outlier tokens
  const TraceMeta m = synth_meta(p);
  for (int h = 0; h < p.n_kv_heads; ++h) {
    const HeadData hd = synth_head(p, 0, h);
    const auto outliers = head_plans(m)[h].at("outlier_channels").get<std::vector<int>>();
    REQUIRE(outliers.size() == 4u);
    const Eigen::ArrayXXd k = hd.keys_pre_rope.cast<double>().array();
    const Eigen::RowVectorXd mean = k.colwise().mean();
    const Eigen::RowVectorXd rms = k.square().colwise().mean().sqrt();
    for (int c = 0; c < p.head_dim; ++c) {
      const bool outlier = std::find(outliers.begin(), outliers.end(), c) != outliers.end();
      INFO("head " << h << " channel " << c);
      CHECK(rms[c] == Approx(outlier ? p.outlier_strength : 1.0).epsilon(0.1));
      if (outlier) CHECK(std::abs(mean[c]) == Approx(0.8 * p.outlier_strength).epsilon(0.1));
      if (!outlier) CHECK(std::abs(mean[c]) < 0.25);
    }
  }
}

TEST_CASE("key content is correlated between neighbouring positions, and some tokens are outliers", "[synthetic]") {
  SynthParams p = one_kind("diffuse");
  const HeadData h = synth_head(p, 0, 1);
  const auto outliers = head_plans(synth_meta(p))[1].at("outlier_channels").get<std::vector<int>>();
  double num = 0.0, den = 0.0;
  for (int c = 0; c < p.head_dim; ++c) {
    if (std::find(outliers.begin(), outliers.end(), c) != outliers.end()) continue;
    for (int t = 1; t < p.prompt_len; ++t) num += double(h.keys_pre_rope(t, c)) * h.keys_pre_rope(t - 1, c);
    for (int t = 0; t < p.prompt_len; ++t) den += double(h.keys_pre_rope(t, c)) * h.keys_pre_rope(t, c);
  }
  CHECK(num / den == Approx(0.45).margin(0.04));  // rho, measured on stories260K's pre-RoPE keys: 0.32-0.48

  // Outlier tokens: about outlier_token_rate of the keys have a 2.5x larger content norm.
  p.outlier_token_rate = 0.05;
  const HeadData o = synth_head(p, 0, 1);
  const Eigen::VectorXd norms = o.keys_pre_rope.cast<double>().rowwise().norm();
  std::vector<double> sorted(norms.data(), norms.data() + norms.size());
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  int big = 0;
  for (double x : sorted) big += x > 1.8 * median;
  CHECK(big > 0.5 * 0.05 * p.prompt_len);
  CHECK(big < 1.5 * 0.05 * p.prompt_len);
}

TEST_CASE("queries are large on the keys' outlier channels", "[synthetic]") {
  // RoPE mixes the two channels of a pair, so the pairs' energies are compared: a pair with one
  // outlier channel carries (w^2 + 1) / 2 times a clean pair's, w = query_outlier_strength.
  SynthParams p = one_kind("diffuse");
  p.query_outlier_strength = 3.0;
  p.group_size = 16;  // enough query heads that the base contents average out
  const TraceMeta m = synth_meta(p);
  for (int h = 0; h < p.n_kv_heads; ++h) {
    const HeadData hd = synth_head(p, 0, h);
    const auto outliers = head_plans(m)[h].at("outlier_channels").get<std::vector<int>>();
    std::vector<int> count(p.head_dim / 2, 0);
    for (int c : outliers) ++count[c / 2];
    double clean = 0.0, one = 0.0;
    int n_clean = 0, n_one = 0;
    for (int i = 0; i < p.head_dim / 2; ++i) {
      const double e = (hd.obs_queries.col(2 * i).cast<double>().squaredNorm() +
                        hd.obs_queries.col(2 * i + 1).cast<double>().squaredNorm());
      if (count[i] == 0) clean += e, ++n_clean;
      if (count[i] == 1) one += e, ++n_one;
    }
    if (n_one == 0) continue;
    INFO("head " << h);
    CHECK((one / n_one) / (clean / n_clean) == Approx((9.0 + 1.0) / 2.0).epsilon(0.3));
  }
}

TEST_CASE("a logit scale multiplies the queries of a pure-content head and nothing else", "[synthetic]") {
  // Without structure (a diffuse head, background 0) every query is content only, scaled by
  // lambda; with structure, the shares are held and only the content sharpens.
  SynthParams a = one_kind("diffuse");
  a.logit_scale_min = a.logit_scale_max = 1.0;
  SynthParams b = a;
  b.logit_scale_min = b.logit_scale_max = 2.0;
  const HeadData ha = synth_head(a, 0, 0), hb = synth_head(b, 0, 0);
  CHECK(same_bits(ha.keys, hb.keys));
  CHECK(same_bits(ha.values, hb.values));
  CHECK(same_bits(MatrixRM(2.0f * ha.obs_queries), hb.obs_queries));  // x2 is exact in binary
  CHECK(same_bits(MatrixRM(2.0f * ha.decode_queries), hb.decode_queries));
}

TEST_CASE("GQA query heads are similar but not identical", "[synthetic]") {
  // They share the structure (here: strong spans) and have their own content.
  SynthParams p = one_kind("retrieval");
  p.prompt_len = 240;
  p.span_mass_min = 0.6;
  p.span_mass_max = 0.8;
  const HeadData h = synth_head(p, 0, 1);
  const int W = p.obs_window;
  const Eigen::RowVectorXf m0 = h.obs_queries.topRows(W).colwise().mean();
  const Eigen::RowVectorXf m1 = h.obs_queries.middleRows(W, W).colwise().mean();
  const double cosine = m0.dot(m1) / (m0.norm() * m1.norm());
  CHECK(cosine > 0.3);  // the shared spans; the rest is each query head's own content
  CHECK(cosine < 0.999);
}

TEST_CASE("decode queries drift by a random walk of query_drift |q0| per step", "[synthetic]") {
  // The walk has its own random stream, so with and without drift the decode queries of a
  // pure-content head differ by exactly z_s, z_s = z_{s-1} + N(0, (query_drift |q0|)^2 / d I),
  // q0 = s_q b_k the query head's base content.
  SynthParams still = one_kind("diffuse"), moving = still;
  still.query_drift = 0.0;
  moving.query_drift = 0.1;
  const int S = still.decode_steps, W = still.obs_window;
  for (int h = 0; h < still.n_kv_heads; ++h) {
    const HeadData a = synth_head(still, 0, h), b = synth_head(moving, 0, h);
    CHECK(same_bits(a.obs_queries, b.obs_queries));
    for (int k = 0; k < still.group_size; ++k) {
      // |q0|^2 estimated from the observation queries nu (q0 + eps s_q xi): E|.|^2 = E[nu^2] (1 + eps^2) |q0|^2
      // on average over heads, eps = 0.5, E[nu^2] = exp(0.3^2).
      const double q0 = std::sqrt(a.obs_queries.middleRows(k * W, W).rowwise().squaredNorm().mean() / 1.25 /
                                  std::exp(0.09));
      const MatrixRM z = b.decode_queries.middleRows(k * S, S) - a.decode_queries.middleRows(k * S, S);
      double step2 = z.row(0).squaredNorm();
      for (int s = 1; s < S; ++s) step2 += (z.row(s) - z.row(s - 1)).squaredNorm();
      const double step = std::sqrt(step2 / S);
      INFO("head " << h << " query head " << k);
      CHECK(step / q0 == Approx(0.1).epsilon(0.3));
    }
  }
  const HeadData a = synth_head(still, 0, 0), b = synth_head(moving, 0, 0);
  // A walk, not independent noise: the offset at step S is about sqrt(S) steps long.
  const MatrixRM z = b.decode_queries.topRows(S) - a.decode_queries.topRows(S);
  CHECK(z.row(S - 1).norm() > 2.0 * z.row(0).norm());
}

// ---- attention shapes, in the exact causal softmax -------------------------------------

TEST_CASE("every query gives the first token its head's drawn share over the reference positions", "[synthetic]") {
  // The sink component is solved per query: the share is the plan's times the query head's
  // factor in [0.9, 1.1] (then capped with the other shares at 0.95), exactly while the query
  // sees at most the 256 reference positions.
  for (const char* kind : {"sink", "local", "diffuse"}) {
    SynthParams p = one_kind(kind, 1.0);  // background 1: every head has a first-token share
    p.prompt_len = 240;                   // queries at positions 224..255
    const TraceMeta m = synth_meta(p);
    const auto plans = head_plans(m);
    for (int h = 0; h < p.n_kv_heads; ++h) {
      const double target = plans[h].at("sink_mass").get<double>();
      const HeadData hd = synth_head(p, 0, h);
      for (bool decode : {false, true}) {
        const Shape s = measure(hd, m, decode, 1, target);
        INFO(kind << " head " << h << (decode ? " decode" : " obs") << " target " << target);
        CHECK(s.min_sink_ratio > 0.85);
        CHECK(s.max_sink_ratio < 1.1 + 1e-6);
        if (std::string(kind) == "sink") CHECK(target >= p.sink_mass_min * 0.95 / 1.0);
      }
    }
  }
}

TEST_CASE("local heads attend to the positions just around the query", "[synthetic]") {
  SynthParams p = one_kind("local");
  p.prompt_len = 240;  // within the 256 reference positions (longer contexts dilute the share)
  p.local_mass_min = 0.6;
  p.local_mass_max = 0.8;
  const TraceMeta m = synth_meta(p);
  for (int h = 0; h < p.n_kv_heads; ++h) {
    const HeadData hd = synth_head(p, 0, h);
    for (bool decode : {false, true}) {
      const Shape s = measure(hd, m, decode);
      INFO("head " << h << (decode ? " decode" : " obs"));
      CHECK(s.local_mass > 0.5);
      CHECK(s.peak_near >= 0.9);  // the peak follows the query position (obs: T-W+i, decode: T+s-1)
      CHECK(s.sink_mass < 0.01);
    }
  }
}

TEST_CASE("retrieval heads' queries attend to the planted spans", "[synthetic]") {
  SynthParams p = one_kind("retrieval");
  p.prompt_len = 240;  // within the 256 reference positions (longer contexts dilute the share)
  p.span_mass_min = 0.6;
  p.span_mass_max = 0.8;
  const TraceMeta m = synth_meta(p);
  for (int h = 0; h < p.n_kv_heads; ++h) {
    const HeadData hd = synth_head(p, 0, h);
    REQUIRE(hd.spans.size() == 4u);
    INFO("head " << h);
    CHECK(measure(hd, m, true).span_mass > 0.5);  // 32 of 240 tokens
    CHECK(measure(hd, m, false).span_mass > 0.5);
  }
}

TEST_CASE("diffuse heads spread attention; logit scale sharpens it", "[synthetic]") {
  const SynthParams p = one_kind("diffuse");
  const TraceMeta m = synth_meta(p);
  double least = 1.0;
  for (int h = 0; h < p.n_kv_heads; ++h) {
    const HeadData hd = synth_head(p, 0, h);
    const Shape s = measure(hd, m, true);
    INFO("head " << h);
    CHECK(s.norm_entropy > 0.9);
    CHECK(s.sink_mass < 0.01);
    least = std::min(least, s.norm_entropy);
  }
  // Every structured head is less spread than every diffuse one.
  for (const char* kind : {"sink", "local", "retrieval"}) {
    SynthParams q = one_kind(kind);
    q.sink_mass_min = q.local_mass_min = q.span_mass_min = 0.5;
    const TraceMeta mq = synth_meta(q);
    for (int h = 0; h < q.n_kv_heads; ++h) CHECK(measure(synth_head(q, 0, h), mq, true).norm_entropy < least);
  }
  SynthParams soft = p, sharp = p;
  soft.logit_scale_min = soft.logit_scale_max = 1.0;
  sharp.logit_scale_min = sharp.logit_scale_max = 4.0;
  CHECK(measure(synth_head(sharp, 0, 0), synth_meta(sharp), false).norm_entropy <
        measure(synth_head(soft, 0, 0), synth_meta(soft), false).norm_entropy - 0.05);
}

TEST_CASE("every head of every small preset has its dominant component's attention", "[synthetic][presets]") {
  for (const char* preset : {"llama-like", "mistral-like", "qwen-like"}) {
    SynthParams p = synth_preset(preset);
    p.prompt_len = 192;  // queries within the 256 reference positions: the shares are exact
    p.mix_retrieval = 0.2;  // meet some retrieval heads
    const TraceMeta m = synth_meta(p);
    const auto plans = head_plans(m);
    for (int l = 0; l < p.n_layers; ++l)
      for (int h = 0; h < p.n_kv_heads; ++h) {
        const auto& plan = plans[static_cast<std::size_t>(l) * p.n_kv_heads + h];
        const std::string kind = plan.at("kind").get<std::string>();
        const HeadData hd = synth_head(p, l, h);
        const Shape s = measure(hd, m, true, 8, plan.at("sink_mass").get<double>());  // every 8th decode step
        INFO(preset << " layer " << l << " head " << h << " " << kind);
        CHECK(s.min_sink_ratio > 0.85);  // every head, whatever its kind
        if (kind == "sink") CHECK(s.sink_mass > 0.25);
        if (kind == "local") CHECK(s.local_mass > 0.3);
        if (kind == "retrieval") CHECK(s.span_mass > 0.3);
      }
  }
}

TEST_CASE("attention spreads with T: the tokens holding 90% of it grow, the structure's shares dilute",
          "[synthetic][realism]") {
  // stories260K (captured, docs/synthetic.md): median n90 7.0, 11.5, 15.7, 26.7 at T = 64, 128, 256, 448.
  SynthParams p = synth_preset("llama-like");
  p.n_kv_heads = 4;
  p.decode_steps = 1;
  const double n90_128 = median_over_heads(p, 128, &HeadRealism::n90);
  const double n90_448 = median_over_heads(p, 448, &HeadRealism::n90);
  const double n90_2048 = median_over_heads(p, 2048, &HeadRealism::n90);
  CHECK(n90_448 > 1.5 * n90_128);
  CHECK(n90_2048 > 2.0 * n90_448);
  CHECK(median_over_heads(p, 2048, &HeadRealism::entropy) > median_over_heads(p, 128, &HeadRealism::entropy) + 0.3);
  // Up to 256 positions the first token's share is the drawn one; beyond, older positions dilute it.
  const double m0_128 = median_over_heads(p, 128, &HeadRealism::first_token_mass);
  CHECK(median_over_heads(p, 224, &HeadRealism::first_token_mass) == Approx(m0_128).epsilon(1e-6));
  CHECK(median_over_heads(p, 2048, &HeadRealism::first_token_mass) < 0.5 * m0_128);
}

TEST_CASE("a small preset's margins and 2-bit logit noise are in the range measured on stories260K", "[synthetic][realism]") {
  // stories260K at T = 128..448: median margin 10.2-11.3 nats, median 2-bit noise 1.7-2.6 nat^2.
  for (const char* preset : {"llama-like", "qwen-like"}) {
    SynthParams p = synth_preset(preset);
    p.decode_steps = 1;
    INFO(preset);
    const double margin = median_over_heads(p, 256, &HeadRealism::margin);
    const double noise = median_over_heads(p, 256, &HeadRealism::noise);
    CHECK(margin > 8.0);
    CHECK(margin < 16.0);
    CHECK(noise > 1.0);
    CHECK(noise < 4.0);
  }
}

// ---- writing the file -----------------------------------------------------------------

TEST_CASE("write_synthetic_trace streams every head, reads back, and is byte-identical", "[synthetic][io]") {
  SynthParams p = synth_preset("tiny");
  p.seed = 31;
  const std::string a = temp_path("tiny_a.safetensors"), b = temp_path("tiny_b.safetensors"),
                    c = temp_path("tiny_c.safetensors");
  std::vector<std::pair<int, int>> calls;
  write_synthetic_trace(p, a, [&](int done, int total) { calls.emplace_back(done, total); });
  REQUIRE(calls.size() == 4u);
  for (int i = 0; i < 4; ++i) CHECK(calls[i] == std::make_pair(i + 1, 4));

  write_synthetic_trace(p, b);
  const std::string bytes_a = file_bytes(a);
  CHECK(bytes_a.size() > 0u);
  CHECK(bytes_a == file_bytes(b));

  SynthParams q = p;
  q.seed = 32;
  write_synthetic_trace(q, c);
  CHECK(bytes_a != file_bytes(c));

  const TraceReader reader(a);
  const TraceMeta& m = reader.meta();
  const TraceMeta expect = synth_meta(p);
  CHECK(m.n_layers == 2);
  CHECK(m.group_size == 2);
  CHECK(m.has_pre_rope);
  CHECK(m.storage == DType::F32);
  CHECK(nlohmann::json::parse(m.provenance) == nlohmann::json::parse(expect.provenance));
  REQUIRE(m.spans.size() == expect.spans.size());
  for (std::size_t i = 0; i < m.spans.size(); ++i) {
    REQUIRE(m.spans[i].size() == expect.spans[i].size());
    for (std::size_t j = 0; j < m.spans[i].size(); ++j) {
      CHECK(m.spans[i][j].begin == expect.spans[i][j].begin);
      CHECK(m.spans[i][j].end == expect.spans[i][j].end);
    }
  }
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) CHECK(same_head(reader.head(l, h), synth_head(p, l, h)));
  fs::remove(a);
  fs::remove(b);
  fs::remove(c);
}

TEST_CASE("write_synthetic_trace honours the storage dtype", "[synthetic][io]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    SynthParams p = synth_preset("tiny");
    p.storage = dt;
    const std::string path = temp_path(std::string("tiny_") + std::string(dtype_name(dt)) + ".safetensors");
    write_synthetic_trace(p, path);
    const TraceReader reader(path);
    CHECK(reader.meta().storage == dt);
    CHECK(reader.file().info(head_tensor_name(0, 0, "keys")).dtype == dt);
    const HeadData stored = reader.head(0, 1), exact = synth_head(p, 0, 1);
    // Half keeps 11 significant bits, bfloat16 8: relative rounding 2^-11 and 2^-8.
    const float rel = dt == DType::F16 ? 1.0f / 2048 : 1.0f / 256;
    CHECK(((stored.keys - exact.keys).array().abs() <= rel * exact.keys.array().abs() + 1e-6f).all());
    CHECK(((stored.decode_queries - exact.decode_queries).array().abs() <=
           rel * exact.decode_queries.array().abs() + 1e-6f)
              .all());
    CHECK_FALSE(same_bits(stored.keys, exact.keys));
    fs::remove(path);
  }
}

TEST_CASE("A synthetic trace generated in memory reads the bits of the same trace written to a file and read back, "
          "for F32, F16 and BF16 storage",
          "[synthetic]") {
  tierlab::testing::TempDir dir("synthetic-in-memory");
  for (const DType storage : {DType::F32, DType::F16, DType::BF16}) {
    INFO("storage " << dtype_name(storage));
    SynthParams p = synth_preset("tiny");
    p.n_layers = 2;
    p.n_kv_heads = 2;
    p.prompt_len = 200;
    p.decode_steps = 6;
    p.storage = storage;
    p.seed = 11;
    const std::string path = dir.file("t-" + std::string(dtype_name(storage)) + ".safetensors");
    write_synthetic_trace(p, path);
    const TraceReader file(path);
    const TraceReader mem = synthetic_trace(p, "synthetic cell tiny-s11");
    CHECK(mem.generated());
    CHECK_FALSE(file.generated());
    CHECK(mem.path() == "synthetic cell tiny-s11");
    CHECK(mem.meta().n_heads() == file.meta().n_heads());
    CHECK(mem.meta().spans.size() == file.meta().spans.size());
    CHECK(mem.meta().storage == storage);
    CHECK_THROWS_WITH(mem.file(), Catch::Contains("synthetic cell tiny-s11") && Catch::Contains("has no file"));
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) {
        const HeadData a = file.head(l, h), b = mem.head(l, h);
        CHECK(a.keys == b.keys);
        CHECK(a.keys_pre_rope.rows() == b.keys_pre_rope.rows());
        CHECK(a.keys_pre_rope == b.keys_pre_rope);
        CHECK(a.values == b.values);
        CHECK(a.obs_queries == b.obs_queries);
        CHECK(a.decode_queries == b.decode_queries);
        CHECK(a.decode_keys == b.decode_keys);
        CHECK(a.decode_values == b.decode_values);
        CHECK(a.spans.size() == b.spans.size());
        CHECK(a.group_size == b.group_size);
        CHECK(b.layer == l);
        CHECK(b.kv_head == h);
      }
  }
}

TEST_CASE("A generated trace checks its heads as a file's are checked: a wrong shape or a value that is not finite "
          "is an error naming the trace and the tensor",
          "[synthetic]") {
  SynthParams p = synth_preset("tiny");
  p.n_layers = 1;
  p.n_kv_heads = 1;
  p.prompt_len = 64;
  const TraceMeta meta = synth_meta(p);
  const TraceReader short_keys(meta, "gen", [&](int l, int h) {
    HeadData d = synth_head(p, l, h);
    d.keys.conservativeResize(d.keys.rows() - 1, Eigen::NoChange);
    return d;
  });
  CHECK_THROWS_WITH(short_keys.head(0, 0), Catch::Contains("trace 'gen'") && Catch::Contains("layers.0.heads.0.keys") &&
                                               Catch::Contains("expected [64, "));
  const TraceReader nan_values(meta, "gen", [&](int l, int h) {
    HeadData d = synth_head(p, l, h);
    d.values(3, 2) = std::numeric_limits<float>::quiet_NaN();
    return d;
  });
  CHECK_THROWS_WITH(nan_values.head(0, 0), Catch::Contains("layers.0.heads.0.values") && Catch::Contains("not finite"));
  CHECK_THROWS_WITH(TraceReader(meta, "gen", HeadGenerator{}), Catch::Contains("no generator"));
}
