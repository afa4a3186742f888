// Scenario `methods`, `mismatch` and `proxy` keys: parsing, expansion and the errors (file,
// line, valid choices).
#include <catch2/catch.hpp>

#include <string>

#include "model/base/error.hpp"
#include "scenarios/analyses/mismatch.hpp"
#include "scenarios/analyses/proxy.hpp"
#include "scenarios/scenario/scenario.hpp"

using namespace tierlab;

namespace {

// Lines 1-4 are the header; methods entries start at line 6.
std::string scenario_with(const std::string& tail) {
  return "name: m\n"            // 1
         "traces:\n"            // 2
         "  synthetic:\n"       // 3
         "    presets: [tiny]\n"  // 4
         + tail;
}

std::string methods(const std::string& entry) {
  return scenario_with("methods:\n"  // 5
                       "  - " + entry + "\n"  // 6
                       "proxy: {}\n");
}

// The InputError message of parsing `text` (fails the test when it parses).
std::string error_of(const std::string& text) {
  try {
    parse_scenario(text, "m.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("no error for:\n" << text);
  return {};
}

}  // namespace

TEST_CASE("method entries resolve through the registries; list values expand in key order") {
  const Scenario s = parse_scenario(scenario_with("methods:\n"
                                                  "  - {quantizer: kivi, bits: [2, 4]}\n"
                                                  "  - {quantizer: quarot, params: {bits: 4, group: 8}}\n"
                                                  "  - {scorer: snapkv, keep: [\"ratio:0.25\", \"count:16\"], params: {kernel: 7, window: 8}}\n"
                                                  "  - {seed: ratequant, budget: 2, ladder: \"evict,kivi2,kivi4,exact\"}\n"
                                                  "  - {policy: \"kivi:2\"}\n"
                                                  "  - {family: M, budget: [2, 3]}\n"
                                                  "  - {family: E, budget: 2, label: evict-only}\n"
                                                  "proxy: {mode: free-running}\n"),
                                    "m.yaml");
  REQUIRE(s.methods.size() == 10);
  REQUIRE(s.find<ProxyAnalysis>() != nullptr);
  CHECK(s.find<ProxyAnalysis>()->spec.mode == "free-running");
  CHECK(s.methods[0].kind == MethodSpec::Kind::Quantizer);
  CHECK(s.methods[0].label == "kivi bits=2");
  CHECK(s.methods[1].label == "kivi bits=4");
  CHECK(s.methods[1].params.at("bits") == "4");
  CHECK(s.methods[2].params.at("group") == "8");
  CHECK(s.methods[3].kind == MethodSpec::Kind::Scorer);
  CHECK(s.methods[3].keep == "ratio:0.25");
  CHECK(s.methods[4].keep == "count:16");
  CHECK(s.methods[4].params.at("kernel") == "7");
  CHECK(s.methods[5].kind == MethodSpec::Kind::Seed);
  CHECK(s.methods[5].budget == 2.0);
  CHECK(s.methods[5].ladder.name() == "evict,kivi2,kivi4,exact");
  CHECK(s.methods[6].kind == MethodSpec::Kind::Policy);
  CHECK(s.methods[6].name == "kivi:2");
  CHECK(s.methods[7].label == "M* B=2");
  CHECK(s.methods[8].budget == 3.0);
  CHECK(s.methods[8].ladder.name() == s.ladder.name());  // the scenario's ladder by default
  CHECK(s.methods[9].label == "evict-only");
  CHECK(s.methods[7].where == "m.yaml:11");
}

TEST_CASE("method errors name the file, the line and the valid choices") {
  SECTION("unknown quantizer") {
    const std::string e = error_of(methods("{quantizer: kivvi, bits: 2}"));
    CHECK_THAT(e, Catch::Contains("m.yaml:6:"));
    CHECK_THAT(e, Catch::Contains("kivvi"));
    CHECK_THAT(e, Catch::Contains("quarot"));
    CHECK_THAT(e, Catch::Contains("turboquant"));
  }
  SECTION("unknown parameter") {
    const std::string e = error_of(methods("{quantizer: kivi, bitz: 2}"));
    CHECK_THAT(e, Catch::Contains("m.yaml:6:"));
    CHECK_THAT(e, Catch::Contains("bitz"));
    CHECK_THAT(e, Catch::Contains("bits, group, residual"));
  }
  SECTION("out-of-range value") {
    const std::string e = error_of(methods("{quantizer: kivi, bits: 40}"));
    CHECK_THAT(e, Catch::Contains("m.yaml:6:"));
    CHECK_THAT(e, Catch::Contains("40"));
  }
  SECTION("a bad value inside a list names its own line") {
    const std::string e = error_of(scenario_with("methods:\n  - quantizer: kivi\n    bits:\n      - 2\n      - 99\nproxy: {}\n"));
    CHECK_THAT(e, Catch::Contains("m.yaml:9:"));
  }
  SECTION("unknown scorer") {
    const std::string e = error_of(methods("{scorer: snapk, keep: \"ratio:0.5\"}"));
    CHECK_THAT(e, Catch::Contains("m.yaml:6:"));
    CHECK_THAT(e, Catch::Contains("snapkv"));
    CHECK_THAT(e, Catch::Contains("h2o"));
  }
  SECTION("scorer without keep, and a bad keep") {
    CHECK_THAT(error_of(methods("{scorer: snapkv}")), Catch::Contains("keep"));
    const std::string e = error_of(methods("{scorer: snapkv, keep: \"half\"}"));
    CHECK_THAT(e, Catch::Contains("m.yaml:6:"));
    CHECK_THAT(e, Catch::Contains("ratio:R"));
    CHECK_THAT(error_of(methods("{scorer: snapkv, keep: \"ratio:1.5\"}")), Catch::Contains("[0, 1]"));
  }
  SECTION("unknown seed allocator and parameter") {
    const std::string e = error_of(methods("{seed: ratequantt, budget: 2}"));
    CHECK_THAT(e, Catch::Contains("m.yaml:6:"));
    CHECK_THAT(e, Catch::Contains("ratequant"));
    CHECK_THAT(e, Catch::Contains("rdkv"));
    CHECK_THAT(error_of(methods("{seed: ratequant, budget: 2, foo: 1}")), Catch::Contains("foo"));
    CHECK_THAT(error_of(methods("{seed: ratequant}")), Catch::Contains("budget"));
    CHECK_THAT(error_of(methods("{seed: ratequant, budget: 40}")), Catch::Contains("[0.01, 16]"));
  }
  SECTION("unknown family and policy") {
    const std::string e = error_of(methods("{family: X, budget: 2}"));
    CHECK_THAT(e, Catch::Contains("m.yaml:6:"));
    CHECK_THAT(e, Catch::Contains("M (mixed)"));
    CHECK_THAT(error_of(methods("{policy: \"kivi:x\"}")), Catch::Contains("m.yaml:6:"));
  }
  SECTION("kind keys: none, two, or misplaced keys") {
    CHECK_THAT(error_of(methods("{bits: 2}")), Catch::Contains("quantizer, scorer, seed, policy, family"));
    CHECK_THAT(error_of(methods("{quantizer: kivi, scorer: snapkv}")), Catch::Contains("exactly one"));
    CHECK_THAT(error_of(methods("{quantizer: kivi, keep: \"ratio:0.5\"}")), Catch::Contains("scorers only"));
    CHECK_THAT(error_of(methods("kivi")), Catch::Contains("must be a mapping"));
  }
  SECTION("duplicate labels and parameters") {
    CHECK_THAT(error_of(methods("{quantizer: kivi, bits: [2, 2]}")), Catch::Contains("twice"));
    CHECK_THAT(error_of(methods("{quantizer: kivi, bits: 2, params: {bits: 3}}")), Catch::Contains("twice"));
    CHECK_THAT(error_of(methods("{family: M, budget: [2, 3], label: x}")), Catch::Contains("label"));
  }
  SECTION("methods without an analysis, proxy without methods") {
    CHECK_THAT(error_of(scenario_with("methods:\n  - {quantizer: kivi}\n")), Catch::Contains("add the key 'proxy'"));
    CHECK_THAT(error_of(scenario_with("proxy: {}\n")), Catch::Contains("give the key 'methods'"));
    CHECK_THAT(error_of(scenario_with("methods:\n  - {quantizer: kivi}\nproxy: {mod: x}\n")),
               Catch::Contains("the valid keys are mode"));
    CHECK_THAT(error_of(scenario_with("methods:\n  - {quantizer: kivi}\nproxy: {mode: greedy}\n")),
               Catch::Contains("teacher-forced, free-running"));
  }
}

TEST_CASE("the mismatch key") {
  const Scenario s = parse_scenario(
      scenario_with("mismatch:\n  quantizers: [kivi, {quantizer: quarot, group: 16}]\n  bits: [2, 4, 8]\n  budgets: [4]\n"),
      "m.yaml");
  REQUIRE(s.find<MismatchAnalysis>() != nullptr);
  REQUIRE(s.find<MismatchAnalysis>()->spec.quantizers.size() == 2);
  CHECK(s.find<MismatchAnalysis>()->spec.quantizers[0].name == "kivi");
  CHECK(s.find<MismatchAnalysis>()->spec.quantizers[1].params.at("group") == "16");
  CHECK(s.find<MismatchAnalysis>()->spec.bits == std::vector<int>{2, 4, 8});
  CHECK(s.find<MismatchAnalysis>()->spec.budgets == std::vector<double>{4});

  auto err = [](const std::string& body) { return error_of(scenario_with("mismatch:\n" + body)); };
  CHECK_THAT(err("  quantizers: [kivi]\n  bits: [2, 4]\n  budgets: [3]\n"),
             Catch::Contains("m.yaml:8:") && Catch::Contains("one of mismatch.bits (2, 4)"));
  CHECK_THAT(err("  quantizers: [kivi, {quantizer: token, bits: 2}]\n"),
             Catch::Contains("m.yaml:6:") && Catch::Contains("mismatch.bits"));
  CHECK_THAT(err("  quantizers: [kivvi]\n"), Catch::Contains("m.yaml:6:") && Catch::Contains("quarot"));
  CHECK_THAT(err("  quantizers: [{scorer: snapkv, keep: \"ratio:0.5\"}]\n"), Catch::Contains("only quantizers"));
  CHECK_THAT(err("  quantizers: [kivi]\n  bits: [4, 2]\n"), Catch::Contains("increasing"));
  CHECK_THAT(err("  quantizers: [kivi]\n  bits: [2]\n"), Catch::Contains("at least two"));
  CHECK_THAT(err("  quantizers: [kivi]\n  bits: [2, 9]\n"), Catch::Contains("[1, 8]"));
  CHECK_THAT(err("  quantizers: [kivi]\n  budget: [2]\n"), Catch::Contains("the valid keys are quantizers, bits, budgets"));
  CHECK_THAT(err("  bits: [2, 4]\n"), Catch::Contains("needs 'quantizers'"));
}

TEST_CASE("a scorer window longer than a cell's observation queries is refused when the file is read, naming both") {
  // tiny has W = 8 observation queries per query head.
  const std::string e = error_of(methods("{scorer: snapkv, keep: \"ratio:0.5\", params: {window: 16}}"));
  CHECK_THAT(e, Catch::Contains("m.yaml:6:") && Catch::Contains("parameter window = 16") &&
                    Catch::Contains("W = 8 observation queries of cell 'tiny-s0-T64'") && Catch::Contains("window <= 8"));
  // Within the cells' W it parses.
  CHECK_NOTHROW(parse_scenario(methods("{scorer: snapkv, keep: \"ratio:0.5\", params: {window: 8}}"), "m.yaml"));
}
