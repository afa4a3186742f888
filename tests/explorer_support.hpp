#pragma once
// What every explorer test needs: one headless QApplication (the offscreen platform, a private
// runtime folder), created on first use, shared by the test file's cases.
#include <QApplication>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace tierlab::testing {

inline QApplication& offscreen_app(const char* test_name) {
  static int argc = 1;
  static std::string name = test_name;
  static char* argv[] = {name.data(), nullptr};
  if (!QCoreApplication::instance()) {
    setenv("QT_QPA_PLATFORM", "offscreen", 1);
    const std::string rt = "/tmp/tierlab-runtime-" + std::to_string(::getuid());
    ::mkdir(rt.c_str(), 0700);
    setenv("XDG_RUNTIME_DIR", rt.c_str(), 0);
    static QApplication* a = new QApplication(argc, argv);
    return *a;
  }
  return *qobject_cast<QApplication*>(QCoreApplication::instance());
}

// A folder of this test process (tierlab-test-<what>-<pid> in the temporary folder), made on
// first use and removed at exit.
inline const std::filesystem::path& process_temp_dir(const char* what) {
  static const struct Base {
    std::filesystem::path path;
    ~Base() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } base{std::filesystem::temp_directory_path() / ("tierlab-test-" + std::string(what) + "-" + std::to_string(::getpid()))};
  return base.path;
}

}  // namespace tierlab::testing
