#include "scenarios/io/atomic_file.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "model/base/error.hpp"
#include "model/io/paths.hpp"

namespace tierlab {

void make_directories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError("cannot create the folder '" + dir + "': " + ec.message() + ".");
}

void write_file_atomically(const std::string& given, const std::string& contents) {
  const std::filesystem::path target(given);
  if (target.has_parent_path()) make_directories(target.parent_path().string());
  const std::string path = writable_destination(given, "output file");  // model/io/paths.hpp
  const std::string tmp = temporary_name(path);
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

// Running (a zombie, exited but not yet reaped, is not: it writes nothing more).
bool process_alive(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!f) return true;  // no /proc: trust kill()
  char buf[512];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string_view stat(buf, n);  // "pid (comm) S ...": the state after the last ')'
  const auto close = stat.rfind(')');
  const char state = close != std::string_view::npos && close + 2 < stat.size() ? stat[close + 2] : '?';
  return state != 'Z' && state != 'X';
}

// Is the file or folder of the process `tag` left by a process that is gone? On this host: its
// pid is not running. Another host's (a shared output folder): older than an hour, since a
// temporary lives only while its write (or a cell's trace while its cell) is in progress.
bool left_by_dead_process(std::string_view tag, const std::filesystem::path& p, std::chrono::hours age) {
  long pid = 0;
  std::string_view host;
  if (!parse_temporary_tag(tag, pid, host)) return false;
  const std::string mine = process_tag();
  const std::string_view my_host = std::string_view(mine).substr(mine.find('@') + 1);
  if (host.empty() || host == my_host) return pid != static_cast<long>(::getpid()) && !process_alive(pid);
  std::error_code ec;
  const auto t = std::filesystem::last_write_time(p, ec);
  return !ec && std::filesystem::file_time_type::clock::now() - t > age;
}

}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return removed;
  std::vector<fs::path> stale;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code sec;
    const std::string name = it->path().filename().string();
    if (it->is_directory(sec) && it->path().parent_path().filename() == "traces") {
      // A run's work folder (DIR/traces/<pid>@<host>): its temporary traces.
      if (left_by_dead_process(name, it->path(), std::chrono::hours(24))) stale.push_back(it->path());
      it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(sec)) continue;
    const auto at = name.rfind(kTemporaryMarker);
    if (at == std::string::npos || at == 0) continue;
    if (left_by_dead_process(std::string_view(name).substr(at + kTemporaryMarker.size()), it->path(), std::chrono::hours(1)))
      stale.push_back(it->path());
  }
  for (const auto& p : stale) {
    std::error_code sec;
    if (fs::remove_all(p, sec) > 0) removed.push_back(p.string());
  }
  return removed;
}

}  // namespace tierlab
