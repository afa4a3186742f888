// Numbers in the analyses' tables (table_numbers.hpp).
#include "scenarios/io/table_numbers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "model/base/error.hpp"

namespace tierlab {

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

double double_or_nan(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return kNaN;
  const nlohmann::json& v = j[key];
  if (!v.is_number()) {
    std::string t = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (t.size() > 120) t = t.substr(0, 117) + "...";
    throw InputError(std::string("the value of '") + key + "' is " + t + ", not a number (or null: not defined).");
  }
  return v.get<double>();
}


double median_or_nan(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean_or_nan(const std::vector<double>& v) {
  if (v.empty()) return kNaN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double quantile_or_nan(std::vector<double> v, double q) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t i = static_cast<std::size_t>(std::floor(pos));
  const double t = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - t) + v[i + 1] * t : v[i];
}

std::string plurality_winner(int q, int e, int m) {
  const int w[3] = {q, e, m};
  const int best = std::max({q, e, m});
  if (best <= 0) return "";
  std::string win;
  for (int k = 0; k < 3; ++k)
    if (w[k] == best) win = win.empty() ? std::string(1, "QEM"[k]) : "tie";
  return win;
}

}  // namespace tierlab
