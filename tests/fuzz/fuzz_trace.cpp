// libFuzzer harness: the trace reader (metadata fields, provenance and spans JSON, tensor
// shapes, every head's values).
#include <cstdint>

#include "model/base/error.hpp"
#include "model/io/trace.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = tierlab::fuzz::input_file(data, size, ".safetensors");
  try {
    tierlab::TraceReader r(path);
    const tierlab::TraceMeta& m = r.meta();
    if (static_cast<long long>(m.n_heads()) * m.prompt_len * m.head_dim > (1 << 22)) return 0;
    for (int l = 0; l < m.n_layers; ++l)
      for (int h = 0; h < m.n_kv_heads; ++h) {
        const tierlab::HeadData head = r.head(l, h);
        (void)tierlab::observation_queries(head);
      }
  } catch (const tierlab::InputError&) {
  }
  return 0;
}
