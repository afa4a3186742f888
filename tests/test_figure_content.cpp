// What the figures of a run say (issue 15, item 26), from tables written here: no figure
// without content (and the run says which was skipped and why), advantage_vs_budget's median
// on top and only the swept budgets on its axis, proxy figures naming their methods, phase
// maps as heatmaps with ties as ties and the recomputed boundary, the water-filling figure in
// docs/model.md's symbols.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "scenarios/scenario/analysis.hpp"
#include "scenarios/analyses/interior.hpp"
#include "scenarios/analyses/phase_map.hpp"
#include "scenarios/figures/figure.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "support.hpp"

using namespace tierlab;
using tierlab::testing::slurp;
namespace fs = std::filesystem;

namespace {

std::string fresh(const std::string& name) {
  const std::string d = tierlab::testing::process_dir("figure-content").file(name);
  fs::remove_all(d);
  fs::create_directories(d + "/tables");
  return d;
}

std::vector<NamedFigure> figures_of(const std::string& analysis, const std::string& dir) {
  for (const AnalysisType& t : analysis_types())
    if (t.name == analysis) return t.figures(dir);
  FAIL("no analysis " << analysis);
  return {};
}

const Series* series(const Figure& f, const std::string& prefix) {
  for (const Series& s : f.series)
    if (s.name.rfind(prefix, 0) == 0) return &s;
  return nullptr;
}

// An interior table of `cells` cells at budgets 1, 2 and 4 (none at 3).
void write_interior(const std::string& d, int cells) {
  std::string points, rho = cells >= 3 ? "-0.5" : "null";
  for (int c = 0; c < cells; ++c)
    points += std::string(c ? "," : "") + "{\"preset\":\"a\",\"dominated_share\":" + std::to_string(0.1 + 0.3 * c) +
              ",\"A\":" + std::to_string(0.2 - 0.05 * c) + "}";
  write_file_atomically(d + "/tables/interior.json",
                        "{\"queries\":\"decode\",\"primary_budget\":2,\"n_cells\":" + std::to_string(cells) +
                            ",\"rho\":" + rho + ",\"ci_lo\":null,\"ci_hi\":null,\"points\":[" + points +
                            "],\"budgets\":[{\"budget\":1,\"median_A_heads\":0.02},{\"budget\":2,\"median_A_heads\":0.05},"
                            "{\"budget\":4,\"median_A_heads\":0.01}]}");
  write_file_atomically(d + "/tables/heads.csv",
                        "cell,budget,A\nx,1,0.1\nx,1,0.0\nx,2,0.2\nx,2,0.1\nx,4,0.02\nx,4,0.01\nx,3,0.5\n");
}

// A phase map over logit scales 1, 2, 4 x budgets 2, 4: at B = 2, M, then a 0.50/0.50 tie of E
// and M, then E.
void write_phase_table(const std::string& d) {
  write_file_atomically(d + "/tables/phase.json", R"({"boundary_logit_scale":1.5,"rows":[
    {"logit_scale":1,"budget":2,"winner":"M","share_Q":0,"share_E":0.25,"share_M":0.75},
    {"logit_scale":2,"budget":2,"winner":"E","share_Q":0,"share_E":0.5,"share_M":0.5},
    {"logit_scale":4,"budget":2,"winner":"E","share_Q":0,"share_E":1,"share_M":0},
    {"logit_scale":1,"budget":4,"winner":"Q","share_Q":1,"share_E":0,"share_M":0},
    {"logit_scale":2,"budget":4,"winner":"M","share_Q":0.25,"share_E":0,"share_M":0.75},
    {"logit_scale":4,"budget":4,"winner":"E","share_Q":0,"share_E":0.75,"share_M":0.25}]})");
}

}  // namespace

