#pragma once
// Errors raised by the library when a call cannot be carried out. Two categories, each
// with its own exit status of the `tierlab` tool (docs/design.md "Errors vs outcomes"):
//   InputError (and FormatError)  the input is at fault: a malformed file, an unknown name,
//                                 a value out of range, a backend asked for that is not
//                                 there. Exit status 2.
//   RecomputeError                the input was valid but the exact recomputation could not
//                                 be carried out on its backend (a device error, device
//                                 memory exhausted, a kernel fault). Exit status 4.
// Anything else escaping is a defect (exit status 3, "internal error"). Outcomes of a
// successful call (an infeasible budget, an all-evicting optimum) are reported in result
// types, never as exceptions. Library code never calls exit().
#include <exception>
#include <stdexcept>
#include <string>

namespace tierlab {

// A call failed because of its input. The message is a full sentence that names
// the file, the field (tensor, key, option) and the value at fault.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file does not follow its format (safetensors trace, allocation, scenario).
class FormatError : public InputError {
 public:
  using InputError::InputError;
};

// The exact recomputation failed on its backend (gpu/recompute.hpp recompute()); the message
// names the backend and what failed.
class RecomputeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Re-throws the exception in `e` with "context: " in front of its message, keeping its
// category (FormatError, InputError, RecomputeError; anything else as std::logic_error, a
// defect). Used where work is done for a named unit (a scenario cell) and reported later.
[[noreturn]] void rethrow_with_context(const std::exception_ptr& e, const std::string& context);

}  // namespace tierlab
