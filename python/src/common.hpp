#pragma once
// What the binding's translation units share (docs/design.md "The Python module"):
//   - call_released: long work runs on the calling thread with the GIL released (other
//     Python threads run meanwhile; OpenMP keeps its thread pool); during it, on the main
//     thread, SIGINT (Ctrl-C) sets the work's cancel flag (model/base/cancel.hpp) instead of
//     Python's: the work stops at its next progress point (Cancelled), or sooner inside a
//     head (the surrogate and the CPU backend check the flag at every block of their loops:
//     current_cancel_flag), and KeyboardInterrupt is raised when it returns;
//   - scalar arguments: every function's float, int, bool and str arguments checked in one
//     place (check_argument_types), so a wrong type is an InputError naming it;
//   - progress callbacks: a Python callable progress(done, total) called from the worker
//     with the GIL held; each call is also the work's cancel point;
//   - array arguments: checked for dtype, dimensions, shape and memory order, with a
//     message naming the argument and what was expected (InputError -> tierlab.InputError).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <csignal>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "model/base/error.hpp"
#include "model/base/linalg.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"

namespace py = pybind11;

namespace tierlab {
struct AllocationReport;  // scenarios/pipeline/allocate.hpp
}  // namespace tierlab

namespace tierlab::python {

// The work's side of cancellation: the flag call_released sets on Ctrl-C, and the user's
// progress callable (None: no callback).
struct WorkContext {
  std::atomic<bool> stop{false};
  py::object progress;  // None or callable(done, total)

  // A tierlab::Progress for the library: checks the flag (throws Cancelled), then calls the
  // Python callable with the GIL held (its exceptions propagate as py::error_already_set).
  Progress reporter() {
    return [this](int done, int total) {
      throw_if_cancelled(&stop);
      if (!progress.is_none()) {
        py::gil_scoped_acquire gil;
        progress(done, total);
      }
    };
  }
};

// While alive (on the interpreter's main thread only), SIGINT sets *stop instead of Python's
// flag; the previous handler (Python's, or an enclosing scope's) is restored afterwards.
class SigintScope {
 public:
  SigintScope(std::atomic<bool>* stop, bool active);
  ~SigintScope();
  SigintScope(const SigintScope&) = delete;
  SigintScope& operator=(const SigintScope&) = delete;

