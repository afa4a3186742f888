// Trace container: TraceMeta <-> safetensors "__metadata__" strings, per-head tensors.
// docs/trace-format.md describes the format for users.
#include "model/io/trace.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "model/base/error.hpp"
#include "model/io/head_range.hpp"
#include "model/io/safetensors_parts.hpp"
#include "model/base/text.hpp"

namespace tierlab {

namespace {

constexpr const char* kFormat = "trace-v1";
constexpr int kMaxCount = 1 << 20;  // sanity bound on layers, heads, group size, head dim
constexpr int kMaxLen = std::numeric_limits<std::int32_t>::max();

const char* const kFields[] = {"keys", "keys_pre_rope", "values", "obs_queries",
                               "decode_queries", "decode_keys", "decode_values"};

using safetensors_detail::shape_string;


bool parse_int(const std::string& s, long long& out) {
  const char* b = s.data();
  const char* e = b + s.size();
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && !s.empty();
}

bool parse_double(const std::string& s, double& out) {
  const char* b = s.data();
  const char* e = b + s.size();
  auto r = std::from_chars(b, e, out);
  return r.ec == std::errc() && r.ptr == e && !s.empty();
}

// A metadata string for a message, cut to 120 characters.
std::string excerpt(const std::string& s) { return s.size() > 120 ? s.substr(0, 120) + "..." : s; }

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// Expected shape of one per-head field; symbolic form for messages in `symbolic`.
std::vector<std::int64_t> field_shape(const TraceMeta& m, const std::string& field, std::string& symbolic) {
  const std::int64_t T = m.prompt_len, d = m.head_dim, g = m.group_size, W = m.obs_window, S = m.decode_steps;
  if (field == "keys" || field == "keys_pre_rope" || field == "values") {
    symbolic = "[prompt_len, head_dim]";
    return {T, d};
  }
  if (field == "obs_queries") {
    symbolic = "[group_size, obs_window, head_dim]";
    return {g, W, d};
  }
  if (field == "decode_queries") {
    symbolic = "[group_size, decode_steps, head_dim]";
    return {g, S, d};
  }
  symbolic = "[decode_steps, head_dim]";  // decode_keys, decode_values
  return {S, d};
}

// The fields a trace with this meta stores per head, in file order.
std::vector<std::string> head_fields(const TraceMeta& m) {
  std::vector<std::string> out;
  for (const char* f : kFields) {
    if (std::string(f) == "keys_pre_rope" && !m.has_pre_rope) continue;
    out.emplace_back(f);
  }
  return out;
}

// The first problem with a meta's values as a phrase ("n_layers = 0 is out of range
// (expected >= 1)"), or an empty string. Shared by the reader and the writer.
std::string meta_problem(const TraceMeta& m) {
  auto range = [](const char* name, long long v, long long lo, long long hi) -> std::string {
    if (v >= lo && v <= hi) return {};
    return std::string(name) + " = " + std::to_string(v) + " is out of range (expected " + std::to_string(lo) +
           ".." + std::to_string(hi) + ")";
  };
  std::string p;
  if (!(p = range("n_layers", m.n_layers, 1, kMaxCount)).empty()) return p;
  if (!(p = range("n_kv_heads", m.n_kv_heads, 1, kMaxCount)).empty()) return p;
  if (!(p = range("group_size", m.group_size, 1, kMaxCount)).empty()) return p;
  if (!(p = range("head_dim", m.head_dim, 1, kMaxCount)).empty()) return p;
  if (!(p = range("prompt_len", m.prompt_len, 1, kMaxLen)).empty()) return p;
  if (!(p = range("obs_window", m.obs_window, 0, m.prompt_len)).empty()) return p + " (at most prompt_len)";
  if (!(p = range("decode_steps", m.decode_steps, 0, static_cast<long long>(kMaxLen) - m.prompt_len)).empty()) return p;
  if (!(p = range("rope_dim", m.rope.rotary_dim, 0, m.head_dim)).empty()) return p + " (0 means head_dim)";
  if (m.rope.rotary_dim % 2 != 0) return "rope_dim = " + std::to_string(m.rope.rotary_dim) + " is odd (RoPE rotates pairs)";
  if (!(m.rope.theta > 0.0) || !std::isfinite(m.rope.theta)) return "rope_theta = " + format_exact(m.rope.theta) + " is not a positive number";
  if (m.rope.style != "interleaved" && m.rope.style != "half") {
    return "rope_style = '" + m.rope.style + "' is not 'interleaved' or 'half'";
  }
  if (!is_float_dtype(m.storage)) {
    return "storage_dtype = " + std::string(dtype_name(m.storage)) + " is not a floating dtype (F32, F16 or BF16)";
  }
  if (!m.spans.empty() && static_cast<int>(m.spans.size()) != m.n_heads()) {
    return "spans has " + std::to_string(m.spans.size()) + " entries, expected n_layers x n_kv_heads = " +
           std::to_string(m.n_heads()) + " (or none)";
  }
  for (std::size_t i = 0; i < m.spans.size(); ++i) {
    for (const Span& s : m.spans[i]) {
      if (s.begin < 0 || s.begin >= s.end || s.end > m.prompt_len) {
        return "spans of head (" + std::to_string(i / m.n_kv_heads) + ", " + std::to_string(i % m.n_kv_heads) +
               ") holds [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
               "), expected 0 <= begin < end <= prompt_len = " + std::to_string(m.prompt_len);
      }
    }
  }
  if (!m.token_ids.empty() && static_cast<long long>(m.token_ids.size()) !=
                                  static_cast<long long>(m.prompt_len) + m.decode_steps) {
    return "token_ids has " + std::to_string(m.token_ids.size()) + " entries, expected prompt_len + decode_steps = " +
           std::to_string(static_cast<long long>(m.prompt_len) + m.decode_steps);
  }
  if (!m.provenance.empty()) {
    try {
      if (!parse_json_checked(m.provenance, "provenance").is_object())
        return "provenance = '" + excerpt(m.provenance) + "' is not a JSON object";
    } catch (const FormatError& e) {
      return "provenance = '" + excerpt(m.provenance) + "' is not a JSON object (" + e.what() + ")";
    }
  }
  return {};
}

std::string spans_json(const TraceMeta& m) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < m.spans.size(); ++i) {
    if (m.spans[i].empty()) continue;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const Span& s : m.spans[i]) list.push_back({s.begin, s.end});
    j[std::to_string(i / m.n_kv_heads) + "." + std::to_string(i % m.n_kv_heads)] = std::move(list);
  }
  return j.dump();
}

