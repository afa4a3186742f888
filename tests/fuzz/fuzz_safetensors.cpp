// libFuzzer harness: the safetensors reader (header JSON, offsets, every tensor's data).
#include <cstdint>

#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = tierlab::fuzz::input_file(data, size, ".safetensors");
  try {
    tierlab::SafetensorsFile f(path);
    for (const std::string& name : f.names()) {
      const tierlab::TensorInfo& ti = f.info(name);
      if (ti.numel() > (1 << 22)) continue;  // a valid but large tensor: the header is what is fuzzed
      try {
        switch (ti.dtype) {
          case tierlab::DType::F32:
          case tierlab::DType::F16:
          case tierlab::DType::BF16: f.read_f32(name); break;
          case tierlab::DType::I32:
          case tierlab::DType::I64: f.read_i32(name); break;
          case tierlab::DType::U8: f.read_u8(name); break;
        }
      } catch (const tierlab::InputError&) {
      }
    }
  } catch (const tierlab::InputError&) {
  }
  return 0;
}
