// tierlab synth --preset NAME --seed N -o FILE [generator parameters] [--stats [--stats-lengths L,...] [--json]]
#include <array>
#include <cstdio>
#include <memory>
#include <sstream>
#include <tuple>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/realism.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/realism_output.hpp"
#include "scenarios/run/progress.hpp"

namespace tierlab::cli {
namespace {

struct SynthArgs {
  std::string preset = "llama-like";
  std::string output;
  std::string dtype;
  std::string mix;
  std::string sink_mass, local_mass, span_mass;
  std::string stats_lengths;
  bool stats = false, json = false;
  std::uint64_t seed = 0;
  int layers = -1, kv_heads = -1, group_size = -1, head_dim = -1, tokens = -1, obs_window = -1,
      decode_steps = -1, outlier_channels = -1, spans = -1, span_len = -1;
  double logit_scale_min = -1, logit_scale_max = -1, outlier_strength = -1, query_outlier_strength = -1,
         outlier_token_rate = -1, background = -1, query_drift = -1, rope_theta = -1;
};

// Overrides the preset's value with the option's when the option was given.
template <class T>
void override_if(T& field, T value, bool given) {
  if (given) field = value;
}

// "a,b,c" -> numbers; `what` names the expected fields in the InputError.
std::vector<double> number_list(const std::string& text, const std::string& option, const std::string& what,
                                std::size_t count) {
  std::vector<double> w;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const std::optional<double> v = read_real(part);  // model/base/numbers.hpp: the whole part, finite ('3abc' is not 3)
    if (!v) throw InputError("option " + option + ": '" + part + "' is not a number (expected " + what + ")");
    w.push_back(*v);
  }
  if (w.size() != count)
    throw InputError("option " + option + ": expected " + std::to_string(count) + " numbers " + what + ", got '" +
                     text + "'");
  return w;
}

// The realism statistics of the preset at each length (regenerated in memory, one head at a
// time), or of the written trace when there is one and no lengths are asked for.
RealismReport synth_realism(const SynthParams& p, const std::string& written, const std::vector<int>& lengths) {
  RealismReport all;
  TerminalProgress bar("realism " + p.preset);
  if (lengths.empty() && !written.empty()) {
    const TraceReader reader(written);
    all = trace_realism(reader, {}, [&](int d, int t) { bar.update(d, t); });
  } else {
    const std::vector<int> ls = lengths.empty() ? std::vector<int>{p.prompt_len} : lengths;
    all.options.lengths = ls;
    for (int L : ls) {
      SynthParams q = p;
      q.prompt_len = L;
      q.validate();
      const RealismReport r = trace_realism(synth_meta(q), [&](int l, int h) { return synth_head(q, l, h); }, {},
                                            [&](int d, int t) { bar.update(d, t); });
      all.summaries.insert(all.summaries.end(), r.summaries.begin(), r.summaries.end());
      all.heads.insert(all.heads.end(), r.heads.begin(), r.heads.end());
    }
  }
  bar.finish();
  return all;
}

}  // namespace

