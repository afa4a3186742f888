// Trace container: round trip of a small hand-made trace, the metadata strings it
// stores, and the errors for wrong shapes, missing fields and bad tensors.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"
#include "model/io/trace.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using tierlab::testing::TempDir;
using tierlab::testing::error_of;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// L=2 layers, H=2 KV heads, g=2, d=4, T=5, W=2, S=3.
TraceMeta small_meta(DType storage = DType::F32) {
  TraceMeta m;
  m.n_layers = 2;
  m.n_kv_heads = 2;
  m.group_size = 2;
  m.head_dim = 4;
  m.prompt_len = 5;
  m.obs_window = 2;
  m.decode_steps = 3;
  m.has_pre_rope = true;
  m.rope.theta = 500000.0;
  m.rope.rotary_dim = 2;
  m.rope.style = "half";
  m.storage = storage;
  m.provenance = R"({"source":"synthetic","seed":7})";
  m.spans.assign(4, {});
  m.spans[2] = {{1, 3}, {4, 5}};  // head (1, 0)
  m.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
  return m;
}

// Values exactly representable in F16 and BF16: (field*100 + layer*10 + head) / 4 + i/8
// kept small, so every storage dtype round-trips exactly.
MatrixRM filled(int rows, int cols, int field, int l, int h) {
  MatrixRM m(rows, cols);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) m(r, c) = 0.25f * (field * 4 + l * 2 + h) + 0.125f * (r * cols + c) - 3.0f;
  }
  return m;
}

HeadData small_head(const TraceMeta& m, int l, int h) {
  HeadData hd;
  hd.layer = l;
  hd.kv_head = h;
  const int T = m.prompt_len, d = m.head_dim, g = m.group_size, W = m.obs_window, S = m.decode_steps;
  hd.keys = filled(T, d, 1, l, h);
  if (m.has_pre_rope) hd.keys_pre_rope = filled(T, d, 2, l, h);
  hd.values = filled(T, d, 3, l, h);
  hd.obs_queries = filled(g * W, d, 4, l, h);
  hd.decode_queries = filled(g * S, d, 5, l, h);
  hd.decode_keys = filled(S, d, 6, l, h);
  hd.decode_values = filled(S, d, 7, l, h);
  if (!m.spans.empty()) hd.spans = m.spans[l * m.n_kv_heads + h];
  return hd;
}

void write_small_trace(const std::string& path, const TraceMeta& m) {
  TraceWriter w(path, m);
  for (int l = 0; l < m.n_layers; ++l) {
    for (int h = 0; h < m.n_kv_heads; ++h) w.write_head(small_head(m, l, h));
  }
  w.commit();
}

// The metadata strings a valid small trace carries, spelled out by hand.
std::map<std::string, std::string> small_meta_strings() {
  return {{"tierlab.format", "trace-v1"}, {"n_layers", "2"},       {"n_kv_heads", "2"},
          {"group_size", "2"},           {"head_dim", "4"},       {"prompt_len", "5"},
          {"obs_window", "2"},           {"decode_steps", "3"},   {"has_pre_rope", "false"},
          {"storage_dtype", "F32"}};
}

// A trace written with the plain safetensors writer (as another tool would), with one
// metadata string changed and optionally one tensor left out or given another shape.
std::string write_raw_trace(const TempDir& dir, const std::string& name, std::map<std::string, std::string> md,
                            const std::string& skip = "", const std::string& reshape = "") {
  const std::string path = dir.file(name);
  SafetensorsWriter w(path, md);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors;
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      for (const auto& [f, shape] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
               {"keys", {5, 4}}, {"values", {5, 4}}, {"obs_queries", {2, 2, 4}}, {"decode_queries", {2, 3, 4}},
               {"decode_keys", {3, 4}}, {"decode_values", {3, 4}}}) {
        const std::string t = head_tensor_name(l, h, f);
        if (t == skip) continue;
        tensors.push_back({t, t == reshape ? std::vector<std::int64_t>{4, 5} : shape});
      }
    }
  }
  for (const auto& [t, shape] : tensors) w.declare(t, DType::F32, shape);
  for (const auto& [t, shape] : tensors) {
    std::size_t n = 1;
    for (auto d : shape) n *= static_cast<std::size_t>(d);
    std::vector<float> v(n, 0.5f);
    w.write_f32(t, v.data(), n);
  }
  w.commit();
  return path;
}

}  // namespace

