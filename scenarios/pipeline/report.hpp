#pragma once
// Readable and JSON reports of an evaluation (scenarios/pipeline/evaluation.hpp).
#include <string>

#include <nlohmann/json.hpp>

#include "scenarios/pipeline/evaluation.hpp"

namespace tierlab {

nlohmann::json to_json(const ErrorMetrics&);
nlohmann::json to_json(const TraceEvaluation&);
// A table: one row per layer (and per head when per_head), then the model row.
std::string text_report(const TraceEvaluation&, bool per_head);

}  // namespace tierlab
