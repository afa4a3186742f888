// safetensors reading (mmap, validated header, per-tensor conversion) and atomic writing.
// Layout and writer conventions follow the reference implementation
// (huggingface/safetensors): 8-byte little-endian header length N, N bytes of compact
// JSON padded with spaces to a multiple of 8, then the data buffer; per tensor the keys
// "dtype", "shape", "data_offsets" in that order; "__metadata__" first when present.
#include "model/io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <nlohmann/json.hpp>
#include <utility>

#include "model/base/error.hpp"
#include "model/io/safetensors_parts.hpp"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this reader assumes a little-endian host");

namespace tierlab {

namespace safetensors_detail {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool checked_bytes(const std::vector<std::int64_t>& shape, std::size_t elem, std::uint64_t& out) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return false;
  }
  return !__builtin_mul_overflow(n, static_cast<std::uint64_t>(elem), &out);
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace safetensors_detail

using namespace safetensors_detail;

namespace {

constexpr std::string_view kSupported = "F32, F16, BF16, I32, I64, U8";


std::string file_context(const std::string& path) { return "safetensors file '" + path + "'"; }

std::string tensor_context(const std::string& path, const std::string& tensor) {
  return file_context(path) + ", tensor '" + tensor + "'";
}

// A llama2.c checkpoint starts with seven int32 (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len) of plausible sizes.
bool is_llama2c_shaped(const void* map, std::uint64_t size) {
  if (size < 28) return false;
  std::int32_t c[7];
  std::memcpy(c, map, sizeof c);
  const std::int64_t vocab = c[5] < 0 ? -static_cast<std::int64_t>(c[5]) : c[5];  // negative: unshared classifier (INT32_MIN too)
  return c[0] > 0 && c[0] <= 65536 && c[1] > 0 && c[1] <= 1 << 20 && c[2] > 0 && c[2] <= 1024 && c[3] > 0 && c[3] <= 1024 &&
         c[4] > 0 && c[4] <= c[3] && vocab > 0 && vocab <= 1 << 22 && c[6] > 0 && c[6] <= 1 << 24 && c[0] % c[3] == 0;
}

[[noreturn]] void fail_file(const std::string& path, const std::string& detail) {
  throw FormatError(file_context(path) + ": " + detail + ".");
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& tensor,
                              const std::string& detail) {
  throw FormatError(tensor_context(path, tensor) + ": " + detail + ".");
}


// Row-major multi-index of a flat index, e.g. "[4, 1]".
std::string multi_index(std::size_t flat, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    const auto d = static_cast<std::size_t>(shape[k]);
    idx[k] = static_cast<std::int64_t>(flat % d);
    flat /= d;
  }
  return shape_string(idx);
}

// Tell the kernel the pages of a tensor just read are not needed any more: the mapping is
// read-only and file-backed, so they are dropped from this process (the page cache keeps
// them) and re-read on the next access. This keeps the resident set at about one tensor
// when a file much larger than memory is walked head by head. The range is widened by
// 2 MiB on each side because the kernel maps whole page-cache folios (up to 2 MiB) on a
// fault, so reading one tensor also maps the edges of its neighbours; dropping pages
// another reader still uses is harmless (they fault back in).
void release_pages(const std::uint8_t* map, std::size_t map_size, const std::uint8_t* begin, std::size_t bytes) {
  if (bytes == 0 || map == nullptr) return;
  static const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  constexpr std::uintptr_t kSlack = 2u << 20;
  const auto map_lo = reinterpret_cast<std::uintptr_t>(map);  // page aligned (mmap)
  const auto map_hi = map_lo + map_size;
  const auto b = reinterpret_cast<std::uintptr_t>(begin);
  const std::uintptr_t lo = (b - map_lo > kSlack ? b - kSlack : map_lo) & ~(page - 1);
  const std::uintptr_t hi = std::min(map_hi, b + bytes + kSlack);
  madvise(reinterpret_cast<void*>(lo), ((hi + page - 1) & ~(page - 1)) - lo, MADV_DONTNEED);
}


}  // namespace

// ---- dtypes and conversions ------------------------------------------------------

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  return "?";
}

DType parse_dtype(std::string_view name, const std::string& context) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8}) {
    if (name == dtype_name(t)) return t;
  }
  throw FormatError(context + ": dtype '" + std::string(name) + "' is not supported (expected one of " +
                    std::string(kSupported) + ").");
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
  }
  return 0;
}

