// The defects that fuzzing and hostile inputs found in the readers (docs/reliability.md),
// one test per class: unbounded JSON nesting, duplicate keys, bytes after the header's JSON,
// unindexed bytes in the data buffer, non-regular files.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "model/allocation.hpp"
#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/io/safetensors.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using tierlab::testing::error_of;
using tierlab::testing::TempDir;

namespace {

// A safetensors file from its header text and data bytes, byte for byte.
std::string raw_safetensors(const TempDir& dir, const std::string& name, const std::string& header,
                            const std::string& data = "") {
  const std::string path = dir.file(name);
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
  return path;
}

std::string nested(int levels, const std::string& open, const std::string& inner, const std::string& close) {
  std::string s;
  s.reserve(static_cast<std::size_t>(levels) * (open.size() + close.size()) + inner.size());
  for (int i = 0; i < levels; ++i) s += open;
  s += inner;
  for (int i = 0; i < levels; ++i) s += close;
  return s;
}

const std::string kTensor = R"("t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";

}  // namespace

TEST_CASE("JSON nested exactly to the limit parses and one level more is refused naming the context", "[reliability]") {
  CHECK_NOTHROW(parse_json_checked(nested(kMaxJsonDepth, "[", "1", "]"), "here"));
  const std::string msg = error_of<FormatError>([] { parse_json_checked(nested(kMaxJsonDepth + 1, "[", "1", "]"), "field 'x'"); });
  CHECK_THAT(msg, Catch::Contains("field 'x'") && Catch::Contains("deeper than 64 levels"));
  CHECK_THAT(error_of<FormatError>([] { parse_json_checked(R"({"a":1,"b":{"c":1,"c":2}})", "ctx"); }),
             Catch::Contains("ctx") && Catch::Contains("the key 'c' twice"));
  CHECK_THAT(error_of<FormatError>([] { parse_json_checked("{} x", "ctx"); }), Catch::Contains("does not parse"));
  CHECK_NOTHROW(parse_json_checked(R"({"a":{"c":1},"b":{"c":2}})", "ctx"));  // same key in two objects
}

TEST_CASE("A safetensors header nested 100000 levels deep in shape or data_offsets or metadata is refused instead of overflowing the stack",
          "[reliability]") {
  TempDir dir("rel-deep");
  const int deep = 100000;
  const std::string shape = "{\"t\":{\"dtype\":\"U8\",\"shape\":" + nested(deep, "[", "4", "]") + ",\"data_offsets\":[0,4]}}";
  const std::string offsets = "{\"t\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":" + nested(deep, "[", "0", "]") + "}}";
  const std::string meta = "{\"__metadata__\":" + nested(deep, "{\"a\":", "\"x\"", "}") + "," + kTensor + "}";
  for (const std::string& header : {shape, offsets, meta}) {
    const std::string path = raw_safetensors(dir, "deep.safetensors", header, "abcd");
    const std::string msg = error_of<FormatError>([&] { SafetensorsFile f(path); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("deeper than 64 levels"));
  }
}

TEST_CASE("A trace whose provenance or spans metadata nests deeply is refused naming the field", "[reliability]") {
  TempDir dir("rel-trace");
  SynthParams p = synth_preset("tiny");
  p.n_layers = 1, p.n_kv_heads = 1, p.group_size = 1, p.head_dim = 8, p.prompt_len = 32, p.obs_window = 2,
  p.decode_steps = 1, p.spans_per_head = 1, p.span_len = 2;
  const std::string good = dir.file("good.safetensors");
  write_synthetic_trace(p, good);
  const SafetensorsFile f(good);
  for (const std::string field : {"provenance", "spans"}) {
    auto md = f.metadata();
    md[field] = nested(50000, "{\"a\":", "1", "}");
    const std::string path = dir.file(field + ".safetensors");
    SafetensorsWriter w(path, md);
    for (const std::string& name : f.names()) w.declare(name, f.info(name).dtype, f.info(name).shape);
    for (const std::string& name : f.names()) {
      const auto v = f.read_f32(name);
      w.write_f32(name, v.data(), v.size());
    }
    w.commit();
    const std::string msg = error_of<FormatError>([&] { TraceReader r(path); });
    CHECK_THAT(msg, Catch::Contains("metadata field '" + field + "'") && Catch::Contains("deeper than 64"));
  }
}

TEST_CASE("A safetensors header with a duplicate __metadata__ or tensor key is refused naming the key", "[reliability]") {
  TempDir dir("rel-dup");
  const std::string two_meta = R"({"__metadata__":{"a":"1"},"__metadata__":{"a":"2"},)" + kTensor + "}";
  CHECK_THAT(error_of<FormatError>([&] { SafetensorsFile f(raw_safetensors(dir, "m.safetensors", two_meta, "abcd")); }),
             Catch::Contains("'__metadata__' twice"));
  const std::string two_tensors = "{" + kTensor + "," + kTensor + "}";
  CHECK_THAT(error_of<FormatError>([&] { SafetensorsFile f(raw_safetensors(dir, "t.safetensors", two_tensors, "abcd")); }),
             Catch::Contains("'t' twice"));
  const std::string two_fields = R"({"t":{"dtype":"U8","dtype":"F32","shape":[4],"data_offsets":[0,4]}})";
  CHECK_THAT(error_of<FormatError>([&] { SafetensorsFile f(raw_safetensors(dir, "f.safetensors", two_fields, "abcd")); }),
             Catch::Contains("'dtype' twice"));
}

