#pragma once
// The names of what one writer puts beside its destination while it writes (issue 33, item 7):
// every atomic write of tierlab (a trace or allocation: model/io/safetensors_write.cpp, a table or
// cell: scenarios/io/atomic_file.cpp, a figure: scenarios/figures/figure.cpp) writes
//   "<path>.tmp-<pid>-<n>@<host>"
// and renames it over <path> when complete. <n> is a counter of this process, one per call,
// so two threads (two Python threads running scenarios into one folder) or two writers of one
// thread never share a temporary file; <pid>@<host> lets a later run tell a temporary of a
// killed process (remove_stale_temporaries) from one being written on another machine sharing
// the folder.
#include <string>
#include <string_view>

namespace tierlab {

// "<pid>@<host>": names what one process writes in a folder other processes may share (shards
// of one run on several machines): its work folder. The host name keeps letters, digits, '.'
// and '-' (anything else becomes '_'; "localhost" when unknown).
std::string process_tag();

// "<path>.tmp-<pid>-<n>@<host>", with <n> new on every call (thread-safe).
std::string temporary_name(const std::string& path);

// The marker between a destination's name and the tag of its temporary file.
inline constexpr std::string_view kTemporaryMarker = ".tmp-";

// Reads the tag of a temporary file (the text after ".tmp-") or of a work folder: the current
// "<pid>-<n>@<host>", "<pid>@<host>" (work folders; temporaries before issue 33) and a bare
// "<pid>" (temporaries of earlier versions, this host). Sets pid and host ("" for a bare pid);
// false when the text is none of these.
bool parse_temporary_tag(std::string_view tag, long& pid, std::string_view& host);

}  // namespace tierlab