std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / Inf
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to Inf
  const std::uint32_t e = a >> 23;               // biased f32 exponent
  if (e >= 113) {                                // normal half: exponent e - 112
    std::uint32_t h = ((e - 112) << 10) | ((a & 0x7fffffu) >> 13);
    const std::uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
    return static_cast<std::uint16_t>(sign | h);
  }
  if (e < 102) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to even 0)
  // Subnormal half: value = m * 2^(e-150) = h * 2^-24, so h = m >> (126 - e).
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t s = 126 - e;  // 14..24
  std::uint32_t h = m >> s;
  const std::uint32_t rem = m & ((1u << s) - 1);
  const std::uint32_t halfway = 1u << (s - 1);
  if (rem > halfway || (rem == halfway && (h & 1u))) ++h;  // 0x400 is the smallest normal
  return static_cast<std::uint16_t>(sign | h);
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  std::uint32_t x;
  if (e == 0x1f) {
    x = sign | 0x7f800000u | (m << 13);
  } else if (e != 0) {
    x = sign | ((e + 112) << 23) | (m << 13);
  } else if (m == 0) {
    x = sign;
  } else {  // subnormal: m * 2^-24, exact in float
    const float v = static_cast<float>(m) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) | sign);
  }
  return std::bit_cast<float>(x);
}

std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(rounded >> 16);
}

float bf16_to_float(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// ---- checked input ---------------------------------------------------------------

nlohmann::json parse_json_checked(std::string_view text, const std::string& context, int max_depth) {
  // The parser callback sees every container start (depth = containers already open) and
  // every key; one set of keys per open object finds duplicates. Throwing from the callback
  // stops the parse before a deeper value exists.
  std::vector<std::set<std::string>> keys;     // the keys seen, per open object
  std::vector<bool> is_object;                 // per open container
  const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t event,
                                                   nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (depth + 1 > max_depth) {
          throw FormatError(context + ": the JSON nests arrays and objects deeper than " + std::to_string(max_depth) +
                            " levels (the limit for every tierlab JSON text).");
        }
        is_object.push_back(event == E::object_start);
        if (event == E::object_start) keys.emplace_back();
        break;
      case E::object_end:
      case E::array_end:
        if (!is_object.empty()) {
          if (is_object.back()) keys.pop_back();
          is_object.pop_back();
        }
        break;
      case E::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second) {
          const std::string shown = k.size() > 80 ? k.substr(0, 80) + "..." : k;
          throw FormatError(context + ": the JSON object at nesting level " + std::to_string(depth) +
                            " has the key '" + shown + "' twice (duplicate keys are refused).");
        }
        break;
      }
      case E::value:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), cb);
  } catch (const FormatError&) {
    throw;
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(context + ": the JSON does not parse (" + e.what() + ").");
  }
}

std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars) {
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
  return s;
}

std::string non_regular_kind(unsigned mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

int open_regular_file(const std::string& path, const std::string& what, std::uint64_t& size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw InputError("The " + what + " '" + path + "' cannot be opened: " + errno_text() + ".");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw InputError("Cannot read " + what + " '" + path + "': " + why + ".");
  }
  const std::string kind = non_regular_kind(st.st_mode);
  if (!kind.empty()) {
    ::close(fd);
    throw InputError("Cannot read " + what + " '" + path + "': it is " + kind + ", not a regular file.");
  }
  // Regular files ignore O_NONBLOCK; clear it anyway so that reads behave as usual.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

OpenRegularFile::~OpenRegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_regular_file(const std::string& path, const std::string& what, std::uint64_t max_bytes) {
  const OpenRegularFile opened(path, what);
  const int fd = opened.fd();
  const std::uint64_t size = opened.size();
  auto too_large = [&](std::uint64_t n) {
    throw InputError("Cannot read " + what + " '" + path + "': it is " + std::to_string(n) +
                     " bytes long, more than the limit of " + std::to_string(max_bytes) + " bytes.");
  };
  if (size > max_bytes) too_large(size);
  std::string out;
  out.resize(static_cast<std::size_t>(size));
  std::size_t at = 0;
  for (;;) {
    if (at == out.size()) {
      if (out.size() > max_bytes) too_large(out.size());
      out.resize(out.size() + 4096);  // the file grew since fstat: keep reading, bounded
    }
    const ssize_t r = ::read(fd, out.data() + at, out.size() - at);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw InputError("Cannot read " + what + " '" + path + "': " + errno_text() + ".");
    }
    if (r == 0) break;
    at += static_cast<std::size_t>(r);
  }
  out.resize(at);
  if (out.size() > max_bytes) too_large(out.size());
  return out;
}

// ---- reading ---------------------------------------------------------------------