void add_synth(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "Generate a seeded synthetic trace (safetensors), or its realism statistics");
  std::ostringstream presets;
  for (const auto& n : synth_preset_names()) presets << n << " ";
  cmd->add_option("--preset", args->preset, "Preset: " + presets.str())->capture_default_str();
  cmd->add_option("--seed", args->seed, "Random seed (same seed -> byte-identical file)")->capture_default_str();
  cmd->add_option("-o,--output", args->output, "Output trace file (required unless --stats)");
  cmd->add_option("--tokens", args->tokens, "Prompt tokens T");
  cmd->add_option("--decode-steps", args->decode_steps, "Decode steps S");
  cmd->add_option("--obs-window", args->obs_window, "Observation window W");
  cmd->add_option("--layers", args->layers, "Layers");
  cmd->add_option("--kv-heads", args->kv_heads, "KV heads per layer");
  cmd->add_option("--group-size", args->group_size, "Query heads per KV head (GQA g)");
  cmd->add_option("--head-dim", args->head_dim, "Head dimension d");
  cmd->add_option("--mix", args->mix, "Dominant-component weights sink,local,retrieval,diffuse (e.g. 1,1,2,0)");
  cmd->add_option("--logit-scale-min", args->logit_scale_min, "Smallest per-head content logit std (nats)");
  cmd->add_option("--logit-scale-max", args->logit_scale_max, "Largest per-head content logit std (nats)");
  cmd->add_option("--sink-mass", args->sink_mass, "First-token share of sink heads MIN,MAX (e.g. 0.3,0.85)");
  cmd->add_option("--local-mass", args->local_mass, "Recency-kernel share of local heads MIN,MAX");
  cmd->add_option("--span-mass", args->span_mass, "Planted-span share of retrieval heads MIN,MAX");
  cmd->add_option("--background", args->background, "Scale of every head's secondary sink/local shares (0: pure kinds)");
  cmd->add_option("--outlier-channels", args->outlier_channels, "Large key channels per head");
  cmd->add_option("--outlier-strength", args->outlier_strength, "Their RMS relative to the rest");
  cmd->add_option("--query-outlier-strength", args->query_outlier_strength,
                  "Query content RMS on the same channels, relative to the rest");
  cmd->add_option("--outlier-token-rate", args->outlier_token_rate, "Share of tokens with 2.5x larger key content");
  cmd->add_option("--spans", args->spans, "Planted spans per retrieval head");
  cmd->add_option("--span-len", args->span_len, "Tokens per planted span");
  cmd->add_option("--query-drift", args->query_drift, "Per-step drift of decode queries");
  cmd->add_option("--rope-theta", args->rope_theta, "RoPE base");
  cmd->add_option("--dtype", args->dtype, "Storage dtype: F32, F16 or BF16");
  cmd->add_flag("--stats", args->stats,
                "Print the realism statistics (entropy, first-token mass, tokens holding 90%, margin, 2-bit noise, "
                "channel spreads; docs/synthetic.md)");
  cmd->add_option("--stats-lengths", args->stats_lengths,
                  "With --stats: regenerate at these prompt lengths T (e.g. 64,128,256,448) and give one row each");
  cmd->add_flag("--json", args->json, "With --stats: print JSON");
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
    override_if(p.background, args->background, given("--background"));
    override_if(p.outlier_channels, args->outlier_channels, given("--outlier-channels"));
    override_if(p.outlier_strength, args->outlier_strength, given("--outlier-strength"));
    override_if(p.query_outlier_strength, args->query_outlier_strength, given("--query-outlier-strength"));
    override_if(p.outlier_token_rate, args->outlier_token_rate, given("--outlier-token-rate"));
    override_if(p.spans_per_head, args->spans, given("--spans"));
    override_if(p.span_len, args->span_len, given("--span-len"));
    override_if(p.query_drift, args->query_drift, given("--query-drift"));
    override_if(p.rope_theta, args->rope_theta, given("--rope-theta"));
    if (given("--dtype")) p.storage = parse_dtype(args->dtype, "option --dtype");
    if (given("--mix")) {
      const auto w = number_list(args->mix, "--mix", "sink,local,retrieval,diffuse", 4);
      p.mix_sink = w[0], p.mix_local = w[1], p.mix_retrieval = w[2], p.mix_diffuse = w[3];
    }
    const std::array<std::tuple<const char*, std::string*, double*, double*>, 3> ranges = {
        {{"--sink-mass", &args->sink_mass, &p.sink_mass_min, &p.sink_mass_max},
         {"--local-mass", &args->local_mass, &p.local_mass_min, &p.local_mass_max},
         {"--span-mass", &args->span_mass, &p.span_mass_min, &p.span_mass_max}}};
    for (const auto& [name, text, lo, hi] : ranges)
      if (given(name)) {
        const auto v = number_list(*text, name, "MIN,MAX", 2);
        *lo = v[0], *hi = v[1];
      }
    try {
      p.validate();
    } catch (const InputError& e) {
      // In the user's words: the option typed, then the parameter it sets.
      static const std::pair<const char*, const char*> kOption[] = {
          {"prompt_len", "--tokens"}, {"decode_steps", "--decode-steps"}, {"obs_window", "--obs-window"},
          {"n_layers", "--layers"}, {"n_kv_heads", "--kv-heads"}, {"group_size", "--group-size"},
          {"head_dim", "--head-dim"}, {"logit_scale_min", "--logit-scale-min"}, {"logit_scale_max", "--logit-scale-max"},
          {"background", "--background"}, {"outlier_channels", "--outlier-channels"},
          {"outlier_strength", "--outlier-strength"}, {"query_outlier_strength", "--query-outlier-strength"},
          {"outlier_token_rate", "--outlier-token-rate"}, {"spans_per_head", "--spans"}, {"span_len", "--span-len"},
          {"query_drift", "--query-drift"}, {"rope_theta", "--rope-theta"}, {"sink_mass_min", "--sink-mass"},
          {"sink_mass_max", "--sink-mass"}, {"local_mass_min", "--local-mass"}, {"local_mass_max", "--local-mass"},
          {"span_mass_min", "--span-mass"}, {"span_mass_max", "--span-mass"}};
      std::string msg = e.what();
      for (const auto& [field, option] : kOption) {
        const std::string key = "synthetic parameter " + std::string(field) + " =";
        if (msg.rfind(key, 0) == 0 && given(option)) {
          msg = std::string(option) + " (synthetic parameter " + field + ") =" + msg.substr(key.size());
          break;
        }
      }
      throw InputError(msg);
    }
    if (args->output.empty() && !args->stats)
      throw InputError("tierlab synth needs -o FILE (the trace to write), or --stats (statistics only).");
    if ((given("--stats-lengths") || args->json) && !args->stats)
      throw InputError("options --stats-lengths and --json go with --stats.");
    if (!args->output.empty()) {
      TerminalProgress bar("synth " + p.preset);
      write_synthetic_trace(p, args->output, [&](int done, int total) { bar.update(done, total); });
      bar.finish();
      std::fprintf(args->json ? stderr : stdout,
                   "wrote %s: preset %s, seed %llu, %d layers x %d KV heads (g=%d), T=%d, W=%d, S=%d, d=%d, %s\n",
                   args->output.c_str(), p.preset.c_str(), static_cast<unsigned long long>(p.seed), p.n_layers,
                   p.n_kv_heads, p.group_size, p.prompt_len, p.obs_window, p.decode_steps, p.head_dim,
                   std::string(dtype_name(p.storage)).c_str());
    }
    if (!args->stats) return;
    const std::vector<int> lengths =
        given("--stats-lengths") ? parse_length_list(args->stats_lengths, "--stats-lengths") : std::vector<int>{};
    const RealismReport report = synth_realism(p, args->output, lengths);
    if (args->json) {
      nlohmann::json j = {{"preset", p.preset}, {"seed", p.seed}, {"trace", args->output.empty() ? nlohmann::json(nullptr)
                                                                                                   : nlohmann::json(args->output)},
                          {"realism", realism_json(report)}};
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    std::printf("realism statistics (docs/synthetic.md): median [p10, p90] over heads, causal observation queries\n");
    std::printf("%s", report.table(p.preset + "/" + std::to_string(p.seed)).c_str());
  });
}

}  // namespace tierlab::cli
