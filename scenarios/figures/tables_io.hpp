#pragma once
// What the figure builders (each analysis's figures, scenarios/analyses/*.cpp) share:
// reading a saved table of a scenario run (DIR/tables/*.json, *.csv), the number labels,
// the padding of an axis range and the points of a phase map. Used by tierlab_figures and by
// tierlab-explorer's core (gui/explorer_core.cpp), which reads the same tables. A number missing from a
// table reads as NaN: double_or_nan (scenarios/run/table_numbers.hpp).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/figures/figure.hpp"

namespace tierlab {

// The JSON table at path; InputError naming the file when it is missing or not valid JSON.
nlohmann::json read_table_json(const std::string& path);
// A CSV table with a header line, as its columns by name (cells as text, unquoted, split
// at every ','; every header column is present, possibly empty); a row shorter than the
// header leaves the trailing columns short.
// InputError naming the file when it is missing.
std::map<std::string, std::vector<std::string>> read_table_csv(const std::string& path);
// v printed with the printf format fmt (default "%.3g"); "n/a" when v is not finite.
std::string format_label(double v, const char* fmt = "%.3g");
// Widens [lo, hi] by frac (hi - lo) on each side, after replacing a non-finite bound by
// [-1, 1] and widening a range narrower than 1e-9 by 0.5 on each side.
void pad_range(double& lo, double& hi, double frac);

// The points of a phase map: one Squares series (marker size given) per winning family,
// q "Q wins (quantize only)", e "E wins (evict only)", m "M wins (mixed tiers)" in palette
// colours 0, 1, 2, at (row[xkey], row["budget"]) for each row of rows by its "winner"; the
// bounds cover every row, whatever its winner (INFINITY / -INFINITY when there is none).
struct PhasePoints {
  Series q, e, m;
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
};
PhasePoints phase_points(const nlohmann::json& rows, const char* xkey, double marker_size);

}  // namespace tierlab