namespace {

// The validated JSON header of the mapped file (size bytes at map); data_start receives the
// offset of the data buffer.
nlohmann::json read_header(const std::string& path, const std::uint8_t* map, std::size_t size,
                           std::size_t& data_start) {
  if (size < 8) {
    fail_file(path, "the file is " + std::to_string(size) +
                        " bytes long, shorter than the 8-byte header length (truncated file?)");
  }
  std::uint64_t n = 0;
  std::memcpy(&n, map, 8);
  // A safetensors file begins with an 8-byte header length and then a JSON header '{'.
  // Without the '{' this is another kind of file: say so, not "truncated".
  const bool json_follows = size > 8 && reinterpret_cast<const char*>(map)[8] == '{';
  if (!json_follows && (n > size - 8 || n > kMaxHeaderBytes)) {  // an impossible length and no JSON
    std::string what = "this is not a safetensors file (no JSON header '{' after the 8-byte length field";
    if (is_llama2c_shaped(map, size))
      what += "; it looks like a llama2.c checkpoint: give it to tierlab capture/replay --checkpoint";
    fail_file(path, what + "); traces are written by tierlab synth, tierlab capture and tools/capture_hf.py");
  }
  if (n > size - 8) {
    fail_file(path, "the header length field says " + std::to_string(n) + " bytes but only " +
                        std::to_string(size - 8) + " bytes follow it (truncated file?)");
  }
  data_start = 8 + static_cast<std::size_t>(n);

  if (n > kMaxHeaderBytes) {
    fail_file(path, "the header length field says " + std::to_string(n) + " bytes, more than the limit of " +
                        std::to_string(kMaxHeaderBytes) + " bytes");
  }
  // The header (safetensors format): JSON that begins with '{' and may be padded at the end
  // with spaces (0x20), nothing else: no NUL, no other trailing bytes.
  const std::string_view text(reinterpret_cast<const char*>(map) + 8, static_cast<std::size_t>(n));
  if (text.empty() || text.front() != '{') {
    fail_file(path, std::string("the JSON header ") +
                        (text.empty() ? "is empty" : "does not begin with '{' (it begins with byte " +
                                                         std::to_string(static_cast<unsigned char>(text.front())) + ")"));
  }
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    fail_file(path, "byte " + std::to_string(nul) + " of the " + std::to_string(n) +
                        "-byte JSON header is a NUL (the header is JSON padded with spaces only)");
  }
  std::size_t json_end = text.size();
  while (json_end > 0 && text[json_end - 1] == ' ') --json_end;
  if (json_end == 0 || text[json_end - 1] != '}') {
    fail_file(path, "the JSON header has bytes after its closing '}' other than space padding (byte " +
                        std::to_string(json_end == 0 ? 0 : json_end - 1) + " is " +
                        std::to_string(json_end == 0 ? 0 : static_cast<unsigned char>(text[json_end - 1])) + ")");
  }
  const nlohmann::json header = parse_json_checked(text.substr(0, json_end), file_context(path) + ": the JSON header");
  if (!header.is_object()) {
    fail_file(path, std::string("the JSON header is a ") + header.type_name() + ", expected an object");
  }
  return header;
}

// The "__metadata__" entry: an object of strings (or null), into metadata.
void read_metadata(const std::string& path, const std::string& name, const nlohmann::json& v,
                   std::map<std::string, std::string>& metadata) {
  if (v.is_null()) return;
  if (!v.is_object()) {
    fail_tensor(path, name, std::string("expected an object of strings, found a ") + v.type_name());
  }
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string()) {
      fail_tensor(path, name, "the value of key '" + m.key() + "' is a " + m.value().type_name() +
                                  ", expected a string");
    }
    metadata[m.key()] = m.value().get<std::string>();
  }
}

