// Figures from saved tables: PNG, SVG and PDF produced, with the axis labels as text.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "model/base/error.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/run/render_figures.hpp"
#include "support.hpp"

using namespace tierlab;
using tierlab::testing::slurp;
namespace fs = std::filesystem;

TEST_CASE("figures are rendered from the tables alone") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);  // headless, as in CI
  const tierlab::testing::TempDir tmp("figures");
  const std::string d = tmp.path.string();
  fs::create_directories(d + "/tables");
  write_file_atomically(d + "/tables/interior.json", R"({"queries":"decode","primary_budget":2,"n_cells":3,
    "rho":0.5,"ci_lo":-0.5,"ci_hi":1,
    "points":[{"preset":"a","dominated_share":0.1,"A":0.01},{"preset":"a","dominated_share":0.5,"A":0.05},
              {"preset":"b","dominated_share":0.9,"A":0.2}],
    "budgets":[{"budget":2,"median_A_heads":0.05},{"budget":4,"median_A_heads":0.01}]})");
  write_file_atomically(d + "/tables/heads.csv", "cell,budget,A\nx,2,0.1\nx,2,0\nx,4,0.02\nx,4,nan\n");
  write_file_atomically(d + "/tables/phase.json", R"({"boundary_logit_scale":1.5,"rows":[
    {"logit_scale":1,"budget":2,"winner":"M"},{"logit_scale":2,"budget":2,"winner":"E"},
    {"logit_scale":1,"budget":4,"winner":"Q"},{"logit_scale":2,"budget":4,"winner":"M"}]})");
  write_file_atomically(d + "/tables/waterfill.json", R"({"cell":"c","layer":0,"kv_head":1,"budget":2,"theta":0.01,
    "rows":[{"rank":1,"g0":1.0,"bits":4},{"rank":2,"g0":0.1,"bits":2},{"rank":3,"g0":0.001,"bits":0}]})");
  const auto files = render_figures(d);
  CHECK(files.size() == 15);
  for (const std::string name : {"interior_vs_dominated", "advantage_vs_budget", "phase_map", "waterfill_level", "waterfill_bits"}) {
    const std::string png = slurp(d + "/figures/" + name + ".png");
    const std::string pdf = slurp(d + "/figures/" + name + ".pdf");
    const std::string svg = slurp(d + "/figures/" + name + ".svg");
    REQUIRE(png.size() > 1000);
    CHECK(png.substr(1, 3) == "PNG");
    REQUIRE(pdf.size() > 1000);
    CHECK(pdf.substr(0, 4) == "%PDF");
    CHECK_THAT(svg, Catch::Contains("<svg"));
  }
  CHECK_THAT(slurp(d + "/figures/advantage_vs_budget.svg"), Catch::Contains("budget B (bits per key element)"));
  CHECK_THAT(slurp(d + "/figures/phase_map.svg"), Catch::Contains("logit scale"));
  CHECK_THAT(slurp(d + "/figures/phase_map.svg"), Catch::Contains("M wins (mixed tiers)"));
  CHECK_THAT(slurp(d + "/figures/interior_vs_dominated.svg"), Catch::Contains("dominated share"));
  CHECK_THAT(slurp(d + "/figures/waterfill_level.svg"), Catch::Contains("water level theta"));
  CHECK_THAT(slurp(d + "/figures/waterfill_bits.svg"), Catch::Contains("bits per key element of the token"));
}

TEST_CASE("a folder without tables is an InputError naming the table") {
  const tierlab::testing::TempDir tmp("figures-empty");
  const std::string d = tmp.path.string();
  CHECK_THROWS_WITH(render_figures(d), Catch::Contains("interior.json"));
}
