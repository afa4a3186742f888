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
  if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int width = 30;
  const int filled = total > 0 ? done * width / total : width;
  std::fprintf(stderr, "\r%s [", label_.c_str());
  for (int i = 0; i < width; ++i) std::fputc(i < filled ? '#' : '.', stderr);
  std::fprintf(stderr, "] %d/%d  %.1fs", done, total, elapsed);
  if (done > 0 && done < total) std::fprintf(stderr, "  ~%.0fs left", elapsed * (total - done) / done);
  std::fprintf(stderr, "   ");
  std::fflush(stderr);
}

void TerminalProgress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  std::fprintf(stderr, "\n");
}

}  // namespace tierlab
