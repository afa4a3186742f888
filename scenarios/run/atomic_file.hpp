#pragma once
// Writes a whole text file atomically: "<path>.tmp-<pid>", flushed, then renamed.
// A reader never sees a half-written result and a crash leaves the old file intact.
#include <string>
#include <vector>

namespace tierlab {

// InputError naming the path and the system's reason when it cannot be written (a
// read-only folder, a full disk, a file-size limit); the temporary file is removed.
void write_file_atomically(const std::string& path, const std::string& contents);

// Creates a folder and its parents; InputError naming the folder and the reason (a parent
// that is a file, no permission) instead of std::filesystem's exception.
void make_directories(const std::string& dir);

// Removes the temporary files "<name>.tmp-<pid>" under dir (recursively) left by processes
// that are no longer running (a run killed with SIGKILL); files of live processes stay.
// Returns the paths removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace tierlab
