#pragma once
// Realism statistics on the command line (tierlab synth --stats, tierlab info --realism):
// the option list of lengths, and the JSON form of a RealismReport.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/realism.hpp"

namespace tierlab::cli {

// "64,128,256" -> {64, 128, 256}; `option` names the option in the InputError.
std::vector<int> parse_length_list(const std::string& text, const std::string& option);

// {"options": {...}, "summaries": [{"length", "window", "n_heads", "entropy": {"p10", "median",
// "p90", "mean"}, ...}], "heads": [{"layer", "kv_head", "length", "n_queries", "entropy", ...}]}
nlohmann::json realism_json(const RealismReport& report);

}  // namespace tierlab::cli
