// One problem definition (solvers/problem.hpp, docs/model.md section 12, convention 11): the
// same problem, given with no option but the budget, through the command line, Python, a
// scenario and the explorer's core gives the same allocation, because every front door takes
// the same defaults (ladder, rate kind, scope, queries). Also: the one budget rule, and
// decode queries addressed through one type.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gui/engine.hpp"
#include "gui/source.hpp"
#include "model/allocation.hpp"
#include "model/base/error.hpp"
#include "model/io/trace.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "solvers/problem.hpp"
#include "support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Runs a shell command; its output goes to `log`. Returns the exit status.
int run(const std::string& cmd, const std::string& log) {
  const int rc = std::system((cmd + " > " + quoted(log) + " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

const std::string kTool = std::string(TIERLAB_BINARY_DIR) + "/tierlab";

}  // namespace

TEST_CASE("the same problem through the command line, Python, a scenario and the explorer core gives the same allocation") {
  const tierlab::testing::TempDir tmp("problem");
  SynthParams p = synth_preset("tiny");
  p.seed = 11;
  p.n_layers = 2;
  const std::string trace = tmp.file("t.safetensors");
  write_synthetic_trace(p, trace);
  const double B = 3;  // between the 2- and 4-bit tiers: a true mix
  const TraceReader reader(trace);
  const int L = reader.meta().n_layers, H = reader.meta().n_kv_heads;

  // The command line: only the budget.
  const std::string alloc_file = tmp.file("cli.alloc");
  REQUIRE(run(quoted(kTool) + " solve " + quoted(trace) + " --budget 3 --write-allocation " + quoted(alloc_file) +
                  " --json", tmp.file("cli.json")) == 0);
  const Allocation cli = read_allocation(alloc_file);
  REQUIRE(cli.tiers.size() == static_cast<std::size_t>(L * H));
  const nlohmann::json cli_json = nlohmann::json::parse(tierlab::testing::slurp(tmp.file("cli.json")));

  // The library's defaults are the ones the command line used.
  AllocateOptions lib;
  lib.budget = B;
  CHECK(lib.rate_kind == kDefaultRateKind);
  CHECK(lib.ladder.name() == std::string(kDefaultLadder));
  CHECK(lib.scope == Scope::Head);

  // The explorer's core, head by head, with its default settings and the budget.
  {
    explorer::SourceSpec spec;
    spec.kind = explorer::SourceKind::Trace;
    spec.path = trace;
    explorer::Engine engine(explorer::Source::open(spec));
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        explorer::Settings s;
        s.layer = l, s.kv_head = h, s.budget = B;
        INFO("head L" << l << ".H" << h);
        CHECK(engine.allocate(s) == cli.tiers[static_cast<std::size_t>(l * H + h)]);
      }
  }

  // Python, when the package is built (pybind11 present): tierlab.solve(trace, 3).
  const fs::path py_dir = fs::path(TIERLAB_BINARY_DIR) / "python";
  if (fs::exists(py_dir / "tierlab")) {
    const std::string out = tmp.file("py.bin");
    const std::string script = "import sys; sys.path.insert(0, " + quoted(py_dir.string()) +
                               "); import tierlab; s = tierlab.solve(tierlab.open_trace(" + quoted(trace) +
                               "), 3); s.allocation.tofile(" + quoted(out) + ")";
    REQUIRE(run("/usr/bin/python3 -c \"" + script + "\"", tmp.file("py.log")) == 0);
    const std::string bytes = tierlab::testing::slurp(out);
    std::vector<std::uint8_t> all;
    for (const auto& t : cli.tiers) all.insert(all.end(), t.begin(), t.end());
    CHECK(std::vector<std::uint8_t>(bytes.begin(), bytes.end()) == all);
  } else {
    WARN("the Python package is not built (pybind11 missing): its front door is not compared");
  }

  // A scenario with the same trace and no problem keys but the budgets: its rate-distortion
  // point of the mixed family at B equals the command line's curve point and the allocation.
  {
    std::ofstream(tmp.file("p.yaml")) << "name: problem\n"
                                         "traces:\n"
                                         "  files: [" << trace << "]\n"
                                         "budgets: [3]\n"
                                         "backend: cpu\n"
                                         "bootstrap: 100\n"
                                         "rd_curve:\n"
                                         "  budgets: 3:3:1\n"
                                         "  families: [mixed]\n";
  }
  REQUIRE(run(quoted(kTool) + " run " + quoted(tmp.file("p.yaml")) + " --out " + quoted(tmp.file("run")),
              tmp.file("run.log")) == 0);
  const nlohmann::json tables = nlohmann::json::parse(tierlab::testing::slurp(tmp.file("run/tables/rd_curve.json")));
  REQUIRE(tables["cells"].size() == 1);
  const nlohmann::json& scen = tables["cells"][0]["rd_curve"];
  REQUIRE(run(quoted(kTool) + " solve " + quoted(trace) + " --budgets 3:3:1 --families mixed --recompute --json",
              tmp.file("curve.json")) == 0);
  const nlohmann::json curve = nlohmann::json::parse(tierlab::testing::slurp(tmp.file("curve.json")));
  for (const char* key : {"rate_kind", "scope", "ladder", "queries"}) {
    INFO(key);
    CHECK(scen[key] == curve[key]);
  }
  CHECK(scen["rate_kind"] == std::string(to_string(kDefaultRateKind)));
  const nlohmann::json& m_scen = scen["families"]["mixed"];
  const nlohmann::json& m_cli = curve["families"]["mixed"];
  for (const char* key : {"surrogate", "code_bits", "total_bits", "error"}) {
    INFO(key);
    CHECK(m_scen[key][0].get<double>() == Approx(m_cli[key][0].get<double>()).epsilon(1e-12));
  }
  // ... and the single allocation measures the curve point's rate.
  CHECK(cli_json["model"]["rate"]["total_bits"].get<double>() == Approx(m_cli["total_bits"][0].get<double>()).epsilon(1e-9));
  CHECK(cli_json["model"]["rate"]["code_bits"].get<double>() == Approx(m_cli["code_bits"][0].get<double>()).epsilon(1e-9));
}

TEST_CASE("one budget rule: finite and in [0, 16], named by the caller's field") {
  CHECK_NOTHROW(check_budget(0, "budget"));
  CHECK_NOTHROW(check_budget(16, "budget"));
  for (double bad : {-0.5, 16.5, std::nan(""), 1.0 / 0.0}) {
    const std::string msg = tierlab::testing::error_of<InputError>([&] { check_budget(bad, "--budget"); });
    CHECK(msg.find("--budget = ") == 0);
    CHECK(msg.find("[0, 16]") != std::string::npos);
  }
  ProblemOptions o;
  o.budget = 17;
  CHECK(tierlab::testing::error_of<InputError>([&] { o.validate(); }).find("budget = 17") != std::string::npos);
  AllocateOptions a;
  a.budget = -1;
  CHECK(tierlab::testing::error_of<InputError>([&] { a.validate(); }).find("budget = -1") != std::string::npos);
}

TEST_CASE("decode queries are addressed by query head and step, and step s sees T + s tokens") {
  HeadData h;
  const int g = 2, S = 3, T = 5, d = 4;
  h.keys = MatrixRM::Zero(T, d);
  h.decode_keys = MatrixRM::Zero(S, d);
  h.decode_queries.resize(g * S, d);
  for (int r = 0; r < g * S; ++r) h.decode_queries.row(r).setConstant(static_cast<float>(r));
  const DecodeQueries q = decode_query_set(h);
  CHECK(q.g == g);
  CHECK(q.S == S);
  CHECK(q.T == T);
  // The trace format's layout (docs/trace-format.md): row = query_head * S + (s - 1).
  CHECK(q.query(0, 1)(0) == 0.0f);
  CHECK(q.query(1, 1)(0) == 3.0f);
  CHECK(q.query(1, 3)(0) == 5.0f);
  const MatrixRM step2 = q.step(2);
  REQUIRE(step2.rows() == g);
  CHECK(step2(0, 0) == 1.0f);
  CHECK(step2(1, 0) == 4.0f);
  CHECK(q.visible() == std::vector<int>{6, 7, 8, 6, 7, 8});
  HeadData none;
  CHECK(decode_query_set(none).g == 0);
}
