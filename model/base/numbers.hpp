#pragma once
// One strict number parser for every front door: command-line values, scenario files, trace
// metadata, method parameters and Python (issue 33). A text is a number only when ALL of it
// is one: "3abc", " 3", "3 ", "", "0x10" and "1e400" are refused; a real must be finite; an
// integer never wraps around ("-1" is not an unsigned seed, 2^64 is not 0), and a value
// outside the stated range is refused naming the range. Errors are InputError sentences
// "<what> = '<text>' is not ..." so the caller names the file, field or option in `what`.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace tierlab {

// The number the whole text spells, or nothing (no exceptions): decimal or scientific
// notation, an optional leading '-', finite.
std::optional<double> read_real(std::string_view text);
// A whole decimal number with an optional leading '-', within int64, or nothing.
std::optional<std::int64_t> read_integer(std::string_view text);
// A whole decimal number without a sign, within uint64, or nothing.
std::optional<std::uint64_t> read_unsigned(std::string_view text);

// The same, throwing InputError naming `what`, the text and the range when the text is not a
// number of that kind or lies outside [lo, hi].
double parse_real(std::string_view text, const std::string& what,
                  double lo = -std::numeric_limits<double>::max(), double hi = std::numeric_limits<double>::max());
std::int64_t parse_integer(std::string_view text, const std::string& what,
                           std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                           std::int64_t hi = std::numeric_limits<std::int64_t>::max());
std::uint64_t parse_unsigned(std::string_view text, const std::string& what,
                             std::uint64_t hi = std::numeric_limits<std::uint64_t>::max());
int parse_int(std::string_view text, const std::string& what, int lo = std::numeric_limits<int>::min(),
              int hi = std::numeric_limits<int>::max());

}  // namespace tierlab
