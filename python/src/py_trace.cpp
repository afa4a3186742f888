// Traces in Python: tierlab.Trace (an open trace file, model/io/trace.hpp), tierlab.Head (one KV
// head: the tensors of a file as read-only views of its memory map, or arrays a user built),
// writing a trace from heads, and the synthetic generator (model/synthetic/synthetic.hpp).
#include <algorithm>
#include <map>
#include <sstream>

#include "common.hpp"
#include "model/io/head_range.hpp"
#include "model/io/safetensors.hpp"
#include "model/synthetic/synthetic.hpp"

namespace tierlab::python {

namespace {

// The owner of one tensor view of a memory map (the view's base): keeps the trace open, and
// when the last view of the tensor goes, drops its pages from the resident set.
struct MappedTensor {
  py::object trace;  // the tierlab.Trace
  std::shared_ptr<const TraceReader> reader;
  std::string name;
  ~MappedTensor() {
    if (reader) reader->file().drop_pages(name);
  }
};

std::vector<py::ssize_t> shape_of(const TensorInfo& ti) {
  return std::vector<py::ssize_t>(ti.shape.begin(), ti.shape.end());
}

// A view of the named tensor when NumPy has its dtype (F32, F16, I32, I64, U8); a float32 copy
// (checked, as the reader converts it) for BF16.
py::object tensor_array(const py::object& trace_obj, const std::shared_ptr<const TraceReader>& reader,
                        const std::string& name) {
  // A file truncated or replaced since it was opened: InputError, not a view whose first read
  // faults (SIGBUS). A view made before the change is not protected (model/io/trace.cpp).
  reader->check_unchanged();
  const SafetensorsFile& f = reader->file();
  const TensorInfo& ti = f.info(name);
  py::dtype dt;
  switch (ti.dtype) {
    case DType::F32: dt = py::dtype("<f4"); break;
    case DType::F16: dt = py::dtype("<f2"); break;
    case DType::I32: dt = py::dtype("<i4"); break;
    case DType::I64: dt = py::dtype("<i8"); break;
    case DType::U8: dt = py::dtype("u1"); break;
    case DType::BF16: {
      const std::vector<float> v = f.read_f32(name);
      py::array_t<float> a(shape_of(ti));
      if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(float));
      return a;
    }
  }
  auto owner = py::cast(MappedTensor{trace_obj, reader, name});
  return readonly_view(dt, shape_of(ti), f.mapped_bytes(name), owner);
}

// A view of an owned head's matrix (base: the tierlab.Head), with the given shape.
py::object owned_array(const py::object& head_obj, const MatrixRM& m, std::vector<py::ssize_t> shape) {
  return readonly_view(py::dtype::of<float>(), std::move(shape), m.data(), head_obj);
}

py::object head_tensor(const py::object& self, const std::string& field) {
  const PyHead& h = self.cast<const PyHead&>();
  if (h.reader) {
    const std::string name = head_tensor_name(h.layer, h.kv_head, field);
    if (!h.reader->file().has(name)) return py::none();
    return tensor_array(h.trace, h.reader, name);
  }
  const HeadData& d = *h.owned;
  const py::ssize_t dim = d.keys.cols(), g = h.group_size;
  if (field == "keys") return owned_array(self, d.keys, {d.keys.rows(), dim});
  if (field == "values") return owned_array(self, d.values, {d.values.rows(), dim});
  if (field == "keys_pre_rope")
    return d.keys_pre_rope.size() ? owned_array(self, d.keys_pre_rope, {d.keys_pre_rope.rows(), dim}) : py::none();
  if (field == "obs_queries") return owned_array(self, d.obs_queries, {g, d.obs_queries.rows() / g, dim});
  if (field == "decode_queries") return owned_array(self, d.decode_queries, {g, d.decode_queries.rows() / g, dim});
  if (field == "decode_keys") return owned_array(self, d.decode_keys, {d.decode_keys.rows(), dim});
  if (field == "decode_values") return owned_array(self, d.decode_values, {d.decode_values.rows(), dim});
  throw InputError("no head tensor '" + field + "'");
}

MatrixRM optional_matrix(const py::object& obj, const std::string& arg, int dims, const std::string& expect) {
  if (obj.is_none()) return MatrixRM();
  return float_matrix(obj, arg, dims, expect);
}

std::string shape2(Eigen::Index a, Eigen::Index b) { return "[" + std::to_string(a) + ", " + std::to_string(b) + "]"; }

// tierlab.Head(keys, values, obs_queries, ...): checks every array against the others.
PyHead make_head(const py::object& keys, const py::object& values, const py::object& obs_queries,
                 const py::object& decode_queries, const py::object& decode_keys, const py::object& decode_values,
                 const py::object& keys_pre_rope, const std::vector<std::pair<int, int>>& spans, int layer,
                 int kv_head, double rope_theta, int rope_dim, const std::string& rope_style,
                 int obs_first_position) {
  auto d = std::make_shared<HeadData>();
  d->keys = float_matrix(keys, "keys", 2, "[T, d]");
  const Eigen::Index T = d->keys.rows(), dim = d->keys.cols();
  if (T == 0 || dim == 0) throw InputError("argument keys: expected T >= 1 tokens and d >= 1 channels, got " + shape2(T, dim));
  d->values = float_matrix(values, "values", 2, "[T, d]");
  if (d->values.rows() != T || d->values.cols() != dim)
    throw InputError("argument values: expected shape " + shape2(T, dim) + " (as keys), got " +
                     shape2(d->values.rows(), d->values.cols()));
  const py::array oq = py::reinterpret_borrow<py::array>(obs_queries);
  d->obs_queries = float_matrix(obs_queries, "obs_queries", 3, "[g, W, d]");
  const int g = static_cast<int>(oq.shape(0));
  const Eigen::Index W = oq.shape(1);
  if (oq.shape(2) != dim || g < 1 || W < 1)
    throw InputError("argument obs_queries: expected shape [g, W, " + std::to_string(dim) +
                     "] with g >= 1 and W >= 1, got [" + std::to_string(oq.shape(0)) + ", " +
                     std::to_string(oq.shape(1)) + ", " + std::to_string(oq.shape(2)) + "]");
  if (W > T) throw InputError("argument obs_queries: W = " + std::to_string(W) + " observation queries exceed the T = " + std::to_string(T) + " prompt tokens");
  const bool any_decode = !decode_queries.is_none() || !decode_keys.is_none() || !decode_values.is_none();
  if (any_decode) {
    if (decode_queries.is_none() || decode_keys.is_none() || decode_values.is_none())
      throw InputError("arguments decode_queries, decode_keys, decode_values: give all three or none");
    const py::array dq = py::reinterpret_borrow<py::array>(decode_queries);
    d->decode_queries = float_matrix(decode_queries, "decode_queries", 3, "[g, S, d]");
    const Eigen::Index S = dq.shape(1);
    if (dq.shape(0) != g || dq.shape(2) != dim)
      throw InputError("argument decode_queries: expected shape [" + std::to_string(g) + ", S, " + std::to_string(dim) +
                       "] (g and d as obs_queries), got [" + std::to_string(dq.shape(0)) + ", " + std::to_string(S) +
                       ", " + std::to_string(dq.shape(2)) + "]");
    d->decode_keys = float_matrix(decode_keys, "decode_keys", 2, "[S, d]");
    d->decode_values = float_matrix(decode_values, "decode_values", 2, "[S, d]");
    if (d->decode_keys.rows() != S || d->decode_keys.cols() != dim)
      throw InputError("argument decode_keys: expected shape " + shape2(S, dim) + ", got " +
                       shape2(d->decode_keys.rows(), d->decode_keys.cols()));
    if (d->decode_values.rows() != S || d->decode_values.cols() != dim)
      throw InputError("argument decode_values: expected shape " + shape2(S, dim) + ", got " +
                       shape2(d->decode_values.rows(), d->decode_values.cols()));
  } else {
    d->decode_queries.resize(0, dim);
    d->decode_keys.resize(0, dim);
    d->decode_values.resize(0, dim);
  }
  d->keys_pre_rope = optional_matrix(keys_pre_rope, "keys_pre_rope", 2, "[T, d]");
  if (d->keys_pre_rope.size() && (d->keys_pre_rope.rows() != T || d->keys_pre_rope.cols() != dim))
    throw InputError("argument keys_pre_rope: expected shape " + shape2(T, dim) + " (as keys), got " +
                     shape2(d->keys_pre_rope.rows(), d->keys_pre_rope.cols()));
  for (const auto& [b, e] : spans) {
    if (b < 0 || e <= b || e > T)
      throw InputError("argument spans: span (" + std::to_string(b) + ", " + std::to_string(e) +
                       ") is not a range 0 <= begin < end <= T = " + std::to_string(T));
    d->spans.push_back(Span{b, e});
  }
  constexpr int kMaxIndex = (1 << 20) - 1;  // a trace's n_layers and n_kv_heads are at most 2^20 (model/io/trace.cpp)
  if (layer < 0 || kv_head < 0 || layer > kMaxIndex || kv_head > kMaxIndex)
    throw InputError("arguments layer, kv_head: (" + std::to_string(layer) + ", " + std::to_string(kv_head) +
                     ") is outside 0.." + std::to_string(kMaxIndex));
  if (obs_first_position != -1 && (obs_first_position < 0 || obs_first_position > T - W))
    throw InputError("argument obs_first_position: " + std::to_string(obs_first_position) +
                     " is neither -1 (the last W prompt positions) nor a first position of the W = " + std::to_string(W) +
                     " observation queries within the T = " + std::to_string(T) + " prompt tokens (0.." +
                     std::to_string(T - W) + ")");
  d->layer = layer;
  d->kv_head = kv_head;
  d->group_size = g;
  d->obs_first_position = obs_first_position;
  PyHead h;
  h.owned = d;
  h.rope.theta = rope_theta;
  h.rope.rotary_dim = rope_dim;
  h.rope.style = rope_style;
  if (rope_style != "interleaved" && rope_style != "half")
    throw InputError("argument rope_style: '" + rope_style + "' is not interleaved or half");
  if (!(rope_theta > 0)) throw InputError("argument rope_theta: must be > 0, got " + std::to_string(rope_theta));
  h.layer = layer;
  h.kv_head = kv_head;
  h.group_size = g;
  // Everything the trace reader checks of a head's metadata (model/io/trace.hpp trace_meta_problem):
  // rope_dim even and <= d, rope_theta positive and finite, lengths and counts in range, spans.
  TraceMeta meta;
  meta.n_layers = 1;
  meta.n_kv_heads = 1;
  meta.group_size = g;
  meta.head_dim = static_cast<int>(std::min<Eigen::Index>(dim, INT32_MAX));
  meta.prompt_len = static_cast<int>(std::min<Eigen::Index>(T, INT32_MAX));
  meta.obs_window = static_cast<int>(W);
  meta.decode_steps = static_cast<int>(std::min<Eigen::Index>(d->decode_keys.rows(), INT32_MAX));
  meta.has_pre_rope = d->keys_pre_rope.size() > 0;
  meta.rope = h.rope;
  if (!d->spans.empty()) meta.spans = {d->spans};
  if (const std::string problem = trace_meta_problem(meta); !problem.empty())
    throw InputError("tierlab.Head: " + problem + " (as a trace's reader checks it)");
  check_head_magnitudes(*d, "tierlab.Head");  // docs/model.md convention 10, as the reader and writer check it
  observation_queries(*d);  // the library's own check of the layout (InputError naming the head)
  return h;
}

py::dict meta_dict(const TraceMeta& m) {
  py::dict d;
  d["n_layers"] = m.n_layers;
  d["n_kv_heads"] = m.n_kv_heads;
  d["group_size"] = m.group_size;
  d["head_dim"] = m.head_dim;
  d["prompt_len"] = m.prompt_len;
  d["obs_window"] = m.obs_window;
  d["decode_steps"] = m.decode_steps;
  d["has_pre_rope"] = m.has_pre_rope;
  d["storage_dtype"] = std::string(dtype_name(m.storage));
  d["rope_theta"] = m.rope.theta;
  d["rope_dim"] = m.rope.rotary_dim;
  d["rope_style"] = m.rope.style;
  d["provenance"] = m.provenance;
  return d;
}

std::string trace_repr(const TraceReader& r) {
  const TraceMeta& m = r.meta();
  std::ostringstream s;
  s << "<tierlab.Trace '" << r.path() << "': " << m.n_layers << " layers x " << m.n_kv_heads << " KV heads (g="
    << m.group_size << "), T=" << m.prompt_len << ", W=" << m.obs_window << ", S=" << m.decode_steps
    << ", d=" << m.head_dim << ", " << dtype_name(m.storage) << ">";
  return s.str();
}

void check_head_index(const TraceMeta& m, int layer, int kv_head) {
  if (layer < 0 || layer >= m.n_layers || kv_head < 0 || kv_head >= m.n_kv_heads)
    throw InputError("head (" + std::to_string(layer) + ", " + std::to_string(kv_head) + ") is outside the trace's " +
                     std::to_string(m.n_layers) + " layers x " + std::to_string(m.n_kv_heads) + " KV heads");
}

PyTrace open_trace(const std::string& path) { return PyTrace{std::make_shared<const TraceReader>(path)}; }

// Writes heads (any order; every (layer, kv_head) of the grid exactly once) as a trace file.
PyTrace write_trace(const std::string& path, const std::vector<PyHead>& heads, const std::string& storage,
                    const std::string& provenance, const py::object& token_ids) {
  if (heads.empty()) throw InputError("argument heads: no heads to write");
  std::vector<std::shared_ptr<const HeadData>> data;
  for (const PyHead& h : heads) data.push_back(h.data());
  int L = 0, H = 0;
  for (const auto& d : data) L = std::max(L, d->layer + 1), H = std::max(H, d->kv_head + 1);
  std::vector<int> slot(static_cast<std::size_t>(L * H), -1);
  for (std::size_t i = 0; i < data.size(); ++i) {
    int& s = slot[static_cast<std::size_t>(data[i]->layer * H + data[i]->kv_head)];
    if (s >= 0)
      throw InputError("argument heads: head (layer " + std::to_string(data[i]->layer) + ", kv_head " +
                       std::to_string(data[i]->kv_head) + ") is given twice");
    s = static_cast<int>(i);
  }
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h)
      if (slot[static_cast<std::size_t>(l * H + h)] < 0)
        throw InputError("argument heads: head (layer " + std::to_string(l) + ", kv_head " + std::to_string(h) +
                         ") is missing (the heads must fill " + std::to_string(L) + " layers x " + std::to_string(H) +
                         " KV heads)");
  const HeadData& first = *data[static_cast<std::size_t>(slot[0])];
  TraceMeta meta;
  meta.n_layers = L;
  meta.n_kv_heads = H;
  meta.group_size = first.group_size;
  meta.head_dim = static_cast<int>(first.keys.cols());
  meta.prompt_len = static_cast<int>(first.keys.rows());
  meta.obs_window = static_cast<int>(first.obs_queries.rows() / first.group_size);
  meta.decode_steps = static_cast<int>(first.decode_keys.rows());
  meta.has_pre_rope = first.keys_pre_rope.size() > 0;
  meta.rope = heads[static_cast<std::size_t>(slot[0])].rope;
  meta.storage = parse_dtype(storage, "argument storage");
  if (meta.storage != DType::F32 && meta.storage != DType::F16 && meta.storage != DType::BF16)
    throw InputError("argument storage: '" + storage + "' is not F32, F16 or BF16");
  meta.provenance = provenance.empty() ? std::string(R"({"source":"captured","writer":"tierlab python"})") : provenance;
  bool any_spans = false;
  for (const auto& d : data) any_spans = any_spans || !d->spans.empty();
  if (any_spans) {
    meta.spans.resize(static_cast<std::size_t>(L * H));
    for (const auto& d : data) meta.spans[static_cast<std::size_t>(d->layer * H + d->kv_head)] = d->spans;
  }
  if (!token_ids.is_none()) {
    const auto ids = int_array(token_ids, "token_ids", 1, "[T + S]", INT32_MAX);
    if (ids.size() != meta.prompt_len + meta.decode_steps)
      throw InputError("argument token_ids: expected T + S = " + std::to_string(meta.prompt_len + meta.decode_steps) +
                       " ids, got " + std::to_string(ids.size()));
    meta.token_ids.assign(ids.data(), ids.data() + ids.size());
  }
  {
    py::gil_scoped_release release;
    TraceWriter w(path, meta);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) w.write_head(*data[static_cast<std::size_t>(slot[static_cast<std::size_t>(l * H + h)])]);
    w.commit();
  }
  return open_trace(path);  // the reader's checks of what was written
}

}  // namespace

