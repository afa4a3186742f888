#pragma once
// Errors raised by the library when a call cannot be carried out (bad input,
// malformed file, impossible request). Outcomes of a successful call (an
// infeasible budget, an all-evicting optimum) are reported in result types,
// never as exceptions. Library code never calls exit().
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

}  // namespace tierlab
