// The strict number parser (numbers.hpp).
#include "model/base/numbers.hpp"

#include <charconv>
#include <cmath>
#include <system_error>

#include "model/base/error.hpp"
#include "model/base/text.hpp"

namespace tierlab {

namespace {

template <class T>
std::optional<T> read_whole(std::string_view text) {
  if (text.empty()) return std::nullopt;
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::string quoted(std::string_view text) {
  std::string t(text.substr(0, 80));
  if (text.size() > 80) t += "...";
  return "'" + t + "'";
}

}  // namespace

std::optional<double> read_real(std::string_view text) {
  // from_chars also reads "inf", "nan" and hexadecimal floats only with their own flags; the
  // general format reads "1e3", ".5", "5." and refuses a leading '+' or space.
  const auto v = read_whole<double>(text);
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

std::optional<std::int64_t> read_integer(std::string_view text) { return read_whole<std::int64_t>(text); }

std::optional<std::uint64_t> read_unsigned(std::string_view text) {
  if (!text.empty() && text.front() == '-') return std::nullopt;  // from_chars would wrap "-1"
  return read_whole<std::uint64_t>(text);
}

double parse_real(std::string_view text, const std::string& what, double lo, double hi) {
  const auto v = read_real(text);
  if (!v) {
    // Spelled as a number, but infinite, NaN or beyond the double range ("1e400")?
    double ignored = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, ec] = std::from_chars(text.data(), end, ignored);
    const bool spelled = !text.empty() && ptr == end;
    throw InputError(what + " = " + quoted(text) + (spelled ? " is not a finite number." : " is not a number."));
  }
  if (*v < lo || *v > hi)
    throw InputError(what + " = " + quoted(text) + " is out of range (expected " + format_number(lo) + " to " +
                     format_number(hi) + ").");
  return *v;
}

std::int64_t parse_integer(std::string_view text, const std::string& what, std::int64_t lo, std::int64_t hi) {
  const auto v = read_integer(text);
  if (!v) {
    const bool whole_digits = !text.empty() && text.find_first_not_of("-0123456789") == std::string_view::npos;
    throw InputError(what + " = " + quoted(text) +
                     (whole_digits ? " is beyond the range of a 64-bit integer." : " is not a whole number."));
  }
  if (*v < lo || *v > hi)
    throw InputError(what + " = " + quoted(text) + " is out of range (expected " + std::to_string(lo) + " to " +
                     std::to_string(hi) + ").");
  return *v;
}

std::uint64_t parse_unsigned(std::string_view text, const std::string& what, std::uint64_t hi) {
  const auto v = read_unsigned(text);
  if (!v) {
    const bool negative = !text.empty() && text.front() == '-';
    const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
    throw InputError(what + " = " + quoted(text) +
                     (negative ? " is negative; it must be a whole number from 0."
                               : digits ? " is beyond the range of a 64-bit unsigned integer (at most 18446744073709551615)."
                                        : " is not a whole number."));
  }
  if (*v > hi)
    throw InputError(what + " = " + quoted(text) + " is out of range (expected 0 to " + std::to_string(hi) + ").");
  return *v;
}

int parse_int(std::string_view text, const std::string& what, int lo, int hi) {
  return static_cast<int>(parse_integer(text, what, lo, hi));
}

}  // namespace tierlab