namespace {

// The memory map's owner and one KV head: _MappedTensor, Head.
void bind_head_type(py::module_& m) {
  py::class_<MappedTensor>(m, "_MappedTensor",
                           "The owner of a read-only view of a trace file's memory map (the array's base): it keeps "
                           "the trace open, and drops the tensor's pages from memory when the last view goes.")
      .def_readonly("trace", &MappedTensor::trace, "The tierlab.Trace the view belongs to.")
      .def_readonly("name", &MappedTensor::name, "The tensor's name in the file.")
      .def("__repr__", [](const MappedTensor& t) { return "<tierlab mapped tensor '" + t.name + "'>"; });

  py::class_<PyHead>(m, "Head", R"doc(One KV head: keys, values and queries (docs/model.md section 7).

From a file (Trace.head): the tensors are read-only views of the memory map (no copy) when
NumPy has the file's dtype (F32, F16); BF16 tensors are converted to float32 copies.
Built from arrays (tierlab.Head(keys=..., values=..., obs_queries=...)), e.g. captured with
your own PyTorch code; write heads with tierlab.write_trace.

Shapes: keys, values, keys_pre_rope [T, d]; obs_queries [g, W, d] (the last W prompt
positions of each of the g query heads); decode_queries [g, S, d]; decode_keys,
decode_values [S, d]. Arrays: float32 (float16/float64 are converted), C-contiguous,
finite.)doc")
      .def(py::init(&make_head), py::arg("keys"), py::arg("values"), py::arg("obs_queries"),
           py::arg("decode_queries") = py::none(), py::arg("decode_keys") = py::none(),
           py::arg("decode_values") = py::none(), py::arg("keys_pre_rope") = py::none(),
           py::arg("spans") = std::vector<std::pair<int, int>>{}, py::arg("layer") = 0, py::arg("kv_head") = 0,
           py::arg("rope_theta") = 10000.0, py::arg("rope_dim") = 0, py::arg("rope_style") = "interleaved",
           py::arg("obs_first_position") = -1,
           "Builds a head from NumPy arrays (copied into float32), checking dtypes, shapes and values; errors are "
           "tierlab.InputError naming the argument.")
      .def_readonly("layer", &PyHead::layer, "Layer index l.")
      .def_readonly("kv_head", &PyHead::kv_head, "KV head index h.")
      .def_readonly("group_size", &PyHead::group_size, "g: query heads sharing this KV head.")
      .def_property_readonly("file_backed", [](const PyHead& h) { return static_cast<bool>(h.reader); },
                             "True when the tensors are views of an open trace file.")
      .def_property_readonly("rope", [](const PyHead& h) {
        return py::dict(py::arg("theta") = h.rope.theta, py::arg("rotary_dim") = h.rope.rotary_dim,
                        py::arg("style") = h.rope.style);
      }, "RoPE applied to the keys: theta, rotary_dim (0 = all of d), style.")
      .def_property_readonly("keys", [](py::object s) { return head_tensor(s, "keys"); }, "Post-RoPE keys [T, d].")
      .def_property_readonly("values", [](py::object s) { return head_tensor(s, "values"); }, "Values [T, d].")
      .def_property_readonly("keys_pre_rope", [](py::object s) { return head_tensor(s, "keys_pre_rope"); },
                             "Pre-RoPE keys [T, d], or None.")
      .def_property_readonly("obs_queries", [](py::object s) { return head_tensor(s, "obs_queries"); },
                             "Observation queries [g, W, d].")
      .def_property_readonly("decode_queries", [](py::object s) { return head_tensor(s, "decode_queries"); },
                             "Decode-step queries [g, S, d].")
      .def_property_readonly("decode_keys", [](py::object s) { return head_tensor(s, "decode_keys"); },
                             "Key appended at each decode step [S, d].")
      .def_property_readonly("decode_values", [](py::object s) { return head_tensor(s, "decode_values"); },
                             "Value appended at each decode step [S, d].")
      .def_property_readonly("spans", [](const PyHead& h) {
        std::vector<std::pair<int, int>> out;
        if (h.reader) {
          const TraceMeta& m = h.reader->meta();
          if (!m.spans.empty())
            for (const Span& s : m.spans[static_cast<std::size_t>(h.layer * m.n_kv_heads + h.kv_head)])
              out.emplace_back(s.begin, s.end);
        } else {
          for (const Span& s : h.owned->spans) out.emplace_back(s.begin, s.end);
        }
        return out;
      }, "Planted multi-token spans [(begin, end), ...] (synthetic retrieval heads).")
      .def_property_readonly("tokens", [](const PyHead& h) {
        return h.reader ? h.reader->meta().prompt_len : static_cast<int>(h.owned->keys.rows());
      }, "T: prompt tokens.")
      .def("load", [](const PyHead& h) {
        PyHead out = h;
        if (h.reader) {
          {
            py::gil_scoped_release release;
            out.owned = std::make_shared<HeadData>(h.reader->head(h.layer, h.kv_head));
          }
          out.reader.reset();
          out.trace = py::object();
        }
        return out;
      }, "A copy in memory as float32, every value checked as the C++ reader checks it (NaN/Inf -> "
         "tierlab.FormatError naming the tensor and index). A head in memory returns itself.")
      .def("__repr__", [](const PyHead& h) {
        const int T = h.reader ? h.reader->meta().prompt_len : static_cast<int>(h.owned->keys.rows());
        const int d = h.reader ? h.reader->meta().head_dim : static_cast<int>(h.owned->keys.cols());
        return "<tierlab.Head L" + std::to_string(h.layer) + ".H" + std::to_string(h.kv_head) + ": T=" +
               std::to_string(T) + ", d=" + std::to_string(d) + ", g=" + std::to_string(h.group_size) +
               (h.reader ? ", view of " + h.reader->path() : std::string(", in memory")) + ">";
      });

}

// Trace files: Trace, open_trace, write_trace.
void bind_trace_type(py::module_& m) {
  py::class_<PyTrace>(m, "Trace", R"doc(An open trace file (docs/trace-format.md), read head by head
through its memory map. tierlab.open_trace(path) or tierlab.Trace(path); the constructor
checks the metadata and every tensor's presence, shape and dtype (tierlab.FormatError).)doc")
      .def(py::init(&open_trace), py::arg("path"), "Opens and checks a trace file.")
      .def_property_readonly("path", [](const PyTrace& t) { return t.reader->path(); }, "The file.")
      .def_property_readonly("meta", [](const PyTrace& t) { return meta_dict(t.reader->meta()); },
                             "The metadata as a dict (n_layers, n_kv_heads, group_size, head_dim, prompt_len, "
                             "obs_window, decode_steps, has_pre_rope, storage_dtype, rope_*, provenance).")
      .def_property_readonly("metadata", [](const PyTrace& t) { return t.reader->file().metadata(); },
                             "The file's raw safetensors metadata (all strings).")
      .def_property_readonly("n_layers", [](const PyTrace& t) { return t.reader->meta().n_layers; }, "Layers.")
      .def_property_readonly("n_kv_heads", [](const PyTrace& t) { return t.reader->meta().n_kv_heads; }, "KV heads per layer.")
      .def_property_readonly("group_size", [](const PyTrace& t) { return t.reader->meta().group_size; }, "g.")
      .def_property_readonly("head_dim", [](const PyTrace& t) { return t.reader->meta().head_dim; }, "d.")
      .def_property_readonly("prompt_len", [](const PyTrace& t) { return t.reader->meta().prompt_len; }, "T.")
      .def_property_readonly("obs_window", [](const PyTrace& t) { return t.reader->meta().obs_window; }, "W.")
      .def_property_readonly("decode_steps", [](const PyTrace& t) { return t.reader->meta().decode_steps; }, "S.")
      .def_property_readonly("storage_dtype", [](const PyTrace& t) { return std::string(dtype_name(t.reader->meta().storage)); },
                             "dtype of the float tensors: F32, F16 or BF16.")
      .def_property_readonly("provenance", [](const PyTrace& t) { return t.reader->meta().provenance; },
                             "Provenance JSON text (source, model, preset, seed, ...).")
      .def_property_readonly("token_ids", [](py::object self) -> py::object {
        const PyTrace& t = self.cast<const PyTrace&>();
        if (!t.reader->file().has("token_ids")) return py::none();
        return tensor_array(self, t.reader, "token_ids");
      }, "Token ids [T + S] (a view), or None.")
      .def("tensor_names", [](const PyTrace& t) { return t.reader->file().names(); }, "Every tensor's name, sorted.")
      .def("tensor", [](py::object self, const std::string& name) {
        const PyTrace& t = self.cast<const PyTrace&>();
        return tensor_array(self, t.reader, name);
      }, py::arg("name"), "One tensor by name: a read-only view of the memory map (BF16: a float32 copy).")
      .def("head", [](py::object self, int layer, int kv_head) {
        const PyTrace& t = self.cast<const PyTrace&>();
        check_head_index(t.reader->meta(), layer, kv_head);
        PyHead h;
        h.reader = t.reader;
        h.trace = self;
        h.rope = t.reader->meta().rope;
        h.layer = layer;
        h.kv_head = kv_head;
        h.group_size = t.reader->meta().group_size;
        return h;
      }, py::arg("layer"), py::arg("kv_head"),
         "Head (layer, kv_head): its tensors are views of the file (nothing is read until they are used).")
      .def("__len__", [](const PyTrace& t) { return t.reader->meta().n_heads(); }, "Number of KV heads, all layers.")
      .def("__repr__", [](const PyTrace& t) { return trace_repr(*t.reader); });

  m.def("open_trace", &open_trace, py::arg("path"), "Opens a trace file (tierlab.Trace); tierlab.FormatError when malformed.");
  m.def("write_trace", &write_trace, py::arg("path"), py::arg("heads"), py::arg("storage") = "F32",
        py::arg("provenance") = "", py::arg("token_ids") = py::none(),
        R"doc(Writes heads as a trace file (atomically) and returns it opened.

heads: tierlab.Head objects covering every (layer, kv_head) of an n_layers x n_kv_heads
grid exactly once, all of one shape; storage: "F32", "F16" or "BF16"; provenance: JSON
text; token_ids: integer array [T + S] or None. The writer checks each head against the
trace's metadata and the reader then checks the file, with the C++ messages.)doc");

}

// Synthetic traces: SynthParams, presets, synthetic_head, write_synthetic.
void bind_synthetic(py::module_& m) {
  py::class_<SynthParams>(m, "SynthParams", "Parameters of a synthetic trace (model/synthetic/synthetic.hpp, docs/synthetic.md).")
      .def(py::init<>())
      .def_static("preset", &synth_preset, py::arg("name"), "The parameters of a preset (tierlab.presets()).")
      .def_readwrite("preset_name", &SynthParams::preset, "Preset name (part of every head's seed).")
      .def_readwrite("seed", &SynthParams::seed, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("n_layers", &SynthParams::n_layers, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("n_kv_heads", &SynthParams::n_kv_heads, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("group_size", &SynthParams::group_size, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("head_dim", &SynthParams::head_dim, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("prompt_len", &SynthParams::prompt_len, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("obs_window", &SynthParams::obs_window, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("decode_steps", &SynthParams::decode_steps, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("mix_sink", &SynthParams::mix_sink, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("mix_local", &SynthParams::mix_local, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("mix_retrieval", &SynthParams::mix_retrieval, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("mix_diffuse", &SynthParams::mix_diffuse, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("logit_scale_min", &SynthParams::logit_scale_min, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("logit_scale_max", &SynthParams::logit_scale_max, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("sink_mass_min", &SynthParams::sink_mass_min, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("sink_mass_max", &SynthParams::sink_mass_max, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("local_mass_min", &SynthParams::local_mass_min, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("local_mass_max", &SynthParams::local_mass_max, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("span_mass_min", &SynthParams::span_mass_min, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("span_mass_max", &SynthParams::span_mass_max, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("background", &SynthParams::background, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("outlier_channels", &SynthParams::outlier_channels, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("outlier_strength", &SynthParams::outlier_strength, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("query_outlier_strength", &SynthParams::query_outlier_strength, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("outlier_token_rate", &SynthParams::outlier_token_rate, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("spans_per_head", &SynthParams::spans_per_head, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("span_len", &SynthParams::span_len, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("query_drift", &SynthParams::query_drift, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_readwrite("rope_theta", &SynthParams::rope_theta, "A field of SynthParams (model/synthetic/synthetic.hpp; docs/synthetic.md).")
      .def_property("storage", [](const SynthParams& p) { return std::string(dtype_name(p.storage)); },
                    [](SynthParams& p, const std::string& s) { p.storage = parse_dtype(s, "SynthParams.storage"); },
                    "Storage dtype of the float tensors: F32, F16 or BF16.")
      .def("validate", &SynthParams::validate, "tierlab.InputError naming the parameter and value when one is wrong.")
      .def("__repr__", [](const SynthParams& p) {
        return "<tierlab.SynthParams preset=" + p.preset + " seed=" + std::to_string(p.seed) + ": " +
               std::to_string(p.n_layers) + " layers x " + std::to_string(p.n_kv_heads) + " KV heads (g=" +
               std::to_string(p.group_size) + "), T=" + std::to_string(p.prompt_len) + ", d=" +
               std::to_string(p.head_dim) + ">";
      });
  m.def("presets", &synth_preset_names, "Names of the synthetic presets.");
  m.def("synthetic_head", [](const SynthParams& p, int layer, int kv_head) {
    p.validate();
    if (layer < 0 || layer >= p.n_layers || kv_head < 0 || kv_head >= p.n_kv_heads)
      throw InputError("head (" + std::to_string(layer) + ", " + std::to_string(kv_head) + ") is outside the " +
                       std::to_string(p.n_layers) + " x " + std::to_string(p.n_kv_heads) + " heads of the parameters");
    PyHead h;
    {
      py::gil_scoped_release release;
      h.owned = std::make_shared<HeadData>(synth_head(p, layer, kv_head));
    }
    h.rope = synth_meta(p).rope;
    h.layer = layer;
    h.kv_head = kv_head;
    h.group_size = p.group_size;
    return h;
  }, py::arg("params"), py::arg("layer"), py::arg("kv_head"),
     "One synthetic head in memory (the same data the trace file of these parameters holds).");
  m.def("write_synthetic", [](const std::string& path, const SynthParams& p, py::object progress) {
    p.validate();
    WorkContext ctx;
    ctx.progress = progress;
    const Progress report = ctx.reporter();
    call_released(ctx, [&] {
      write_synthetic_trace(p, path, [&](int d, int t) { report(d, t); });
      return 0;
    });
    return open_trace(path);
  }, py::arg("path"), py::arg("params"), py::arg("progress") = py::none(),
     "Writes the synthetic trace of the parameters (byte-identical for the same parameters) and returns it "
     "opened; progress(done, total) is called per head. Ctrl-C stops it (KeyboardInterrupt, no file left).");
}

}  // namespace

void bind_trace(py::module_& m) {
  bind_head_type(m);
  bind_trace_type(m);
  bind_synthetic(m);
}

}  // namespace tierlab::python
