// tierlab figure DIR: re-renders a run's figures from its saved tables (no recomputation).
// DIR is one scenario's output folder (DIR/tables), or the folder of a multi-scenario run
// (`tierlab run A.yaml B.yaml --out DIR` writes DIR/<scenario>/tables): then every scenario
// in it is rendered, in name order.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/figures/figure.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab::cli {

namespace {

namespace fs = std::filesystem;

// The scenario folders directly under `dir` (each holds tables/ and scenario.yaml).
std::vector<std::string> scenario_folders(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code ec2;
    if (e.is_directory(ec2) && fs::is_directory(e.path() / "tables", ec2) && fs::exists(e.path() / "scenario.yaml", ec2))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The options that override a run's figure style (its scenario file's `figures:`).
struct StyleOptions {
  std::string style, width, height, formats;
  double font_pt = 0;
  int dpi = 0;
};

// The style of the run in `run`: its scenario file's `figures:` (DIR/scenario.yaml), then each
// option given over it (--style first).
FigureStyle style_of(const std::string& run, const StyleOptions& o) {
  FigureStyle st;
  std::error_code ec;
  if (fs::exists(fs::path(run) / "scenario.yaml", ec)) st = load_scenario((fs::path(run) / "scenario.yaml").string()).figure_style;
  if (!o.style.empty()) st = FigureStyle::preset(o.style, "--style");
  if (!o.width.empty()) st.width_pt = parse_length_pt(o.width, "--width");
  if (!o.height.empty()) st.height_pt = o.height == "auto" ? 0 : parse_length_pt(o.height, "--height");
  if (o.font_pt > 0) st.font_pt = o.font_pt;
  if (o.dpi > 0) st.dpi = o.dpi;
  if (!o.formats.empty()) st.formats = parse_formats(o.formats, "--format");
  st.validate("tierlab figure");
  return st;
}

}  // namespace

void add_figure(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  auto so = std::make_shared<StyleOptions>();
  CLI::App* cmd = app.add_subcommand("figure", "Re-render the figures of a `tierlab run` output folder from its tables");
  cmd->add_option("dir", *dir, "Output folder of `tierlab run` (one scenario's, or a multi-scenario run's)")->required();
  cmd->add_option("--style", so->style, "paper (89 mm wide, 8 pt, 300 dpi; the default) or slides (10 in, 16 pt, 150 dpi)");
  cmd->add_option("--width", so->width, "Figure width with its unit: 3.5in, 89mm, 8.9cm or 252pt (default: the style's)");
  cmd->add_option("--height", so->height, "Figure height with its unit, or auto (default: auto, the axes 0.62 x the width)");
  cmd->add_option("--font-size", so->font_pt, "Text size in points (4-48; titles 1 pt larger, ticks 1 pt smaller)")->check(CLI::Range(4.0, 48.0));
  cmd->add_option("--format", so->formats, "Files to write, comma-separated: png,pdf,svg (default: all three)");
  cmd->add_option("--dpi", so->dpi, "PNG resolution in dots per inch (50-1200; default 300)")->check(CLI::Range(50, 1200));
  cmd->callback([dir, so]() {
    std::error_code ec;
    if (!fs::is_directory(*dir, ec)) throw InputError("figure: '" + *dir + "' is not a folder (give a `tierlab run` output folder).");
    std::vector<std::string> runs;
    if (fs::is_directory(fs::path(*dir) / "tables", ec) || !fs::exists(fs::path(*dir) / "summary.md", ec))
      runs = {*dir};  // one scenario's folder (render_figures names what is missing otherwise)
    else
      runs = scenario_folders(*dir);
    if (runs.empty())
      throw InputError("figure: '" + *dir + "' has neither tables/ nor scenario folders with tables/ (run `tierlab run` first).");
    if (runs.size() > 1 || runs[0] != *dir)
      std::printf("%s: a multi-scenario run; rendering its %zu scenarios\n", dir->c_str(), runs.size());
    for (const std::string& run : runs) {
      const FiguresWritten done = render_figures_of_run(run, style_of(run, *so));
      for (const auto& f : done.files) std::printf("wrote %s\n", f.c_str());
      for (const auto& why : done.skipped) std::printf("skipped %s/figures/%s\n", run.c_str(), why.c_str());
      for (const auto& fault : done.layout) std::printf("layout %s/figures/%s\n", run.c_str(), fault.c_str());
    }
  });
}

}  // namespace tierlab::cli