TEST_CASE("head_tensor_name follows the documented pattern", "[trace]") {
  CHECK(head_tensor_name(3, 1, "keys") == "layers.3.heads.1.keys");
  CHECK(head_tensor_name(0, 12, "decode_values") == "layers.0.heads.12.decode_values");
}

TEST_CASE("a small trace round-trips through TraceWriter and TraceReader", "[trace]") {
  TempDir dir("trace-rt");
  for (DType storage : {DType::F32, DType::F16, DType::BF16}) {
    DYNAMIC_SECTION("storage " << dtype_name(storage)) {
      const TraceMeta m = small_meta(storage);
      const std::string path = dir.file("small.safetensors");
      write_small_trace(path, m);

      TraceReader r(path);
      CHECK(r.path() == path);
      const TraceMeta& got = r.meta();
      CHECK(got.n_layers == 2);
      CHECK(got.n_kv_heads == 2);
      CHECK(got.group_size == 2);
      CHECK(got.head_dim == 4);
      CHECK(got.prompt_len == 5);
      CHECK(got.obs_window == 2);
      CHECK(got.decode_steps == 3);
      CHECK(got.has_pre_rope);
      CHECK(got.rope.theta == 500000.0);
      CHECK(got.rope.rotary_dim == 2);
      CHECK(got.rope.style == "half");
      CHECK(got.storage == storage);
      CHECK(got.provenance == m.provenance);
      CHECK(got.token_ids == m.token_ids);
      REQUIRE(got.spans.size() == 4);
      CHECK(got.spans[0].empty());
      REQUIRE(got.spans[2].size() == 2);
      CHECK(got.spans[2][1].begin == 4);
      CHECK(got.spans[2][1].end == 5);

      for (int l = 0; l < 2; ++l) {
        for (int h = 0; h < 2; ++h) {
          const HeadData want = small_head(m, l, h);
          const HeadData hd = r.head(l, h);
          CHECK(hd.layer == l);
          CHECK(hd.kv_head == h);
          CHECK(hd.keys == want.keys);
          CHECK(hd.keys_pre_rope == want.keys_pre_rope);
          CHECK(hd.values == want.values);
          CHECK(hd.obs_queries == want.obs_queries);
          CHECK(hd.decode_queries == want.decode_queries);
          CHECK(hd.decode_keys == want.decode_keys);
          CHECK(hd.decode_values == want.decode_values);
          CHECK(hd.spans.size() == want.spans.size());
        }
      }
      CHECK(r.file().info("layers.1.heads.0.keys").dtype == storage);
      CHECK(r.file().info("token_ids").dtype == DType::I32);
    }
  }
}

TEST_CASE("F16 storage rounds to nearest even", "[trace]") {
  TempDir dir("trace-f16");
  TraceMeta m = small_meta(DType::F16);
  m.n_layers = 1;
  m.n_kv_heads = 1;
  m.spans.clear();
  const std::string path = dir.file("f16.safetensors");
  TraceWriter w(path, m);
  HeadData hd = small_head(m, 0, 0);
  hd.keys(2, 3) = 1.0f / 3.0f;  // f16 0x3555 = 0.333251953125
  w.write_head(hd);
  w.commit();
  TraceReader r(path);
  CHECK(r.head(0, 0).keys(2, 3) == 0.333251953125f);
}