std::map<std::string, std::string> meta_strings(const TraceMeta& m) {
  return {
      {"tierlab.format", kFormat},
      {"n_layers", std::to_string(m.n_layers)},
      {"n_kv_heads", std::to_string(m.n_kv_heads)},
      {"group_size", std::to_string(m.group_size)},
      {"head_dim", std::to_string(m.head_dim)},
      {"prompt_len", std::to_string(m.prompt_len)},
      {"obs_window", std::to_string(m.obs_window)},
      {"decode_steps", std::to_string(m.decode_steps)},
      {"has_pre_rope", m.has_pre_rope ? "true" : "false"},
      {"rope_theta", format_exact(m.rope.theta)},
      {"rope_dim", std::to_string(m.rope.rotary_dim)},
      {"rope_style", m.rope.style},
      {"storage_dtype", std::string(dtype_name(m.storage))},
      {"provenance", m.provenance.empty() ? std::string("{}") : m.provenance},
      {"spans", spans_json(m)},
  };
}

// Reads the metadata strings of a trace file into a TraceMeta (FormatError naming the
// field and its value).
class MetaParser {
 public:
  MetaParser(const std::string& path, const std::map<std::string, std::string>& md) : path_(path), md_(md) {}

  [[noreturn]] void fail(const std::string& detail) const {
    throw FormatError("trace '" + path_ + "': metadata " + detail + ".");
  }

