// safetensors reading/writing. Golden data: hand-computed f16/bf16 bit patterns, the
// compiler's own _Float16 conversion, byte streams written by hand here, and the byte
// streams the reference implementation (huggingface/safetensors, tensor.rs unit tests)
// produces for the same tensors.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using tierlab::testing::TempDir;
using tierlab::testing::error_of;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

std::string le64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}
std::string le16(std::uint16_t v) { return {static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; }
std::string f32le(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((u >> (8 * i)) & 0xff);
  return s;
}
std::string bytes_of(std::initializer_list<int> b) {
  std::string s;
  for (int v : b) s.push_back(static_cast<char>(v));
  return s;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// 8-byte length + header + data, written by hand (not with the code under test).
std::string raw_file(const TempDir& dir, const std::string& name, const std::string& header, const std::string& data) {
  const std::string path = dir.file(name);
  write_bytes(path, le64(header.size()) + header + data);
  return path;
}

// The message of the FormatError `f` throws; fails the test for no or another exception.
template <class F>
std::string format_error(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected FormatError, got another exception: " << e.what());
  }
  FAIL("expected FormatError, nothing was thrown");
  return {};
}

template <class F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("expected InputError, nothing was thrown");
  return {};
}

}  // namespace

TEST_CASE("f16 and bf16 conversion matches hand-computed bit patterns", "[safetensors]") {
  // float -> f16, round to nearest even.
  CHECK(float_to_half(1.0f) == 0x3C00);
  CHECK(float_to_half(-2.0f) == 0xC000);
  CHECK(float_to_half(1.0f / 3.0f) == 0x3555);  // 0.333251953125
  CHECK(float_to_half(0.1f) == 0x2E66);
  CHECK(float_to_half(65504.0f) == 0x7BFF);  // largest finite
  CHECK(float_to_half(65519.0f) == 0x7BFF);  // below the midpoint 65520
  CHECK(float_to_half(65520.0f) == 0x7C00);  // midpoint ties to even: Inf
  CHECK(float_to_half(std::ldexp(1.0f, -14)) == 0x0400);               // smallest normal
  CHECK(float_to_half(std::ldexp(1.0f, -24)) == 0x0001);               // smallest subnormal
  CHECK(float_to_half(std::ldexp(1.0f, -25)) == 0x0000);               // half a unit: ties to even 0
  CHECK(float_to_half(std::ldexp(3.0f, -26)) == 0x0001);               // 0.75 unit rounds up
  CHECK(float_to_half(std::ldexp(3.0f, -25)) == 0x0002);               // 1.5 units ties to even 2
  CHECK(float_to_half(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);        // tie, even is 1.0
  CHECK(float_to_half(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);        // tie, even is up
  CHECK(float_to_half(-0.0f) == 0x8000);
  CHECK(float_to_half(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x7C00) == 0x7C00);
  CHECK((float_to_half(std::numeric_limits<float>::quiet_NaN()) & 0x03FF) != 0);
  // f16 -> float.
  CHECK(half_to_float(0x3555) == 0.333251953125f);
  CHECK(half_to_float(0x7BFF) == 65504.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x8400) == -std::ldexp(1.0f, -14));
  CHECK(std::isinf(half_to_float(0xFC00)));
  CHECK(std::isnan(half_to_float(0x7E00)));
  // float -> bf16.
  CHECK(float_to_bf16(1.0f / 3.0f) == 0x3EAB);  // 0.333984375
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(0.1f) == 0x3DCD);  // 0x3DCCCCCD: lower half above the midpoint
  CHECK(float_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);  // tie, even is 1.0
  CHECK(float_to_bf16(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);  // tie, even is up
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds to Inf
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(bf16_to_float(0x3EAB) == 0.333984375f);
  CHECK(bf16_to_float(0xC040) == -3.0f);
}

TEST_CASE("f16 conversion agrees with the compiler's _Float16 on every half and random floats", "[safetensors]") {
#ifdef __FLT16_MANT_DIG__
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    _Float16 ref;
    std::memcpy(&ref, &bits, 2);
    const float f = half_to_float(bits);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(static_cast<float>(ref)));
      continue;
    }
    REQUIRE(f == static_cast<float>(ref));
    REQUIRE(float_to_half(f) == bits);
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 1000000; ++i) {
    // Finite floats around the f16 range: exponent bits 100..143 plus random mantissa and sign.
    const std::uint32_t u = (any(rng) & 0x807fffffu) | ((100u + any(rng) % 44u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    const _Float16 ref = static_cast<_Float16>(f);
    std::uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    REQUIRE(float_to_half(f) == rb);
  }
#else
  WARN("skipped: this compiler has no _Float16");
#endif
}

TEST_CASE("bf16 conversion agrees with a slow double-precision nearest-even rounding", "[safetensors]") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = any(rng);
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // skip NaN/Inf inputs
    if (i % 4 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
    float f;
    std::memcpy(&f, &u, 4);
    // The two bf16 neighbours of f (truncated and next away from zero).
    const std::uint32_t lo = u & 0xffff0000u;
    const std::uint32_t hi = lo + 0x10000u;
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    const double dlo = std::fabs(static_cast<double>(f) - flo);
    const double dhi = std::isinf(fhi) ? std::fabs(static_cast<double>(f) - std::ldexp(1.0, 128) * (f < 0 ? -1 : 1))
                                       : std::fabs(static_cast<double>(f) - fhi);
    std::uint16_t want;
    if (dlo < dhi) want = static_cast<std::uint16_t>(lo >> 16);
    else if (dhi < dlo) want = static_cast<std::uint16_t>(hi >> 16);
    else want = static_cast<std::uint16_t>(((lo >> 16) & 1u) ? hi >> 16 : lo >> 16);
    REQUIRE(float_to_bf16(f) == want);
  }
}

