// tierlab synth --preset NAME --seed N -o FILE [generator parameters]
#include <cstdio>
#include <memory>
#include <sstream>

#include "model/error.hpp"
#include "model/synthetic.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/run/progress.hpp"

namespace tierlab::cli {
namespace {

struct SynthArgs {
  std::string preset = "llama-like";
  std::string output;
  std::string dtype;
  std::string mix;
  std::uint64_t seed = 0;
  int layers = -1, kv_heads = -1, group_size = -1, head_dim = -1, tokens = -1, obs_window = -1,
      decode_steps = -1, outlier_channels = -1, spans = -1, span_len = -1;
  double logit_scale_min = -1, logit_scale_max = -1, outlier_strength = -1, query_drift = -1, rope_theta = -1;
};

// Overrides the preset's value with the option's when the option was given.
template <class T>
void override_if(T& field, T value, bool given) {
  if (given) field = value;
}

}  // namespace

void add_synth(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "Generate a seeded synthetic trace (safetensors)");
  std::ostringstream presets;
  for (const auto& n : synth_preset_names()) presets << n << " ";
  cmd->add_option("--preset", args->preset, "Preset: " + presets.str())->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed (same seed -> byte-identical file)")->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Output trace file")->required();
  cmd->add_option("--tokens", args->tokens, "Prompt tokens T");
  cmd->add_option("--decode-steps", args->decode_steps, "Decode steps S");
  cmd->add_option("--obs-window", args->obs_window, "Observation window W");
  cmd->add_option("--layers", args->layers, "Layers");
  cmd->add_option("--kv-heads", args->kv_heads, "KV heads per layer");
  cmd->add_option("--group-size", args->group_size, "Query heads per KV head (GQA g)");
  cmd->add_option("--head-dim", args->head_dim, "Head dimension d");
  cmd->add_option("--mix", args->mix, "Head mix weights sink,local,retrieval,diffuse (e.g. 1,1,2,0)");
  cmd->add_option("--logit-scale-min", args->logit_scale_min, "Smallest per-head logit scale");
  cmd->add_option("--logit-scale-max", args->logit_scale_max, "Largest per-head logit scale");
  cmd->add_option("--outlier-channels", args->outlier_channels, "Large key channels per head");
  cmd->add_option("--outlier-strength", args->outlier_strength, "Their magnitude relative to the rest");
  cmd->add_option("--spans", args->spans, "Planted spans per retrieval head");
  cmd->add_option("--span-len", args->span_len, "Tokens per planted span");
  cmd->add_option("--query-drift", args->query_drift, "Per-step drift of decode queries");
  cmd->add_option("--rope-theta", args->rope_theta, "RoPE base");
  cmd->add_option("--dtype", args->dtype, "Storage dtype: F32, F16 or BF16");
  cmd->callback([args, cmd]() {
    SynthParams p = synth_preset(args->preset);
    p.seed = args->seed;
    auto given = [cmd](const char* name) { return cmd->count(name) > 0; };
    override_if(p.prompt_len, args->tokens, given("--tokens"));
    override_if(p.decode_steps, args->decode_steps, given("--decode-steps"));
    override_if(p.obs_window, args->obs_window, given("--obs-window"));
    override_if(p.n_layers, args->layers, given("--layers"));
    override_if(p.n_kv_heads, args->kv_heads, given("--kv-heads"));
    override_if(p.group_size, args->group_size, given("--group-size"));
    override_if(p.head_dim, args->head_dim, given("--head-dim"));
    override_if(p.logit_scale_min, args->logit_scale_min, given("--logit-scale-min"));
    override_if(p.logit_scale_max, args->logit_scale_max, given("--logit-scale-max"));
    override_if(p.outlier_channels, args->outlier_channels, given("--outlier-channels"));
    override_if(p.outlier_strength, args->outlier_strength, given("--outlier-strength"));
    override_if(p.spans_per_head, args->spans, given("--spans"));
    override_if(p.span_len, args->span_len, given("--span-len"));
    override_if(p.query_drift, args->query_drift, given("--query-drift"));
    override_if(p.rope_theta, args->rope_theta, given("--rope-theta"));
    if (given("--dtype")) p.storage = parse_dtype(args->dtype, "option --dtype");
    if (given("--mix")) {
      std::vector<double> w;
      std::stringstream ss(args->mix);
      std::string part;
      while (std::getline(ss, part, ',')) {
        try {
          w.push_back(std::stod(part));
        } catch (const std::exception&) {
          throw InputError("option --mix: '" + part + "' is not a number (expected sink,local,retrieval,diffuse)");
        }
      }
      if (w.size() != 4) throw InputError("option --mix: expected 4 weights sink,local,retrieval,diffuse, got '" + args->mix + "'");
      p.mix_sink = w[0], p.mix_local = w[1], p.mix_retrieval = w[2], p.mix_diffuse = w[3];
    }
    p.validate();
    TerminalProgress bar("synth " + p.preset);
    write_synthetic_trace(p, args->output, [&](int done, int total) { bar.update(done, total); });
    bar.finish();
    std::printf("wrote %s: preset %s, seed %llu, %d layers x %d KV heads (g=%d), T=%d, W=%d, S=%d, d=%d, %s\n",
                args->output.c_str(), p.preset.c_str(), static_cast<unsigned long long>(p.seed), p.n_layers,
                p.n_kv_heads, p.group_size, p.prompt_len, p.obs_window, p.decode_steps, p.head_dim,
                std::string(dtype_name(p.storage)).c_str());
  });
}

}  // namespace tierlab::cli
