// What the figure renderers share (tables_io.hpp).
#include "scenarios/figures/tables_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "model/error.hpp"
#include "scenarios/run/table_numbers.hpp"

namespace tierlab {

nlohmann::json read_table_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("the table '" + path + "' is missing; run `tierlab run` first.");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("the table '" + path + "' is not valid JSON (" + e.what() + ").");
  }
}

std::map<std::string, std::vector<std::string>> read_table_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("the table '" + path + "' is missing; run `tierlab run` first.");
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  {
    std::stringstream ss(line);
    std::string x;
    while (std::getline(ss, x, ',')) names.push_back(x);
  }
  std::map<std::string, std::vector<std::string>> cols;
  for (const auto& n : names) cols[n];  // every header column exists, even with no rows
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string x;
    for (std::size_t i = 0; i < names.size() && std::getline(ss, x, ','); ++i) cols[names[i]].push_back(x);
  }
  return cols;
}

std::string format_label(double v, const char* fmt) { return format_or_nan(v, fmt, "n/a"); }

void pad_range(double& lo, double& hi, double frac) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = -1, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const double p = (hi - lo) * frac;
  lo -= p, hi += p;
}

PhasePoints phase_points(const nlohmann::json& rows, const char* xkey, double marker_size) {
  PhasePoints p;
  p.q = {"Q wins (quantize only)", palette(0), Style::Squares, {}, {}, marker_size};
  p.e = {"E wins (evict only)", palette(1), Style::Squares, {}, {}, marker_size};
  p.m = {"M wins (mixed tiers)", palette(2), Style::Squares, {}, {}, marker_size};
  for (const auto& r : rows) {
    const double x = double_or_nan(r, xkey), y = double_or_nan(r, "budget");
    const std::string w = r["winner"].get<std::string>();
    Series* s = w == "Q" ? &p.q : w == "E" ? &p.e : w == "M" ? &p.m : nullptr;
    if (s) s->x.push_back(x), s->y.push_back(y);
    p.xlo = std::min(p.xlo, x), p.xhi = std::max(p.xhi, x), p.ylo = std::min(p.ylo, y), p.yhi = std::max(p.yhi, y);
  }
  return p;
}

}  // namespace tierlab
