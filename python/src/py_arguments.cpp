// Argument types of every function of the module, checked in one place (issue 33): a string
// where a number is expected (solve_head(head, "2")), a bool for a number (Head(layer=True)), a
// number for a string or a bool, NaN or infinity for a float, an integer out of its parameter's
// range: tierlab.InputError naming the function, the argument and the value, instead of
// pybind11's TypeError ("incompatible function arguments") or a bool taken as 0 or 1.
//
// How: after every binding is made, check_argument_types() walks the module's functions and
// its classes' methods, constructors and property setters, reads each one's signature as
// pybind11 wrote it ("(head: tierlab._tierlab.Head, budget: float, family: str = 'mixed', ...)")
// and replaces the function's call entry (function_record::impl) by checked_call, which checks
// the arguments of the declared types float, int, bool and str (and Optional[...] of them)
// before pybind11 converts them, and names the argument when the conversion still fails. An
// argument declared `object` (a budget that may be a list) is converted in the function with
// real_arg(). Functions with overloads are left as they are (the module has none).
#include <cmath>
#include <unordered_map>

#include "common.hpp"

namespace tierlab::python {

namespace {

namespace pd = py::detail;

enum class Kind { Real, Integer, Bool, String, Other };

struct ArgumentCheck {
  std::string name;  // as the signature names it, or the property's name for a setter
  std::string type;  // as the signature writes it
  Kind kind = Kind::Other;
  bool optional = false;  // Optional[...]: None is accepted
  bool skip = false;      // self (already checked by pybind11)
};

struct CheckedFunction {
  py::handle (*impl)(pd::function_call&) = nullptr;  // pybind11's
  std::string label;                                 // "solve", "Head", "SynthParams.seed"
  std::vector<ArgumentCheck> args;                   // one per call.args entry
};

std::unordered_map<const pd::function_record*, CheckedFunction>& checked_functions() {
  static auto* map = new std::unordered_map<const pd::function_record*, CheckedFunction>();  // lives with the module
  return *map;
}

// NumPy's scalar types, looked up once.
struct NumpyScalars {
  py::object integer, floating, boolean;
};
const NumpyScalars& numpy_scalars() {
  static const NumpyScalars* s = [] {
    const py::module_ np = py::module_::import("numpy");
    return new NumpyScalars{np.attr("integer"), np.attr("floating"), np.attr("bool_")};
  }();
  return *s;
}

bool is_bool(py::handle v) { return PyBool_Check(v.ptr()) || py::isinstance(v, numpy_scalars().boolean); }
bool is_integer(py::handle v) {
  return (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr())) || py::isinstance(v, numpy_scalars().integer);
}
bool is_real(py::handle v) {
  return is_integer(v) || PyFloat_Check(v.ptr()) || py::isinstance(v, numpy_scalars().floating);
}

// "str '2'", "bool True", "list [1, 2]" (the repr cut to 60 characters).
std::string value_text(py::handle v) {
  std::string type = py::str(py::type::of(v).attr("__name__")).cast<std::string>();
  std::string r;
  try {
    r = py::repr(v).cast<std::string>();
  } catch (const py::error_already_set&) {
    r = "(no repr)";
  }
  if (r.size() > 60) r = r.substr(0, 57) + "...";
  return type + " " + r;
}

const char* kind_text(Kind k) {
  switch (k) {
    case Kind::Real: return "a number (int or float)";
    case Kind::Integer: return "an integer";
    case Kind::Bool: return "True or False";
    case Kind::String: return "a string";
    case Kind::Other: break;
  }
  return "a value of its type";
}

[[noreturn]] void refuse(const CheckedFunction& f, const ArgumentCheck& a, const std::string& why) {
  throw InputError(f.label + ": argument " + a.name + ": " + why + ".");
}

// The check of one argument of a declared scalar type (nothing for other types).
void check_argument(const CheckedFunction& f, const ArgumentCheck& a, py::handle v) {
  if (a.skip || a.kind == Kind::Other || !v) return;
  if (a.optional && v.is_none()) return;
  bool ok = false;
  switch (a.kind) {
    case Kind::Real: ok = is_real(v); break;
    case Kind::Integer: ok = is_integer(v); break;
    case Kind::Bool: ok = is_bool(v); break;
    case Kind::String: ok = PyUnicode_Check(v.ptr()); break;
    case Kind::Other: ok = true; break;
  }
  if (!ok)
    refuse(f, a, std::string("expected ") + kind_text(a.kind) + (a.optional ? " or None" : "") + ", got " + value_text(v));
  if (a.kind == Kind::Real && !is_integer(v)) {
    const double x = PyFloat_AsDouble(v.ptr());
    if (PyErr_Occurred()) throw py::error_already_set();
    if (!std::isfinite(x)) refuse(f, a, "expected a finite number, got " + value_text(v));
  }
}

// Why the call failed after the scalar checks passed: an integer out of its parameter's range,
// an object of another class, or (when neither can be told) the signature and what was given.
[[noreturn]] void diagnose(const CheckedFunction& f, const pd::function_call& call) {
  for (std::size_t i = 0; i < f.args.size() && i < call.args.size(); ++i) {
    const ArgumentCheck& a = f.args[i];
    const py::handle v = call.args[i];
    if (a.skip || !v || (a.optional && v.is_none())) continue;
    if (a.kind == Kind::Integer && is_integer(v)) {
      const py::int_ n = py::reinterpret_borrow<py::object>(v);
      int overflow = 0;
      const long long x = PyLong_AsLongLongAndOverflow(n.ptr(), &overflow);
      if (overflow != 0 || x < 0 || x > INT32_MAX)
        refuse(f, a, "the integer " + py::repr(v).cast<std::string>() + " is outside the range of this parameter");
    }
    if (a.kind == Kind::Other && a.type.rfind("List[", 0) == 0 &&
        (PyUnicode_Check(v.ptr()) || PyBytes_Check(v.ptr()) || !PySequence_Check(v.ptr())))
      refuse(f, a, "expected a list, got " + value_text(v));
    if (a.kind == Kind::Other && a.type.rfind("tierlab.", 0) == 0) {
      // A class of this module: "tierlab._tierlab.Trace".
      const auto dot = a.type.rfind('.');
      const py::module_ m = py::module_::import(a.type.substr(0, dot).c_str());
      const std::string cls = a.type.substr(dot + 1);
      if (py::hasattr(m, cls.c_str()) && !py::isinstance(v, m.attr(cls.c_str())))
        refuse(f, a, "expected a tierlab." + cls + ", got " + value_text(v));
    }
  }
  std::string given;
  for (std::size_t i = 0; i < f.args.size() && i < call.args.size(); ++i) {
    if (f.args[i].skip || !call.args[i]) continue;
    given += (given.empty() ? "" : ", ") + f.args[i].name + " = " + value_text(call.args[i]);
  }
  throw InputError(f.label + ": the arguments do not match its signature " + call.func.signature + " (given: " + given +
                   ").");
}

py::handle checked_call(pd::function_call& call) {
  const auto it = checked_functions().find(&call.func);
  if (it == checked_functions().end()) py::pybind11_fail("tierlab: a checked function without its record");
  const CheckedFunction& f = it->second;
  for (std::size_t i = 0; i < f.args.size() && i < call.args.size(); ++i) check_argument(f, f.args[i], call.args[i]);
  const py::handle result = f.impl(call);
  if (result.ptr() == PYBIND11_TRY_NEXT_OVERLOAD) diagnose(f, call);
  return result;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The parameters of a signature "(a: int, b: str = 'x, y', c: List[str] = [...]) -> R": the
// text between the outer parentheses split at commas outside brackets and quotes, each piece
// "name: type[ = default]".
std::vector<std::pair<std::string, std::string>> parameters(const std::string& sig) {
  std::vector<std::pair<std::string, std::string>> out;
  if (sig.empty() || sig[0] != '(') return out;
  std::vector<std::string> pieces;
  std::string cur;
  int depth = 0;
  char quote = 0;
  std::size_t i = 1;
  for (; i < sig.size(); ++i) {
    const char c = sig[i];
    if (quote) {
      if (c == '\\' && i + 1 < sig.size()) {
        cur += c;
        cur += sig[++i];
        continue;
      }
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '[' || c == '(' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}' || (c == ')' && depth > 0)) {
      --depth;
    } else if (c == ')') {
      break;
    } else if (c == ',' && depth == 0) {
      pieces.push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!trim(cur).empty()) pieces.push_back(cur);
  for (const std::string& p : pieces) {
    const auto colon = p.find(": ");
    if (colon == std::string::npos) {
      out.emplace_back(trim(p), "");
      continue;
    }
    std::string type = p.substr(colon + 2);
    const auto eq = type.find(" = ");
    if (eq != std::string::npos) type = type.substr(0, eq);
    out.emplace_back(trim(p.substr(0, colon)), trim(type));
  }
  return out;
}

ArgumentCheck argument_check(const std::string& name, std::string type) {
  ArgumentCheck a;
  a.name = name;
  a.type = type;
  if (type.rfind("Optional[", 0) == 0 && type.back() == ']') {
    a.optional = true;
    type = type.substr(9, type.size() - 10);
  }
  if (type == "float") a.kind = Kind::Real;
  if (type == "int") a.kind = Kind::Integer;
  if (type == "bool") a.kind = Kind::Bool;
  if (type == "str") a.kind = Kind::String;
  return a;
}

// The function record of a pybind11 function object (a method unwrapped), or nullptr.
pd::function_record* record_of(py::handle h) {
  h = pd::get_function(h);
  if (!h || !PyCFunction_Check(h.ptr())) return nullptr;
  py::handle self = PyCFunction_GET_SELF(h.ptr());
  if (!self || !py::isinstance<py::capsule>(self)) return nullptr;
  const auto cap = py::reinterpret_borrow<py::capsule>(self);
  if (!pd::is_function_record_capsule(cap)) return nullptr;
  return cap.get_pointer<pd::function_record>();
}

// Puts checked_call in front of the function (once); `label` names it in messages, `setter`
// (a property's name) names the value argument of a setter.
void check_function(py::handle fn, const std::string& label, const std::string& setter = {}) {
  pd::function_record* rec = record_of(fn);
  if (!rec || rec->next || rec->has_args || rec->has_kwargs || !rec->signature) return;  // overloads: as they are
  if (checked_functions().count(rec)) return;
  const auto params = parameters(rec->signature);
  if (params.size() != rec->nargs) return;  // a signature this reader does not follow: as it is
  if (rec->is_operator || params.size() <= (rec->is_method ? 1u : 0u)) return;  // nothing to check
  CheckedFunction f;
  f.impl = rec->impl;
  f.label = label;
  for (std::size_t i = 0; i < params.size(); ++i) {
    ArgumentCheck a = argument_check(!setter.empty() && i + 1 == params.size() ? setter : params[i].first, params[i].second);
    a.skip = rec->is_method && i == 0;
    f.args.push_back(std::move(a));
  }
  checked_functions().emplace(rec, std::move(f));
  rec->impl = &checked_call;
}

}  // namespace