  const std::string* find(const std::string& key) const {
    auto it = md_.find(key);
    return it == md_.end() ? nullptr : &it->second;
  }

  const std::string& required(const std::string& key) const {
    const std::string* v = find(key);
    if (!v) fail("field '" + key + "' is missing");
    return *v;
  }

  int integer(const std::string& key, long long lo, long long hi) const {
    const std::string& s = required(key);
    long long v = 0;
    if (!parse_int(s, v)) fail("field '" + key + "' = '" + s + "' is not an integer");
    if (v < lo || v > hi) {
      fail("field '" + key + "' = '" + s + "' is out of range (expected " + std::to_string(lo) + ".." +
           std::to_string(hi) + ")");
    }
    return static_cast<int>(v);
  }

  TraceMeta parse() const {
    TraceMeta m;
    const std::string& format = required("tierlab.format");
    if (format != kFormat) fail("field 'tierlab.format' = '" + format + "', expected '" + kFormat + "'");
    m.n_layers = integer("n_layers", 1, kMaxCount);
    m.n_kv_heads = integer("n_kv_heads", 1, kMaxCount);
    m.group_size = integer("group_size", 1, kMaxCount);
    m.head_dim = integer("head_dim", 1, kMaxCount);
    m.prompt_len = integer("prompt_len", 1, kMaxLen);
    m.obs_window = integer("obs_window", 0, m.prompt_len);
    m.decode_steps = integer("decode_steps", 0, static_cast<long long>(kMaxLen) - m.prompt_len);

    const std::string& pre = required("has_pre_rope");
    if (pre == "true" || pre == "1") {
      m.has_pre_rope = true;
    } else if (pre == "false" || pre == "0") {
      m.has_pre_rope = false;
    } else {
      fail("field 'has_pre_rope' = '" + pre + "' is not 'true' or 'false'");
    }

    const std::string& st = required("storage_dtype");
    DType storage = DType::F32;
    try {
      storage = parse_dtype(st, "trace '" + path_ + "': metadata field 'storage_dtype'");
    } catch (const FormatError&) {
      fail("field 'storage_dtype' = '" + st + "' is not F32, F16 or BF16");
    }
    if (!is_float_dtype(storage)) fail("field 'storage_dtype' = '" + st + "' is not F32, F16 or BF16");
    m.storage = storage;

    // RoPE fields are optional (defaults as RopeParams).
    if (const std::string* s = find("rope_theta")) {
      if (!parse_double(*s, m.rope.theta) || !(m.rope.theta > 0.0) || !std::isfinite(m.rope.theta)) {
        fail("field 'rope_theta' = '" + *s + "' is not a positive number");
      }
    }
    if (find("rope_dim")) m.rope.rotary_dim = integer("rope_dim", 0, m.head_dim);
    if (m.rope.rotary_dim % 2 != 0) fail("field 'rope_dim' = '" + required("rope_dim") + "' is odd (RoPE rotates pairs)");
    if (const std::string* s = find("rope_style")) {
      if (*s != "interleaved" && *s != "half") fail("field 'rope_style' = '" + *s + "' is not 'interleaved' or 'half'");
      m.rope.style = *s;
    }

    if (const std::string* s = find("provenance")) {
      if (!json_text(*s, "provenance").is_object()) fail("field 'provenance' = '" + excerpt(*s) + "' is not a JSON object");
      m.provenance = *s;
    }
    if (const std::string* s = find("spans")) parse_spans(*s, m);
    return m;
  }

 private:
  // A metadata string that holds JSON, parsed with the limits of every tierlab JSON text.
  nlohmann::json json_text(const std::string& text, const std::string& field) const {
    try {
      return parse_json_checked(text, "its text");
    } catch (const FormatError& e) {
      std::string why = e.what();
      if (!why.empty() && why.back() == '.') why.pop_back();
      fail("field '" + field + "' = '" + excerpt(text) + "' is not a JSON object (" + why + ")");
    }
  }