TEST_CASE("a hand-built byte-level file is read correctly", "[safetensors]") {
  TempDir dir("st-hand");
  // Unpadded header: the data buffer starts unaligned on purpose.
  const std::string header =
      R"({"__metadata__":{"source":"hand","n":"3"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]},)"
      R"("c":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]},)"
      R"("d":{"dtype":"I32","shape":[2],"data_offsets":[16,24]},)"
      R"("e":{"dtype":"U8","shape":[3],"data_offsets":[24,27]},)"
      R"("f":{"dtype":"I64","shape":[1],"data_offsets":[27,35]},)"
      R"("g":{"dtype":"F32","shape":[0,4],"data_offsets":[35,35]}})";
  const std::string data = bytes_of({0x00, 0x00, 0x80, 0x3F,  // a: 1.0
                                     0x00, 0x00, 0x20, 0xC0,  //    -2.5
                                     0x55, 0x35,              // b: f16 0x3555
                                     0x00, 0xC1,              //    f16 0xC100 = -2.5
                                     0xAB, 0x3E,              // c: bf16 0x3EAB
                                     0x40, 0xC0,              //    bf16 0xC040 = -3
                                     0x07, 0x00, 0x00, 0x00,  // d: 7
                                     0xFE, 0xFF, 0xFF, 0xFF,  //    -2
                                     0x00, 0x05, 0xFF,        // e
                                     0x2A, 0, 0, 0, 0, 0, 0, 0});  // f: 42
  REQUIRE(header.size() % 8 != 0);
  const std::string path = raw_file(dir, "hand.safetensors", header, data);

  SafetensorsFile f(path);
  CHECK(f.names() == std::vector<std::string>{"a", "b", "c", "d", "e", "f", "g"});
  CHECK(f.metadata().at("source") == "hand");
  CHECK(f.metadata().at("n") == "3");
  CHECK(f.info("b").dtype == DType::F16);
  CHECK(f.info("b").shape == std::vector<std::int64_t>{1, 2});
  CHECK(f.info("b").begin == 8);
  CHECK(f.info("b").end == 12);
  CHECK(f.read_f32("a") == std::vector<float>{1.0f, -2.5f});
  CHECK(f.read_f32("b") == std::vector<float>{0.333251953125f, -2.5f});
  CHECK(f.read_f32("c") == std::vector<float>{0.333984375f, -3.0f});
  CHECK(f.read_i32("d") == std::vector<std::int32_t>{7, -2});
  CHECK(f.read_u8("e") == std::vector<std::uint8_t>{0, 5, 255});
  CHECK(f.read_i32("f") == std::vector<std::int32_t>{42});
  CHECK(f.read_f32("g").empty());
  const MatrixRM m = f.read_matrix("b", 1, 2);
  CHECK(m(0, 1) == -2.5f);
  CHECK(f.has("a"));
  CHECK_FALSE(f.has("z"));
  CHECK_THAT(format_error([&] { f.info("z"); }), Contains(path) && Contains("'z'"));
  CHECK_THAT(format_error([&] { f.read_f32("d"); }), Contains(path) && Contains("'d'") && Contains("I32"));
  CHECK_THAT(format_error([&] { f.read_u8("a"); }), Contains(path) && Contains("'a'"));
  CHECK_THAT(format_error([&] { f.read_matrix("a", 2, 2); }), Contains("'a'") && Contains("[2]") && Contains("[2, 2]"));
}

