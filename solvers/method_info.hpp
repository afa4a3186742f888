#pragma once
// How a named method describes itself: its name, its kind, a one-line summary, the source it
// follows and the parameters it takes (each with its declared default, its meaning and, for a
// text parameter, its choices). Every registry of methods (model/quantizers/key_quantizer.hpp,
// solvers/scorers.hpp, seed_allocators.hpp, kvcobra_allocator.hpp, policy.hpp, problem.hpp)
// describes its entries with these, and scenarios/methods/catalogue.hpp lists them all.
#include <string>
#include <vector>

namespace tierlab {

// One parameter of a named method.
struct MethodParam {
  std::string name;
  std::string default_value;  // "" where the parameter has no default (it must be given)
  std::string help;
  std::vector<std::string> choices{};  // the allowed values of a text parameter (empty: any)
};

struct MethodInfo {
  std::string name;
  std::string kind;  // "key quantizer" | "eviction scorer" | "seed allocator" | "uniform policy" | "solver"
  std::string summary;
  std::string source;  // arXiv id and/or repository; "tierlab (FILE)" for the project's own
  std::vector<MethodParam> params;
  // Concrete spellings a menu may offer where the name is a grammar ("kivi:2" for
  // "kivi:B[:gG][:rR]"); empty where the name itself is what one writes.
  std::vector<std::string> examples{};
};

}  // namespace tierlab
