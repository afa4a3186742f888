#include "scenarios/cli/prompt_options.hpp"
#include "scenarios/cli/usage.hpp"

#include "model/base/error.hpp"

namespace tierlab::cli {

void PromptOptions::add_to(CLI::App* cmd) {
  auto* by_ids = cmd->add_option("--prompt-ids", ids, "Prompt token ids, comma-separated (start with BOS = 1)");
  auto* by_greedy =
      cmd->add_option("--prompt-greedy", greedy, "Prompt of N tokens: BOS and N-1 greedy tokens from the model")
          ->check(at_least(1));
  auto* by_sample = cmd->add_option("--prompt-sample", sample,
                                    "Prompt of N tokens: BOS and N-1 tokens sampled at --temperature with --seed")
                       ->check(at_least(1));
  by_ids->excludes(by_greedy, by_sample);
  by_greedy->excludes(by_sample);
  cmd->add_option("--temperature", temperature, "Sampling temperature for --prompt-sample")->capture_default_str();
  cmd->add_option("--seed", seed, "Sampling seed for --prompt-sample")->capture_default_str();
}

PromptSpec PromptOptions::spec(const std::string& command) const {
  PromptSpec p;
  if (!ids.empty()) {
    p.ids = parse_token_ids(ids);
  } else if (greedy > 0) {
    p.generate = greedy;
  } else if (sample > 0) {
    p.generate = sample;
    p.temperature = temperature;
    p.seed = seed;
  } else {
    throw InputError(command + " needs a prompt: --prompt-ids 1,461,401 or --prompt-greedy N or --prompt-sample N.");
  }
  return p;
}

}  // namespace tierlab::cli
