// tierlab info TRACE [--json] [--realism [--lengths L,...] [--window W]]
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"

#include "model/error.hpp"
#include "model/realism.hpp"
#include "model/trace.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/realism_output.hpp"
#include "scenarios/run/progress.hpp"

namespace tierlab::cli {

void add_info(CLI::App& app) {
  struct Args {
    std::string trace;
    bool json = false;
    bool realism = false;
    std::string lengths;
    int window = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("info", "Show a trace's shapes, dtypes and provenance");
  cmd->add_option("trace", args->trace, "Trace file (safetensors)")->required();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--realism", args->realism,
                "Print the realism statistics (entropy, first-token mass, tokens holding 90%, margin, 2-bit noise, "
                "channel spreads over the causal observation queries; docs/synthetic.md)");
  cmd->add_option("--lengths", args->lengths,
                  "With --realism: statistics of the trace cut to these prompt lengths (e.g. 64,128,256; needs "
                  "observation queries reaching back to L - window)");
  cmd->add_option("--window", args->window, "With --realism: observation queries per query head at each length (default W)");
  cmd->callback([args, cmd]() {
    TraceReader reader(args->trace);
    if ((cmd->count("--lengths") > 0 || cmd->count("--window") > 0) && !args->realism)
      throw InputError("options --lengths and --window go with --realism.");
    if (args->realism) {
      RealismOptions opt;
      opt.window = args->window;
      if (cmd->count("--lengths") > 0) opt.lengths = parse_length_list(args->lengths, "--lengths");
      TerminalProgress bar("realism");
      const RealismReport report = trace_realism(reader, opt, [&](int d, int t) { bar.update(d, t); });
      bar.finish();
      if (args->json) {
        std::printf("%s\n", nlohmann::json({{"path", args->trace}, {"realism", realism_json(report)}}).dump(2).c_str());
        return;
      }
      std::printf("realism statistics (docs/synthetic.md): median [p10, p90] over heads, causal observation queries\n");
      const std::string name = std::filesystem::path(args->trace).filename().string();
      std::printf("%s", report.table(name).c_str());
      return;
    }
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
    {  // where --backend auto recomputes, said here once rather than on every command
      std::string note;
      const auto be = make_recomputer(Backend::Auto, &note);
      std::printf("backend      auto -> %s%s%s\n", be ? be->description().c_str() : "none", note.empty() ? "" : "; ",
                  note.c_str());
    }
  });
}

}  // namespace tierlab::cli
