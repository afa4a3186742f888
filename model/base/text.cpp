#include "model/base/text.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tierlab {

std::string format_number(double v, int precision) {
  std::ostringstream os;
  os.precision(precision);
  os << v;
  return os.str();
}

std::string format_or_nan(double v, const char* fmt, const char* missing) {
  if (!std::isfinite(v)) return missing;
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string format_exact(double v) {
  char buf[400];
  const bool integral = std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 1e15;
  auto r = integral ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                    : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string s;
  for (const auto& x : items) {
    if (!s.empty()) s += sep;
    s += x;
  }
  return s;
}

}  // namespace tierlab