TEST_CASE("a single-cell run writes no correlation figure and says which figure was skipped and why") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  const std::string d = fresh("single");
  write_interior(d, 1);
  fs::create_directories(d + "/figures");
  write_file_atomically(d + "/figures/interior_vs_dominated.png", "stale, from an earlier run");
  const FiguresWritten done = render_figures_of_run(d);
  REQUIRE(done.skipped.size() == 1);
  CHECK_THAT(done.skipped[0], Catch::StartsWith("interior_vs_dominated: rho across cells is n/a (1 cell"));
  CHECK_FALSE(fs::exists(d + "/figures/interior_vs_dominated.png"));  // nor a stale one left behind
  CHECK_FALSE(fs::exists(d + "/figures/interior_vs_dominated.svg"));
  CHECK(fs::exists(d + "/figures/advantage_vs_budget.png"));
  CHECK(done.files.size() == 3);

  const std::string many = fresh("many");
  write_interior(many, 4);
  const FiguresWritten all = render_figures_of_run(many);
  CHECK(all.skipped.empty());
  CHECK(fs::exists(many + "/figures/interior_vs_dominated.svg"));
}

TEST_CASE("interior_vs_dominated names the cell summary on its y axis in words, not by its scenario key") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  const std::string d = fresh("ylabel");
  write_interior(d, 4);
  nlohmann::json in = read_table_json(d + "/tables/interior.json");
  in["primary_aggregation"] = "routed";
  write_file_atomically(d + "/tables/interior.json", in.dump());
  REQUIRE(render_figures_of_run(d).skipped.empty());
  const Figure f = figures_of("interior", d).at(0).figure;
  CHECK_THAT(f.ylabel, Catch::Contains("A of the model-wide routed allocation (decode queries)"));
  CHECK_THAT(f.ylabel, !Catch::Contains("routed of the"));
  // Drawn (wrapped to the axis's height: the words, not necessarily one line).
  const std::string svg = slurp(d + "/figures/interior_vs_dominated.svg");
  CHECK_THAT(svg, Catch::Contains("model-wide"));
  CHECK_THAT(svg, !Catch::Contains("routed of the"));
}

TEST_CASE("advantage_vs_budget: the median is drawn on top, and only the swept budgets are on the axis") {
  const std::string d = fresh("advantage");
  write_interior(d, 3);
  std::vector<std::size_t> rows;
  const Figure f = advantage_vs_budget_figure(read_table_json(d + "/tables/interior.json"),
                                              read_table_csv(d + "/tables/heads.csv"), &rows);
  // Drawn last: nothing covers the median.
  REQUIRE(!f.series.empty());
  CHECK(f.series.back().name == "median over heads");
  CHECK(f.series.front().name.rfind("heads", 0) == 0);
  // The axis: the three swept budgets as evenly spaced columns, labelled with B; no column for 3.
  REQUIRE(f.xticks.size() == 3);
  CHECK(f.xticks[0].label == "1");
  CHECK(f.xticks[1].label == "2");
  CHECK(f.xticks[2].label == "4");
  CHECK(f.xticks[2].at == 3);
  CHECK(f.xmin == 0.5);
  CHECK(f.xmax == 3.5);
  const Series& pts = f.series.front();
  CHECK(pts.x.size() == 6);  // the row at B = 3 (not swept) is not drawn
  CHECK(rows.size() == 6);
  for (std::size_t k = 0; k < pts.x.size(); ++k) {
    const double column = std::strtod(read_table_csv(d + "/tables/heads.csv").at("budget")[rows[k]].c_str(), nullptr);
    const double at = column == 1 ? 1 : column == 2 ? 2 : 3;
    CHECK(std::abs(pts.x[k] - at) < 0.5);
  }
  CHECK(f.series.back().x == std::vector<double>{1, 2, 3});
}

TEST_CASE("proxy figures name their methods beside their points") {
  const std::string d = fresh("proxy");
  write_file_atomically(d + "/tables/proxy.json", R"({"correlations":[{"x":"surrogate","y":"error","spearman":0.8}],
    "methods":[{"method":"kivi2","kind":"quantizer","rank_surrogate":1,"rank_error":2,"surrogate":0.01,"error":0.02},
               {"method":"snapkv","kind":"scorer","rank_surrogate":2,"rank_error":1,"surrogate":0.05,"error":0.01},
               {"method":"M*","kind":"family","rank_surrogate":3,"rank_error":3,"surrogate":0.1,"error":0.3}]})");
  const std::vector<NamedFigure> figs = figures_of("proxy", d);
  REQUIRE(figs.size() == 2);
  for (const NamedFigure& nf : figs) {
    INFO(nf.name);
    REQUIRE(nf.figure.labels.size() == 3);
    std::vector<std::string> names;
    for (const Label& l : nf.figure.labels) names.push_back(l.text);
    CHECK(names == std::vector<std::string>{"kivi2", "snapkv", "M*"});
  }
  // A label sits at its method's point.
  const Figure& ranks = figs[0].figure;
  CHECK(ranks.labels[1].x == 2);
  CHECK(ranks.labels[1].y == 1);
  // ... and is drawn: the SVG holds the names.
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  render_figure(ranks, d + "/ranks", {"svg"});
  CHECK_THAT(slurp(d + "/ranks.svg"), Catch::Contains(">snapkv</text>"));
}

