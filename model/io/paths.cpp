#include "model/io/paths.hpp"

#include "model/base/error.hpp"
#include "model/io/safetensors.hpp"  // non_regular_kind

#include <sys/stat.h>

#include <cstdlib>

#ifndef TIERLAB_SOURCE_DIR
#define TIERLAB_SOURCE_DIR "."
#endif

namespace tierlab {

namespace fs = std::filesystem;

std::vector<fs::path> data_roots() {
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("TIERLAB_DATA"); env && *env) roots.emplace_back(env);
  roots.push_back(fs::path(TIERLAB_SOURCE_DIR) / "data");
  return roots;
}

fs::path resolve_shipped(const fs::path& p, const fs::path& base, std::vector<std::string>* tried) {
  std::vector<fs::path> candidates{p};
  if (p.is_relative() && !base.empty()) candidates.push_back(base / p);
  // The part of p after its last "data" folder, under each data root.
  fs::path rest;
  bool found = false;
  for (const fs::path& part : p) {
    if (part == "data") {
      rest.clear();
      found = true;
    } else if (found) {
      rest /= part;
    }
  }
  if (found && !rest.empty())
    for (const fs::path& root : data_roots()) candidates.push_back(root / rest);
  for (const fs::path& c : candidates) {
    std::error_code ec;
    if (fs::exists(c, ec)) return c;
    if (tried) tried->push_back(c.lexically_normal().string());
  }
  return {};
}

std::string writable_destination(const std::string& path, const std::string& what) {
  std::string target = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(target.c_str(), &st) != 0) {  // nothing there: a new file, in a folder made if missing
      const std::filesystem::path folder = std::filesystem::path(target).parent_path();
      std::error_code ec;
      if (!folder.empty() && !std::filesystem::exists(folder, ec) && !std::filesystem::create_directories(folder, ec) && ec)
        throw InputError(what + " '" + path + "': cannot create its folder '" + folder.string() + "': " + ec.message() + ".");
      return target;
    }
    if (S_ISREG(st.st_mode)) return target;
    if (!S_ISLNK(st.st_mode))
      throw InputError(what + " '" + path + "'" + (target == path ? "" : " (a link to '" + target + "')") + " is " +
                       non_regular_kind(st.st_mode) + ", not a regular file; tierlab writes results only to regular files "
                       "(it would replace it). Give a file path.");
    std::error_code ec;
    const std::filesystem::path link = std::filesystem::read_symlink(target, ec);
    if (ec) throw InputError(what + " '" + path + "': cannot read the link '" + target + "': " + ec.message() + ".");
    target = (link.is_absolute() ? link : std::filesystem::path(target).parent_path() / link).string();
  }
  throw InputError(what + " '" + path + "': too many levels of symbolic links.");
}

}  // namespace tierlab
