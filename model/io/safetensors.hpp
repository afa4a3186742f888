#pragma once
// A safetensors file (https://huggingface.co/docs/safetensors): 8-byte little-endian
// header length N, N bytes of JSON header {name: {dtype, shape, data_offsets:[begin,end]},
// "__metadata__": {string: string}}, then the data buffer. Offsets are relative to the
// start of the buffer. Reading maps the file (mmap) and validates the header once;
// tensor data is converted to float32 only when a caller asks for one tensor, so that
// files far larger than memory can be processed one head at a time.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/base/linalg.hpp"

namespace tierlab {

// ---- checked input, shared by every tierlab reader ---------------------------------
// The limits every reader enforces (docs/trace-format.md "Limits", docs/scenarios.md):
//   kMaxJsonDepth     nesting of arrays and objects in any JSON text tierlab parses (the
//                     safetensors header, the trace metadata provenance and spans, cell files)
//   kMaxHeaderBytes   the safetensors JSON header (the reference implementation's limit)
//   kMaxTextBytes     a text file read whole: a scenario (YAML), a cell file (JSON)
constexpr int kMaxJsonDepth = 64;
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::uint64_t kMaxTextBytes = 64u << 20;

// Parses a JSON text strictly: FormatError "<context>: ..." when it does not parse, has
// bytes after the value (whitespace aside), nests arrays/objects deeper than max_depth
// (refused while parsing, so no deep value is ever built, printed or destroyed), or repeats
// a key within one object (JSON leaves duplicates open; tierlab refuses them).
nlohmann::json parse_json_checked(std::string_view text, const std::string& context, int max_depth = kMaxJsonDepth);

// A JSON value as compact text for a message, cut to about max_chars characters ("...").
std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars = 120);

// The kind of a file that is not a regular file, for messages: "a directory", "a FIFO
// (named pipe)", "a character device", ...; empty for a regular file.
std::string non_regular_kind(unsigned mode);
// Opens `path` for reading without ever blocking (O_NONBLOCK: a FIFO with no writer does
// not stall the open) and refuses anything but a regular file with an InputError naming
// `what` and the path ("Cannot read trace 'p': it is a FIFO (named pipe), not a regular
// file."). Returns the descriptor (the caller closes it) and the file's size.
int open_regular_file(const std::string& path, const std::string& what, std::uint64_t& size);
// open_regular_file as an owner: the descriptor is closed when the object goes.
class OpenRegularFile {
 public:
  OpenRegularFile(const std::string& path, const std::string& what) : fd_(open_regular_file(path, what, size_)) {}
  ~OpenRegularFile();
  OpenRegularFile(const OpenRegularFile&) = delete;
  OpenRegularFile& operator=(const OpenRegularFile&) = delete;
  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }

 private:
  std::uint64_t size_ = 0;
  int fd_ = -1;
};
// Reads a whole regular file of at most max_bytes bytes (InputError naming the path and the
// limit otherwise).
std::string read_regular_file(const std::string& path, const std::string& what, std::uint64_t max_bytes = kMaxTextBytes);

enum class DType { F32, F16, BF16, I32, I64, U8 };

std::string_view dtype_name(DType);            // "F32", "F16", "BF16", "I32", "I64", "U8"
DType parse_dtype(std::string_view name, const std::string& context);  // throws FormatError
std::size_t dtype_size(DType);

// Conversion helpers (round-to-nearest-even for f32 -> f16/bf16).
//   f16  (1 sign, 5 exponent, 10 mantissa bits): (-1)^s 2^(e-15) (1 + m/1024) for 0 < e < 31,
//        subnormal (-1)^s 2^-14 (m/1024) for e = 0; largest finite 65504.
//   bf16 = the upper 16 bits of an f32: (-1)^s 2^(e-127) (1 + m/128).
// float_to_half/float_to_bf16 return Inf for values that round beyond the largest finite.
std::uint16_t float_to_half(float);
float half_to_float(std::uint16_t);
std::uint16_t float_to_bf16(float);
float bf16_to_float(std::uint16_t);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offset into the data buffer
  std::uint64_t end = 0;
  std::int64_t numel() const;
};

// Read-only view of a safetensors file. Construction validates: file size, header
// length, header JSON, every dtype, shape and offset (in range, size = numel x
// dtype size, no overlap). Errors are FormatError naming the file and the tensor.
// Reads touch only the named tensor's bytes and drop its mapped pages afterwards
// (madvise), so the resident set stays near one tensor; they are const and thread-safe.
// A missing or unreadable file is an InputError.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws FormatError naming it
  std::vector<std::string> names() const;                 // sorted

  // Copy a floating tensor into float32. Every value is checked: a NaN or Inf
  // throws FormatError naming the file, the tensor and the flat index.
  std::vector<float> read_f32(const std::string& name) const;
  // Same, checked against an expected shape (FormatError names expected and found):
  // [rows, cols], or [a, b, ..., cols] with a*b*... = rows (so [g, W, d] reads as (g*W) x d).
  MatrixRM read_matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  // I32, or I64 narrowed with a range check (PyTorch's default integer dtype).
  std::vector<std::int32_t> read_i32(const std::string& name) const;
  std::vector<std::uint8_t> read_u8(const std::string& name) const;
  // The tensor's bytes in the memory map, unconverted and unchecked (little-endian, of
  // info(name).dtype), valid while this object lives: for zero-copy views (the Python module).
  const std::uint8_t* mapped_bytes(const std::string& name) const;
  // Drops the tensor's mapped pages from the resident set, as every read does afterwards.
  void drop_pages(const std::string& name) const;

 private:
  std::string path_;
  int fd_ = -1;
  const std::uint8_t* map_ = nullptr;
  std::size_t size_ = 0;
  std::size_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, TensorInfo> tensors_;
};

// Streaming, atomic writer. Declare every tensor first (the header carries all
// offsets), then write their data in declaration order; commit() flushes, fsyncs and
// renames the temporary file onto path ("<path>.tmp-<pid>-<n>@<host>", a name of its own:
// model/base/temporary_name.hpp). A writer destroyed
// without commit() removes its temporary file, so a crash never leaves a partial file.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::map<std::string, std::string> metadata);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void declare(const std::string& name, DType dtype, std::vector<std::int64_t> shape);
  // Float data is converted to the declared dtype (F32/F16/BF16); count must equal numel.
  void write_f32(const std::string& name, const float* data, std::size_t count);
  void write_i32(const std::string& name, const std::int32_t* data, std::size_t count);
  void write_u8(const std::string& name, const std::uint8_t* data, std::size_t count);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierlab
