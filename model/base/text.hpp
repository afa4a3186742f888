#pragma once
// Text for messages, reports and tables: the one place numbers become text.
//   format_number(v)           the stream form with `precision` significant digits
//                              (0.5, 1e-06, 4096): what error messages and labels print
//   format_or_nan(v, fmt, m)   printf format fmt ("%.6g" by default); `m` ("nan" unless
//                              given) when v is not finite: the tables' and summaries' form
//   format_exact(v)            the shortest text that reads back to the same double
//                              (integral values in plain digits: "500000"): metadata
//   join(items, sep)           "a, b, c"
#include <string>
#include <string_view>
#include <vector>

namespace tierlab {

std::string format_number(double v, int precision = 6);
std::string format_or_nan(double v, const char* fmt = "%.6g", const char* missing = "nan");
std::string format_exact(double v);
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");

}  // namespace tierlab
