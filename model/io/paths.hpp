#pragma once
// Where tierlab finds the files it ships (data/: the stories260K model, golden tokens) when
// a path does not resolve where it was written: a scenario copied to another folder, the
// explorer started outside the repository.
//
// resolve_shipped(p, base) tries, in order:
//   1. p as given (absolute, or relative to the current folder);
//   2. base / p (base: the folder of the file that names p, e.g. the scenario file's);
//   3. when p runs through a folder named "data": the part after that folder under each
//      data root: $TIERLAB_DATA (if set), then the repository's data/ (where the build
//      came from). So "../../data/stories260K/stories260K.bin" and
//      "data/stories260K/stories260K.bin" find the shipped model from anywhere.
// Returns the first that exists; otherwise an empty path, and `tried` (if given) lists
// every place looked at, for the error message.
#include <filesystem>
#include <string>
#include <vector>

namespace tierlab {

std::vector<std::filesystem::path> data_roots();

// Where an atomic write of `path` (temporary file, then rename over the destination) may
// land without replacing what is not tierlab's to replace. Every writer of a result file
// calls it first (traces, allocations, tables, figures):
//   - a destination that does not exist, or is a regular file: `path` itself (a missing
//     folder on the way is created, as `tierlab run --out` creates its folder);
//   - a symbolic link to a regular file (or to nothing yet): the link's target, so the link
//     is kept and its file replaced;
//   - anything else (a character or block device such as /dev/null, a FIFO, a socket, a
//     directory): InputError naming `what`, the path and its kind; nothing is written.
// (Renaming over /dev/null as root replaces the device node for the whole machine.)
std::string writable_destination(const std::string& path, const std::string& what);

std::filesystem::path resolve_shipped(const std::filesystem::path& p, const std::filesystem::path& base,
                                      std::vector<std::string>* tried = nullptr);

}  // namespace tierlab
