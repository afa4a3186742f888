// Allocation files: round trip, validation, and FormatErrors for malformed files.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/allocation.hpp"
#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using tierlab::testing::TempDir;
using tierlab::testing::error_of;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// 2 layers x 3 KV heads x 7 tokens on the ladder evict,kivi2,kivi4,exact.
Allocation small_allocation() {
  Allocation a;
  a.ladder = RateLadder::parse("evict,kivi2,kivi4,exact");
  a.n_layers = 2;
  a.n_kv_heads = 3;
  a.prompt_len = 7;
  a.tiers.resize(6);
  for (int i = 0; i < 6; ++i) {
    for (int t = 0; t < 7; ++t) a.tiers[i].push_back(static_cast<std::uint8_t>((i + t) % 4));
  }
  return a;
}

// An allocation file written with the plain safetensors writer.
std::string write_raw(const TempDir& dir, const std::string& name, std::map<std::string, std::string> md,
                      DType dtype = DType::U8, std::uint8_t value = 1, const std::string& skip = "") {
  const std::string path = dir.file(name);
  SafetensorsWriter w(path, md);
  std::vector<std::string> names;
  for (int l = 0; l < 1; ++l) {
    for (int h = 0; h < 2; ++h) {
      const std::string t = "layers." + std::to_string(l) + ".heads." + std::to_string(h) + ".tiers";
      if (t != skip) names.push_back(t);
    }
  }
  for (const auto& t : names) w.declare(t, dtype, {3});
  for (const auto& t : names) {
    if (dtype == DType::U8) {
      const std::uint8_t v[3] = {0, value, 1};
      w.write_u8(t, v, 3);
    } else {
      const std::int32_t v[3] = {0, value, 1};
      w.write_i32(t, v, 3);
    }
  }
  w.commit();
  return path;
}

std::map<std::string, std::string> raw_meta() {
  return {{"tierlab.kind", "allocation"}, {"tierlab.ladder", "evict,kivi2,exact"},
          {"n_layers", "1"},              {"n_kv_heads", "2"},
          {"prompt_len", "3"}};
}

}  // namespace

TEST_CASE("an allocation round-trips through its file", "[allocation]") {
  TempDir dir("alloc-rt");
  const Allocation a = small_allocation();
  const std::string path = dir.file("a.safetensors");
  write_allocation(path, a);

  {
    SafetensorsFile f(path);
    CHECK(f.metadata() == std::map<std::string, std::string>{{"tierlab.kind", "allocation"},
                                                             {"tierlab.ladder", "evict,kivi2,kivi4,exact"},
                                                             {"n_layers", "2"},
                                                             {"n_kv_heads", "3"},
                                                             {"prompt_len", "7"}});
    CHECK(f.info("layers.1.heads.2.tiers").dtype == DType::U8);
    CHECK(f.info("layers.1.heads.2.tiers").shape == std::vector<std::int64_t>{7});
    // Head (1, 2) is index 5: tiers (5 + t) % 4.
    CHECK(f.read_u8("layers.1.heads.2.tiers") == std::vector<std::uint8_t>{1, 2, 3, 0, 1, 2, 3});
  }
  const Allocation b = read_allocation(path);
  CHECK(b.ladder.name() == "evict,kivi2,kivi4,exact");
  CHECK(b.n_layers == 2);
  CHECK(b.n_kv_heads == 3);
  CHECK(b.prompt_len == 7);
  CHECK(b.tiers == a.tiers);
}

TEST_CASE("Allocation::validate checks counts, lengths and tier indices", "[allocation]") {
  CHECK_NOTHROW(small_allocation().validate());
  {
    Allocation a = small_allocation();
    a.tiers.pop_back();
    CHECK_THAT(error_of<InputError>([&] { a.validate(); }), Contains("5 heads") && Contains("6"));
  }
  {
    Allocation a = small_allocation();
    a.head(1, 0).push_back(0);
    CHECK_THAT(error_of<InputError>([&] { a.validate(); }), Contains("head (1, 0)") && Contains("8 tokens"));
  }
  {
    Allocation a = small_allocation();
    a.head(0, 2)[4] = 4;  // the ladder has tiers 0..3
    CHECK_THAT(error_of<InputError>([&] { a.validate(); }),
               Contains("head (0, 2)") && Contains("token 4") && Contains("tier 4"));
  }
  {
    Allocation a = small_allocation();
    a.n_layers = 0;
    a.tiers.clear();
    CHECK_THAT(error_of<InputError>([&] { a.validate(); }), Contains("n_layers = 0"));
  }
}

