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

#include "model/error.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/figures/figures.hpp"

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

}  // namespace

void add_figure(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("figure", "Re-render the figures of a `tierlab run` output folder from its tables");
  cmd->add_option("dir", *dir, "Output folder of `tierlab run` (one scenario's, or a multi-scenario run's)")->required();
  cmd->callback([dir]() {
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
      const FiguresWritten done = render_figures_of_run(run);
      for (const auto& f : done.files) std::printf("wrote %s\n", f.c_str());
      for (const auto& why : done.skipped) std::printf("skipped %s/figures/%s\n", run.c_str(), why.c_str());
    }
  });
}

}  // namespace tierlab::cli