TEST_CASE("every TraceMeta field is stored as a metadata string", "[trace]") {
  TempDir dir("trace-md");
  const std::string path = dir.file("md.safetensors");
  write_small_trace(path, small_meta());
  SafetensorsFile f(path);
  const auto& md = f.metadata();
  CHECK(md.at("tierlab.format") == "trace-v1");
  CHECK(md.at("n_layers") == "2");
  CHECK(md.at("n_kv_heads") == "2");
  CHECK(md.at("group_size") == "2");
  CHECK(md.at("head_dim") == "4");
  CHECK(md.at("prompt_len") == "5");
  CHECK(md.at("obs_window") == "2");
  CHECK(md.at("decode_steps") == "3");
  CHECK(md.at("has_pre_rope") == "true");
  CHECK(md.at("rope_theta") == "500000");
  CHECK(md.at("rope_dim") == "2");
  CHECK(md.at("rope_style") == "half");
  CHECK(md.at("storage_dtype") == "F32");
  CHECK(md.at("provenance") == R"({"source":"synthetic","seed":7})");
  CHECK(md.at("spans") == R"({"1.0":[[1,3],[4,5]]})");
  CHECK(f.info("layers.1.heads.1.obs_queries").shape == std::vector<std::int64_t>{2, 2, 4});
  CHECK(f.info("layers.0.heads.0.decode_queries").shape == std::vector<std::int64_t>{2, 3, 4});
  CHECK(f.info("token_ids").shape == std::vector<std::int64_t>{8});
}

TEST_CASE("a trace written by another tool in another tensor order reads", "[trace]") {
  TempDir dir("trace-raw");
  const std::string path = write_raw_trace(dir, "raw.safetensors", small_meta_strings());
  TraceReader r(path);
  CHECK_FALSE(r.meta().has_pre_rope);
  CHECK(r.meta().spans.empty());
  CHECK(r.meta().token_ids.empty());
  CHECK(r.meta().rope.theta == 10000.0);  // documented defaults for absent RoPE fields
  CHECK(r.meta().rope.style == "interleaved");
  const HeadData hd = r.head(1, 1);
  CHECK(hd.keys_pre_rope.size() == 0);
  CHECK(hd.obs_queries.rows() == 4);
  CHECK(hd.obs_queries(3, 3) == 0.5f);
}

TEST_CASE("TraceWriter rejects wrong shapes naming the field", "[trace]") {
  TempDir dir("trace-shapes");
  const TraceMeta m = small_meta();
  const std::string path = dir.file("w.safetensors");

  SECTION("keys") {
    TraceWriter w(path, m);
    HeadData hd = small_head(m, 0, 0);
    hd.keys = MatrixRM::Zero(4, 4);
    CHECK_THAT(error_of<InputError>([&] { w.write_head(hd); }),
               Contains(path) && Contains("HeadData.keys") && Contains("prompt_len") && Contains("5 x 4"));
  }
  SECTION("obs_queries") {
    TraceWriter w(path, m);
    HeadData hd = small_head(m, 0, 0);
    hd.obs_queries = MatrixRM::Zero(2, 4);  // W rows instead of g * W
    CHECK_THAT(error_of<InputError>([&] { w.write_head(hd); }),
               Contains("HeadData.obs_queries") && Contains("group_size * obs_window"));
  }
  SECTION("decode_values head_dim") {
    TraceWriter w(path, m);
    HeadData hd = small_head(m, 0, 0);
    hd.decode_values = MatrixRM::Zero(3, 5);
    CHECK_THAT(error_of<InputError>([&] { w.write_head(hd); }), Contains("HeadData.decode_values") && Contains("head_dim"));
  }
  SECTION("keys_pre_rope without has_pre_rope") {
    TraceMeta m2 = m;
    m2.has_pre_rope = false;
    TraceWriter w(path, m2);
    CHECK_THAT(error_of<InputError>([&] { w.write_head(small_head(m, 0, 0)); }),
               Contains("keys_pre_rope") && Contains("has_pre_rope"));
  }
  SECTION("heads out of order") {
    TraceWriter w(path, m);
    CHECK_THAT(error_of<InputError>([&] { w.write_head(small_head(m, 0, 1)); }), Contains("(0, 0) is next"));
  }
  SECTION("spans that differ from the meta") {
    TraceWriter w(path, m);
    HeadData hd = small_head(m, 0, 0);
    hd.spans = {{0, 1}};
    CHECK_THAT(error_of<InputError>([&] { w.write_head(hd); }), Contains("spans"));
  }
  SECTION("commit with heads missing leaves no file") {
    {
      TraceWriter w(path, m);
      w.write_head(small_head(m, 0, 0));
      CHECK_THAT(error_of<InputError>([&] { w.commit(); }), Contains("1 of 4") && Contains("(0, 1)"));
    }
    CHECK_FALSE(fs::exists(path));
    CHECK(fs::is_empty(dir.path));
  }
  SECTION("a NaN in a head is named with its index") {
    TraceWriter w(path, m);
    HeadData hd = small_head(m, 0, 0);
    hd.values(1, 2) = std::numeric_limits<float>::quiet_NaN();
    CHECK_THAT(error_of<InputError>([&] { w.write_head(hd); }),
               Contains("layers.0.heads.0.values") && Contains("flat index 6"));
  }
}

