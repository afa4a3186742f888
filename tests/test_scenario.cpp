// Scenario files: parsing, cells, and errors naming the file, the line and the choices.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "model/base/error.hpp"
#include "scenarios/analyses/stats.hpp"
#include "scenarios/analyses/waterfill.hpp"
#include "scenarios/run/tables.hpp"
#include "scenarios/scenario/scenario.hpp"

using namespace tierlab;

namespace {
std::string error_of(const std::string& yaml) {
  try {
    parse_scenario(yaml, "bad.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
const char* kGood =
    "# comment\n"
    "name: t\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [0, 1]\n"
    "    context_lengths: [32, 64]\n"
    "budgets: [2, 4]\n";
}  // namespace

TEST_CASE("a scenario expands to presets x seeds x context lengths") {
  const Scenario s = parse_scenario(kGood, "good.yaml");
  REQUIRE(s.cells.size() == 4);
  CHECK(s.cells[0].id == "tiny-s0-T32");
  CHECK(s.cells[3].id == "tiny-s1-T64");
  CHECK(s.cells[3].synth.prompt_len == 64);
  CHECK(s.cells[1].synth.seed == 0);
  CHECK(s.cells[2].synth.seed == 1);
  CHECK(s.budgets == std::vector<double>{2, 4});
  CHECK(s.primary_budget == 2);
  CHECK_FALSE(s.sweeps_logit_scales);
}

TEST_CASE("logit scales make a phase map and fix each cell's scale") {
  const Scenario s = parse_scenario(std::string(kGood) + "", "g.yaml");
  const Scenario p = parse_scenario(
      "name: p\ntraces:\n  synthetic:\n    presets: tiny\n    logit_scales: [0.5, 2]\n    overrides: {n_layers: 1}\n",
      "p.yaml");
  REQUIRE(p.cells.size() == 2);
  CHECK(p.sweeps_logit_scales);
  CHECK(p.cells[1].synth.logit_scale_min == 2.0);
  CHECK(p.cells[1].synth.logit_scale_max == 2.0);
  CHECK(p.cells[1].synth.n_layers == 1);
  CHECK(s.cells.size() == 4);
}

TEST_CASE("an unknown key names the file, the line and the valid keys") {
  const std::string e = error_of("name: t\ntraces:\n  synthetic:\n    presets: [tiny]\nbudgetz: [2]\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:5:"));
  CHECK_THAT(e, Catch::Contains("budgetz"));
  CHECK_THAT(e, Catch::Contains("budgets"));
}

TEST_CASE("an unknown preset names the line and the presets") {
  const std::string e = error_of("name: t\ntraces:\n  synthetic:\n    presets: [tiny, huge]\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:4:"));
  CHECK_THAT(e, Catch::Contains("huge"));
  CHECK_THAT(e, Catch::Contains("llama-like"));
}

TEST_CASE("an unknown backend or query set names the line and the choices") {
  const std::string base = "name: t\ntraces:\n  synthetic:\n    presets: [tiny]\n";
  const std::string e = error_of(base + "backend: tpu\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:5:"));
  CHECK_THAT(e, Catch::Contains("tpu"));
  CHECK_THAT(e, Catch::Contains("cuda"));
  const std::string q = error_of(base + "queries: prefill\n");
  CHECK_THAT(q, Catch::Contains("bad.yaml:5:"));
  CHECK_THAT(q, Catch::Contains("decode, obs"));
}

TEST_CASE("a bad ladder tier names the line") {
  const std::string e = error_of("name: t\nladder: evict,kivi3x,exact\ntraces:\n  synthetic:\n    presets: [tiny]\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:2:"));
  CHECK_THAT(e, Catch::Contains("kivi3x"));
}

TEST_CASE("an out-of-range budget names the line and the range") {
  const std::string e = error_of("name: t\ntraces:\n  synthetic:\n    presets: [tiny]\nbudgets: [2,\n  40]\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:6:"));
  CHECK_THAT(e, Catch::Contains("40"));
  CHECK_THAT(e, Catch::Contains("[0.01, 16]"));
}

