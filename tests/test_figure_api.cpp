// The figure description (scenarios/figures/figure.hpp): one Figure written as PNG, PDF,
// SVG and CSV, explicit category ticks, and errors for unknown formats.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/base/error.hpp"
#include "scenarios/figures/figure.hpp"
#include "tests/support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Figure categories() {
  Figure f;
  f.title = "error per quantizer";
  f.xlabel = "quantizer";
  f.ylabel = "relative error";
  f.series = {{"uniform, 3 bits", palette(0), Style::Points, {1, 2, 3}, {0.5, 0.25, 0.125}, 8},
              {"", Rgb{120, 120, 120}, Style::Dashed, {0, 4}, {1, 1}, 1}};
  f.xticks = {{1, "kivi"}, {2, "quarot"}, {3, "turbo, quant"}};
  f.xmin = 0.5, f.xmax = 3.5, f.ymin = 0, f.ymax = 1.1;
  return f;
}
}  // namespace

TEST_CASE("a figure is written as PNG, PDF and SVG with its explicit tick labels") {
  const tierlab::testing::TempDir tmp("figure-api");
  const fs::path d = tmp.path;
  const auto files = render_figure(categories(), (d / "cat").string());
  REQUIRE(files.size() == 3);
  CHECK(slurp(d / "cat.png").substr(1, 3) == "PNG");
  CHECK(slurp(d / "cat.pdf").rfind("%PDF-", 0) == 0);
  const std::string svg = slurp(d / "cat.svg");
  // The category labels replace the automatic numeric ticks: exactly the three given.
  CHECK(svg.find(">kivi</text>") != std::string::npos);
  CHECK(svg.find(">quarot</text>") != std::string::npos);
  CHECK(svg.find(">turbo, quant</text>") != std::string::npos);
  CHECK(svg.find(">2.5</text>") == std::string::npos);
  CHECK(svg.find(">error per quantizer</text>") != std::string::npos);
  CHECK(svg.find(">uniform, 3 bits</text>") != std::string::npos);
}

TEST_CASE("export_figure picks the format from the extension; CSV holds every point") {
  const tierlab::testing::TempDir tmp("figure-api-export");
  const fs::path d = tmp.path;
  export_figure(categories(), (d / "a.csv").string());
  CHECK(slurp(d / "a.csv") ==
        "series,x,y\n\"uniform, 3 bits\",1,0.5\n\"uniform, 3 bits\",2,0.25\n\"uniform, 3 bits\",3,0.125\n"
        "series 2,0,1\nseries 2,4,1\n");
  export_figure(categories(), (d / "a.SVG").string());
  CHECK(fs::exists(d / "a.SVG"));
  CHECK(slurp(d / "a.SVG").find("<svg") != std::string::npos);
  export_figure(categories(), (d / "b.pdf").string());
  CHECK(slurp(d / "b.pdf").rfind("%PDF-", 0) == 0);
  CHECK_THROWS_WITH(export_figure(categories(), (d / "a.jpg").string()),
                    Catch::Contains("a.jpg") && Catch::Contains(".png, .pdf, .svg, .csv"));
  CHECK_THROWS_AS(render_figure(categories(), (d / "c").string(), {"gif"}), InputError);
}

TEST_CASE("a wrapped title, label or note never splits a short formula or an interval") {
  // A 89 mm figure's title wrapped as "... share (B =" / "2)" (seen in paper/01's figure): a
  // sign is glued to the words on both sides, so "(B = 2)" and "R_h(2-bit) >= 1)" stay whole.
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  Figure f = categories();
  f.title = "Interior advantage vs dominated share (B = 2)";
  f.xlabel = "dominated share (fraction of the cell's heads with R_h(2-bit) >= 1)";
  f.note = "Spearman rho = -0.84, 95% cluster-bootstrap interval [-0.93, -0.49], 27 cells in 9 clusters.";
  FigureStyle paper;
  paper.width_pt = parse_length_pt("89mm", "width");
  paper.font_pt = 8;
  // One box per drawn line.
  bool title_whole = false, title_formula = false, label_formula = false, interval_whole = false;
  for (const TextBox& b : figure_text_boxes(f, paper)) {
    INFO("line: '" << b.text << "'");
    title_whole = title_whole || b.text == f.title;
    title_formula = title_formula || b.text.find("(B = 2)") != std::string::npos;
    label_formula = label_formula || b.text.find("R_h(2-bit) >= 1)") != std::string::npos;
    interval_whole = interval_whole || b.text.find("[-0.93, -0.49]") != std::string::npos;
    for (const char* sign : {" =", " >="})  // no line ends on a sign
      CHECK_FALSE((b.text.size() >= std::strlen(sign) && b.text.compare(b.text.size() - std::strlen(sign), std::string::npos, sign) == 0));
  }
  CHECK(title_formula);
  CHECK(label_formula);
  CHECK(interval_whole);
  CHECK_FALSE(title_whole);  // the case is exercised: the title wraps at this width
}
