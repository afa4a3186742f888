// One error seam: a failed recomputation is its own category (RecomputeError, exit status 4),
// never bad input; the runner keeps an error's category and adds the cell it came from.
#include <catch2/catch.hpp>

#include <memory>
#include <stdexcept>

#include "gpu/recompute.hpp"
#include "model/base/error.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "support.hpp"

using namespace tierlab;
using tierlab::testing::error_of;
using tierlab::testing::TempDir;

namespace {

// A backend whose every call fails, as a device that has gone away does.
class FailingRecomputer final : public Recomputer {
 public:
  std::string name() const override { return "failing"; }
  std::string description() const override { return "failing (test double)"; }
  EvalResult evaluate(const std::vector<HeadBatch>&) override {
    EvalResult r;
    r.ok = false;
    r.message = "the device stopped answering";
    return r;
  }
};

const char* kTiny =
    "name: seam\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "    seeds: [3]\n"
    "    overrides: {n_layers: 1}\n"
    "budgets: [2]\n"
    "backend: cpu\n"
    "bootstrap: 100\n";

}  // namespace

TEST_CASE("a failed recomputation throws RecomputeError naming the backend, which is not an InputError") {
  FailingRecomputer be;
  const std::vector<HeadBatch> none;
  const std::string msg = error_of<RecomputeError>([&] { recompute(be, none); });
  CHECK_THAT(msg, Catch::Contains("failing (test double)"));
  CHECK_THAT(msg, Catch::Contains("the device stopped answering"));
  bool caught_as_input = false;
  try {
    recompute(be, none);
  } catch (const InputError&) {
    caught_as_input = true;
  } catch (const RecomputeError&) {
  }
  CHECK_FALSE(caught_as_input);
}

TEST_CASE("rethrow_with_context keeps each error's category and puts the context in front") {
  auto again = [](auto e) {
    try {
      rethrow_with_context(std::make_exception_ptr(e), "cell 'x'");
    } catch (...) {
      return std::current_exception();
    }
    return std::exception_ptr();
  };
  CHECK(error_of<FormatError>([&] { std::rethrow_exception(again(FormatError("bad header"))); }) == "cell 'x': bad header");
  CHECK(error_of<InputError>([&] { std::rethrow_exception(again(InputError("bad value"))); }) == "cell 'x': bad value");
  CHECK(error_of<RecomputeError>([&] { std::rethrow_exception(again(RecomputeError("device lost"))); }) ==
        "cell 'x': device lost");
  CHECK(error_of<std::logic_error>([&] { std::rethrow_exception(again(std::out_of_range("index 9"))); }) ==
        "cell 'x': index 9");
}

TEST_CASE("a scenario run whose backend fails reports a RecomputeError naming the cell, and writes no cell") {
  TempDir dir("seam");
  const Scenario sc = parse_scenario(kTiny, "seam.yaml");
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  opt.backend_factory = [] { return std::make_unique<FailingRecomputer>(); };
  const std::string msg = error_of<RecomputeError>([&] { run_scenario(sc, opt); });
  CHECK_THAT(msg, Catch::StartsWith("cell 'tiny-s3-T"));
  CHECK_THAT(msg, Catch::Contains("the device stopped answering"));
  CHECK_FALSE(std::filesystem::exists(cell_path(opt.out, sc.cells.front())));
}

TEST_CASE("bad input inside a cell stays an InputError, with the cell named") {
  TempDir dir("seam-input");
  // The waterfill head is outside the trace: found only when the cell's trace is there.
  const Scenario sc = parse_scenario(std::string(kTiny) + "waterfill: {layer: 7}\n", "seam.yaml");
  RunOptions opt;
  opt.out = dir.file("out");
  opt.progress = false;
  const std::string msg = error_of<InputError>([&] { run_scenario(sc, opt); });
  CHECK_THAT(msg, Catch::StartsWith("cell 'tiny-s3-T"));
  CHECK_THAT(msg, Catch::Contains("waterfill head L7.H0 is outside"));
}