  void parse_spans(const std::string& text, TraceMeta& m) const {
    const auto j = json_text(text, "spans");
    if (!j.is_object()) fail("field 'spans' = '" + excerpt(text) + "' is not a JSON object");
    if (j.empty()) return;
    m.spans.assign(static_cast<std::size_t>(m.n_heads()), {});
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& key = it.key();
      const auto dot = key.find('.');
      long long l = -1, h = -1;
      if (dot == std::string::npos || !parse_int(key.substr(0, dot), l) || !parse_int(key.substr(dot + 1), h) ||
          l < 0 || l >= m.n_layers || h < 0 || h >= m.n_kv_heads) {
        fail("field 'spans' has key '" + key + "', expected 'layer.head' with layer < " + std::to_string(m.n_layers) +
             " and head < " + std::to_string(m.n_kv_heads));
      }
      if (!it.value().is_array()) fail("field 'spans' entry '" + key + "' = " + json_excerpt(it.value()) + " is not a list");
      auto& out = m.spans[static_cast<std::size_t>(l * m.n_kv_heads + h)];
      for (const auto& pair : it.value()) {
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number_integer()) {
          fail("field 'spans' entry '" + key + "' holds " + json_excerpt(pair) + ", expected [begin, end]");
        }
        const long long b = pair[0].get<long long>(), e = pair[1].get<long long>();
        if (b < 0 || b >= e || e > m.prompt_len) {
          fail("field 'spans' entry '" + key + "' holds " + json_excerpt(pair) +
               ", expected 0 <= begin < end <= prompt_len = " + std::to_string(m.prompt_len));
        }
        out.push_back({static_cast<std::int32_t>(b), static_cast<std::int32_t>(e)});
      }
    }
  }

  const std::string& path_;
  const std::map<std::string, std::string>& md_;
};

// What stat() says of a path: false (errno set) when it cannot be stat'ed.
template <class Stamp>
bool stamp_of(const std::string& path, Stamp& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  out.device = static_cast<std::uint64_t>(st.st_dev);
  out.inode = static_cast<std::uint64_t>(st.st_ino);
  out.size = static_cast<std::int64_t>(st.st_size);
  out.mtime_sec = static_cast<std::int64_t>(st.st_mtim.tv_sec);
  out.mtime_nsec = static_cast<std::int64_t>(st.st_mtim.tv_nsec);
  return true;
}

// How `now` differs from `then` as a phrase ("was replaced by another file"), "" when it does not.
template <class Stamp>
std::string stamp_change(const Stamp& then, const Stamp& now) {
  if (now.device != then.device || now.inode != then.inode) return "was replaced by another file";
  if (now.size != then.size)
    return std::string(now.size < then.size ? "was truncated" : "grew") + " from " + std::to_string(then.size) +
           " to " + std::to_string(now.size) + " bytes";
  if (now.mtime_sec != then.mtime_sec || now.mtime_nsec != then.mtime_nsec) return "was modified (its modification time changed)";
  return {};
}

}  // namespace

std::string trace_meta_problem(const TraceMeta& meta) { return meta_problem(meta); }

std::string head_tensor_name(int layer, int kv_head, const std::string& field) {
  return "layers." + std::to_string(layer) + ".heads." + std::to_string(kv_head) + "." + field;
}

// ---- reader ----------------------------------------------------------------------

