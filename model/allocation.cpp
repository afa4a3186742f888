// Allocation files: one U8 tensor of tier indices per head, the ladder by name in the
// metadata (see allocation.hpp).
#include "model/allocation.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "model/base/error.hpp"
#include "model/base/sha256.hpp"
#include "model/io/safetensors.hpp"

namespace tierlab {

namespace {

constexpr int kMaxCount = 1 << 20;

std::string tiers_name(int l, int h) {
  return "layers." + std::to_string(l) + ".heads." + std::to_string(h) + ".tiers";
}

}  // namespace

void Allocation::validate() const {
  auto fail = [](const std::string& detail) { throw InputError("Allocation: " + detail + "."); };
  ladder.validate();
  if (n_layers < 1 || n_layers > kMaxCount) fail("n_layers = " + std::to_string(n_layers) + " is out of range (expected >= 1)");
  if (n_kv_heads < 1 || n_kv_heads > kMaxCount) fail("n_kv_heads = " + std::to_string(n_kv_heads) + " is out of range (expected >= 1)");
  if (prompt_len < 1) fail("prompt_len = " + std::to_string(prompt_len) + " is out of range (expected >= 1)");
  const std::size_t heads = static_cast<std::size_t>(n_layers) * static_cast<std::size_t>(n_kv_heads);
  if (tiers.size() != heads) {
    fail("tiers holds " + std::to_string(tiers.size()) + " heads, expected n_layers x n_kv_heads = " +
         std::to_string(heads));
  }
  for (std::size_t i = 0; i < heads; ++i) {
    const std::string head = "head (" + std::to_string(i / n_kv_heads) + ", " + std::to_string(i % n_kv_heads) + ")";
    if (tiers[i].size() != static_cast<std::size_t>(prompt_len)) {
      fail(head + " has " + std::to_string(tiers[i].size()) + " tokens, expected prompt_len = " + std::to_string(prompt_len));
    }
    for (std::size_t t = 0; t < tiers[i].size(); ++t) {
      if (tiers[i][t] >= ladder.size()) {
        fail(head + " token " + std::to_string(t) + " has tier " + std::to_string(tiers[i][t]) + ", but ladder '" +
             ladder.name() + "' has only " + std::to_string(ladder.size()) + " tiers");
      }
    }
  }
}

void write_allocation(const std::string& path, const Allocation& a) {
  a.validate();
  std::map<std::string, std::string> md = {
      {"tierlab.kind", "allocation"},
      {"tierlab.ladder", a.ladder.name()},
      {"n_layers", std::to_string(a.n_layers)},
      {"n_kv_heads", std::to_string(a.n_kv_heads)},
      {"prompt_len", std::to_string(a.prompt_len)},
  };
  if (!a.trace_sha256.empty()) md["tierlab.trace_sha256"] = a.trace_sha256;
  if (!a.trace_name.empty()) md["tierlab.trace_name"] = a.trace_name;
  if (!a.trace_tokens.empty()) md["tierlab.trace_tokens"] = a.trace_tokens;
  SafetensorsWriter w(path, std::move(md));
  for (int l = 0; l < a.n_layers; ++l) {
    for (int h = 0; h < a.n_kv_heads; ++h) w.declare(tiers_name(l, h), DType::U8, {a.prompt_len});
  }
  for (int l = 0; l < a.n_layers; ++l) {
    for (int h = 0; h < a.n_kv_heads; ++h) {
      const auto& v = a.head(l, h);
      w.write_u8(tiers_name(l, h), v.data(), v.size());
    }
  }
  w.commit();
}

Allocation read_allocation(const std::string& path) {
  SafetensorsFile f(path);
  const auto& md = f.metadata();
  auto fail_meta = [&](const std::string& detail) {
    throw FormatError("allocation '" + path + "': metadata " + detail + ".");
  };
  auto required = [&](const std::string& key) -> const std::string& {
    auto it = md.find(key);
    if (it == md.end()) fail_meta("field '" + key + "' is missing");
    return it->second;
  };
  auto integer = [&](const std::string& key, long long lo, long long hi) {
    const std::string& s = required(key);
    long long v = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) {
      fail_meta("field '" + key + "' = '" + s + "' is not an integer");
    }
    if (v < lo || v > hi) {
      fail_meta("field '" + key + "' = '" + s + "' is out of range (expected " + std::to_string(lo) + ".." +
                std::to_string(hi) + ")");
    }
    return static_cast<int>(v);
  };

