#pragma once
// Reading scenario files (YAML) with messages that name the file, the line (1-based), the
// key and the valid choices or range: "FILE:LINE: key 'staleness.steps' is 0, out of range;
// it must be in [1, 4096]." Every part of a scenario (the common keys, the method lists,
// each analysis's key) is read through this one reader.
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "model/base/error.hpp"

namespace tierlab {

// The offset of the first byte of text that does not begin or continue a well-formed UTF-8
// sequence (no overlong forms, surrogates or code points past U+10FFFF), or npos.
std::size_t invalid_utf8_at(const std::string& text);

class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  // "FILE:LINE" of a node (line 0 when the node is undefined).
  std::string at(const YAML::Node& n) const;
  [[noreturn]] void fail(const YAML::Node& n, const std::string& what) const;

  // A single value.
  std::string str(const YAML::Node& n, const std::string& key) const;
  // A number in [lo, hi].
  double num(const YAML::Node& n, const std::string& key, double lo, double hi) const;
  // An integer in [lo, hi].
  long long integer(const YAML::Node& n, const std::string& key, long long lo, long long hi) const;
  // A value or a non-empty list of values (each a single value), with their nodes.
  std::vector<YAML::Node> list(const YAML::Node& n, const std::string& key) const;
  // A mapping whose keys are all among `allowed`; `where` names it ("staleness").
  void keys(const YAML::Node& map, const std::string& where, const std::vector<std::string>& allowed) const;

  // Limits of a scenario file's YAML tree (docs/scenarios.md "Limits").
  static constexpr int kMaxDepth = 64;            // nested mappings and sequences
  static constexpr long kMaxNodes = 100000;       // nodes visited, aliases counted each time they are used
  // Checks the whole tree once, before any key is read: nesting deeper than kMaxDepth, more
  // than kMaxNodes nodes, a mapping key that is not a single value, a key given twice in one
  // mapping (yaml-cpp keeps both and reads the first), or a value that is not UTF-8 after
  // yaml-cpp decoded its escapes fail naming the line.
  void check_tree(const YAML::Node& root) const;

  // Runs f and re-throws its InputError with the file, line and key in front.
  template <class F>
  auto wrap(const YAML::Node& n, const std::string& key, F&& f) const -> decltype(f()) {
    try {
      return f();
    } catch (const InputError& e) {
      fail(n, "key '" + key + "': " + e.what());
    }
  }

 private:
  std::string file_;
};

}  // namespace tierlab