// A trace's file changed under an open reader (issue 33): the map is of the file as it was
// opened, and a read of a page past a truncated end raises SIGBUS, which kills the process (a
// Python session with it). So the reader remembers what stat() said of the path when it
// opened it (device, inode, size, modification time) and check_unchanged() compares it with
// the path now before every head read: a file truncated, grown, rewritten in place, replaced
// (renamed over) or removed is an InputError naming it, before any page is touched.
// What remains (stated, not solved):
//   - a file truncated after the check, while head() copies from the map, still faults: the
//     check and the copy are not atomic, and no lock keeps another process from truncating;
//     a read of a whole head is short (milliseconds), so the window is that long;
//   - NumPy views that the Python module handed out earlier (Trace.head(...).keys) read the
//     map directly, with no check at all: a truncation before they are read faults too
//     (Head.load() and every computation go through head() and are checked);
//   - a rewrite of the same size within one tick of the file system's clock (milliseconds)
//     keeps size and modification time, so it is not noticed; it cannot fault either (no page
//     is past the end), and head() checks every value it reads;
//   - the path replaced between the stat() and the open of the map, and put back before the
//     second stat() below (an A-B-A swap), is not noticed.
// A file replaced while it is being opened (another writer renaming a complete file over it)
// is opened again, up to three times: each try maps one complete file.
TraceReader::TraceReader(const std::string& path) {
  for (int attempt = 1;; ++attempt) {
    const bool stamped = stamp_of(path, opened_);
    file_ = std::make_unique<SafetensorsFile>(path);  // its own messages for a missing or unreadable file
    FileStamp mapped;
    if (stamped && stamp_of(path, mapped) && stamp_change(opened_, mapped).empty()) break;
    if (attempt == 3)
      throw InputError("trace '" + path + "' changed while it was being opened, three times (another process is "
                       "writing it?); open it again once it is complete.");
  }
  meta_ = MetaParser(path, file_->metadata()).parse();
  auto fail = [&](const std::string& tensor, const std::string& detail) {
    throw FormatError("trace '" + path + "', tensor '" + tensor + "': " + detail + ".");
  };
  for (int l = 0; l < meta_.n_layers; ++l) {
    for (int h = 0; h < meta_.n_kv_heads; ++h) {
      for (const std::string& field : head_fields(meta_)) {
        const std::string name = head_tensor_name(l, h, field);
        std::string symbolic;
        const auto want = field_shape(meta_, field, symbolic);
        if (!file_->has(name)) fail(name, "is missing (expected shape " + symbolic + " = " + shape_string(want) + ")");
        const TensorInfo& ti = file_->info(name);
        if (ti.shape != want) {
          fail(name, "has shape " + shape_string(ti.shape) + ", expected " + symbolic + " = " + shape_string(want));
        }
        if (ti.dtype != meta_.storage) {
          fail(name, "has dtype " + std::string(dtype_name(ti.dtype)) + ", expected storage_dtype " +
                         std::string(dtype_name(meta_.storage)));
        }
      }
    }
  }
  if (file_->has("token_ids")) {
    const TensorInfo& ti = file_->info("token_ids");
    const std::vector<std::int64_t> want = {static_cast<std::int64_t>(meta_.prompt_len) + meta_.decode_steps};
    if (ti.shape != want) {
      fail("token_ids", "has shape " + shape_string(ti.shape) + ", expected [prompt_len + decode_steps] = " +
                            shape_string(want));
    }
    meta_.token_ids = file_->read_i32("token_ids");  // I32 or I64 (range-checked)
  }
}

TraceReader::TraceReader(TraceMeta meta, std::string name, HeadGenerator generate)
    : meta_(std::move(meta)), name_(std::move(name)), generate_(std::move(generate)) {
  if (!generate_) throw InputError("trace '" + name_ + "': no generator of its heads was given.");
  if (const std::string problem = meta_problem(meta_); !problem.empty())
    throw InputError("trace '" + name_ + "': " + problem + ".");
}

const std::string& TraceReader::path() const { return file_ ? file_->path() : name_; }

const SafetensorsFile& TraceReader::file() const {
  if (!file_) throw InputError("trace '" + name_ + "' is computed in memory, head by head: it has no file.");
  return *file_;
}