TEST_CASE("a primary budget must be one of the budgets; overrides are checked") {
  const std::string base = "name: t\ntraces:\n  synthetic:\n    presets: [tiny]\n";
  CHECK_THAT(error_of(base + "budgets: [2, 4]\nprimary_budget: 3\n"), Catch::Contains("bad.yaml:6:"));
  const std::string o = error_of(base + "    overrides:\n      n_layerz: 2\n");
  CHECK_THAT(o, Catch::Contains("bad.yaml:6:"));
  CHECK_THAT(o, Catch::Contains("n_layers"));
  CHECK_THAT(error_of(base + "    overrides:\n      head_dim: 0\n"), Catch::Contains("bad.yaml:6:"));
  CHECK_THAT(error_of("name: t\n"), Catch::Contains("traces"));
}

TEST_CASE("Spearman rho against a hand-computed case with ties") {
  // x ranks 1..5; y = [5,6,7,8,7] has ranks [1,2,3.5,5,3.5]:
  // sum dx dy = 8, sum dx^2 = 10, sum dy^2 = 9.5 -> rho = 8 / sqrt(95).
  const std::vector<double> x{1, 2, 3, 4, 5}, y{5, 6, 7, 8, 7};
  CHECK(mid_ranks(y) == std::vector<double>{1, 2, 3.5, 5, 3.5});
  CHECK(spearman(x, y) == Approx(8.0 / std::sqrt(95.0)).epsilon(1e-12));
  CHECK(spearman(x, std::vector<double>{5, 4, 3, 2, 1}) == Approx(-1.0));
  CHECK(std::isnan(spearman(x, std::vector<double>{1, 1, 1, 1, 1})));
  const Interval a = bootstrap_spearman(x, y, 500, 7), b = bootstrap_spearman(x, y, 500, 7);
  CHECK(a.lo == b.lo);  // seeded: deterministic
  CHECK(a.hi == b.hi);
  CHECK(a.lo <= spearman(x, y));
  CHECK(a.hi >= a.lo);
  CHECK(a.used > 0);
}

TEST_CASE("model cells: the shipped checkpoint, seeds x context lengths") {
  const std::string ck = std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin";
  const Scenario s = parse_scenario("name: m\ntraces:\n  model:\n    checkpoint: " + ck +
                                        "\n    seeds: [0, 1]\n    context_lengths: [32, 64]\n    decode_steps: 4\n",
                                    "m.yaml");
  REQUIRE(s.cells.size() == 4);
  CHECK(s.cells[1].id == "stories260K-s0-T64");
  CHECK(s.cells[1].source == "model");
  CHECK(s.cells[1].decode_steps == 4);
  const std::string e = error_of("name: m\ntraces:\n  model:\n    checkpoint: nowhere.bin\n    context_lengths: [32]\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:4:"));
  CHECK_THAT(e, Catch::Contains("nowhere.bin"));
}

TEST_CASE("a scenario copied to another folder still finds the shipped model") {
  // The shipped scenarios name the model relative to scenarios/files/; from a file in /tmp
  // that path leads nowhere, and the shipped data/ is found instead (model/io/paths.hpp).
  const std::string yaml = "name: m\ntraces:\n  model:\n    checkpoint: ../../data/stories260K/stories260K.bin\n"
                           "    context_lengths: [32]\n";
  const Scenario s = parse_scenario(yaml, "/tmp/some/where/copied.yaml");
  REQUIRE(s.cells.size() == 1);
  CHECK(std::filesystem::equivalent(s.cells[0].checkpoint,
                                    std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin"));
  // A path that leads nowhere says where it looked.
  const std::string e = error_of("name: m\ntraces:\n  model:\n    checkpoint: data/none/x.bin\n    context_lengths: [32]\n");
  CHECK_THAT(e, Catch::Contains("looked for") && Catch::Contains("data/none/x.bin"));
}

TEST_CASE("the water-filling head names a cell of the scenario") {
  const Scenario s = parse_scenario(std::string(kGood) + "waterfill:\n  cell: tiny-s1-T32\n  layer: 1\n  budget: 3\n", "w.yaml");
  REQUIRE(s.find<WaterfillAnalysis>() != nullptr);
  CHECK(s.find<WaterfillAnalysis>()->spec.cell == "tiny-s1-T32");
  CHECK(s.find<WaterfillAnalysis>()->spec.layer == 1);
  CHECK(s.find<WaterfillAnalysis>()->spec.budget == 3);
  const std::string e = error_of(std::string(kGood) + "waterfill:\n  cell: tiny-s9-T32\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:10:"));
  CHECK_THAT(e, Catch::Contains("tiny-s0-T32, tiny-s0-T64"));
}

TEST_CASE("a key given twice in one scenario mapping is refused naming both lines", "[scenario][reliability]") {
  CHECK(error_of(std::string(kGood) + "budgets: [8]\n") ==
        "bad.yaml:9: the key 'budgets' is given twice in the same mapping (first on line 8); give each key once.");
  const std::string nested = "name: t\ntraces:\n  synthetic:\n    presets: [tiny]\n    presets: [llama-like]\n";
  CHECK(error_of(nested) ==
        "bad.yaml:5: the key 'presets' is given twice in the same mapping (first on line 4); give each key once.");
}

TEST_CASE("a scenario nested too deeply or with an alias bomb or a complex key is refused naming the line",
          "[scenario][reliability]") {
  std::string deep = "name: t\nx: ";
  for (int i = 0; i < 70; ++i) deep += "[";
  for (int i = 0; i < 70; ++i) deep += "]";
  CHECK(error_of(deep + "\n") == "bad.yaml:2: mappings and lists nest deeper than 64 levels.");
  std::string deeper = "name: t\nx: " + std::string(5000, '[') + std::string(5000, ']') + "\n";
  CHECK_THAT(error_of(deeper), Catch::StartsWith("bad.yaml:2: not valid YAML"));  // yaml-cpp's own depth guard
  std::string bomb = "name: t\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 6; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", " : "") + prev;
    bomb += "]\n";
  }
  CHECK_THAT(error_of(bomb), Catch::Contains("more than 100000 YAML nodes"));
  CHECK(error_of("name: t\n? [1, 2]\n: 3\n") == "bad.yaml:2: a mapping key must be a single value.");
}

