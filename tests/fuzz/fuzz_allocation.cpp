// libFuzzer harness: allocation files (safetensors with a ladder and one U8 tensor per head).
#include <cstdint>

#include "model/allocation.hpp"
#include "model/base/error.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = tierlab::fuzz::input_file(data, size, ".safetensors");
  try {
    const tierlab::Allocation a = tierlab::read_allocation(path);
    a.validate();
  } catch (const tierlab::InputError&) {
  }
  return 0;
}