 private:
  bool active_ = false;
  std::atomic<bool>* previous_target_ = nullptr;
  struct sigaction previous_ {};
};

// Is the calling thread the interpreter's main thread (the one that receives Ctrl-C)? Needs the GIL.
bool on_main_thread();

// Runs work() on the calling thread with the GIL released; see the header comment. The caller
// holds the GIL. On the main thread, Ctrl-C during the work sets ctx.stop (the work stops at its
// next cancel point) and KeyboardInterrupt is raised when it returns. Exceptions of work() are
// rethrown (translated by pybind11).
template <class F>
auto call_released(WorkContext& ctx, F&& work) -> decltype(work()) {
  using R = decltype(work());
  std::optional<R> result;
  std::exception_ptr error;
  const bool main = on_main_thread();
  {
    SigintScope sigint(&ctx.stop, main);
    const CancelScope cancel(&ctx.stop);  // the work's inner loops see the flag too (model/base/cancel.hpp)
    py::gil_scoped_release release;
    try {
      result.emplace(work());
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (main && ctx.stop) {
    // A Python exception of the work (its progress callback's) wins over the interrupt.
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (py::error_already_set&) {
        throw;
      } catch (...) {
      }
    }
    PyErr_SetString(PyExc_KeyboardInterrupt, "interrupted (tierlab stopped at its next cancel point)");
    throw py::error_already_set();
  }
  if (error) std::rethrow_exception(error);
  return std::move(*result);
}

// ---- scalar arguments ----------------------------------------------------------------------

// Wraps every function, method, constructor and property setter of the module so that its
// arguments of the declared types float, int, bool and str are checked before pybind11 converts
// them: a string for a number, a bool for a number, NaN, a number for a string, an integer out
// of range is a tierlab.InputError naming the function, the argument and the value
// (py_arguments.cpp). Called once, after every binding is made.
void check_argument_types(py::module_& m);

// A number given as a Python object (an argument declared `object` because it may also be a
// list, such as a budget): an int or float (NumPy's too), finite; anything else (a string, a
// bool, None) is an InputError naming the argument and the value.
double real_arg(const py::handle& value, const std::string& arg);

// ---- arrays ------------------------------------------------------------------------------

// A float32 matrix from a NumPy argument: float16, float32 or float64, `dims` dimensions
// (2: rows x cols; 3: [a, b, cols] read as (a b) x cols), C-contiguous. `expect` describes
// the shape for the message ("[T, d]"). Values must be finite (InputError with the index).
MatrixRM float_matrix(const py::handle& obj, const std::string& arg, int dims, const std::string& expect);

// The argument as a C-contiguous integer array of `dims` dimensions, values in [0, max_value].
py::array_t<std::int64_t> int_array(const py::handle& obj, const std::string& arg, int dims,
                                    const std::string& expect, std::int64_t max_value);

// Copies into new NumPy arrays.
py::array_t<double> to_array(const VectorD& v);
py::array_t<double> to_array(const MatrixRMd& m);
py::array_t<double> to_array(const std::vector<double>& v);
py::array_t<float> to_array(const MatrixRM& m);
py::array_t<std::uint8_t> to_array(const std::vector<std::uint8_t>& v);

// One column of a per-head table: f(row) for each row, as a NumPy array of T (double, int or
// bool), and the table's first two columns, "layer" and "kv_head" (rows with those fields).
template <class T, class Row, class F>
py::array_t<T> column(const std::vector<Row>& rows, F f) {
  py::array_t<T> a(static_cast<py::ssize_t>(rows.size()));
  T* out = a.mutable_data();
  for (std::size_t i = 0; i < rows.size(); ++i) out[i] = static_cast<T>(f(rows[i]));
  return a;
}
template <class Row>
py::dict head_table(const std::vector<Row>& rows) {
  py::dict d;
  d["layer"] = column<int>(rows, [](const Row& r) { return r.layer; });
  d["kv_head"] = column<int>(rows, [](const Row& r) { return r.kv_head; });
  return d;
}
py::array_t<bool> to_bool_array(const std::vector<bool>& v);

// A read-only NumPy view of memory owned by `owner` (kept alive as the array's base).
py::array readonly_view(const py::dtype& dtype, std::vector<py::ssize_t> shape, const void* data,
                        const py::object& owner);

// ---- shared Python-side types ------------------------------------------------------------

// One KV head as Python sees it (tierlab.Head): either owned data (built from arrays, from a
// synthetic generator or read and converted) or a head of an open trace file whose tensors
// are views of the memory map. data() gives the HeadData the library computes on.
struct PyHead {
  std::shared_ptr<const TraceReader> reader;  // file-backed when set
  py::object trace;                           // the tierlab.Trace it came from (file-backed)
  std::shared_ptr<HeadData> owned;            // owned otherwise (or the converted copy)
  RopeParams rope;
  int layer = 0, kv_head = 0;
  int group_size = 1;
  // The float32 data (reads and checks the file's head when file-backed: a fresh copy).
  std::shared_ptr<const HeadData> data() const;
};

// The Python `tierlab.Trace` object: an open TraceReader.
struct PyTrace {
  std::shared_ptr<const TraceReader> reader;
};

// Surrogate costs with the head they were computed on (tierlab.Costs; arrays are views owned by it).
struct PyCosts {
  SurrogateCosts costs;
  int layer = 0, kv_head = 0;
  std::string queries;  // "obs" | "decode"
};

// A ladder argument: a tierlab.Ladder, a comma-separated string or a list of tier names.
RateLadder ladder_arg(const py::object& obj);
// The head's surrogate costs on its "obs" (causal) or "decode" queries.
SurrogateCosts head_costs(const HeadData& d, const RopeParams& rope, const RateLadder& ladder, const std::string& queries);

// tierlab.Solution (py_solve.cpp), also an allocation argument of tierlab.recompute (py_evaluate.cpp).
struct PySolution {
  std::shared_ptr<const AllocationReport> rep;
};

// A JSON value as Python objects (json.loads of its text).
py::object json_to_python(const nlohmann::json& j);
// The backend named "auto", "cpu" or "cuda"; InputError when it is not available here.
std::unique_ptr<Recomputer> backend_for(const std::string& name);

void bind_trace(py::module_& m);
void bind_model(py::module_& m);
void bind_solve(py::module_& m);
void bind_evaluate(py::module_& m);
void bind_scenarios(py::module_& m);
void bind_rdcurve(py::module_& m);

}  // namespace tierlab::python
