// safetensors atomic writing (model/io/safetensors.hpp): a temporary file beside the target,
// the header first, tensors in declaration order, renamed over the target on commit.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "model/base/error.hpp"
#include "model/io/paths.hpp"
#include "model/io/safetensors.hpp"
#include "model/io/safetensors_parts.hpp"
#include "model/base/temporary_name.hpp"

namespace tierlab {

using namespace safetensors_detail;

// ---- writing ---------------------------------------------------------------------

struct SafetensorsWriter::Impl {
  std::string path;
  std::string tmp;
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;  // declaration order
  std::map<std::string, std::size_t> index;
  std::uint64_t next_offset = 0;
  std::size_t next_write = 0;
  bool header_written = false;
  bool committed = false;
  std::FILE* file = nullptr;
  std::vector<char> buffer;

  std::string context() const { return "safetensors writer for '" + path + "'"; }
  [[noreturn]] void fail(const std::string& detail) const { throw InputError(context() + ": " + detail + "."); }

  void put(const void* data, std::size_t bytes) {
    if (bytes && std::fwrite(data, 1, bytes, file) != bytes) {
      fail("cannot write to '" + tmp + "': " + errno_text());
    }
  }

  void write_header() {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
      nlohmann::ordered_json m = nlohmann::ordered_json::object();
      for (const auto& [k, v] : metadata) m[k] = v;
      h["__metadata__"] = std::move(m);
    }
    for (const TensorInfo& ti : tensors) {
      nlohmann::ordered_json e = nlohmann::ordered_json::object();
      e["dtype"] = std::string(dtype_name(ti.dtype));
      e["shape"] = ti.shape;
      e["data_offsets"] = {ti.begin, ti.end};
      h[ti.name] = std::move(e);
    }
    std::string text;
    try {
      text = h.dump();
    } catch (const nlohmann::json::exception& e) {
      fail(std::string("a tensor name or metadata string is not valid UTF-8 (") + e.what() + ")");
    }
    text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
    const std::uint64_t n = text.size();
    put(&n, 8);
    put(text.data(), text.size());
    header_written = true;
  }

  // Checks that `name` is the next tensor to write with `count` elements; returns it.
  const TensorInfo& begin_write(const std::string& name, std::size_t count) {
    if (committed) fail("tensor '" + name + "' written after commit()");
    auto it = index.find(name);
    if (it == index.end()) fail("tensor '" + name + "' was never declared");
    if (next_write >= tensors.size() || it->second != next_write) {
      fail("tensor '" + name + "' written out of order; tensors are written in declaration order and " +
           (next_write < tensors.size() ? "'" + tensors[next_write].name + "' is next" : std::string("all are written")));
    }
    const TensorInfo& ti = tensors[next_write];
    if (count != static_cast<std::size_t>(ti.numel())) {
      fail("tensor '" + name + "' got " + std::to_string(count) + " values but its shape " +
           shape_string(ti.shape) + " holds " + std::to_string(ti.numel()));
    }
    if (!header_written) write_header();
    return ti;
  }
};

SafetensorsWriter::SafetensorsWriter(std::string path, std::map<std::string, std::string> metadata)
    : impl_(std::make_unique<Impl>()) {
  // Never rename over a device, FIFO or folder (model/io/paths.hpp); a link keeps pointing at
  // the replaced file.
  impl_->path = writable_destination(path, "output file");
  impl_->tmp = temporary_name(impl_->path);  // unique per call: two writers of one path never share it
  impl_->metadata = std::move(metadata);
  impl_->file = std::fopen(impl_->tmp.c_str(), "wb");
  if (!impl_->file) impl_->fail("cannot create the temporary file '" + impl_->tmp + "': " + errno_text());
  impl_->buffer.resize(1 << 20);
  std::setvbuf(impl_->file, impl_->buffer.data(), _IOFBF, impl_->buffer.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!impl_) return;
  if (impl_->file) std::fclose(impl_->file);
  if (!impl_->committed) std::remove(impl_->tmp.c_str());
}

void SafetensorsWriter::declare(const std::string& name, DType dtype, std::vector<std::int64_t> shape) {
  Impl& w = *impl_;
  if (w.header_written || w.committed) w.fail("tensor '" + name + "' declared after data writing started");
  if (name.empty() || name == "__metadata__") w.fail("'" + name + "' is not a valid tensor name");
  if (w.index.count(name)) w.fail("tensor '" + name + "' declared twice");
  for (std::int64_t d : shape) {
    if (d < 0) w.fail("tensor '" + name + "' has negative dimension in shape " + shape_string(shape));
  }
  std::uint64_t bytes = 0;
  if (!checked_bytes(shape, dtype_size(dtype), bytes) || w.next_offset + bytes < w.next_offset) {
    w.fail("tensor '" + name + "' with shape " + shape_string(shape) + " overflows 64-bit sizes");
  }
  TensorInfo ti;
  ti.name = name;
  ti.dtype = dtype;
  ti.shape = std::move(shape);
  ti.begin = w.next_offset;
  ti.end = w.next_offset + bytes;
  w.next_offset = ti.end;
  w.index[name] = w.tensors.size();
  w.tensors.push_back(std::move(ti));
}

