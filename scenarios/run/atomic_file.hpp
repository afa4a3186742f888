#pragma once
// Writes a whole text file atomically: "<path>.tmp-<pid>", flushed, then renamed.
// A reader never sees a half-written result and a crash leaves the old file intact.
#include <string>

namespace tierlab {

void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace tierlab
