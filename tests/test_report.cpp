// The evaluation report (scenarios/pipeline/report.hpp): a trace without decode steps has no
// decode error, and the report says so ("n/a", JSON null) instead of printing 0.
#include <catch2/catch.hpp>

#include <string>

#include "scenarios/pipeline/report.hpp"

using namespace tierlab;

namespace {
TraceEvaluation one_layer(bool has_decode) {
  TraceEvaluation ev;
  ev.trace_path = "t.safetensors";
  ev.policy = "kivi:2";
  ev.backend = "cpu";
  ev.ladder = RateLadder::parse("evict,kivi2,exact");
  ev.has_decode = has_decode;
  Aggregate a;
  a.rate = {2.0, 3.0};
  a.obs.rel_error = 0.01;
  a.decode.rel_error = has_decode ? 0.02 : 0.0;
  ev.layers = {a};
  ev.model = a;
  HeadEvaluation h;
  h.obs = a.obs;
  h.decode = a.decode;
  ev.heads = {h};
  return ev;
}
}  // namespace

TEST_CASE("without decode steps the report prints n/a for the decode error and JSON gives null") {
  const TraceEvaluation ev = one_layer(false);
  const std::string text = text_report(ev, true);
  // One n/a per row (the head, the layer, the model), in the decode column.
  std::size_t rows = 0;
  for (std::size_t at = text.find("n/a"); at != std::string::npos; at = text.find("n/a", at + 1)) ++rows;
  CHECK(rows == 3);
  const nlohmann::json j = to_json(ev);
  CHECK(j["model"]["decode"].is_null());
  CHECK(j["heads"][0]["decode"].is_null());
  CHECK(j["model"]["obs"]["rel_error"].get<double>() == 0.01);
}

TEST_CASE("with decode steps the report prints the decode error") {
  const TraceEvaluation ev = one_layer(true);
  const std::string text = text_report(ev, false);
  CHECK_THAT(text, Catch::Contains("2.000e-02"));
  CHECK_THAT(text, !Catch::Contains("n/a"));
  CHECK(to_json(ev)["model"]["decode"]["rel_error"].get<double>() == 0.02);
}
