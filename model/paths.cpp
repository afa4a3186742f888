#include "model/paths.hpp"

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

}  // namespace tierlab