double real_arg(const py::handle& value, const std::string& arg) {
  if (!is_real(value))
    throw InputError("argument " + arg + ": expected a number (int or float), got " + value_text(value) + ".");
  const double x = py::reinterpret_borrow<py::object>(value).cast<double>();
  if (!std::isfinite(x)) throw InputError("argument " + arg + ": expected a finite number, got " + value_text(value) + ".");
  return x;
}

void check_argument_types(py::module_& m) {
  const py::dict attrs = m.attr("__dict__");
  for (const auto& item : attrs) {
    const std::string name = py::str(item.first).cast<std::string>();
    const py::handle value = item.second;
    if (PyType_Check(value.ptr())) {
      // A class: its constructor, methods (static ones too) and property setters.
      const py::dict members = value.attr("__dict__");
      for (const auto& member : members) {
        const std::string mname = py::str(member.first).cast<std::string>();
        const py::handle mv = member.second;
        // Python's own protocols (__eq__, __repr__, ...) keep pybind11's behaviour.
        if (mname.rfind("__", 0) == 0 && mname != "__init__" && mname != "__call__") continue;
        const std::string label = mname == "__init__" ? name : name + "." + mname;
        if (py::isinstance(mv, py::module_::import("builtins").attr("property"))) {
          const py::object fset = mv.attr("fset");
          if (!fset.is_none()) check_function(fset, label, mname);
        } else if (py::isinstance(mv, py::module_::import("builtins").attr("staticmethod"))) {
          check_function(mv.attr("__func__"), label);
        } else {
          check_function(mv, label);
        }
      }
    } else {
      check_function(value, name);
    }
  }
}

}  // namespace tierlab::python