// One tensor's entry, checked against the data buffer of `buffer` bytes.
TensorInfo read_tensor_entry(const std::string& path, const std::string& name, const nlohmann::json& v,
                             std::uint64_t buffer) {
  if (!v.is_object()) fail_tensor(path, name, std::string("expected an object, found a ") + v.type_name());
  TensorInfo ti;
  ti.name = name;
  if (!v.contains("dtype")) fail_tensor(path, name, "the entry has no 'dtype'");
  if (!v["dtype"].is_string()) {
    fail_tensor(path, name, std::string("'dtype' is a ") + v["dtype"].type_name() + ", expected a string");
  }
  ti.dtype = parse_dtype(v["dtype"].get<std::string>(), tensor_context(path, name));

  if (!v.contains("shape")) fail_tensor(path, name, "the entry has no 'shape'");
  const auto& shape = v["shape"];
  if (!shape.is_array()) fail_tensor(path, name, std::string("'shape' is a ") + shape.type_name() + ", expected an array");
  for (const auto& d : shape) {
    if (!d.is_number_integer()) fail_tensor(path, name, "'shape' " + json_excerpt(shape) + " holds a non-integer");
    if (d.is_number_unsigned() ? d.get<std::uint64_t>() > static_cast<std::uint64_t>(
                                                               std::numeric_limits<std::int64_t>::max())
                               : d.get<std::int64_t>() < 0) {
      fail_tensor(path, name, "'shape' " + json_excerpt(shape) + " holds a negative or too large dimension");
    }
    ti.shape.push_back(d.get<std::int64_t>());
  }

  if (!v.contains("data_offsets")) fail_tensor(path, name, "the entry has no 'data_offsets'");
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
    fail_tensor(path, name, "'data_offsets' is " + json_excerpt(off) + ", expected [begin, end] with non-negative integers");
  }
  ti.begin = off[0].get<std::uint64_t>();
  ti.end = off[1].get<std::uint64_t>();
  if (ti.begin > ti.end) {
    fail_tensor(path, name, "'data_offsets' [" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) +
                                "] has begin > end");
  }
  if (ti.end > buffer) {
    fail_tensor(path, name, "'data_offsets' [" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) +
                                "] run past the end of the " + std::to_string(buffer) +
                                "-byte data buffer (truncated file?)");
  }
  std::uint64_t need = 0;
  if (!checked_bytes(ti.shape, dtype_size(ti.dtype), need)) {
    fail_tensor(path, name, "shape " + shape_string(ti.shape) + " overflows 64-bit sizes");
  }
  if (ti.end - ti.begin != need) {
    fail_tensor(path, name, "'data_offsets' [" + std::to_string(ti.begin) + ", " + std::to_string(ti.end) + "] hold " +
                                std::to_string(ti.end - ti.begin) + " bytes but dtype " +
                                std::string(dtype_name(ti.dtype)) + " with shape " + shape_string(ti.shape) +
                                " needs " + std::to_string(need));
  }
  return ti;
}

// The tensors tile the data buffer of `buffer` bytes: no overlaps, no holes, nothing after.
void check_tensor_layout(const std::string& path, const std::map<std::string, TensorInfo>& tensors,
                         std::uint64_t buffer) {
  // No two tensors may share bytes (empty tensors occupy none).
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, ti] : tensors) {
    if (ti.end > ti.begin) by_offset.push_back(&ti);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
  });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      fail_tensor(path, cur.name, "bytes [" + std::to_string(cur.begin) + ", " + std::to_string(cur.end) +
                                      ") overlap tensor '" + prev.name + "' at [" + std::to_string(prev.begin) +
                                      ", " + std::to_string(prev.end) + ")");
    }
  }
  // The data buffer is entirely indexed, without holes (safetensors format): no bytes that
  // no tensor owns, in between or at the end of the file.
  std::uint64_t covered = 0;
  for (const TensorInfo* ti : by_offset) {
    if (ti->begin != covered) {
      fail_tensor(path, ti->name, "starts at byte " + std::to_string(ti->begin) + " of the data buffer but bytes [" +
                                      std::to_string(covered) + ", " + std::to_string(ti->begin) +
                                      ") belong to no tensor (the buffer may not have holes)");
    }
    covered = ti->end;
  }
  if (covered != buffer) {
    fail_file(path, "the data buffer is " + std::to_string(buffer) + " bytes but its tensors cover only the first " +
                        std::to_string(covered) + " (" + std::to_string(buffer - covered) +
                        " trailing bytes belong to no tensor)");
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::uint64_t file_size = 0;
  fd_ = open_regular_file(path, "safetensors file", file_size);
  size_ = static_cast<std::size_t>(file_size);
  if (size_ > 0) {
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (m == MAP_FAILED) {
      const std::string why = errno_text();
      ::close(fd_);
      throw InputError("Cannot map safetensors file '" + path + "': " + why + ".");
    }
    map_ = static_cast<const std::uint8_t*>(m);
  }
  ::close(fd_);  // the mapping stays valid without the descriptor
  fd_ = -1;

  try {
    const nlohmann::json header = read_header(path, map_, size_, data_start_);
    const std::uint64_t buffer = size_ - data_start_;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const nlohmann::json& v = it.value();
      if (name == "__metadata__") {
        read_metadata(path, name, v, metadata_);
        continue;
      }
      tensors_.emplace(name, read_tensor_entry(path, name, v, buffer));
    }
    check_tensor_layout(path, tensors_, buffer);
  } catch (...) {
    if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

bool SafetensorsFile::has(const std::string& name) const { return tensors_.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw FormatError(tensor_context(path_, name) + ": no such tensor in the file (it holds " +
                      std::to_string(tensors_.size()) + " tensors).");
  }
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

namespace {

// Converts a floating tensor's bytes into dst (numel floats) and checks every value.
void convert_floats(const std::string& path, const TensorInfo& ti, const std::uint8_t* map, std::size_t map_size,
                    const std::uint8_t* src, float* dst) {
  const auto n = static_cast<std::size_t>(ti.numel());
  switch (ti.dtype) {
    case DType::F32:
      if (n) std::memcpy(dst, src, n * 4);
      break;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = half_to_float(h);
      }
      break;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = bf16_to_float(b);
      }
      break;
    default:
      fail_tensor(path, ti.name, "dtype " + std::string(dtype_name(ti.dtype)) +
                                     " is not a floating dtype (expected F32, F16 or BF16)");
  }
  release_pages(map, map_size, src, n * dtype_size(ti.dtype));
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(dst[i])) {
      fail_tensor(path, ti.name, std::string(std::isnan(dst[i]) ? "NaN" : "Inf") + " at flat index " +
                                     std::to_string(i) + " (index " + multi_index(i, ti.shape) +
                                     " of shape " + shape_string(ti.shape) + ")");
    }
  }
}

}  // namespace

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const TensorInfo& ti = info(name);
  std::vector<float> out(static_cast<std::size_t>(ti.numel()));
  convert_floats(path_, ti, map_, size_, map_ + data_start_ + ti.begin, out.data());
  return out;
}

