#include "scenarios/run/atomic_file.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "model/error.hpp"

namespace tierlab {

void make_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError("cannot create the folder '" + dir + "': " + ec.message() + ".");
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::filesystem::path target(path);
  if (target.has_parent_path()) make_directories(target.parent_path().string());
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw InputError("cannot write '" + tmp + "': " + std::strerror(errno) + ".");
  int err = 0;
  if (std::fwrite(contents.data(), 1, contents.size(), f) != contents.size() || std::fflush(f) != 0 ||
      ::fsync(fileno(f)) != 0)
    err = errno;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    throw InputError("cannot write '" + path + "': " + std::strerror(err) + ".");
  }
}

namespace {

// The pid of a temporary file's name "<name>.tmp-<pid>", or 0.
long temporary_pid(const std::string& name) {
  const auto at = name.rfind(".tmp-");
  if (at == std::string::npos || at == 0) return 0;
  const char* b = name.data() + at + 5;
  const char* e = name.data() + name.size();
  long pid = 0;
  const auto r = std::from_chars(b, e, pid);
  return r.ec == std::errc() && r.ptr == e && b != e && pid > 0 ? pid : 0;
}

bool process_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code sec;
    if (!it->is_regular_file(sec)) continue;
    const long pid = temporary_pid(it->path().filename().string());
    if (pid == 0 || pid == static_cast<long>(::getpid()) || process_alive(pid)) continue;
    if (fs::remove(it->path(), sec)) removed.push_back(it->path().string());
  }
  return removed;
}

}  // namespace tierlab