TEST_CASE("phase maps are heatmaps: touching cells, ties as ties, the recomputed boundary, no axis past the data") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  const std::string d = fresh("phase");
  // Logit scales 1, 2, 4 x budgets 2, 4: at B = 2, M, then a 0.50/0.50 tie of E and M, then E.
  write_phase_table(d);
  const Figure f = phase_map_figure(read_table_json(d + "/tables/phase.json"));
  const Series* tie = series(f, "tie");
  const Series* e = series(f, "E wins");
  const Series* m = series(f, "M wins");
  const Series* q = series(f, "Q wins");
  REQUIRE(tie != nullptr);
  REQUIRE(e != nullptr);
  REQUIRE(m != nullptr);
  REQUIRE(q != nullptr);
  // The 0.50/0.50 cell is a tie, not a win.
  CHECK(tie->x == std::vector<double>{2});
  CHECK(tie->y == std::vector<double>{2});
  CHECK(e->x.size() == 2);
  for (const Series* s : {tie, e, m, q}) {
    CHECK(s->style == Style::Cells);
    CHECK(s->x_lo.size() == s->x.size());
  }
  // Cells touch: on the log axis the edge between 1 and 2 is sqrt(2), between 2 and 4 sqrt(8).
  CHECK(m->x_lo[0] == Approx(1 / std::sqrt(2.0)));
  CHECK(m->x_hi[0] == Approx(std::sqrt(2.0)));
  CHECK(tie->x_lo[0] == Approx(std::sqrt(2.0)));
  CHECK(tie->x_hi[0] == Approx(std::sqrt(8.0)));
  CHECK(m->y_hi[0] == Approx(3));  // budgets 2 and 4 meet at 3
  // The axes end at the outer cells' edges: no room made above the data.
  CHECK(f.xlog);
  CHECK(f.xmin == Approx(1 / std::sqrt(2.0)));
  CHECK(f.xmax == Approx(std::sqrt(32.0)));
  CHECK(f.ymin == Approx(1));
  CHECK(f.ymax == Approx(5));
  // Both boundaries: per budget, the edge where E starts winning; the surrogate's dashed.
  const Series* rb = series(f, "recomputed boundary");
  REQUIRE(rb != nullptr);
  CHECK(rb->x.size() == 2);
  CHECK(rb->x[0] == Approx(std::sqrt(8.0)));  // B = 2: after the tie
  CHECK(rb->x[1] == Approx(std::sqrt(8.0)));  // B = 4: after M at 2
  const Series* sb = series(f, "surrogate boundary");
  REQUIRE(sb != nullptr);
  CHECK(sb->style == Style::Dashed);
  CHECK(sb->y == std::vector<double>{1, 5});
  // The run's figure is this one, drawn in all three formats.
  const std::vector<NamedFigure> figs = figures_of("phase_map", d);
  REQUIRE(figs.size() == 1);
  CHECK(figs[0].figure.series.size() == f.series.size());
  render_figure(f, d + "/phase_map");
  CHECK_THAT(slurp(d + "/phase_map.svg"), Catch::Contains("tie (two families win equal shares of heads)"));
  CHECK_THAT(slurp(d + "/phase_map.svg"), Catch::Contains("recomputed boundary"));
  CHECK(slurp(d + "/phase_map.png").size() > 1000);
  CHECK(slurp(d + "/phase_map.pdf").size() > 1000);
}