void TraceReader::check_unchanged() const {
  if (!file_) return;  // generated: nothing on disk to change
  FileStamp now;
  if (!stamp_of(path(), now)) {
    throw InputError("trace '" + path() + "' is no longer there (" + std::strerror(errno) +
                     "): it was removed or renamed since it was opened; open it again where it is now.");
  }
  if (const std::string change = stamp_change(opened_, now); !change.empty())
    throw InputError("trace '" + path() + "' " + change + " since it was opened; its heads can no longer be read from "
                     "it. Open it again once it is complete.");
}

HeadData TraceReader::head(int layer, int kv_head) const {
  if (layer < 0 || layer >= meta_.n_layers) {
    throw InputError("trace '" + path() + "': layer " + std::to_string(layer) + " is out of range (n_layers = " +
                     std::to_string(meta_.n_layers) + ").");
  }
  if (kv_head < 0 || kv_head >= meta_.n_kv_heads) {
    throw InputError("trace '" + path() + "': KV head " + std::to_string(kv_head) + " is out of range (n_kv_heads = " +
                     std::to_string(meta_.n_kv_heads) + ").");
  }
  if (!file_) return generated_head(layer, kv_head);
  check_unchanged();  // before any page of the map is touched
  const std::int64_t T = meta_.prompt_len, d = meta_.head_dim, g = meta_.group_size;
  const std::int64_t W = meta_.obs_window, S = meta_.decode_steps;
  auto read = [&](const char* field, std::int64_t rows) {
    return file_->read_matrix(head_tensor_name(layer, kv_head, field), rows, d);
  };
  HeadData hd;
  hd.layer = layer;
  hd.kv_head = kv_head;
  hd.keys = read("keys", T);
  if (meta_.has_pre_rope) hd.keys_pre_rope = read("keys_pre_rope", T);
  hd.values = read("values", T);
  hd.obs_queries = read("obs_queries", g * W);
  hd.decode_queries = read("decode_queries", g * S);
  hd.decode_keys = read("decode_keys", S);
  hd.decode_values = read("decode_values", S);
  if (!meta_.spans.empty()) hd.spans = meta_.spans[static_cast<std::size_t>(layer * meta_.n_kv_heads + kv_head)];
  hd.group_size = meta_.group_size;
  check_head_magnitudes(hd, "trace '" + path() + "', head L" + std::to_string(layer) + ".H" + std::to_string(kv_head));
  return hd;
}

HeadData TraceReader::generated_head(int layer, int kv_head) const {
  const std::int64_t T = meta_.prompt_len, d = meta_.head_dim, g = meta_.group_size;
  const std::int64_t W = meta_.obs_window, S = meta_.decode_steps;
  HeadData hd = generate_(layer, kv_head);
  // The fields a file of this meta holds, with their shapes and finite values, as head() reads
  // them from a file (same messages, the generated trace's name in place of the file's).
  auto check = [&](const MatrixRM& m, const char* field, std::int64_t rows) {
    const std::string name = head_tensor_name(layer, kv_head, field);
    if (m.rows() != rows || m.cols() != d)
      throw FormatError("trace '" + name_ + "', tensor '" + name + "': has shape [" + std::to_string(m.rows()) + ", " +
                        std::to_string(m.cols()) + "], expected [" + std::to_string(rows) + ", " + std::to_string(d) + "].");
    if (!m.allFinite())
      throw FormatError("trace '" + name_ + "', tensor '" + name + "': holds a value that is not finite.");
  };
  check(hd.keys, "keys", T);
  if (meta_.has_pre_rope)
    check(hd.keys_pre_rope, "keys_pre_rope", T);
  else
    hd.keys_pre_rope.resize(0, 0);
  check(hd.values, "values", T);
  check(hd.obs_queries, "obs_queries", g * W);
  check(hd.decode_queries, "decode_queries", g * S);
  check(hd.decode_keys, "decode_keys", S);
  check(hd.decode_values, "decode_values", S);
  hd.layer = layer;
  hd.kv_head = kv_head;
  hd.spans = meta_.spans.empty() ? std::vector<Span>{} : meta_.spans[static_cast<std::size_t>(layer * meta_.n_kv_heads + kv_head)];
  hd.group_size = meta_.group_size;
  check_head_magnitudes(hd, "trace '" + name_ + "', head L" + std::to_string(layer) + ".H" + std::to_string(kv_head));
  return hd;
}