TEST_CASE("TraceWriter rejects an invalid TraceMeta naming the field", "[trace]") {
  TempDir dir("trace-meta");
  const std::string path = dir.file("m.safetensors");
  struct Case {
    const char* field;
    void (*edit)(TraceMeta&);
  };
  const Case cases[] = {
      {"n_layers", [](TraceMeta& m) { m.n_layers = 0; }},
      {"head_dim", [](TraceMeta& m) { m.head_dim = -4; }},
      {"obs_window", [](TraceMeta& m) { m.obs_window = 6; }},
      {"rope_dim", [](TraceMeta& m) { m.rope.rotary_dim = 3; }},
      {"rope_style", [](TraceMeta& m) { m.rope.style = "neox"; }},
      {"storage_dtype", [](TraceMeta& m) { m.storage = DType::I32; }},
      {"spans", [](TraceMeta& m) { m.spans.resize(3); }},
      {"spans", [](TraceMeta& m) { m.spans[1] = {{3, 9}}; }},
      {"token_ids", [](TraceMeta& m) { m.token_ids.pop_back(); }},
      {"provenance", [](TraceMeta& m) { m.provenance = "seed=7"; }},
  };
  for (const Case& c : cases) {
    TraceMeta m = small_meta();
    c.edit(m);
    INFO(c.field);
    CHECK_THAT(error_of<InputError>([&] { TraceWriter w(path, m); }),
               Contains(path) && Contains(std::string("TraceMeta.") + c.field));
  }
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("TraceReader names the missing or malformed metadata field and value", "[trace]") {
  TempDir dir("trace-badmeta");
  struct Case {
    const char* key;
    const char* value;  // nullptr: remove the key
    const char* expect;
  };
  const Case cases[] = {
      {"head_dim", nullptr, "'head_dim' is missing"},
      {"tierlab.format", nullptr, "'tierlab.format' is missing"},
      {"tierlab.format", "trace-v0", "'trace-v0'"},
      {"n_layers", "two", "'n_layers' = 'two' is not an integer"},
      {"n_layers", "2.0", "'n_layers' = '2.0' is not an integer"},
      {"n_kv_heads", "0", "'n_kv_heads' = '0' is out of range"},
      {"obs_window", "6", "'obs_window' = '6' is out of range"},
      {"decode_steps", "-1", "'decode_steps' = '-1' is out of range"},
      {"has_pre_rope", "yes", "'has_pre_rope' = 'yes'"},
      {"storage_dtype", "I32", "'storage_dtype' = 'I32'"},
      {"rope_theta", "-5", "'rope_theta' = '-5'"},
      {"rope_style", "neox", "'rope_style' = 'neox'"},
      {"provenance", "seed 7", "'provenance' = 'seed 7'"},
      {"spans", "{\"5.0\":[[0,1]]}", "'5.0'"},
      {"spans", "{\"0.0\":[[3,2]]}", "[3,2]"},
  };
  int i = 0;
  for (const Case& c : cases) {
    auto md = small_meta_strings();
    if (c.value) md[c.key] = c.value;
    else md.erase(c.key);
    const std::string path = write_raw_trace(dir, "bad" + std::to_string(i++) + ".safetensors", md);
    INFO(c.key);
    CHECK_THAT(error_of<FormatError>([&] { TraceReader r(path); }), Contains(path) && Contains(c.expect));
  }
}

TEST_CASE("TraceReader names a missing or misshapen tensor", "[trace]") {
  TempDir dir("trace-badtensor");
  SECTION("missing") {
    const std::string path =
        write_raw_trace(dir, "missing.safetensors", small_meta_strings(), "layers.1.heads.0.decode_keys");
    CHECK_THAT(error_of<FormatError>([&] { TraceReader r(path); }),
               Contains(path) && Contains("'layers.1.heads.0.decode_keys'") && Contains("missing") &&
                   Contains("[decode_steps, head_dim] = [3, 4]"));
  }
  SECTION("wrong shape") {
    const std::string path =
        write_raw_trace(dir, "shape.safetensors", small_meta_strings(), "", "layers.0.heads.1.values");
    CHECK_THAT(error_of<FormatError>([&] { TraceReader r(path); }),
               Contains(path) && Contains("'layers.0.heads.1.values'") && Contains("[4, 5]") &&
                   Contains("[prompt_len, head_dim] = [5, 4]"));
  }
  SECTION("dtype other than storage_dtype") {
    auto md = small_meta_strings();
    md["storage_dtype"] = "BF16";
    const std::string path = write_raw_trace(dir, "dtype.safetensors", md);
    CHECK_THAT(error_of<FormatError>([&] { TraceReader r(path); }),
               Contains(path) && Contains("'layers.0.heads.0.keys'") && Contains("F32") && Contains("BF16"));
  }
  SECTION("keys_pre_rope missing when has_pre_rope is true") {
    auto md = small_meta_strings();
    md["has_pre_rope"] = "true";
    const std::string path = write_raw_trace(dir, "pre.safetensors", md);
    CHECK_THAT(error_of<FormatError>([&] { TraceReader r(path); }),
               Contains(path) && Contains("'layers.0.heads.0.keys_pre_rope'"));
  }
}

TEST_CASE("head() checks its arguments and the values of that head only", "[trace]") {
  TempDir dir("trace-head");
  const std::string path = dir.file("h.safetensors");
  write_small_trace(path, small_meta());
  {
    TraceReader r(path);
    CHECK_THAT(error_of<InputError>([&] { r.head(2, 0); }), Contains(path) && Contains("layer 2") && Contains("n_layers = 2"));
    CHECK_THAT(error_of<InputError>([&] { r.head(0, -1); }), Contains("KV head -1"));
  }
  // Overwrite one F32 value of head (1, 1)'s keys with a NaN, byte by byte.
  std::size_t offset = 0;
  {
    SafetensorsFile f(path);
    std::uint64_t n = 0;
    std::FILE* in = std::fopen(path.c_str(), "rb");
    REQUIRE(std::fread(&n, 8, 1, in) == 1);
    std::fclose(in);
    offset = 8 + n + f.info("layers.1.heads.1.keys").begin + 4 * 7;  // flat index 7 = [1, 3]
  }
  {
    std::FILE* out = std::fopen(path.c_str(), "r+b");
    std::fseek(out, static_cast<long>(offset), SEEK_SET);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fwrite(&nan, 4, 1, out);
    std::fclose(out);
  }
  TraceReader r(path);  // the constructor does not scan the values
  CHECK(r.head(0, 0).keys.rows() == 5);
  CHECK_THAT(error_of<FormatError>([&] { r.head(1, 1); }),
             Contains(path) && Contains("'layers.1.heads.1.keys'") && Contains("flat index 7") && Contains("[1, 3]"));
}
