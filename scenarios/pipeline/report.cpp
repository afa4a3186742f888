#include "scenarios/pipeline/report.hpp"

#include <cstdio>
#include <sstream>

namespace tierlab {
namespace {

// A trace without decode steps has no decode error: "n/a", not 0.
std::string row(const std::string& label, const Rate& rate, const ErrorMetrics& obs, const ErrorMetrics& dec,
                double pred_rel, double pred_abs, bool has_decode) {
  char dec_text[32];
  if (has_decode) std::snprintf(dec_text, sizeof dec_text, "%10.3e", dec.rel_error);
  else std::snprintf(dec_text, sizeof dec_text, "%10s", "n/a");
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-12s %6.3f %6.3f  %10.3e %10.3e %10.3e  %10.3e %s  %8.4f %9.3e\n",
                label.c_str(), rate.code_bits, rate.total_bits, obs.rel_error, pred_rel, obs.abs_error, pred_abs,
                dec_text, obs.attn_tv, obs.logit_error);
  return buf;
}

}  // namespace

nlohmann::json to_json(const ErrorMetrics& e) {
  return {{"rel_error", e.rel_error}, {"abs_error", e.abs_error}, {"attn_tv", e.attn_tv}, {"logit_error", e.logit_error}};
}

nlohmann::json to_json(const TraceEvaluation& ev) {
  // Without decode steps the decode errors are undefined: null.
  auto decode = [&ev](const ErrorMetrics& e) { return ev.has_decode ? to_json(e) : nlohmann::json(nullptr); };
  auto agg = [&decode](const Aggregate& a) {
    return nlohmann::json{{"rate", {{"code_bits", a.rate.code_bits}, {"total_bits", a.rate.total_bits}}},
                          {"obs", to_json(a.obs)},
                          {"decode", decode(a.decode)},
                          {"surrogate", {{"predicted_abs", a.predicted_abs}, {"predicted_rel", a.predicted_rel}}}};
  };
  nlohmann::json heads = nlohmann::json::array();
  for (const auto& h : ev.heads) {
    heads.push_back({{"layer", h.layer},
                     {"kv_head", h.kv_head},
                     {"rate", {{"code_bits", h.rate.code_bits}, {"total_bits", h.rate.total_bits}}},
                     {"evicted_fraction", h.evicted_fraction},
                     {"obs", to_json(h.obs)},
                     {"decode", decode(h.decode)},
                     {"surrogate", {{"predicted_abs", h.predicted_abs}, {"predicted_rel", h.predicted_rel}}}});
  }
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : ev.layers) layers.push_back(agg(l));
  return {{"trace", ev.trace_path}, {"policy", ev.policy},   {"backend", ev.backend}, {"ladder", ev.ladder.name()},
          {"model", agg(ev.model)}, {"layers", layers},     {"heads", heads},        {"seconds", ev.seconds}};
}

std::string text_report(const TraceEvaluation& ev, bool per_head) {
  std::ostringstream os;
  os << "policy " << ev.policy << " (ladder " << ev.ladder.name() << ") on " << ev.trace_path << "\n";
  os << "backend " << ev.backend << "\n";
  os << "                rate bits   recomputed (obs)  surrogate  recomputed   surrogate   recomputed\n";
  os << "scope          code  total      rel err    rel err     abs err     abs err  decode rel   attn TV  logit err\n";
  for (std::size_t l = 0; l < ev.layers.size(); ++l) {
    if (per_head)
      for (const auto& h : ev.heads)
        if (h.layer == static_cast<int>(l))
          os << row("  L" + std::to_string(h.layer) + ".H" + std::to_string(h.kv_head), h.rate, h.obs, h.decode,
                    h.predicted_rel, h.predicted_abs, ev.has_decode);
    const Aggregate& a = ev.layers[l];
    os << row("layer " + std::to_string(l), a.rate, a.obs, a.decode, a.predicted_rel, a.predicted_abs, ev.has_decode);
  }
  const Aggregate& m = ev.model;
  os << row("model", m.rate, m.obs, m.decode, m.predicted_rel, m.predicted_abs, ev.has_decode);
  char buf[96];
  os << measured_rate_legend() << ".\n";
  std::snprintf(buf, sizeof buf, "(%.2f s)\n", ev.seconds);
  os << buf;
  return os.str();
}

}  // namespace tierlab
