// tierlab info TRACE [--json]
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "model/trace.hpp"
#include "scenarios/cli/commands.hpp"

namespace tierlab::cli {

void add_info(CLI::App& app) {
  struct Args {
    std::string trace;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("info", "Show a trace's shapes, dtypes and provenance");
  cmd->add_option("trace", args->trace, "Trace file (safetensors)")->required();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args]() {
    TraceReader reader(args->trace);
    const TraceMeta& m = reader.meta();
    std::size_t spans = 0;
    for (const auto& s : m.spans) spans += s.size();
    const auto& file = reader.file();
    std::uint64_t bytes = 0;
    for (const auto& n : file.names()) bytes += file.info(n).end - file.info(n).begin;
    nlohmann::json provenance = nlohmann::json::parse(m.provenance.empty() ? "{}" : m.provenance, nullptr, false);
    if (args->json) {
      nlohmann::json j = {{"path", args->trace},
                          {"n_layers", m.n_layers},
                          {"n_kv_heads", m.n_kv_heads},
                          {"group_size", m.group_size},
                          {"head_dim", m.head_dim},
                          {"prompt_len", m.prompt_len},
                          {"obs_window", m.obs_window},
                          {"decode_steps", m.decode_steps},
                          {"has_pre_rope", m.has_pre_rope},
                          {"rope", {{"theta", m.rope.theta}, {"rotary_dim", m.rope.rotary_dim}, {"style", m.rope.style}}},
                          {"storage", std::string(dtype_name(m.storage))},
                          {"tensors", file.names().size()},
                          {"data_bytes", bytes},
                          {"spans", spans},
                          {"token_ids", m.token_ids.size()},
                          {"provenance", provenance.is_discarded() ? nlohmann::json(m.provenance) : provenance}};
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("trace        %s\n", args->trace.c_str());
    std::printf("layers       %d\n", m.n_layers);
    std::printf("KV heads     %d per layer, %d query heads each (GQA g=%d)\n", m.n_kv_heads, m.group_size, m.group_size);
    std::printf("head dim     d=%d\n", m.head_dim);
    std::printf("tokens       T=%d prompt, W=%d observation queries, S=%d decode steps\n", m.prompt_len,
                m.obs_window, m.decode_steps);
    std::printf("keys         post-RoPE%s; RoPE theta=%g dim=%d style=%s\n", m.has_pre_rope ? " and pre-RoPE" : "",
                m.rope.theta, m.rope.rotary_dim ? m.rope.rotary_dim : m.head_dim, m.rope.style.c_str());
    std::printf("storage      %s, %zu tensors, %.1f MB of data\n", std::string(dtype_name(m.storage)).c_str(),
                file.names().size(), static_cast<double>(bytes) / 1e6);
    std::printf("spans        %zu planted spans\n", spans);
    std::printf("token ids    %zu\n", m.token_ids.size());
    std::printf("provenance   %s\n", m.provenance.c_str());
  });
}

}  // namespace tierlab::cli
