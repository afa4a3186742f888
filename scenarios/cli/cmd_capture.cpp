// tierlab capture --checkpoint FILE (--prompt-ids IDS | --prompt-greedy N | --prompt-sample N
//                 [--temperature T] [--seed S]) --decode-steps S [--obs-window W] -o OUT
#include <cstdio>
#include <memory>

#include "model/llama2c/capture.hpp"
#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/usage.hpp"
#include "scenarios/cli/prompt_options.hpp"

namespace tierlab::cli {

void add_capture(CLI::App& app) {
  struct Args {
    PromptOptions prompt;
    std::string checkpoint, out;
    int decode = 0, obs_window = -1;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "capture", "Capture a trace (keys, values, queries of every layer and head) from a llama2.c model's forward pass");
  cmd->add_option("--checkpoint", args->checkpoint, "llama2.c checkpoint (e.g. data/stories260K/stories260K.bin)")
      ->required();
  args->prompt.add_to(cmd);
  cmd->add_option("--decode-steps", args->decode, "Decode steps S (greedy, full cache)")->required()->check(at_least(0));
  cmd->add_option("--obs-window", args->obs_window, "Observation window W (default min(32, prompt length))")
      ->check(at_least(1));
  cmd->add_option("-o,--output", args->out, "Output trace (safetensors)")->required();
  cmd->callback([args]() {
    CaptureOptions opt;
    opt.prompt = args->prompt.spec("capture");
    opt.decode_steps = args->decode;
    opt.obs_window = args->obs_window;
    const Llama2cModel model(args->checkpoint);
    const CaptureResult result = capture(model, opt);
    write_trace(args->out, result);
    const TraceMeta& m = result.meta;
    std::printf("captured %s: %d layers x %d KV heads (g=%d, d=%d), T=%d prompt tokens, W=%d, S=%d decode steps\n",
                model.name().c_str(), m.n_layers, m.n_kv_heads, m.group_size, m.head_dim, m.prompt_len, m.obs_window,
                m.decode_steps);
    std::printf("forward pass %.0f tokens/s (with recording); wrote %s\n",
                (m.prompt_len + m.decode_steps) / std::max(result.forward_seconds, 1e-9), args->out.c_str());
  });
}

}  // namespace tierlab::cli
