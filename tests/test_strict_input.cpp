// Strict input at every front door (issue 33, items 4 and 5): one number parser (the whole
// text, finite, no wrap-around), options that act only beside others refused when given
// alone, a parameter given twice refused, and a run's size estimated and refused before any
// work when it exceeds the machine or a stated limit.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "scenarios/run/estimate.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"

using namespace tierlab;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using namespace std::string_literals;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs build/tierlab with `args` (paths hold no quotes); returns the exit status.
int run(const std::string& args, const fs::path& log) {
  const std::string cmd = "'"s + TIERLAB_BINARY_DIR + "/tierlab' " + args + " > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(TIERLAB_BINARY_DIR) / "test-tmp" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("A number is the whole text: trailing letters, spaces, hexadecimal and infinities are not numbers") {
  CHECK(read_real("2.5") == 2.5);
  CHECK(read_real("-1e-3") == -1e-3);
  CHECK(read_real(".5") == 0.5);
  for (const char* bad : {"", " 2", "2 ", "3abc", "+2", "0x10", "inf", "-inf", "nan", "1e400", "1,5", "--1"})
    CHECK_FALSE(read_real(bad));
  CHECK(read_integer("-42") == -42);
  for (const char* bad : {"", "4.0", "1e3", " 7", "7 ", "0x10", "9223372036854775808", "+1"}) CHECK_FALSE(read_integer(bad));
  CHECK(read_unsigned("18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
  for (const char* bad : {"-1", "-0", "18446744073709551616", "1e3", " 1"}) CHECK_FALSE(read_unsigned(bad));
}

TEST_CASE("The strict parser's errors name the field, the text and the range") {
  CHECK_THAT(error_message([] { parse_real("3abc", "--mix"); }), Contains("--mix = '3abc' is not a number."));
  CHECK_THAT(error_message([] { parse_real("1e400", "budget"); }), Contains("budget = '1e400' is not a finite number."));
  CHECK_THAT(error_message([] { parse_real("17", "--budget", 0.01, 16); }), Contains("is out of range (expected 0.01 to 16)"));
  CHECK_THAT(error_message([] { parse_unsigned("-1", "--seed"); }), Contains("--seed = '-1' is negative"));
  CHECK_THAT(error_message([] { parse_unsigned("18446744073709551617", "--seed"); }),
             Contains("beyond the range of a 64-bit unsigned integer"));
  CHECK_THAT(error_message([] { parse_integer("99999999999999999999", "n"); }), Contains("beyond the range of a 64-bit integer"));
  CHECK(parse_int("12", "n", 1, 20) == 12);
}

TEST_CASE("Command-line numbers never wrap or stop early: a negative or too large seed, '3abc' and hexadecimal are usage errors") {
  const fs::path dir = fresh_dir("strict_cli_numbers");
  const std::string out = " -o '" + (dir / "t.safetensors").string() + "'";
  for (const std::string& seed : {"-1"s, "18446744073709551617"s, "0x10"s, "' 5'"s, "1e3"s}) {
    CAPTURE(seed);
    CHECK(run("synth --preset tiny --tokens 64 --seed " + seed + out, dir / "log") == 2);
    CHECK_THAT(slurp(dir / "log"), Contains("--seed"));
    CHECK_FALSE(fs::exists(dir / "t.safetensors"));
  }
  CHECK(run("synth --preset tiny --tokens 64 --mix 3abc,1,1,1" + out, dir / "log") == 2);
  CHECK_THAT(slurp(dir / "log"), Contains("'3abc' is not a number"));
  CHECK(run("synth --preset tiny --tokens 64 --mix 1e300,1e300,1,1" + out, dir / "log") == 2);
  CHECK_THAT(slurp(dir / "log"), Contains("head-mix weights are relative"));
  CHECK(run("synth --preset tiny --tokens 64 --seed 18446744073709551615" + out, dir / "log") == 0);
}

TEST_CASE("An option that acts only beside another is refused when given without it, naming both") {
  const fs::path dir = fresh_dir("strict_cli_conflicts");
  const std::string trace = "'" + (dir / "t.safetensors").string() + "'";
  REQUIRE(run("synth --preset tiny --tokens 64 -o " + trace, dir / "synth.log") == 0);
  const auto refused = [&](const std::string& args, const std::string& words) {
    CAPTURE(args);
    CHECK(run(args, dir / "log") == 2);
    CHECK_THAT(slurp(dir / "log"), Contains(words));
  };
  refused("eval " + trace + " --policy kivi:2 --keep ratio:0.5", "option --keep acts only with --scorer; it was given with --policy");
  refused("eval " + trace + " --policy kivi:2 --param bits=3", "option --param acts only with --quantizer, --scorer or --seed");
  refused("eval " + trace + " --policy kivi:2 --budget 3", "option --budget acts only with --seed");
  refused("eval " + trace + " --quantizer kivi --param bits=2 --param bits=4",
          "option --param: bits is given twice ('bits=2' and 'bits=4')");
  refused("solve " + trace + " --budget 2 --queries obs", "option --queries acts only with --budgets; it was given with --budget");
  refused("solve " + trace + " --budget 2 --kernel 5", "option --kernel acts only with --solver smoothed");
  refused("solve " + trace + " --budget 2 --route-tolerance 0.1", "option --route-tolerance acts only with --family routed");
  CHECK(run("eval " + trace + " --quantizer kivi --param bits=2", dir / "log") == 0);
}

TEST_CASE("A run's size is estimated from the scenario alone, from the trace shapes, the ladder and the jobs") {
  const fs::path dir = fresh_dir("strict_estimate");
  std::ofstream(dir / "s.yaml") << "name: est\ntraces:\n  synthetic:\n    presets: [llama-3.1-8b]\n    seeds: [0, 1]\n"
                                   "    context_lengths: [4096, 32768]\n    overrides: {decode_steps: 16}\n"
                                   "ladder: evict,kivi2,kivi4,kivi8,exact\nbudgets: [2]\nbackend: cpu\n";
  const Scenario sc = load_scenario((dir / "s.yaml").string());
  REQUIRE(sc.cells.size() == 4);
  const ScenarioCell* c32 = nullptr;
  for (const ScenarioCell& c : sc.cells)
    if (c.synth.prompt_len == 32768) c32 = &c;
  REQUIRE(c32 != nullptr);
  // An independent count of a 32k cell's trace: 256 heads x (T d (keys, pre-RoPE keys, values)
  // + g (W + S) d (queries) + 2 S d (decode keys, values)) floats of 4 bytes.
  const double W = c32->synth.obs_window;
  const double floats = 256.0 * (32768.0 * 128 * 3 + 4 * (W + 16) * 128 + 2 * 16 * 128);
  const CellSize size = estimate_cell(sc, *c32);
  CHECK(size.trace_bytes == Approx(floats * 4));
  CHECK(size.disk_bytes == 0);  // a synthetic cell's heads are generated in memory: no file
  // Measured: 584 MB resident for a 32k cell of 256 heads on one thread (docs/performance.md,
  // 2026-12-05); within 25%.
  CHECK(size.resident_bytes / 584e6 == Approx(1.0).epsilon(0.25));
  const RunEstimate e = estimate_run(sc, {0, 1, 2, 3}, 2);
  CHECK(e.cells == 4);
  CHECK(e.peak_disk_bytes == 0);
  CHECK_THAT(e.describe(2), Contains("4 cells to compute, 1,024 KV heads x 4,112-32,784 tokens") &&
                                Contains("none written to disk") && Contains("(2 jobs)"));
}

TEST_CASE("tierlab run of a 100 TB scenario is refused before any work with its estimate; a stated limit refuses a small run unless --force-size") {
  const fs::path dir = fresh_dir("strict_huge_run");
  std::ofstream(dir / "huge.yaml") << "name: huge\ntraces:\n  synthetic:\n    presets: [llama-3.1-8b]\n    seeds: [0]\n"
                                      "    context_lengths: [1048576]\n    overrides: {n_layers: 256, n_kv_heads: 256}\n"
                                      "budgets: [2]\nbackend: cpu\n";
  // Refused before any work, so in no time on any machine (measured: about 0.05 s): nothing is
  // generated and not even the output folder is made (the check is not timed, so that it
  // cannot depend on the machine's speed).
  CHECK(run("run '" + (dir / "huge.yaml").string() + "' --out '" + (dir / "out").string() + "'", dir / "log") == 2);
  CHECK_FALSE(fs::exists(dir / "out"));
  const std::string log = slurp(dir / "log");
  CHECK_THAT(log, Contains("estimate for huge: 1 cell to compute, 65,536 KV heads x 1,048,640 tokens") &&
                      Contains("this run is too large for the machine") && Contains("TiB") && Contains("--force-size"));
  // A stated limit below a tiny run's estimate refuses it too, naming the option.
  std::ofstream(dir / "tiny.yaml") << "name: small\ntraces:\n  synthetic:\n    presets: [tiny]\n    seeds: [0]\n"
                                      "budgets: [2]\nbackend: cpu\nbootstrap: 100\n";
  CHECK(run("run '" + (dir / "tiny.yaml").string() + "' --out '" + (dir / "o2").string() + "' --max-memory 1M", dir / "log2") == 2);
  CHECK_THAT(slurp(dir / "log2"), Contains("exceeds --max-memory (1.0 MiB)"));
  CHECK(run("run '" + (dir / "tiny.yaml").string() + "' --out '" + (dir / "o2").string() + "' --max-memory 1M --force-size",
            dir / "log3") == 0);
  CHECK(run("run '" + (dir / "tiny.yaml").string() + "' --out '" + (dir / "o3").string() + "' --max-memory 12abc", dir / "log4") == 2);
  CHECK_THAT(slurp(dir / "log4"), Contains("--max-memory"));
}

TEST_CASE("A tiny run through every analysis prints no nan or inf in summary.md: what is not defined says so") {
  // Tiny cells where many quantities are undefined: one family wins every head (kappa), no head
  // has spans (truncation rate), a variable is the same in every cell (rank correlations).
  const fs::path dir = fresh_dir("strict_undefined_values");
  std::ofstream(dir / "tiny.yaml")
      << "name: tiny-undefined\ntraces:\n  synthetic:\n    presets: [tiny]\n    seeds: [0, 1]\n    context_lengths: [48]\n"
         "    logit_scales: [1, 4]\n    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
         "budgets: [2, 4]\nbackend: cpu\nbootstrap: 100\nstaleness: {steps: [1, 2, 4], budget: 2}\n"
         "smoothing: {kernels: [1, 3], budgets: [1]}\nmismatch: {quantizers: [kivi, token], bits: [2, 4], budgets: [4]}\n"
         "rd_curve: {budgets: \"0:4:1\"}\n"
         "methods:\n  - {quantizer: kivi, bits: 2}\n  - {scorer: snapkv, keep: \"ratio:0.5\", window: 8}\n"
         "  - {policy: \"evict:0.5\"}\n";
  REQUIRE(run("run '" + (dir / "tiny.yaml").string() + "' --out '" + (dir / "out").string() + "'", dir / "log") == 0);
  const std::string summary = slurp(dir / "out" / "summary.md");
  REQUIRE_FALSE(summary.empty());
  // Whole words only: "nan" inside "finance" or "inf" inside "infeasible" is prose.
  const auto has_word = [&](const std::string& w) {
    for (std::size_t at = summary.find(w); at != std::string::npos; at = summary.find(w, at + 1)) {
      const bool start = at == 0 || !std::isalnum(static_cast<unsigned char>(summary[at - 1]));
      const std::size_t end = at + w.size();
      const bool stop = end >= summary.size() || !std::isalnum(static_cast<unsigned char>(summary[end]));
      if (start && stop) return true;
    }
    return false;
  };
  CHECK_FALSE(has_word("nan"));
  CHECK_FALSE(has_word("-nan"));
  CHECK_FALSE(has_word("inf"));
  CHECK_THAT(summary, Contains("not defined"));
}