void SafetensorsWriter::write_f32(const std::string& name, const float* data, std::size_t count) {
  Impl& w = *impl_;
  const TensorInfo& ti = w.begin_write(name, count);
  if (ti.dtype != DType::F32 && ti.dtype != DType::F16 && ti.dtype != DType::BF16) {
    w.fail("tensor '" + name + "' is declared " + std::string(dtype_name(ti.dtype)) + ", not a floating dtype");
  }
  constexpr std::size_t kChunk = 1 << 14;
  std::uint16_t narrow[kChunk];
  for (std::size_t base = 0; base < count; base += kChunk) {
    const std::size_t n = std::min(kChunk, count - base);
    for (std::size_t i = 0; i < n; ++i) {
      const float v = data[base + i];
      if (!std::isfinite(v)) {
        w.fail("tensor '" + name + "' value at flat index " + std::to_string(base + i) + " is " +
               (std::isnan(v) ? "NaN" : "Inf") + " (readers reject non-finite values)");
      }
      if (ti.dtype == DType::F16) narrow[i] = float_to_half(v);
      if (ti.dtype == DType::BF16) narrow[i] = float_to_bf16(v);
      if (ti.dtype == DType::F16 && (narrow[i] & 0x7fffu) == 0x7c00u) {
        w.fail("tensor '" + name + "' value " + std::to_string(v) + " at flat index " + std::to_string(base + i) +
               " overflows F16 (largest finite 65504)");
      }
      if (ti.dtype == DType::BF16 && (narrow[i] & 0x7fffu) == 0x7f80u) {
        w.fail("tensor '" + name + "' value " + std::to_string(v) + " at flat index " + std::to_string(base + i) +
               " overflows BF16");
      }
    }
    if (ti.dtype == DType::F32) {
      w.put(data + base, n * 4);
    } else {
      w.put(narrow, n * 2);
    }
  }
  ++w.next_write;
}

void SafetensorsWriter::write_i32(const std::string& name, const std::int32_t* data, std::size_t count) {
  Impl& w = *impl_;
  const TensorInfo& ti = w.begin_write(name, count);
  if (ti.dtype == DType::I32) {
    w.put(data, count * 4);
  } else if (ti.dtype == DType::I64) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t v = data[i];
      w.put(&v, 8);
    }
  } else {
    w.fail("tensor '" + name + "' is declared " + std::string(dtype_name(ti.dtype)) + ", not I32 or I64");
  }
  ++w.next_write;
}

void SafetensorsWriter::write_u8(const std::string& name, const std::uint8_t* data, std::size_t count) {
  Impl& w = *impl_;
  const TensorInfo& ti = w.begin_write(name, count);
  if (ti.dtype != DType::U8) {
    w.fail("tensor '" + name + "' is declared " + std::string(dtype_name(ti.dtype)) + ", not U8");
  }
  w.put(data, count);
  ++w.next_write;
}

void SafetensorsWriter::commit() {
  Impl& w = *impl_;
  if (w.committed) w.fail("commit() called twice");
  if (w.next_write < w.tensors.size()) {
    w.fail("commit() before every declared tensor was written; '" + w.tensors[w.next_write].name +
           "' is next (" + std::to_string(w.next_write) + " of " + std::to_string(w.tensors.size()) + " written)");
  }
  if (!w.header_written) w.write_header();  // a file without tensors
  if (std::fflush(w.file) != 0 || ::fsync(::fileno(w.file)) != 0) {
    w.fail("cannot flush '" + w.tmp + "': " + errno_text());
  }
  const int rc = std::fclose(w.file);
  w.file = nullptr;
  if (rc != 0) w.fail("cannot close '" + w.tmp + "': " + errno_text());
  if (std::rename(w.tmp.c_str(), w.path.c_str()) != 0) {
    w.fail("cannot rename '" + w.tmp + "' onto the destination: " + errno_text());
  }
  w.committed = true;
  // Make the rename itself durable.
  std::filesystem::path dir = std::filesystem::path(w.path).parent_path();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace tierlab