TEST_CASE("read_matrix flattens leading dimensions", "[safetensors]") {
  TempDir dir("st-matrix");
  std::string data;
  for (int i = 0; i < 12; ++i) data += f32le(static_cast<float>(i));
  const std::string path =
      raw_file(dir, "m.safetensors", R"({"q":{"dtype":"F32","shape":[2,3,2],"data_offsets":[0,48]}})", data);
  SafetensorsFile f(path);
  const MatrixRM m = f.read_matrix("q", 6, 2);
  CHECK(m(4, 1) == 9.0f);  // [g=1, w=1, :] is row 1*3+1 = 4
  CHECK_THROWS_AS(f.read_matrix("q", 3, 4), FormatError);
}

TEST_CASE("writer output is byte-identical to the reference implementation's", "[safetensors]") {
  TempDir dir("st-golden");
  SECTION("one F32 tensor, header already a multiple of 8") {
    // safetensors tensor.rs test_serialization: "attn.0" F32 [1, 2, 3] = 0..5.
    const std::string want = bytes_of(
        {64,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,  34,  58,  123, 34,  100,
         116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91,
         49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,
         58,  91,  48,  44,  50,  52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,  0,   0,   0,   64,
         0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64});
    const std::string path = dir.file("attn.safetensors");
    SafetensorsWriter w(path, {});
    w.declare("attn.0", DType::F32, {1, 2, 3});
    const float v[6] = {0, 1, 2, 3, 4, 5};
    w.write_f32("attn.0", v, 6);
    w.commit();
    CHECK(read_bytes(path) == want);
  }
  SECTION("header padded with spaces to a multiple of 8") {
    // tensor.rs test_serialization_forced_alignement: "attn0" F32 [1, 1, 2, 3].
    const std::string want = bytes_of(
        {72,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 48,  34,  58,  123, 34,  100, 116,
         121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91,  49,
         44,  49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115,
         34,  58,  91,  48,  44,  50,  52,  93,  125, 125, 32,  32,  32,  32,  32,  32,  32,  0,   0,   0,   0,
         0,   0,   128, 63,  0,   0,   0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64});
    const std::string path = dir.file("attn0.safetensors");
    SafetensorsWriter w(path, {});
    w.declare("attn0", DType::F32, {1, 1, 2, 3});
    const float v[6] = {0, 1, 2, 3, 4, 5};
    w.write_f32("attn0", v, 6);
    w.commit();
    CHECK(read_bytes(path) == want);
  }
  SECTION("metadata only, no tensors") {
    // tensor.rs test_empty: metadata {"framework": "pt"}.
    const std::string want =
        bytes_of({40,  0,   0,   0,   0,   0,   0,   0,   123, 34,  95, 95, 109, 101, 116, 97,
                  100, 97,  116, 97,  95,  95,  34,  58,  123, 34,  102, 114, 97, 109, 101, 119,
                  111, 114, 107, 34,  58,  34,  112, 116, 34,  125, 125, 32, 32, 32, 32, 32});
    const std::string path = dir.file("empty.safetensors");
    SafetensorsWriter w(path, {{"framework", "pt"}});
    w.commit();
    CHECK(read_bytes(path) == want);
  }
}