CausalQueries observation_queries(const HeadData& head) { return observation_queries(head, head.group_size); }

CausalQueries observation_queries(const HeadData& head, int g) {
  const auto where = [&] {
    return "head (" + std::to_string(head.layer) + ", " + std::to_string(head.kv_head) + "): ";
  };
  const Eigen::Index rows = head.obs_queries.rows(), T = head.keys.rows();
  if (rows == 0)
    throw InputError(where() + "has no observation queries (obs_window = 0: a decode-only trace); allocations, the "
                               "surrogate and the observation-query errors are computed from them, so this needs W >= 1.");
  if (g < 1 || rows % g != 0)
    throw InputError(where() + "obs_queries has " + std::to_string(rows) + " rows, not a multiple of the group size " +
                     std::to_string(g) + ".");
  const Eigen::Index W = rows / g;
  const Eigen::Index first = head.obs_first_position >= 0 ? head.obs_first_position : T - W;
  if (first < 0)
    throw InputError(where() + "the observation window W = " + std::to_string(W) + " is longer than the prompt T = " +
                     std::to_string(T) + ".");
  CausalQueries qs;
  qs.rows = &head.obs_queries;
  qs.visible.resize(static_cast<std::size_t>(rows));
  for (int j = 0; j < g; ++j)
    for (Eigen::Index i = 0; i < W; ++i)
      qs.visible[static_cast<std::size_t>(j * W + i)] = static_cast<int>(std::min<Eigen::Index>(T, first + i + 1));
  return qs;
}

MatrixRM DecodeQueries::step(int s) const {
  MatrixRM q(g, rows->cols());
  for (int j = 0; j < g; ++j) q.row(j) = query(j, s);
  return q;
}

std::vector<int> DecodeQueries::visible() const {
  std::vector<int> v(static_cast<std::size_t>(g) * static_cast<std::size_t>(S));
  for (int j = 0; j < g; ++j)
    for (int s = 1; s <= S; ++s) v[static_cast<std::size_t>(row(j, s))] = T + s;
  return v;
}

DecodeQueries decode_query_set(const HeadData& head) {
  DecodeQueries d;
  d.rows = &head.decode_queries;
  d.S = static_cast<int>(head.decode_keys.rows());
  d.T = static_cast<int>(head.keys.rows());
  d.g = d.S > 0 ? static_cast<int>(head.decode_queries.rows() / d.S) : 0;
  return d;
}

CausalQueries all_visible(const MatrixRM& queries, Eigen::Index tokens) {
  CausalQueries qs;
  qs.rows = &queries;
  qs.visible.assign(static_cast<std::size_t>(queries.rows()), static_cast<int>(tokens));
  return qs;
}

// ---- writer ----------------------------------------------------------------------

TraceWriter::TraceWriter(std::string path, TraceMeta meta) : path_(std::move(path)), meta_(std::move(meta)) {
  const std::string problem = meta_problem(meta_);
  if (!problem.empty()) throw InputError("trace writer for '" + path_ + "': TraceMeta." + problem + ".");
  writer_ = std::make_unique<SafetensorsWriter>(path_, meta_strings(meta_));
  if (!meta_.token_ids.empty()) {
    writer_->declare("token_ids", DType::I32, {static_cast<std::int64_t>(meta_.token_ids.size())});
  }
  for (int l = 0; l < meta_.n_layers; ++l) {
    for (int h = 0; h < meta_.n_kv_heads; ++h) {
      for (const std::string& field : head_fields(meta_)) {
        std::string symbolic;
        writer_->declare(head_tensor_name(l, h, field), meta_.storage, field_shape(meta_, field, symbolic));
      }
    }
  }
  if (!meta_.token_ids.empty()) writer_->write_i32("token_ids", meta_.token_ids.data(), meta_.token_ids.size());
}