TEST_CASE("A safetensors header accepts space padding only: a NUL or other bytes after the JSON are refused",
          "[reliability]") {
  TempDir dir("rel-pad");
  const std::string json = "{" + kTensor + "}";
  CHECK_NOTHROW(SafetensorsFile(raw_safetensors(dir, "ok.safetensors", json + "     ", "abcd")));
  CHECK_THAT(error_of<FormatError>([&] {
               SafetensorsFile f(raw_safetensors(dir, "nul.safetensors", json + std::string("\0{\"x\":1}", 8), "abcd"));
             }),
             Catch::Contains("is a NUL"));
  CHECK_THAT(error_of<FormatError>([&] { SafetensorsFile f(raw_safetensors(dir, "tail.safetensors", json + "  x", "abcd")); }),
             Catch::Contains("other than space padding"));
  CHECK_THAT(error_of<FormatError>([&] { SafetensorsFile f(raw_safetensors(dir, "nl.safetensors", json + "\n", "abcd")); }),
             Catch::Contains("other than space padding"));
  CHECK_THAT(error_of<FormatError>([&] { SafetensorsFile f(raw_safetensors(dir, "lead.safetensors", " " + json, "abcd")); }),
             Catch::Contains("does not begin with '{'"));
}

TEST_CASE("A safetensors data buffer with bytes no tensor owns (a hole or a tail) is refused", "[reliability]") {
  TempDir dir("rel-hole");
  CHECK_THAT(error_of<FormatError>([&] {
               SafetensorsFile f(raw_safetensors(dir, "tail.safetensors", "{" + kTensor + "}", "abcdEXTRA"));
             }),
             Catch::Contains("5 trailing bytes belong to no tensor"));
  const std::string hole = R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})";
  CHECK_THAT(error_of<FormatError>([&] { SafetensorsFile f(raw_safetensors(dir, "hole.safetensors", hole, "abcd")); }),
             Catch::Contains("bytes [0, 2) belong to no tensor"));
}

TEST_CASE("A FIFO or a character device or a directory given to any reader is refused with a sentence without blocking",
          "[reliability]") {
  TempDir dir("rel-nonreg");
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {fifo, "a FIFO (named pipe)"}, {"/dev/zero", "a character device"}, {dir.path.string(), "a directory"}};
  for (const auto& c : cases) {
    const std::string& path = c.first;
    const std::string& kind = c.second;
    INFO(path);
    const std::string tail = "'" + path + "': it is " + kind + ", not a regular file.";
    CHECK_THAT(error_of<InputError>([&] { SafetensorsFile f(path); }), Catch::EndsWith(tail));
    CHECK_THAT(error_of<InputError>([&] { TraceReader r(path); }), Catch::EndsWith(tail));
    CHECK_THAT(error_of<InputError>([&] { read_allocation(path); }), Catch::EndsWith(tail));
    CHECK_THAT(error_of<InputError>([&] { Llama2cModel m(path); }), Catch::EndsWith(tail));
    CHECK_THAT(error_of<InputError>([&] { read_regular_file(path, "scenario file"); }), Catch::EndsWith(tail));
  }
}

TEST_CASE("A text file longer than its reader's limit is refused naming the limit", "[reliability]") {
  TempDir dir("rel-size");
  const std::string path = dir.file("big.yaml");
  std::ofstream(path) << std::string(2000, 'x');
  CHECK_THAT(error_of<InputError>([&] { read_regular_file(path, "scenario file", 1000); }),
             Catch::Contains("2000 bytes long, more than the limit of 1000 bytes"));
  CHECK(read_regular_file(path, "scenario file", 2000).size() == 2000);
}

TEST_CASE("Writers never replace a device node, a FIFO or a folder, and write through a link to its file",
          "[reliability][writers]") {
  SynthParams p = synth_preset("tiny");
  p.n_layers = 1;
  // /dev/null: a character device. As root, a rename over it would replace it for the machine.
  struct stat before {};
  REQUIRE(::stat("/dev/null", &before) == 0);
  CHECK_THROWS_WITH(write_synthetic_trace(p, "/dev/null"), Catch::Contains("is a character device, not a regular file"));
  struct stat after {};
  REQUIRE(::stat("/dev/null", &after) == 0);
  CHECK(S_ISCHR(after.st_mode));
  CHECK(after.st_ino == before.st_ino);
  // A FIFO stays a FIFO; nothing is left beside it.
  const testing::TempDir tmp("reliability-writers");
  const std::string dir = tmp.path.string();
  const std::string fifo = dir + "/pipe.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(write_synthetic_trace(p, fifo), Catch::Contains("is a FIFO (named pipe)"));
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
  // A folder is refused by name.
  CHECK_THROWS_WITH(write_synthetic_trace(p, dir), Catch::Contains("is a directory"));
  // A link to a regular file: the file is replaced, the link kept.
  const std::string real = dir + "/real.safetensors", link = dir + "/link.safetensors";
  { std::ofstream(real) << "old"; }
  std::filesystem::create_symlink("real.safetensors", link);
  write_synthetic_trace(p, link);
  CHECK(std::filesystem::is_symlink(link));
  CHECK(std::filesystem::file_size(real) > 3);
  CHECK(TraceReader(link).meta().n_layers == 1);
  // A link to a device is refused, naming both.
  const std::string to_null = dir + "/null.safetensors";
  std::filesystem::create_symlink("/dev/null", to_null);
  CHECK_THROWS_WITH(write_synthetic_trace(p, to_null), Catch::Contains("(a link to '/dev/null') is a character device"));
}
