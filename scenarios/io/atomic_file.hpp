#pragma once
// Writes a whole text file atomically: a temporary file beside it (model/base/temporary_name.hpp:
// "<path>.tmp-<pid>-<n>@<host>", unique per call and thread), flushed, then renamed.
// A reader never sees a half-written result and a crash leaves the old file intact.
#include <string>
#include <vector>

#include "model/base/temporary_name.hpp"  // process_tag, temporary_name

namespace tierlab {

// InputError naming the path and the system's reason when it cannot be written (a
// read-only folder, a full disk, a file-size limit); the temporary file is removed.
void write_file_atomically(const std::string& path, const std::string& contents);

// Creates a folder and its parents; InputError naming the folder and the reason (a parent
// that is a file, no permission) instead of std::filesystem's exception.
void make_directories(const std::string& dir);

// Removes what killed runs left under dir (recursively): temporary files "<name>.tmp-<tag>"
// and work folders "traces/<tag>" (tag: "<pid>-<n>@<host>" or "<pid>@<host>", or a bare pid
// from earlier versions: parse_temporary_tag).
// Left by this host: removed when the pid is not running. Left by another host sharing the
// folder: removed when older than an hour (a temporary file) or a day (a work folder), since
// that host's processes cannot be asked. Files of live processes stay. Returns the paths removed.
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

}  // namespace tierlab
