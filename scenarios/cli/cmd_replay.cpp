// tierlab replay --checkpoint FILE (--prompt-ids IDS | --prompt-greedy N | --prompt-sample N
//                [--temperature T] [--seed S]) --decode-steps S (--policy P | --allocation FILE)
//                [--obs-window W] [--redecide N] [--free-running] [--json]
#include <cstdio>
#include <memory>

#include "model/allocation.hpp"
#include "model/llama2c/capture.hpp"
#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/usage.hpp"
#include "scenarios/cli/prompt_options.hpp"
#include "scenarios/pipeline/replay.hpp"
#include "solvers/policy.hpp"

namespace tierlab::cli {

void add_replay(CLI::App& app) {
  struct Args {
    PromptOptions prompt;
    std::string checkpoint, policy, allocation;
    int decode = 64, obs_window = -1, redecide = 0;
    bool free_running = false, json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Decode with a compressed key cache on a llama2.c model; compare tokens, KL and perplexity with the full cache");
  cmd->add_option("--checkpoint", args->checkpoint, "llama2.c checkpoint (e.g. data/stories260K/stories260K.bin)")
      ->required();
  args->prompt.add_to(cmd);
  cmd->add_option("--decode-steps", args->decode, "Decode steps S")->capture_default_str()->check(at_least(0));
  auto* pol = cmd->add_option("--policy", args->policy,
                              "Uniform policy: exact, kivi:B[:gG][:rR], token:B[:gN], evict:KEEP");
  auto* alloc = cmd->add_option("--allocation", args->allocation, "Allocation file for the prompt's tokens");
  pol->excludes(alloc);
  cmd->add_option("--obs-window", args->obs_window, "Observation queries W per query head (default min(32, prompt length))")
      ->check(at_least(1));
  cmd->add_option("--redecide", args->redecide, "Re-decide the allocation every N decode steps (0: once)")
      ->capture_default_str();
  cmd->add_flag("--free-running", args->free_running,
                "Feed the compressed cache's own tokens (default: teacher-forced on the full cache's)");
  cmd->add_flag("--json", args->json, "Print JSON (every step included)");
  cmd->callback([args]() {
    ReplayOptions opt;
    opt.prompt = args->prompt.spec("replay");
    opt.decode_steps = args->decode;
    opt.obs_window = args->obs_window;
    opt.redecide_every = args->redecide;
    opt.mode = args->free_running ? ReplayMode::FreeRunning : ReplayMode::TeacherForced;
    KeyCompression compression;
    if (!args->policy.empty()) {
      compression = KeyCompression::from_policy(UniformPolicy::parse(args->policy));
    } else if (!args->allocation.empty()) {
      compression = KeyCompression::from_allocation(read_allocation(args->allocation), "allocation " + args->allocation);
    } else {
      throw InputError("replay needs --policy or --allocation (e.g. --policy kivi:2).");
    }
    const Llama2cModel model(args->checkpoint);
    const ReplayResult r = replay(model, opt, compression);
    if (args->json) {
      std::printf("%s\n", to_json(r).dump(2).c_str());
    } else {
      std::printf("%s", text_report(r).c_str());
    }
  });
}

}  // namespace tierlab::cli