TEST_CASE("F32, F16 and BF16 round trip through the writer and reader", "[safetensors]") {
  TempDir dir("st-roundtrip");
  const std::string path = dir.file("rt.safetensors");
  const std::vector<float> v = {1.0f / 3.0f, -2.0f, 65504.0f, 0.1f, 0.0f, std::ldexp(1.0f, -24)};
  {
    SafetensorsWriter w(path, {{"k", "v"}, {"tierlab.format", "test"}});
    w.declare("x32", DType::F32, {2, 3});
    w.declare("x16", DType::F16, {2, 3});
    w.declare("xbf", DType::BF16, {6});
    w.declare("ids", DType::I32, {3});
    w.declare("u", DType::U8, {2});
    w.declare("empty", DType::F16, {0});
    w.write_f32("x32", v.data(), v.size());
    w.write_f32("x16", v.data(), v.size());
    w.write_f32("xbf", v.data(), v.size());
    const std::int32_t ids[3] = {1, -7, 2147483647};
    w.write_i32("ids", ids, 3);
    const std::uint8_t u[2] = {3, 250};
    w.write_u8("u", u, 2);
    w.write_f32("empty", nullptr, 0);
    w.commit();
  }
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes.substr(8, 16) == R"({"__metadata__":)");

  SafetensorsFile f(path);
  CHECK(f.metadata() == std::map<std::string, std::string>{{"k", "v"}, {"tierlab.format", "test"}});
  CHECK(f.read_f32("x32") == v);
  // Hand-computed nearest-even values: 1/3 -> 0x3555, 0.1 -> 0x2E66 (f16);
  // 1/3 -> 0x3EAB, 65504 -> 0x4780 (65536), 0.1 -> 0x3DCD, 2^-24 -> 0x3380 (bf16).
  CHECK(f.read_f32("x16") ==
        std::vector<float>{0.333251953125f, -2.0f, 65504.0f, 0.0999755859375f, 0.0f, std::ldexp(1.0f, -24)});
  CHECK(f.read_f32("xbf") ==
        std::vector<float>{0.333984375f, -2.0f, 65536.0f, 0.10009765625f, 0.0f, std::ldexp(1.0f, -24)});
  CHECK(f.read_i32("ids") == std::vector<std::int32_t>{1, -7, 2147483647});
  CHECK(f.read_u8("u") == std::vector<std::uint8_t>{3, 250});
  CHECK(f.read_f32("empty").empty());
  CHECK(f.info("x16").shape == std::vector<std::int64_t>{2, 3});
  // Tensors are contiguous in declaration order, as the reference loader requires.
  CHECK(f.info("x32").begin == 0);
  CHECK(f.info("x16").begin == 24);
  CHECK(f.info("xbf").begin == 36);
  CHECK(f.info("empty").end == bytes.size() - 8 - n);
}