TEST_CASE("waterfill_level speaks docs/model.md's symbols: weight a_t on x, g_t(0) = a_t alpha ln(beta) in the legend") {
  const std::string d = fresh("waterfill");
  write_file_atomically(d + "/tables/waterfill.json", R"({"cell":"c","layer":0,"kv_head":1,"budget":2,"theta":0.01,
    "rows":[{"rank":1,"g0":1.0,"bits":4},{"rank":2,"g0":0.1,"bits":2},{"rank":3,"g0":0.001,"bits":0}]})");
  const std::vector<NamedFigure> figs = figures_of("waterfill", d);
  REQUIRE(figs.size() == 2);
  const Figure& lv = figs[0].figure;
  CHECK(figs[0].name == "waterfill_level");
  CHECK_THAT(lv.xlabel, Catch::Contains("weight a_t"));
  CHECK(series(lv, "g_t(0) = a_t alpha ln(beta)") != nullptr);
  CHECK_THAT(lv.ylabel, Catch::Contains("g_t(0)"));
  for (const NamedFigure& nf : figs) {
    CHECK(nf.figure.xlabel.find("w_t") == std::string::npos);
    CHECK(nf.figure.ylabel.find("w_t") == std::string::npos);
    for (const Series& s : nf.figure.series) CHECK(s.name.find("w_t") == std::string::npos);
  }
  CHECK(series(figs[1].figure, "continuous bits b_t") != nullptr);
}

TEST_CASE("a scatter of twenty thousand points in random order is painted point for point") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  Figure f;
  f.title = "many points";
  Series s{"points", palette(0), Style::Points, {}, {}, 4};
  std::uint64_t r = 12345;
  auto next = [&r] {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(r >> 11) / 9007199254740992.0;
  };
  for (int i = 0; i < 20000; ++i) s.x.push_back(next()), s.y.push_back(next());
  f.series = {s};
  f.xmin = -0.1, f.xmax = 1.1, f.ymin = -0.1, f.ymax = 1.1;
  CHECK(painted_markers(f) == 20000);
}

TEST_CASE("every row of heads.csv is a point of advantage_vs_budget, as painted") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  const std::string d = fresh("every_row");
  write_interior(d, 3);
  std::string csv = "cell,budget,A\n";
  const int n = 6000;
  for (int i = 0; i < n; ++i) {
    const int b = i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : 4;
    csv += "c" + std::to_string(i % 7) + "," + std::to_string(b) + "," + std::to_string(0.9 - 1.2 * ((i * 7919) % 1000) / 1000.0) + "\n";
  }
  write_file_atomically(d + "/tables/heads.csv", csv);
  std::vector<std::size_t> rows;
  const Figure f = advantage_vs_budget_figure(read_table_json(d + "/tables/interior.json"),
                                              read_table_csv(d + "/tables/heads.csv"), &rows);
  CHECK(rows.size() == static_cast<std::size_t>(n));
  // The heads' points and the median line's markers: every one painted inside the axes.
  CHECK(painted_markers(f) == static_cast<std::size_t>(n) + f.series.back().x.size());
  CHECK(painted_markers(f, FigureStyle::preset("slides")) == static_cast<std::size_t>(n) + f.series.back().x.size());
}

TEST_CASE("interior_vs_dominated states rho by summary.md's rule: none under 5 cells, no interval under 5 clusters") {
  const std::string d = fresh("rho_rule");
  write_interior(d, 4);
  nlohmann::json in = read_table_json(d + "/tables/interior.json");
  auto note = [&](const nlohmann::json& j) {
    write_file_atomically(d + "/tables/interior.json", j.dump());
    return figures_of("interior", d).at(0).figure.note;
  };
  in["rho"] = 1.0, in["ci_lo"] = 1.0, in["ci_hi"] = 1.0, in["clusters"] = 2;
  // 4 cells: no rho at all (the summary: "too few for a rank correlation across cells").
  CHECK_THAT(note(in), Catch::Contains("too few for a rank correlation across cells (at least 5)"));
  CHECK_THAT(note(in), !Catch::Contains("1.00"));
  // 6 cells from 2 clusters: rho, but no interval and no verdict.
  in["n_cells"] = 6, in["rho"] = -0.5, in["ci_lo"] = -0.9, in["ci_hi"] = -0.1;
  CHECK_THAT(note(in), Catch::Contains("rho = -0.50 over 6 cells from 2 independent model draws"));
  CHECK_THAT(note(in), Catch::Contains("no interval and no verdict"));
  CHECK_THAT(note(in), !Catch::Contains("-0.90"));
  // 6 clusters: the interval and the summary's verdict words.
  in["clusters"] = 6;
  CHECK_THAT(note(in), Catch::Contains("[-0.90, -0.10]"));
  CHECK_THAT(note(in), Catch::Contains("holds in sign"));
  // Q infeasible at the primary budget: withheld, as in summary.md.
  in["q_feasible"] = nlohmann::json::array({{{"budget", 2}, {"feasible", false}}});
  CHECK_THAT(note(in), Catch::Contains("is withheld: Q is infeasible at B = 2"));
  // The title carries no statistic of its own.
  CHECK(figures_of("interior", d).at(0).figure.title == "Interior advantage vs dominated share (B = 2)");
}