MatrixRM SafetensorsFile::read_matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const {
  const TensorInfo& ti = info(name);
  // [rows, cols], or [a, b, ..., cols] with a*b*... = rows (e.g. [g, W, d] as (g*W) x d).
  bool ok = ti.shape.size() >= 2 && ti.shape.back() == cols;
  if (ok) {
    std::int64_t lead = 1;
    for (std::size_t k = 0; k + 1 < ti.shape.size(); ++k) lead *= ti.shape[k];
    ok = lead == rows;
  }
  if (!ok) {
    fail_tensor(path_, name, "has shape " + shape_string(ti.shape) + ", expected " +
                                 shape_string({rows, cols}) + " (or leading dimensions multiplying to " +
                                 std::to_string(rows) + ")");
  }
  MatrixRM m(rows, cols);
  convert_floats(path_, ti, map_, size_, map_ + data_start_ + ti.begin, m.data());
  return m;
}

const std::uint8_t* SafetensorsFile::mapped_bytes(const std::string& name) const {
  return map_ + data_start_ + info(name).begin;
}

void SafetensorsFile::drop_pages(const std::string& name) const {
  const TensorInfo& ti = info(name);
  tierlab::release_pages(map_, size_, map_ + data_start_ + ti.begin, ti.end - ti.begin);
}

std::vector<std::int32_t> SafetensorsFile::read_i32(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const auto n = static_cast<std::size_t>(ti.numel());
  const std::uint8_t* src = map_ + data_start_ + ti.begin;
  std::vector<std::int32_t> out(n);
  if (ti.dtype == DType::I32) {
    if (n) std::memcpy(out.data(), src, n * 4);
  } else if (ti.dtype == DType::I64) {  // PyTorch's default integer dtype; narrowed with a check
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t v;
      std::memcpy(&v, src + 8 * i, 8);
      if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()) {
        fail_tensor(path_, name, "I64 value " + std::to_string(v) + " at flat index " + std::to_string(i) +
                                     " does not fit in 32 bits");
      }
      out[i] = static_cast<std::int32_t>(v);
    }
  } else {
    fail_tensor(path_, name, "dtype " + std::string(dtype_name(ti.dtype)) + " is not an integer dtype (expected I32 or I64)");
  }
  release_pages(map_, size_, src, n * dtype_size(ti.dtype));
  return out;
}

std::vector<std::uint8_t> SafetensorsFile::read_u8(const std::string& name) const {
  const TensorInfo& ti = info(name);
  if (ti.dtype != DType::U8) {
    fail_tensor(path_, name, "dtype " + std::string(dtype_name(ti.dtype)) + ", expected U8");
  }
  const auto n = static_cast<std::size_t>(ti.numel());
  const std::uint8_t* src = map_ + data_start_ + ti.begin;
  std::vector<std::uint8_t> out(src, src + n);
  release_pages(map_, size_, src, n);
  return out;
}

}  // namespace tierlab
