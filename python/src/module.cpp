// tierlab._tierlab: the extension module of the `tierlab` Python package (python/tierlab).
// This unit holds the module, the error seam (C++ categories -> Python exceptions) and the
// array helpers of common.hpp; the bindings are grouped by layer in py_*.cpp.
#include <cmath>
#include <cstring>
#include <sstream>

#include "model/base/openmp_policy.hpp"
#include "common.hpp"
#include "model/base/error.hpp"

namespace tierlab::python {

namespace {

std::string shape_text(const py::array& a) {
  std::string s = "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + "]";
}

std::string dtype_text(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

py::array as_array(const py::handle& obj, const std::string& arg) {
  if (!py::isinstance<py::array>(obj))
    throw InputError("argument " + arg + ": expected a NumPy array, got " +
                     py::str(py::type::of(obj).attr("__name__")).cast<std::string>());
  return py::reinterpret_borrow<py::array>(obj);
}

void check_dims(const py::array& a, const std::string& arg, int dims, const std::string& expect) {
  if (a.ndim() != dims)
    throw InputError("argument " + arg + ": expected a " + std::to_string(dims) + "-dimensional array " + expect +
                     ", got shape " + shape_text(a));
  if (!(a.flags() & py::array::c_style))
    throw InputError("argument " + arg + ": expected a C-contiguous (row-major) array, got a " +
                     std::string((a.flags() & py::array::f_style) ? "Fortran-ordered" : "strided") +
                     " one of shape " + shape_text(a) + "; pass numpy.ascontiguousarray(" + arg + ")");
}

std::string index_text(std::size_t flat, const py::array& a) {
  std::vector<std::size_t> idx(static_cast<std::size_t>(a.ndim()));
  for (py::ssize_t k = a.ndim() - 1; k >= 0; --k) {
    idx[static_cast<std::size_t>(k)] = flat % static_cast<std::size_t>(a.shape(k));
    flat /= static_cast<std::size_t>(a.shape(k));
  }
  std::string s = "(";
  for (std::size_t k = 0; k < idx.size(); ++k) s += (k ? ", " : "") + std::to_string(idx[k]);
  return s + ")";
}

}  // namespace

MatrixRM float_matrix(const py::handle& obj, const std::string& arg, int dims, const std::string& expect) {
  const py::array a = as_array(obj, arg);
  const char kind = a.dtype().kind();
  const auto item = a.dtype().itemsize();
  if (kind != 'f' || (item != 2 && item != 4 && item != 8))
    throw InputError("argument " + arg + ": expected a floating array (float32, or float16/float64, converted), got dtype " +
                     dtype_text(a));
  check_dims(a, arg, dims, expect);
  const py::ssize_t cols = a.shape(dims - 1);
  py::ssize_t rows = 1;
  for (int k = 0; k + 1 < dims; ++k) rows *= a.shape(k);
  MatrixRM out(rows, cols);
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  if (item == 4) {
    if (n) std::memcpy(out.data(), a.data(), n * sizeof(float));
  } else {
    const py::array_t<float> f = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    if (n) std::memcpy(out.data(), f.data(), n * sizeof(float));
  }
  const float* p = out.data();
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i]))
      throw InputError("argument " + arg + ": " + (std::isnan(p[i]) ? "NaN" : "Inf") + " at index " +
                       index_text(i, a) + " of shape " + shape_text(a) +
                       (item == 8 && std::isinf(p[i]) ? " (a float64 beyond float32's range)" : ""));
  return out;
}

py::array_t<std::int64_t> int_array(const py::handle& obj, const std::string& arg, int dims,
                                    const std::string& expect, std::int64_t max_value) {
  const py::array a = as_array(obj, arg);
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw InputError("argument " + arg + ": expected an integer array, got dtype " + dtype_text(a));
  check_dims(a, arg, dims, expect);
  auto out = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  const std::int64_t* p = out.data();
  for (py::ssize_t i = 0; i < out.size(); ++i)
    if (p[i] < 0 || p[i] > max_value)
      throw InputError("argument " + arg + ": value " + std::to_string(p[i]) + " at index " +
                       index_text(static_cast<std::size_t>(i), a) + " is outside [0, " + std::to_string(max_value) +
                       "]");
  return out;
}

