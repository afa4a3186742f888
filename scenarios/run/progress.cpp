#include "scenarios/run/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace tierlab {

TerminalProgress::TerminalProgress(std::string label)
    : label_(std::move(label)), enabled_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()), last_(start_ - std::chrono::seconds(1)) {}

TerminalProgress::~TerminalProgress() { finish(); }

void TerminalProgress::update(int done, int total) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && !force_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  force_ = false;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int width = 30;
  const int filled = total > 0 ? done * width / total : width;
  std::string line = label_ + " [";
  for (int i = 0; i < width; ++i) line += i < filled ? '#' : '.';
  char buf[96];
  std::snprintf(buf, sizeof buf, "] %d/%d  %.1fs", done, total, elapsed);
  line += buf;
  if (done > 0 && done < total) {
    std::snprintf(buf, sizeof buf, "  ~%.0fs left", elapsed * (total - done) / done);
    line += buf;
  }
  if (!detail_.empty() && done < total) line += "  " + detail_;
  if (line.size() > 160) line.resize(160);
  const std::size_t w = line.size();
  if (w < drawn_) line.append(drawn_ - w, ' ');  // clear what a longer line left
  drawn_ = w;
  std::fprintf(stderr, "\r%s", line.c_str());
  std::fflush(stderr);
}

void TerminalProgress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  std::fprintf(stderr, "\n");
}

}  // namespace tierlab
