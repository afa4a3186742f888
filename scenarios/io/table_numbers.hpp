#pragma once
// Numbers in the analyses' tables (JSON and CSV) and summaries, shared by the scenario
// analyses (analyses, mismatch, proxy, smoothing study, entropy phase map, runner).
// An undefined number is NaN in memory, null in JSON and "nan" in CSV/text; the
// statistics below return NaN for an empty sample.
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/base/text.hpp"

namespace tierlab {

// The undefined number of the tables, one constant for every analysis.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// v as a JSON number when finite, else JSON null.
nlohmann::json finite_or_null(double v);
// j[key] as a double; NaN when the key is missing or null; InputError naming the key and the
// value when it is something else (a string, true/false, an object).
double double_or_nan(const nlohmann::json& j, const char* key);
// format_or_nan (the tables' number text) is in model/base/text.hpp.

// The sample median: the middle value of the sorted sample, the mean of the two middle
// values for an even size; NaN when empty.
double median_or_nan(std::vector<double> v);
// The sample mean sum_i v_i / n; NaN when empty.
double mean_or_nan(const std::vector<double>& v);
// The q-quantile by linear interpolation between order statistics: with the sorted sample
// v_(0..n-1), pos = q (n - 1), i = floor(pos): v_(i) (1 - t) + v_(i+1) t, t = pos - i
// (v_(n-1) when i = n - 1); NaN when empty.
double quantile_or_nan(std::vector<double> v, double q);

// The family that won the most heads of a cell of a phase table, from the heads won by Q, E
// and M: "Q", "E" or "M"; "tie" when two or three won equally many (never one of them by
// their order); "" when no head was won.
std::string plurality_winner(int q, int e, int m);

}  // namespace tierlab