TEST_CASE("every figure type lays out inside its canvas with no overlapping text, at 89 mm and 8 pt and as slides") {
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  // One run folder holding the tables of the interior, proxy, phase map and water-filling figures.
  const std::string d = fresh("layout");
  write_interior(d, 6);
  write_file_atomically(d + "/tables/proxy.json", R"({"correlations":[{"x":"surrogate","y":"error","spearman":0.8}],
    "methods":[{"method":"kivi2","kind":"quantizer","rank_surrogate":1,"rank_error":2,"surrogate":0.01,"error":0.02},
               {"method":"kivi4","kind":"quantizer","rank_surrogate":2,"rank_error":3,"surrogate":0.011,"error":0.021},
               {"method":"snapkv","kind":"scorer","rank_surrogate":3,"rank_error":1,"surrogate":0.05,"error":0.01},
               {"method":"h2o","kind":"scorer","rank_surrogate":4,"rank_error":4,"surrogate":0.05,"error":0.0101},
               {"method":"M*","kind":"family","rank_surrogate":5,"rank_error":5,"surrogate":0.1,"error":0.3}]})");
  write_phase_table(d);
  write_file_atomically(d + "/tables/waterfill.json", R"({"cell":"c","layer":0,"kv_head":1,"budget":2,"theta":0.01,
    "rows":[{"rank":1,"g0":1.0,"bits":4},{"rank":2,"g0":0.1,"bits":2},{"rank":3,"g0":0.001,"bits":0}]})");
  FigureStyle paper;
  paper.width_pt = parse_length_pt("89mm", "width");
  paper.font_pt = 8;
  int figures = 0;
  for (const char* analysis : {"interior", "proxy", "phase_map", "waterfill"})
    for (const NamedFigure& nf : figures_of(analysis, d)) {
      if (!nf.skipped.empty()) continue;
      ++figures;
      for (const FigureStyle& st : {paper, FigureStyle::preset("slides")}) {
        INFO(nf.name << " as " << st.name);
        const std::vector<TextBox> boxes = figure_text_boxes(nf.figure, st);
        CHECK(boxes.size() >= 4);  // title, axis labels, ticks at least
        const std::vector<std::string> faults = layout_faults(boxes, figure_canvas(nf.figure, st));
        std::string all;
        for (const auto& x : faults) all += x + "\n";
        INFO(all);
        CHECK(faults.empty());
      }
    }
  CHECK(figures >= 6);
}

