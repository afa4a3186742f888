// libFuzzer harness: scenario files (YAML: the tree checks, every key's reader, the methods
// and the analyses' keys). Trace and checkpoint paths resolve against a folder that does not
// exist, so no file is read.
#include <cstdint>
#include <string>

#include "model/base/error.hpp"
#include "scenarios/scenario/scenario.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tierlab::Scenario s = tierlab::parse_scenario(text, "/nonexistent-tierlab-fuzz/scenario.yaml");
    if (s.cells.empty() || s.budgets.empty()) __builtin_trap();  // validated: never empty
  } catch (const tierlab::InputError&) {
  }
  return 0;
}