TEST_CASE("a scenario that is not UTF-8 text is refused naming the line and column", "[scenario][reliability]") {
  CHECK(error_of("name: t\ndescription: caf\xE9\n") ==
        "bad.yaml:2: byte 0xE9 at column 17 is not valid UTF-8 (a scenario file is UTF-8 text).");
  CHECK(error_of("name: t\ndescription: \xED\xA0\x80\n") ==
        "bad.yaml:2: byte 0xED at column 14 is not valid UTF-8 (a scenario file is UTF-8 text).");  // a surrogate
  CHECK(error_of(std::string(kGood) + "description: caf\xC3\xA9\n").empty());
}

TEST_CASE("a scenario path that is a directory is refused with a sentence", "[scenario][reliability]") {
  try {
    load_scenario(TIERLAB_SOURCE_DIR);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::EndsWith("it is a directory, not a regular file."));
  }
}

TEST_CASE("a scenario value that yaml-cpp decodes to bytes that are not UTF-8 is refused naming the line",
          "[scenario][reliability]") {
  CHECK(error_of(std::string(kGood) + "description: \"a\\_b\"\n") ==
        "bad.yaml:9: a value is not UTF-8 text once its escapes are decoded (yaml-cpp decodes \\_ and \\N to single "
        "bytes); write the character itself.");
}

TEST_CASE("a budget listed twice is refused with its line and value, not run twice") {
  const std::string e = error_of("name: t\ntraces:\n  synthetic:\n    presets: [tiny]\nbudgets: [2, 4, 2.0]\n");
  CHECK_THAT(e, Catch::Contains("bad.yaml:5:"));
  CHECK_THAT(e, Catch::Contains("lists 2 twice"));
  CHECK(error_of("name: t\ntraces:\n  synthetic:\n    presets: [tiny]\nbudgets: [2, 4]\n").empty());
}

TEST_CASE("the figures key sets the figure style and never a cell's settings") {
  const Scenario plain = parse_scenario(kGood, "g.yaml");
  const Scenario styled = parse_scenario(std::string(kGood) + "figures: {style: slides, width: 89mm, font_size: 9, format: [pdf]}\n", "g.yaml");
  CHECK(styled.figure_style.name == "slides");
  CHECK(styled.figure_style.width_pt == Approx(252.28).epsilon(1e-3));
  CHECK(styled.figure_style.font_pt == 9);
  CHECK(styled.figure_style.formats == std::vector<std::string>{"pdf"});
  CHECK(styled.settings_json == plain.settings_json);  // restyling never recomputes a cell
  CHECK_THAT(error_of(std::string(kGood) + "figures: {width: 3 furlongs}\n"), Catch::Contains("figures.width"));
  CHECK_THAT(error_of(std::string(kGood) + "figures: {format: gif}\n"), Catch::Contains("gif"));
  CHECK_THAT(error_of(std::string(kGood) + "figures: {colour: red}\n"), Catch::Contains("unknown key 'colour' in figures"));
}
