// libFuzzer harness: the llama2.c checkpoint loader, then a few forward steps of a model
// that loads (small ones: the weights' overflow must surface as errors, never as UB).
#include <cstdint>

#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "tests/fuzz/fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string& path = tierlab::fuzz::input_file(data, size, ".bin");
  try {
    const tierlab::Llama2cModel model(path);
    const tierlab::Llama2cConfig& c = model.config();
    if (static_cast<long long>(c.dim) * c.seq_len * c.n_layers > (1 << 16)) return 0;
    tierlab::Llama2cSession s(model);
    std::int32_t tok = 0;
    for (int pos = 0; pos < std::min(c.seq_len, 4); ++pos) {
      const float* logits = s.forward(tok, pos);
      tok = tierlab::argmax(logits, c.vocab_size);
      if (tok < 0 || tok >= c.vocab_size) __builtin_trap();
    }
  } catch (const tierlab::InputError&) {
  }
  return 0;
}