TEST_CASE("every malformed file is a FormatError naming the file and the tensor", "[safetensors]") {
  TempDir dir("st-bad");
  const std::string ok8 = f32le(1.0f) + f32le(2.0f);

  SECTION("file shorter than the header length field") {
    const std::string path = dir.file("short.safetensors");
    write_bytes(path, std::string("\x10\x00\x00", 3));
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("8-byte"));
  }
  SECTION("header length beyond the end of the file") {
    const std::string path = dir.file("hdr.safetensors");
    write_bytes(path, le64(1000) + R"({"w":{}})");
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("1000"));
  }
  SECTION("truncated data") {
    const std::string path = raw_file(dir, "trunc.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("'w'") && Contains("truncated"));
  }
  SECTION("bad header JSON") {
    const std::string path = raw_file(dir, "json.safetensors", R"({"w":{"dtype":"F32",)", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("JSON"));
  }
  SECTION("header is not an object") {
    const std::string path = raw_file(dir, "array.safetensors", "[1, 2]", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("array"));
  }
  SECTION("tensor entry is not an object") {
    const std::string path = raw_file(dir, "entry.safetensors", R"({"w":[0,8]})", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("'w'"));
  }
  SECTION("unknown dtype") {
    const std::string path = raw_file(dir, "dtype.safetensors", R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("'w'") && Contains("'Q4'"));
  }
  SECTION("missing dtype, shape or data_offsets") {
    const std::pair<std::string, std::string> cases[] = {
        {"dtype", R"({"w":{"shape":[2],"data_offsets":[0,8]}})"},
        {"shape", R"({"w":{"dtype":"F32","data_offsets":[0,8]}})"},
        {"data_offsets", R"({"w":{"dtype":"F32","shape":[2]}})"},
    };
    for (const auto& [key, header] : cases) {
      const std::string path = raw_file(dir, "missing-" + key + ".safetensors", header, ok8);
      CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("'w'") && Contains(key));
    }
  }
  SECTION("negative shape") {
    const std::string path = raw_file(dir, "neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("'w'") && Contains("negative"));
  }
  SECTION("shape and byte size disagree") {
    const std::string path = raw_file(dir, "size.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }),
               Contains(path) && Contains("'w'") && Contains("8 bytes") && Contains("needs 12"));
  }
  SECTION("offset beyond the data buffer") {
    const std::string path = raw_file(dir, "range.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("'w'") && Contains("[8, 12]"));
  }
  SECTION("begin after end") {
    const std::string path = raw_file(dir, "order.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }), Contains(path) && Contains("'w'") && Contains("begin > end"));
  }
  SECTION("overlapping tensors") {
    const std::string path = raw_file(dir, "overlap.safetensors",
                                      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                      ok8);
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }),
               Contains(path) && Contains("'b'") && Contains("'a'") && Contains("overlap"));
  }
  SECTION("metadata value that is not a string") {
    const std::string path = raw_file(dir, "meta.safetensors", R"({"__metadata__":{"n_layers":2}})", "");
    CHECK_THAT(format_error([&] { SafetensorsFile f(path); }),
               Contains(path) && Contains("__metadata__") && Contains("'n_layers'"));
  }
}

TEST_CASE("NaN and Inf are FormatErrors naming the file, the tensor and the index", "[safetensors]") {
  TempDir dir("st-nan");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SECTION("F32") {
    std::string data;
    for (int i = 0; i < 6; ++i) data += f32le(i == 4 ? nan : 1.0f);
    for (int i = 0; i < 6; ++i) data += f32le(i == 5 ? -inf : 1.0f);
    const std::string path2 = raw_file(dir, "f32b.safetensors",
                                       R"({"n":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                                       R"("i":{"dtype":"F32","shape":[2,3],"data_offsets":[24,48]},)"
                                       R"("good":{"dtype":"F32","shape":[1],"data_offsets":[48,52]}})",
                                       data + f32le(5.0f));
    SafetensorsFile f(path2);  // values are checked when a tensor is read, not up front
    CHECK(f.read_f32("good") == std::vector<float>{5.0f});
    CHECK_THAT(format_error([&] { f.read_f32("n"); }),
               Contains(path2) && Contains("'n'") && Contains("NaN") && Contains("flat index 4") && Contains("[1, 1]"));
    CHECK_THAT(format_error([&] { f.read_matrix("i", 2, 3); }),
               Contains(path2) && Contains("'i'") && Contains("Inf") && Contains("flat index 5") && Contains("[1, 2]"));
  }
  SECTION("F16") {
    const std::string data = le16(0x3C00) + le16(0x3C00) + le16(0x7E00) +  // NaN at 2
                             le16(0x3C00) + le16(0xFC00) + le16(0x3C00);   // -Inf at 1
    const std::string path = raw_file(dir, "f16.safetensors",
                                      R"({"hn":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
                                      R"("hi":{"dtype":"F16","shape":[3],"data_offsets":[6,12]}})",
                                      data);
    SafetensorsFile f(path);
    CHECK_THAT(format_error([&] { f.read_f32("hn"); }),
               Contains(path) && Contains("'hn'") && Contains("NaN") && Contains("flat index 2"));
    CHECK_THAT(format_error([&] { f.read_f32("hi"); }),
               Contains(path) && Contains("'hi'") && Contains("Inf") && Contains("flat index 1"));
  }
  SECTION("BF16") {
    const std::string data = le16(0x3F80) + le16(0x7FC0);
    const std::string path = raw_file(dir, "bf16.safetensors", R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}})", data);
    SafetensorsFile f(path);
    CHECK_THAT(format_error([&] { f.read_f32("b"); }), Contains(path) && Contains("'b'") && Contains("flat index 1"));
  }
}

