#pragma once
// The tables and summary of a scenario run (docs/model.md section 11), from the cell files:
// DIR/tables/*.csv and *.json, written by each of the scenario's analyses
// (scenarios/scenario/analysis.hpp, in registry order), and DIR/summary.md: a header (the
// scenario, its cells, budgets, ladder, verdict query set and backend), each analysis's
// section, and where the tables and figures are.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario/scenario.hpp"

namespace tierlab {

void write_analyses(const Scenario&, const std::vector<nlohmann::json>& cells, const std::string& out);

}  // namespace tierlab
