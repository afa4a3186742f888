#pragma once
// Progress for long work on a terminal: a single line on stderr, redrawn in place,
// shown only when stderr is a terminal (so logs and pipes stay clean).
#include <chrono>
#include <string>

namespace tierlab {

class TerminalProgress {
 public:
  explicit TerminalProgress(std::string label);
  ~TerminalProgress();
  void update(int done, int total);
  void finish();

 private:
  std::string label_;
  bool enabled_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tierlab