  const std::string& kind = required("tierlab.kind");
  if (kind != "allocation") fail_meta("field 'tierlab.kind' = '" + kind + "', expected 'allocation'");
  Allocation a;
  const std::string& ladder = required("tierlab.ladder");
  try {
    a.ladder = RateLadder::parse(ladder);
  } catch (const InputError& e) {
    fail_meta("field 'tierlab.ladder' = '" + ladder + "' is not a valid rate ladder (" + e.what() + ")");
  }
  for (const auto& [key, field] : {std::pair<const char*, std::string*>{"tierlab.trace_sha256", &a.trace_sha256},
                                   {"tierlab.trace_name", &a.trace_name},
                                   {"tierlab.trace_tokens", &a.trace_tokens}})
    if (auto it = md.find(key); it != md.end()) *field = it->second;
  if (!a.trace_sha256.empty() && a.trace_sha256.size() != 64)
    fail_meta("field 'tierlab.trace_sha256' = '" + a.trace_sha256 + "' is not 64 hex digits");
  a.n_layers = integer("n_layers", 1, kMaxCount);
  a.n_kv_heads = integer("n_kv_heads", 1, kMaxCount);
  a.prompt_len = integer("prompt_len", 1, std::numeric_limits<std::int32_t>::max());

  a.tiers.resize(static_cast<std::size_t>(a.n_layers) * static_cast<std::size_t>(a.n_kv_heads));
  for (int l = 0; l < a.n_layers; ++l) {
    for (int h = 0; h < a.n_kv_heads; ++h) {
      const std::string name = tiers_name(l, h);
      auto fail = [&](const std::string& detail) {
        throw FormatError("allocation '" + path + "', tensor '" + name + "': " + detail + ".");
      };
      if (!f.has(name)) fail("is missing (expected U8 [prompt_len] = [" + std::to_string(a.prompt_len) + "])");
      const TensorInfo& ti = f.info(name);
      if (ti.dtype != DType::U8) fail("has dtype " + std::string(dtype_name(ti.dtype)) + ", expected U8");
      if (ti.shape != std::vector<std::int64_t>{a.prompt_len}) {
        std::string s = "[";
        for (std::size_t k = 0; k < ti.shape.size(); ++k) s += (k ? ", " : "") + std::to_string(ti.shape[k]);
        fail("has shape " + s + "], expected [prompt_len] = [" + std::to_string(a.prompt_len) + "]");
      }
      auto v = f.read_u8(name);
      for (std::size_t t = 0; t < v.size(); ++t) {
        if (v[t] >= a.ladder.size()) {
          fail("tier " + std::to_string(v[t]) + " at index " + std::to_string(t) + " is beyond ladder '" +
               a.ladder.name() + "' (" + std::to_string(a.ladder.size()) + " tiers)");
        }
      }
      a.head(l, h) = std::move(v);
    }
  }
  return a;
}

std::string file_sha256(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError("Cannot read '" + path + "' to hash it: " + std::strerror(errno) + ".");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError("Cannot hash '" + path + "': not a regular file.");
  }
  const std::size_t size = static_cast<std::size_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return sha256_hex("", 0);
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw InputError("Cannot map '" + path + "' to hash it: " + std::strerror(errno) + ".");
  const std::string h = sha256_hex(map, size);
  ::munmap(map, size);
  return h;
}

std::string token_list(const std::vector<std::int32_t>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

void set_trace_identity(Allocation& a, const std::string& trace_path, const std::vector<std::int32_t>& token_ids) {
  a.trace_sha256 = file_sha256(trace_path);
  a.trace_name = std::filesystem::path(trace_path).filename().string();
  a.trace_tokens = token_list(token_ids);
}

void check_trace_identity(const Allocation& a, const std::string& allocation_path, const std::string& trace_path) {
  if (a.trace_sha256.empty()) return;
  const std::string h = file_sha256(trace_path);
  if (h == a.trace_sha256) return;
  throw InputError("allocation '" + allocation_path + "' was solved for the trace '" + a.trace_name + "' (SHA-256 " +
                   a.trace_sha256.substr(0, 12) + "...), not for '" + trace_path + "' (SHA-256 " + h.substr(0, 12) +
                   "...): the shapes may agree but the keys differ; solve again on this trace (tierlab solve " +
                   trace_path + " --write-allocation FILE).");
}

}  // namespace tierlab
