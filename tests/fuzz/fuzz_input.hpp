#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/README in docs/reliability.md): the bytes of
// one input as a file (the readers take paths and map them), and the rule every harness
// checks: a reader either accepts its input or throws tierlab::InputError (FormatError
// included) with a message; anything else escaping (another exception, a crash, a
// sanitizer report, a hang) is a defect that libFuzzer reports.
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tierlab::fuzz {

// The folder the harnesses write their inputs in: $TMPDIR, else /tmp.
inline std::string temporary_folder() {
  const char* dir = std::getenv("TMPDIR");
  return dir && *dir ? dir : "/tmp";
}

// The machine, not the input, is at fault (the temporary folder is missing, read-only or
// full): says so with the path and the system's reason and ends the process with status 2,
// without a crash report (std::_Exit: libFuzzer's exit handler would file the input as a
// crash, and it is not one). Every later input would fail the same way.
[[noreturn]] inline void cannot_write_input(const std::string& path, const char* step, int err) {
  std::fprintf(stderr,
               "fuzz harness: cannot %s its input file '%s': %s (errno %d). The temporary folder is $TMPDIR, else "
               "/tmp: give a writable one with space left.\n",
               step, path.c_str(), std::strerror(err), err);
  std::fflush(stderr);
  std::_Exit(2);
}

// Writes the input to a file private to this process (rewritten for every input).
inline const std::string& input_file(const std::uint8_t* data, std::size_t size, const char* suffix) {
  static const std::string path = temporary_folder() + "/tierlab-fuzz-" + std::to_string(::getpid()) + suffix;
  // Removed when the process ends normally (the regression replays, a fuzzing run's end).
  struct RemoveAtExit {
    const std::string& file;
    ~RemoveAtExit() { std::remove(file.c_str()); }
  };
  static const RemoveAtExit remove_at_exit{path};
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) cannot_write_input(path, "create", errno);
  if (size && std::fwrite(data, 1, size, f) != size) {
    const int err = errno;
    std::fclose(f);
    cannot_write_input(path, "write", err);
  }
  if (std::fclose(f) != 0) cannot_write_input(path, "write", errno);  // a full disk shows here
  return path;
}

}  // namespace tierlab::fuzz
