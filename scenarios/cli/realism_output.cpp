// The JSON form of the realism statistics and the length-list option (realism_output.hpp).
#include "scenarios/cli/realism_output.hpp"

#include <cmath>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"

namespace tierlab::cli {

std::vector<int> parse_length_list(const std::string& text, const std::string& option) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const std::optional<std::int64_t> v = read_integer(part);  // model/base/numbers.hpp: the whole part
    if (!v || *v < 1 || *v > INT32_MAX)
      throw InputError("option " + option + ": '" + part + "' is not a positive integer (expected e.g. 64,128,256).");
    out.push_back(static_cast<int>(*v));
  }
  if (out.empty()) throw InputError("option " + option + ": no lengths given (expected e.g. 64,128,256).");
  return out;
}

namespace {

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

nlohmann::json stat_json(const RealismStat& s) {
  return {{"p10", finite_or_null(s.p10)},
          {"median", finite_or_null(s.median)},
          {"p90", finite_or_null(s.p90)},
          {"mean", finite_or_null(s.mean)}};
}

}  // namespace

nlohmann::json realism_json(const RealismReport& r) {
  nlohmann::json summaries = nlohmann::json::array(), heads = nlohmann::json::array();
  for (const RealismSummary& s : r.summaries)
    summaries.push_back({{"length", s.length},
                         {"window", s.window},
                         {"n_heads", s.n_heads},
                         {"entropy", stat_json(s.entropy)},
                         {"norm_entropy", stat_json(s.norm_entropy)},
                         {"first_token_mass", stat_json(s.first_token_mass)},
                         {"n90", stat_json(s.n90)},
                         {"margin", stat_json(s.margin)},
                         {"noise", stat_json(s.noise)},
                         {"key_spread", stat_json(s.key_spread)},
                         {"query_spread", stat_json(s.query_spread)}});
  for (const HeadRealism& h : r.heads)
    heads.push_back({{"layer", h.layer},
                     {"kv_head", h.kv_head},
                     {"length", h.length},
                     {"n_queries", h.n_queries},
                     {"entropy", h.entropy},
                     {"norm_entropy", h.norm_entropy},
                     {"first_token_mass", h.first_token_mass},
                     {"n90", h.n90},
                     {"margin", h.margin},
                     {"noise", h.noise},
                     {"key_spread", finite_or_null(h.key_spread)},
                     {"query_spread", finite_or_null(h.query_spread)}});
  return {{"options",
           {{"bits", r.options.bits},
            {"group", r.options.group},
            {"mass", r.options.mass},
            {"window", r.options.window},
            {"lengths", r.options.lengths}}},
          {"summaries", summaries},
          {"heads", heads}};
}

}  // namespace tierlab::cli
