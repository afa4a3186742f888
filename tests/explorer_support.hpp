#pragma once
// What every explorer test needs: one headless QApplication (the offscreen platform, a private
// runtime folder), created on first use, shared by the test file's cases.
#include <QApplication>
#include <QFocusEvent>
#include <QKeyEvent>
#include <QString>
#include <QWidget>

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

// Typing as a user does: each character a key press (text only; a field inserts it), then
// Enter, or the focus leaving the field; `clear` selects the field's text and deletes it.
inline void type_keys(QWidget* field, const QString& text) {
  for (const QChar c : text) {
    QKeyEvent press(QEvent::KeyPress, 0, Qt::NoModifier, QString(c));
    QApplication::sendEvent(field, &press);
  }
}
inline void press_return(QWidget* field) {
  QKeyEvent press(QEvent::KeyPress, Qt::Key_Return, Qt::NoModifier);
  QApplication::sendEvent(field, &press);
}
inline void leave_field(QWidget* field) {
  QFocusEvent out(QEvent::FocusOut, Qt::TabFocusReason);
  QApplication::sendEvent(field, &out);
}
inline void select_all_and_delete(QWidget* field) {
  QKeyEvent all(QEvent::KeyPress, Qt::Key_A, Qt::ControlModifier);
  QApplication::sendEvent(field, &all);
  QKeyEvent del(QEvent::KeyPress, Qt::Key_Delete, Qt::NoModifier);
  QApplication::sendEvent(field, &del);
}

}  // namespace tierlab::testing
