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
  // What the work is doing now, shown after the counts ("cell X: interior: heads 12/256");
  // drawn at the next update (at once when `stage` differs from the last one's: counts
  // within a stage are drawn at most every 100 ms).
  void detail(std::string text, const std::string& stage) {
    if (stage != stage_) force_ = true, stage_ = stage;
    detail_ = std::move(text);
  }
  void finish();

 private:
  std::string label_, detail_, stage_;
  bool force_ = false;
  std::size_t drawn_ = 0;  // width of the last line drawn
  bool enabled_ = false;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tierlab