void TraceWriter::write_head(const HeadData& head) {
  auto fail = [&](const std::string& detail) {
    throw InputError("trace writer for '" + path_ + "', head (" + std::to_string(head.layer) + ", " + std::to_string(head.kv_head) +
                     "): " + detail + ".");
  };
  if (next_ >= meta_.n_heads()) fail("all " + std::to_string(meta_.n_heads()) + " heads are already written");
  const int l = next_ / meta_.n_kv_heads, h = next_ % meta_.n_kv_heads;
  if (head.layer != l || head.kv_head != h) {
    fail("heads are written in order (layer-major) and head (" + std::to_string(l) + ", " + std::to_string(h) +
         ") is next");
  }
  const std::int64_t T = meta_.prompt_len, d = meta_.head_dim, g = meta_.group_size;
  const std::int64_t W = meta_.obs_window, S = meta_.decode_steps;
  auto check = [&](const char* field, const MatrixRM& m, std::int64_t rows, const char* rows_text) {
    if (m.rows() != rows || m.cols() != d) {
      fail("HeadData." + std::string(field) + " is " + std::to_string(m.rows()) + " x " + std::to_string(m.cols()) +
           ", expected " + rows_text + " x head_dim = " + std::to_string(rows) + " x " + std::to_string(d));
    }
  };
  check("keys", head.keys, T, "prompt_len");
  if (meta_.has_pre_rope) {
    check("keys_pre_rope", head.keys_pre_rope, T, "prompt_len");
  } else if (head.keys_pre_rope.size() != 0) {
    fail("HeadData.keys_pre_rope is " + std::to_string(head.keys_pre_rope.rows()) + " x " +
         std::to_string(head.keys_pre_rope.cols()) + " but TraceMeta.has_pre_rope is false");
  }
  check("values", head.values, T, "prompt_len");
  check("obs_queries", head.obs_queries, g * W, "group_size * obs_window");
  check("decode_queries", head.decode_queries, g * S, "group_size * decode_steps");
  check("decode_keys", head.decode_keys, S, "decode_steps");
  check("decode_values", head.decode_values, S, "decode_steps");
  if (!head.spans.empty()) {
    const bool same = !meta_.spans.empty() && [&] {
      const auto& declared = meta_.spans[static_cast<std::size_t>(next_)];
      if (declared.size() != head.spans.size()) return false;
      for (std::size_t i = 0; i < declared.size(); ++i) {
        if (declared[i].begin != head.spans[i].begin || declared[i].end != head.spans[i].end) return false;
      }
      return true;
    }();
    if (!same) fail("HeadData.spans differ from TraceMeta.spans (spans go in the header, so TraceMeta must carry them)");
  }
  if (std::string fault = head_magnitude_fault(head); !fault.empty()) {
    fault.pop_back();  // fail() ends the sentence
    fail(fault);
  }

  auto put = [&](const char* field, const MatrixRM& m) {
    writer_->write_f32(head_tensor_name(l, h, field), m.data(), static_cast<std::size_t>(m.size()));
  };
  put("keys", head.keys);
  if (meta_.has_pre_rope) put("keys_pre_rope", head.keys_pre_rope);
  put("values", head.values);
  put("obs_queries", head.obs_queries);
  put("decode_queries", head.decode_queries);
  put("decode_keys", head.decode_keys);
  put("decode_values", head.decode_values);
  ++next_;
}

void TraceWriter::commit() {
  if (next_ < meta_.n_heads()) {
    throw InputError("trace writer for '" + path_ + "': commit() after " + std::to_string(next_) + " of " +
                     std::to_string(meta_.n_heads()) + " heads; head (" + std::to_string(next_ / meta_.n_kv_heads) +
                     ", " + std::to_string(next_ % meta_.n_kv_heads) + ") is missing.");
  }
  writer_->commit();
}

}  // namespace tierlab
