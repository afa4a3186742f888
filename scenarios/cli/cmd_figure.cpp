// tierlab figure DIR: re-renders a run's figures from its saved tables (no recomputation).
#include <cstdio>
#include <memory>

#include "scenarios/cli/commands.hpp"
#include "scenarios/figures/figures.hpp"

namespace tierlab::cli {

void add_figure(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("figure", "Re-render the figures of a `tierlab run` output folder from its tables");
  cmd->add_option("dir", *dir, "Output folder of `tierlab run`")->required();
  cmd->callback([dir]() {
    const auto files = render_figures(*dir);
    for (const auto& f : files) std::printf("wrote %s\n", f.c_str());
  });
}

}  // namespace tierlab::cli