TEST_CASE("write_allocation refuses an invalid allocation and leaves no file", "[allocation]") {
  TempDir dir("alloc-invalid");
  Allocation a = small_allocation();
  a.head(1, 1)[0] = 9;
  const std::string path = dir.file("bad.safetensors");
  CHECK_THROWS_AS(write_allocation(path, a), InputError);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("malformed allocation files are FormatErrors naming the file and the tensor or field", "[allocation]") {
  TempDir dir("alloc-bad");
  SECTION("a valid hand-assembled file reads") {
    const Allocation a = read_allocation(write_raw(dir, "ok.safetensors", raw_meta()));
    CHECK(a.ladder.size() == 3);
    CHECK(a.head(0, 1) == std::vector<std::uint8_t>{0, 1, 1});
  }
  SECTION("tier index beyond the ladder") {
    const std::string path = write_raw(dir, "range.safetensors", raw_meta(), DType::U8, 3);
    CHECK_THAT(error_of<FormatError>([&] { read_allocation(path); }),
               Contains(path) && Contains("'layers.0.heads.0.tiers'") && Contains("tier 3") && Contains("index 1"));
  }
  SECTION("wrong dtype") {
    const std::string path = write_raw(dir, "dtype.safetensors", raw_meta(), DType::I32);
    CHECK_THAT(error_of<FormatError>([&] { read_allocation(path); }),
               Contains(path) && Contains("'layers.0.heads.0.tiers'") && Contains("I32"));
  }
  SECTION("missing tensor") {
    const std::string path = write_raw(dir, "missing.safetensors", raw_meta(), DType::U8, 1, "layers.0.heads.1.tiers");
    CHECK_THAT(error_of<FormatError>([&] { read_allocation(path); }),
               Contains(path) && Contains("'layers.0.heads.1.tiers'") && Contains("missing"));
  }
  SECTION("wrong shape") {
    auto md = raw_meta();
    md["prompt_len"] = "4";
    const std::string path = write_raw(dir, "shape.safetensors", md);
    CHECK_THAT(error_of<FormatError>([&] { read_allocation(path); }),
               Contains(path) && Contains("'layers.0.heads.0.tiers'") && Contains("[3]") && Contains("[4]"));
  }
  SECTION("bad ladder name") {
    auto md = raw_meta();
    md["tierlab.ladder"] = "evict,kivi9x,exact";
    const std::string path = write_raw(dir, "ladder.safetensors", md);
    CHECK_THAT(error_of<FormatError>([&] { read_allocation(path); }),
               Contains(path) && Contains("'tierlab.ladder'") && Contains("kivi9x"));
  }
  SECTION("missing or wrong metadata") {
    for (const char* key : {"tierlab.kind", "n_layers", "n_kv_heads", "prompt_len", "tierlab.ladder"}) {
      auto md = raw_meta();
      md.erase(key);
      const std::string path = write_raw(dir, std::string("no-") + key + ".safetensors", md);
      CHECK_THAT(error_of<FormatError>([&] { read_allocation(path); }),
                 Contains(path) && Contains(std::string("'") + key + "' is missing"));
    }
    auto md = raw_meta();
    md["n_kv_heads"] = "two";
    const std::string path = write_raw(dir, "nan.safetensors", md);
    CHECK_THAT(error_of<FormatError>([&] { read_allocation(path); }), Contains("'n_kv_heads' = 'two'"));
    md = raw_meta();
    md["tierlab.kind"] = "trace";
    const std::string path2 = write_raw(dir, "kind.safetensors", md);
    CHECK_THAT(error_of<FormatError>([&] { read_allocation(path2); }), Contains("'tierlab.kind' = 'trace'"));
  }
}
