#pragma once
// The prompt options shared by `tierlab capture` and `tierlab replay`:
//   --prompt-ids IDS | --prompt-greedy N | --prompt-sample N [--temperature T] [--seed S]
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "model/llama2c/capture.hpp"

namespace tierlab::cli {

struct PromptOptions {
  std::string ids;
  int greedy = 0, sample = 0;
  float temperature = 1.0f;
  std::uint64_t seed = 0;

  void add_to(CLI::App* cmd);
  // The prompt the options name; InputError naming the command when none is given.
  PromptSpec spec(const std::string& command) const;
};

}  // namespace tierlab::cli
