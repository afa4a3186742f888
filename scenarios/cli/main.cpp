// tierlab: the command-line tool. `tierlab --help` lists the commands.
// Exit status: 0 done; 2 bad input or environment (InputError: the message names the file,
// field and value; a folder or file that cannot be written) or a usage error (one line
// naming the command and option, with "did you mean": scenarios/cli/usage.hpp); 3 an
// internal error (a defect: please report it);
// 4 the exact recomputation failed on its backend (RecomputeError, model/base/error.hpp); 5 out of
// memory (std::bad_alloc: a resource, not a defect).
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>

#include "model/base/allocator_policy.hpp"
#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/base/openmp_policy.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/usage.hpp"

namespace {

// Every option that takes a value is read by the one strict parser (model/base/numbers.hpp): an
// empty value is not a value (CLI11 would read `--budget ''` as 0), and a number is the whole
// text, finite, without wrap-around (CLI11 reads `--seed -1` as 2^64 - 1, 2^64 + 1 as 2^64 - 1,
// ' 5' as 5 and 0x10 as 16). A usage error naming the option, as for any value that does not
// convert; the ranges are the options' own checks.
void check_values(CLI::App* app) {
  for (CLI::Option* o : app->get_options()) {
    if (o->get_type_size() <= 0) continue;
    const std::string type = o->get_type_name();
    o->check(CLI::Validator(
        [type](std::string& v) -> std::string {
          if (v.empty()) return "an empty value is not a value";
          if (type.rfind("UINT", 0) == 0 && !tierlab::read_unsigned(v))
            return "'" + v + "' is not a whole number from 0 to 18446744073709551615";
          if (type.rfind("INT", 0) == 0 && !tierlab::read_integer(v)) return "'" + v + "' is not a whole number";
          if (type.rfind("FLOAT", 0) == 0 && !tierlab::read_real(v)) return "'" + v + "' is not a finite number";
          return {};
        },
        "", "a value"));
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) check_values(sub);
}

}  // namespace

int main(int argc, char** argv) {
  tierlab::use_passive_openmp_wait(argv);  // OpenMP threads sleep when idle (model/base/openmp_policy.hpp)
  tierlab::same_bits_on_any_thread_count();  // Eigen's products on one thread each (model/base/openmp_policy.hpp)
  tierlab::keep_freed_buffers();           // large buffers reused, not re-mapped (model/base/allocator_policy.hpp)
  CLI::App app{"tierlab: key-cache budgets as rate-distortion allocation (quantize, evict, or mix)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tierlab 0.1.0");
  tierlab::cli::add_demo(app);
  tierlab::cli::add_synth(app);
  tierlab::cli::add_info(app);
  tierlab::cli::add_eval(app);
  tierlab::cli::add_solve(app);
  tierlab::cli::add_capture(app);
  tierlab::cli::add_replay(app);
  tierlab::cli::add_methods(app);
  tierlab::cli::add_run(app);
  tierlab::cli::add_figure(app);
  check_values(&app);
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported like a full disk,
  // instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return tierlab::cli::usage_error(app, e, argc, argv);  // one line, "did you mean", exit 2
  } catch (const tierlab::InputError& e) {
    std::fprintf(stderr, "tierlab: error: %s\n", e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {  // the environment: permissions, a full disk
    std::fprintf(stderr, "tierlab: error: %s.\n", e.what());
    return 2;
  } catch (const tierlab::RecomputeError& e) {
    std::fprintf(stderr, "tierlab: recomputation error: %s\n", e.what());
    return 4;
  } catch (const std::bad_alloc&) {  // the machine, not a defect: a resource error of its own
    std::fprintf(stderr, "tierlab: out of memory: the work needs more memory than this process may use (ulimit -v, "
                         "the machine's RAM); reduce the scenario (fewer cells or heads, shorter T) or --jobs. "
                         "Finished cells are kept.\n");
    return 5;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tierlab: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