TEST_CASE("I64 integers are narrowed to I32 with a range check", "[safetensors]") {
  TempDir dir("st-i64");
  const std::string path = raw_file(dir, "i64.safetensors", R"({"t":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})",
                                    le64(3) + le64(std::uint64_t{1} << 40));
  SafetensorsFile f(path);
  CHECK_THAT(format_error([&] { f.read_i32("t"); }), Contains(path) && Contains("'t'") && Contains("flat index 1"));
}

TEST_CASE("the writer rejects misuse with an InputError naming the tensor", "[safetensors]") {
  TempDir dir("st-misuse");
  const std::string path = dir.file("w.safetensors");
  const float v[4] = {1, 2, 3, 4};
  SafetensorsWriter w(path, {});
  w.declare("a", DType::F16, {2});
  w.declare("b", DType::F32, {2});
  CHECK_THAT(input_error([&] { w.declare("a", DType::F32, {1}); }), Contains("'a'") && Contains("twice"));
  CHECK_THAT(input_error([&] { w.declare("c", DType::F32, {-1}); }), Contains("'c'") && Contains("negative"));
  CHECK_THAT(input_error([&] { w.write_f32("b", v, 2); }), Contains("'b'") && Contains("'a' is next"));
  CHECK_THAT(input_error([&] { w.write_f32("a", v, 3); }), Contains("'a'") && Contains("3 values"));
  const float big[2] = {1.0f, 70000.0f};
  CHECK_THAT(input_error([&] { w.write_f32("a", big, 2); }), Contains("'a'") && Contains("flat index 1") && Contains("F16"));
  CHECK_THAT(input_error([&] { w.commit(); }), Contains(path));
}

TEST_CASE("the writer rejects NaN input with the index", "[safetensors]") {
  TempDir dir("st-nanw");
  SafetensorsWriter w(dir.file("n.safetensors"), {});
  w.declare("a", DType::F32, {3});
  const float v[3] = {1, 2, std::numeric_limits<float>::quiet_NaN()};
  CHECK_THAT(input_error([&] { w.write_f32("a", v, 3); }), Contains("'a'") && Contains("flat index 2") && Contains("NaN"));
}

TEST_CASE("writing is atomic", "[safetensors]") {
  TempDir dir("st-atomic");
  const std::string path = dir.file("atomic.safetensors");
  // The writer's temporary file beside it ("<path>.tmp-<pid>-<n>@<host>", model/base/temporary_name.hpp).
  const auto tmp_exists = [&] {
    for (const auto& e : fs::directory_iterator(dir.path))
      if (e.path().filename().string().rfind("atomic.safetensors.tmp-", 0) == 0) return true;
    return false;
  };
  const float v[2] = {1, 2};

  SECTION("nothing at the path before commit; the temporary file goes on destruction") {
    {
      SafetensorsWriter w(path, {});
      w.declare("x", DType::F32, {2});
      w.write_f32("x", v, 2);
      CHECK_FALSE(fs::exists(path));
      CHECK(tmp_exists());
    }
    CHECK_FALSE(fs::exists(path));
    CHECK_FALSE(tmp_exists());
  }
  SECTION("an existing file is replaced only on commit") {
    write_bytes(path, "old contents");
    {
      SafetensorsWriter w(path, {});
      w.declare("x", DType::F32, {2});
      w.write_f32("x", v, 2);
      CHECK(read_bytes(path) == "old contents");
    }
    CHECK(read_bytes(path) == "old contents");  // abandoned writer: old file intact
    SafetensorsWriter w(path, {});
    w.declare("x", DType::F32, {2});
    w.write_f32("x", v, 2);
    CHECK(read_bytes(path) == "old contents");
    w.commit();
    CHECK_FALSE(tmp_exists());
    SafetensorsFile f(path);
    CHECK(f.read_f32("x") == std::vector<float>{1, 2});
  }
  SECTION("a destination whose folder cannot be made is an InputError naming it") {
    // A missing folder is made (model/io/paths.hpp writable_destination); one below a regular
    // file cannot be.
    std::ofstream(dir.file("plain")) << "a file";
    const std::string bad = dir.file("plain/sub/x.safetensors");
    CHECK_THAT(input_error([&] { SafetensorsWriter w(bad, {}); }), Contains(bad) && Contains("cannot create its folder"));
  }
  SECTION("a missing folder on the way is made") {
    const std::string path = dir.file("new-dir/deeper/x.safetensors");
    SafetensorsWriter w(path, {});
    w.declare("x", DType::F32, {2});
    w.write_f32("x", v, 2);
    w.commit();
    CHECK(SafetensorsFile(path).read_f32("x") == std::vector<float>{1, 2});
  }
}

