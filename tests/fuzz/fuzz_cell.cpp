// libFuzzer harness: cell files read back by `tierlab run` (scenarios/run/runner.hpp
// read_cell_file: bounded JSON, a cell or a named damage).
#include <cstdint>

#include "model/base/error.hpp"
#include "scenarios/run/runner.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = tierlab::fuzz::input_file(data, size, ".json");
  const tierlab::CellFile f = tierlab::read_cell_file(path);
  if (f.damage.empty() != f.json.is_object()) __builtin_trap();  // a cell is an object; damage has no json
  if (f.damage.empty() && f.json.contains("cell_hash") && !f.json["cell_hash"].is_string()) __builtin_trap();
  return 0;
}
