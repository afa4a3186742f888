// The tables and summary of a scenario run (tables.hpp).
#include "scenarios/run/tables.hpp"

#include <filesystem>
#include <sstream>

#include "model/base/error.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

void write_analyses(const Scenario& sc, const std::vector<nlohmann::json>& cells, const std::string& out) {
  const std::string dir = out + "/tables";
  make_directories(dir);
  std::ostringstream s;
  s << "# " << sc.name << "\n\n";
  if (!sc.description.empty()) s << sc.description << "\n\n";
  s << "Scenario `" << sc.file << "`: " << cells.size() << " cells, budgets";
  for (double b : sc.budgets) s << ' ' << format_or_nan(b);
  s << " bits per key element (" << (sc.rate_kind == RateKind::Code ? "code" : "total") << "), ladder `"
    << sc.ladder.name() << "`, verdict on the " << to_string(sc.queries)
    << " queries; backend " << (cells.empty() ? "" : cells.front()["backend"].get<std::string>()) << ".\n\n";
  for (const auto& a : sc.analyses) {
    // The cell files were validated (runner.cpp validate_cell_file: the common and interior
    // keys); an analysis's own part that parses but lacks what it wrote (a key missing, a value
    // of another kind) is an InputError naming the analysis, never a crash: the writers read
    // the cells with at() and get<>(), which throw.
    try {
      s << a->write_tables(sc, cells, dir);
    } catch (const nlohmann::json::exception& e) {
      throw InputError("the cells' '" + a->name() + "' results under '" + out + "/cells' do not hold what tierlab writes (" +
                       e.what() + "); rerun with --force to recompute them.");
    }
  }
  s << "\nTables: `tables/` (CSV and JSON). Figures: `figures/` (PNG, SVG, PDF); re-render with `tierlab figure " << out
    << "`.\n";
  write_file_atomically(out + "/summary.md", s.str());
}

}  // namespace tierlab
