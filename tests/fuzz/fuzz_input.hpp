#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/README in docs/reliability.md): the bytes of
// one input as a file (the readers take paths and map them), and the rule every harness
// checks: a reader either accepts its input or throws tierlab::InputError (FormatError
// included) with a message; anything else escaping (another exception, a crash, a
// sanitizer report, a hang) is a defect that libFuzzer reports.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace tierlab::fuzz {

// Writes the input to a file private to this process (rewritten for every input).
inline const std::string& input_file(const std::uint8_t* data, std::size_t size, const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/tierlab-fuzz-" + std::to_string(::getpid()) + suffix;
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
  return path;
}

}  // namespace tierlab::fuzz
