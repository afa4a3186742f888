#include "model/base/temporary_name.hpp"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <charconv>

namespace tierlab {

namespace {

const std::string& host_name() {
  static const std::string host = [] {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
    std::string h;
    for (const char* c = name; *c != '\0'; ++c)
      h += (std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '-') ? *c : '_';
    return h.empty() ? std::string("localhost") : h;
  }();
  return host;
}

// Whole-string unsigned decimal number, at least one digit.
bool parse_number(std::string_view digits, long& out) {
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), out);
  return !digits.empty() && r.ec == std::errc() && r.ptr == digits.data() + digits.size() && out >= 0;
}

}  // namespace

std::string process_tag() { return std::to_string(::getpid()) + "@" + host_name(); }

std::string temporary_name(const std::string& path) {
  static std::atomic<unsigned long> counter{0};
  const unsigned long n = counter.fetch_add(1) + 1;
  return path + std::string(kTemporaryMarker) + std::to_string(::getpid()) + "-" + std::to_string(n) + "@" + host_name();
}

bool parse_temporary_tag(std::string_view tag, long& pid, std::string_view& host) {
  const auto at = tag.find('@');
  std::string_view ids = tag.substr(0, at);
  host = at == std::string_view::npos ? std::string_view() : tag.substr(at + 1);
  if (at != std::string_view::npos && host.empty()) return false;
  const auto dash = ids.find('-');
  if (dash != std::string_view::npos) {
    long n = 0;
    if (at == std::string_view::npos || !parse_number(ids.substr(dash + 1), n)) return false;  // "<pid>-<n>" needs its host
    ids = ids.substr(0, dash);
  }
  return parse_number(ids, pid) && pid > 0;
}

}  // namespace tierlab
