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

std::filesystem::path resolve_shipped(const std::filesystem::path& p, const std::filesystem::path& base,
                                      std::vector<std::string>* tried = nullptr);

}  // namespace tierlab