TEST_CASE("a figure style is sized in physical units and refuses what it cannot draw") {
  CHECK(parse_length_pt("3.5in", "--width") == Approx(252));
  CHECK(parse_length_pt("89mm", "--width") == Approx(252.28).epsilon(1e-3));
  CHECK(parse_length_pt("8.9cm", "--width") == Approx(252.28).epsilon(1e-3));
  CHECK(parse_length_pt("300pt", "--width") == Approx(300));
  CHECK_THROWS_WITH(parse_length_pt("3.5 furlongs", "--width"), Catch::Contains("--width '3.5 furlongs': unknown unit"));
  CHECK_THROWS_WITH(parse_length_pt("abc", "--width"), Catch::Contains("--width 'abc' is not a length"));
  CHECK_THROWS_WITH(parse_length_pt("0.5in", "--width"), Catch::Contains("out of range (1 in to 100 in)"));
  CHECK_THROWS_WITH(parse_formats("png,gif", "--format"), Catch::Contains("--format 'gif' in 'png,gif' is not a figure format"));
  CHECK_THROWS_WITH(FigureStyle::preset("poster"), Catch::Contains("--style 'poster' is not a figure style (valid: paper, slides)"));
  FigureStyle st;
  st.font_pt = 2;
  CHECK_THROWS_WITH(st.validate("figures"), Catch::Contains("figures: font size = 2"));
  // 89 mm at 8 pt: the PDF page and the SVG are 89 mm wide, the PNG 300 dpi.
  setenv("QT_QPA_PLATFORM", "offscreen", 1);
  const std::string d = fresh("physical");
  write_interior(d, 6);
  FigureStyle paper;
  paper.width_pt = parse_length_pt("89mm", "width");
  const auto files = render_figure(figures_of("interior", d).at(1).figure, d + "/adv", paper);
  REQUIRE(files.size() == 3);
  const std::string svg = slurp(d + "/adv.svg");
  CHECK_THAT(svg, Catch::Contains("width=\"88.") || Catch::Contains("width=\"89"));
  const std::string pdf = slurp(d + "/adv.pdf");
  CHECK_THAT(pdf, Catch::Contains("/MediaBox [0 0 252"));
  const std::string png = slurp(d + "/adv.png");
  // PNG IHDR: width at bytes 16-19 (big endian): 252 pt at 300 dpi = 1050 px.
  REQUIRE(png.size() > 24);
  const unsigned w = (static_cast<unsigned char>(png[16]) << 24) | (static_cast<unsigned char>(png[17]) << 16) |
                     (static_cast<unsigned char>(png[18]) << 8) | static_cast<unsigned char>(png[19]);
  CHECK(w == 1050);
}

TEST_CASE("a table that parses but lacks what tierlab writes is an InputError naming its analysis, for every analysis") {
  // Every table a figure builder reads (grep read_table_ in scenarios/analyses): each is given
  // in turn as valid JSON that is not what tierlab writes -- keys missing, values of another
  // kind, rows without their columns -- beside valid interior tables. The figures must come
  // back or stop with an InputError, never a crash or another exception (CI's fuzz_tables found
  // interior.json without "points" reading a missing key).
  const std::vector<std::string> tables = {"interior.json", "mismatch.json", "mismatch_beta.json", "phase.json",
                                           "phase_entropy.json", "proxy.json", "rd_curve.json", "smoothing.json",
                                           "staleness.json", "waterfill.json", "claims.json", "granularity.json"};
  const std::vector<std::string> variants = {
      "{}", "[]", "\"text\"", "7",
      R"({"rows":[{}],"points":[{}],"budgets":[{}],"cells":[{}],"methods":[{}],"correlations":[{}],"heads":[{}]})",
      R"({"rows":[{"family":1,"budget":true,"kernel":"k"}],"points":[{"preset":1,"dominated_share":0.1,"A":0.1}],
          "budgets":[1],"cells":[{"id":"c","rd_curve":{"heads":1,"scope":"head","rate_kind":"total","queries":"decode",
          "families":{"Q":{"feasible":[true,true],"rate":[1],"error":[]}}}}],"cell":"c","layer":0,"kv_head":0})"};
  int refused = 0;
  for (const std::string& table : tables)
    for (const std::string& v : variants) {
      const std::string d = fresh("malformed");
      write_interior(d, 3);
      write_file_atomically(d + "/tables/" + table, v);
      for (const AnalysisType& t : analysis_types()) {
        INFO(table << " = " << v << ", analysis " << t.name);
        try {
          (void)analysis_figures(t, d);
        } catch (const InputError& e) {
          ++refused;
          if (std::string(e.what()).find("do not hold what tierlab writes") != std::string::npos)
            CHECK_THAT(e.what(), Catch::Contains("'" + t.name + "' analysis"));
        } catch (const std::exception& e) {
          FAIL("not an InputError: " << e.what());
        }
      }
    }
  CHECK(refused >= static_cast<int>(tables.size()));  // each table refused at least once
}
