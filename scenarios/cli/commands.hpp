#pragma once
// The `tierlab` subcommands. Each registers itself on the app; its callback does the
// work and throws tierlab::InputError on bad input (main prints it and exits non-zero).
#include <CLI/CLI.hpp>

namespace tierlab::cli {

void add_synth(CLI::App& app);
void add_info(CLI::App& app);
void add_eval(CLI::App& app);
void add_demo(CLI::App& app);
void add_solve(CLI::App&);
void add_capture(CLI::App&);
void add_replay(CLI::App&);
void add_methods(CLI::App&);
void add_run(CLI::App&);
void add_figure(CLI::App&);

}  // namespace tierlab::cli

#include <memory>
#include <string>

#include "gpu/recompute.hpp"

namespace tierlab::cli {
// The backend named by --backend, or an InputError with the reason it is unavailable;
// prints auto's one-line fallback reason to stderr.
std::unique_ptr<Recomputer> backend_or_throw(const std::string& name);
}  // namespace tierlab::cli
