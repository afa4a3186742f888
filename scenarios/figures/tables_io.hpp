#pragma once
// What the figure builders (each analysis's figures, scenarios/analyses/*.cpp) share:
// reading a saved table of a scenario run (DIR/tables/*.json, *.csv), the number labels,
// the padding of an axis range and the cells of a phase map. Used by tierlab_figures and by
// tierlab-explorer's core (gui/explorer_core.cpp), which reads the same tables. A number missing from a
// table reads as NaN: double_or_nan (scenarios/io/table_numbers.hpp).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/figures/figure.hpp"

namespace tierlab {

// The JSON table at path; InputError naming the file when it is missing or not valid JSON,
// and naming the file, the row and the column when a table's rows disagree on a column's
// type (a number in one row, a string, an object or true/false in another; null, "not
// defined", goes with any) or a value is a number given as a string ("0.5").
nlohmann::json read_table_json(const std::string& path);
// A CSV table with a header line, as its columns by name (cells as text, read as RFC 4180
// by CsvReader, scenarios/io/csv.hpp: a quoted field may hold commas, double quotes and line
// ends; every header column is present, possibly empty). A row is a record, not a line.
// InputError naming the file when it is missing; naming the file and the row (1 = the first
// after the header) when a quoted field is not closed or a double quote stands outside one,
// when a row has another number of fields than the header, or the column
// too when a column whose rows are mostly numbers holds a text that is not one; naming the
// column when the header repeats one or lacks one a figure reads (heads.csv: budget, A).
std::map<std::string, std::vector<std::string>> read_table_csv(const std::string& path);
// v printed with the printf format fmt (default "%.3g"); "n/a" when v is not finite.
std::string format_label(double v, const char* fmt = "%.3g");
// Widens [lo, hi] by frac (hi - lo) on each side, after replacing a non-finite bound by
// [-1, 1] and widening a range narrower than 1e-9 by 0.5 on each side.
void pad_range(double& lo, double& hi, double frac);

// A phase map as a heatmap (Style::Cells, neighbouring cells touching): one cell per row of
// `rows` at (row[xkey], row["budget"]), coloured by its outcome: "Q wins (quantize only)",
// "E wins (evict only)", "M wins (mixed tiers)" (palette 0, 1, 2) or "tie" (grey) when the
// largest of share_Q, share_E, share_M is shared by two families (a 0.50/0.50 split is not a
// win). A cell reaches halfway to its neighbours (the geometric mean on a log x axis); the
// edge cells as far out as inside. The bounds are the cells' outer edges (INFINITY /
// -INFINITY when there is no row).
struct PhaseCells {
  Series q, e, m, tie;
  std::vector<Label> e_share;  // per cell, centred: the share of heads won by E ("E 40%")
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  std::vector<Series> present() const;  // the non-empty ones, Q, E, M, tie
};
PhaseCells phase_cells(const nlohmann::json& rows, const char* xkey, bool xlog);
// The outcome phase_cells gives a row: "Q", "E", "M", "tie", or "" (no head decided).
std::string phase_outcome(const nlohmann::json& row);
// The recomputed boundary of a phase map over `xkey`: per budget, the cell edge where E
// starts winning (the first E cell after a cell E does not win, along increasing x); a Line
// series (empty when E never takes over).
Series recomputed_phase_boundary(const nlohmann::json& rows, const char* xkey, bool xlog);

}  // namespace tierlab