py::array_t<double> to_array(const VectorD& v) {
  py::array_t<double> a(v.size());
  if (v.size()) std::memcpy(a.mutable_data(), v.data(), sizeof(double) * static_cast<std::size_t>(v.size()));
  return a;
}
py::array_t<double> to_array(const MatrixRMd& m) {
  py::array_t<double> a({m.rows(), m.cols()});
  if (m.size()) std::memcpy(a.mutable_data(), m.data(), sizeof(double) * static_cast<std::size_t>(m.size()));
  return a;
}
py::array_t<double> to_array(const std::vector<double>& v) {
  py::array_t<double> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), sizeof(double) * v.size());
  return a;
}
py::array_t<float> to_array(const MatrixRM& m) {
  py::array_t<float> a({m.rows(), m.cols()});
  if (m.size()) std::memcpy(a.mutable_data(), m.data(), sizeof(float) * static_cast<std::size_t>(m.size()));
  return a;
}
py::array_t<std::uint8_t> to_array(const std::vector<std::uint8_t>& v) {
  py::array_t<std::uint8_t> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size());
  return a;
}
py::array_t<bool> to_bool_array(const std::vector<bool>& v) {
  py::array_t<bool> a(static_cast<py::ssize_t>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) a.mutable_data()[i] = v[i];
  return a;
}

py::array readonly_view(const py::dtype& dtype, std::vector<py::ssize_t> shape, const void* data,
                        const py::object& owner) {
  py::array a(dtype, std::move(shape), {}, data, owner);
  py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

namespace {
std::atomic<std::atomic<bool>*> g_sigint_target{nullptr};
void interrupt_work(int) {
  if (std::atomic<bool>* t = g_sigint_target.load()) t->store(true);
}
}  // namespace

SigintScope::SigintScope(std::atomic<bool>* stop, bool active) : active_(active) {
  if (!active_) return;
  previous_target_ = g_sigint_target.exchange(stop);
  struct sigaction sa {};
  sa.sa_handler = interrupt_work;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK;
  sigaction(SIGINT, &sa, &previous_);
}

SigintScope::~SigintScope() {
  if (!active_) return;
  sigaction(SIGINT, &previous_, nullptr);
  g_sigint_target.store(previous_target_);
}

bool on_main_thread() {
  return py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>() == PyThread_get_thread_ident();
}

std::shared_ptr<const HeadData> PyHead::data() const {
  if (owned) return owned;
  return std::make_shared<const HeadData>(reader->head(layer, kv_head));
}

}  // namespace tierlab::python

PYBIND11_MODULE(_tierlab, m) {
  using namespace tierlab;
  using namespace tierlab::python;
  m.doc() =
      "tierlab's C++ library (key-cache budget allocation: quantize, evict or mix precisions per token).\n"
      "Import the `tierlab` package, not this module; docs/python.md is the tutorial.";
  m.attr("__version__") = TIERLAB_VERSION;
  same_bits_on_any_thread_count();  // as tierlab's programs: model/base/openmp_policy.hpp

  // The error seam (model/base/error.hpp): InputError (and FormatError) -> tierlab.InputError, a
  // ValueError; RecomputeError -> tierlab.RecomputeError, a RuntimeError; Cancelled ->
  // KeyboardInterrupt. Registered base first: the last registered translator is tried first.
  auto& input_error = py::register_exception<InputError>(m, "InputError", PyExc_ValueError);
  input_error.attr("__doc__") =
      "The input of a call is at fault (a malformed file, an unknown name, a value out of range, an array of the "
      "wrong dtype or shape); the message names the file, field and value. A ValueError.";
  auto& format_error = py::register_exception<FormatError>(m, "FormatError", input_error.ptr());
  format_error.attr("__doc__") = "A file does not follow its format (trace, allocation, scenario). An InputError.";
  auto& recompute_error = py::register_exception<RecomputeError>(m, "RecomputeError", PyExc_RuntimeError);
  recompute_error.attr("__doc__") =
      "The exact recomputation failed on its backend (device error, device memory exhausted). A RuntimeError.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Cancelled&) {
      PyErr_SetString(PyExc_KeyboardInterrupt, "cancelled");
    }
  });

  bind_trace(m);
  bind_model(m);
  bind_solve(m);
  bind_evaluate(m);
  bind_scenarios(m);
  bind_rdcurve(m);
  check_argument_types(m);  // last: every function exists (py_arguments.cpp)
}
