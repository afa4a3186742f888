#include "scenarios/io/yaml_reader.hpp"

#include <cmath>
#include <map>

#include "model/base/numbers.hpp"
#include "model/base/text.hpp"

namespace tierlab {

std::string YamlReader::at(const YAML::Node& n) const {
  const int line = n.IsDefined() && n.Mark().line >= 0 ? n.Mark().line + 1 : 0;
  return file_ + ":" + std::to_string(line);
}

void YamlReader::fail(const YAML::Node& n, const std::string& what) const { throw InputError(at(n) + ": " + what); }

std::string YamlReader::str(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar()) fail(n, "key '" + key + "' must be a single value.");
  return n.as<std::string>();
}

double YamlReader::num(const YAML::Node& n, const std::string& key, double lo, double hi) const {
  if (!n.IsScalar()) fail(n, "key '" + key + "' must be a number.");
  // The one strict parser (model/base/numbers.hpp): the whole value, finite.
  const auto v = read_real(n.Scalar());
  if (!v) fail(n, "key '" + key + "' is '" + n.Scalar() + "', not a (finite) number.");
  if (*v < lo || *v > hi)
    fail(n, "key '" + key + "' is " + format_number(*v) + ", out of range; it must be in [" + format_number(lo) + ", " +
                format_number(hi) + "].");
  return *v;
}

long long YamlReader::integer(const YAML::Node& n, const std::string& key, long long lo, long long hi) const {
  if (!n.IsScalar()) fail(n, "key '" + key + "' must be an integer.");
  const auto v = read_integer(n.Scalar());
  if (!v) {
    if (read_real(n.Scalar())) fail(n, "key '" + key + "' must be an integer, not " + n.Scalar() + ".");
    fail(n, "key '" + key + "' is '" + n.Scalar() + "', not an integer" +
                (n.Scalar().find_first_not_of("-0123456789") == std::string::npos && !n.Scalar().empty()
                     ? " within the 64-bit range."
                     : "."));
  }
  if (*v < lo || *v > hi)
    fail(n, "key '" + key + "' is " + n.Scalar() + ", out of range; it must be in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "].");
  return *v;
}

std::vector<YAML::Node> YamlReader::list(const YAML::Node& n, const std::string& key) const {
  if (n.IsScalar()) return {n};
  if (!n.IsSequence() || n.size() == 0) fail(n, "key '" + key + "' must be a value or a non-empty list of values.");
  std::vector<YAML::Node> out;
  for (const auto& x : n) {
    if (!x.IsScalar()) fail(x, "key '" + key + "': every list entry must be a single value.");
    out.push_back(x);
  }
  return out;
}

void YamlReader::keys(const YAML::Node& map, const std::string& where, const std::vector<std::string>& allowed) const {
  if (!map.IsMap()) fail(map, "key '" + where + "' must be a mapping with the keys " + join(allowed) + ".");
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == k;
    if (!ok) fail(kv.first, "unknown key '" + k + "' in " + where + "; the valid keys are " + join(allowed) + ".");
  }
}

std::size_t invalid_utf8_at(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char b = s[i];
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the valid range of the second byte
    if (b < 0x80) len = 1;
    else if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b == 0xE0) len = 3, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC) len = 3;
    else if (b == 0xED) len = 3, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF) len = 3;
    else if (b == 0xF0) len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) len = 4;
    else if (b == 0xF4) len = 4, hi = 0x8F;
    bool ok = len > 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      const unsigned char c = s[i + k];
      ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    }
    if (!ok) return i;
    i += len;
  }
  return std::string::npos;
}

namespace {

void check_node(const YamlReader& c, const YAML::Node& n, int depth, long& visited) {
  if (++visited > YamlReader::kMaxNodes)
    c.fail(n, "the file has more than " + std::to_string(YamlReader::kMaxNodes) +
                  " YAML nodes (aliases counted at each use); a scenario is far smaller.");
  if (n.IsScalar() && invalid_utf8_at(n.Scalar()) != std::string::npos)
    c.fail(n, "a value is not UTF-8 text once its escapes are decoded (yaml-cpp decodes \\_ and \\N to single "
              "bytes); write the character itself.");
  if (!n.IsMap() && !n.IsSequence()) return;
  if (depth >= YamlReader::kMaxDepth)
    c.fail(n, "mappings and lists nest deeper than " + std::to_string(YamlReader::kMaxDepth) + " levels.");
  if (n.IsSequence()) {
    for (const auto& x : n) check_node(c, x, depth + 1, visited);
    return;
  }
  std::map<std::string, int> lines;  // key -> its 1-based line
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) c.fail(kv.first, "a mapping key must be a single value.");
    check_node(c, kv.first, depth + 1, visited);
    const std::string k = kv.first.Scalar();
    const int line = kv.first.Mark().line + 1;
    const auto [it, fresh] = lines.emplace(k, line);
    if (!fresh)
      c.fail(kv.first, "the key '" + k + "' is given twice in the same mapping (first on line " +
                           std::to_string(it->second) + "); give each key once.");
    check_node(c, kv.second, depth + 1, visited);
  }
}

}  // namespace

void YamlReader::check_tree(const YAML::Node& root) const {
  long visited = 0;
  check_node(*this, root, 0, visited);
}

}  // namespace tierlab