TEST_CASE("a missing file is an InputError naming it", "[safetensors]") {
  const std::string path = "/nonexistent-tierlab-dir/none.safetensors";
  CHECK_THAT(input_error([&] { SafetensorsFile f(path); }), Contains(path));
}

// Pages of `path`'s mapping in this process that are present (Linux /proc/self/pagemap),
// or -1 when that cannot be read here.
long mapped_pages_of(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  unsigned long lo = 0, hi = 0;
  while (std::getline(maps, line)) {
    if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0) {
      std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi);
      break;
    }
  }
  const int fd = ::open("/proc/self/pagemap", O_RDONLY);
  if (fd < 0 || hi == 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  long present = 0;
  for (unsigned long a = lo; a < hi; a += 4096) {
    std::uint64_t e = 0;
    if (::pread(fd, &e, 8, static_cast<off_t>(a / 4096 * 8)) != 8) {
      ::close(fd);
      return -1;
    }
    present += static_cast<long>(e >> 63);
  }
  ::close(fd);
  return present;
}

TEST_CASE("a tensor's pages leave the process once it has been read", "[safetensors][memory]") {
  TempDir dir("st-pages");
  const std::string path = fs::canonical(dir.path).string() + "/pages.safetensors";
  std::vector<float> v(1 << 20, 0.5f);  // two 4 MiB tensors
  {
    SafetensorsWriter w(path, {});
    w.declare("a", DType::F32, {1 << 20});
    w.declare("b", DType::F32, {1 << 20});
    w.write_f32("a", v.data(), v.size());
    w.write_f32("b", v.data(), v.size());
    w.commit();
  }
  SafetensorsFile f(path);
  if (mapped_pages_of(path) < 0) {
    WARN("skipped: /proc/self/pagemap is not readable here");
    return;
  }
  CHECK(f.read_f32("a") == v);
  // Without the release every one of a's 1024 pages would still be mapped.
  CHECK(mapped_pages_of(path) < 64);
  CHECK(f.read_f32("b") == v);
  CHECK(mapped_pages_of(path) < 64);
}

TEST_CASE("a file that is not a safetensors file says so, and a checkpoint is recognised", "[safetensors]") {
  const TempDir tmp("not-st");
  const std::string dir = tmp.path.string();
  auto message = [](const std::string& path) {
    try {
      SafetensorsFile f(path);
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Random bytes: an impossible header length and no JSON.
  const std::string junk = dir + "/junk.bin";
  {
    std::ofstream out(junk, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 2654435761u) >> 13));
  }
  const std::string e1 = message(junk);
  CHECK_THAT(e1, Catch::Contains("this is not a safetensors file") && !Catch::Contains("truncated"));
  // The shipped llama2.c checkpoint (golden file from outside the code) is named as one.
  const std::string e2 = message(std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin");
  CHECK_THAT(e2, Catch::Contains("looks like a llama2.c checkpoint") && Catch::Contains("--checkpoint"));
  // A real safetensors header cut short is still "truncated".
  const std::string cut = dir + "/cut.safetensors";
  {
    const std::string json = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    const std::uint64_t n = json.size() + 100;  // claims more header than the file holds
    std::ofstream out(cut, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << json;
  }
  CHECK_THAT(message(cut), Catch::Contains("truncated file?"));
}
