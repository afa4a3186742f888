// tierlab info TRACE [--json] [--realism [--lengths L,...] [--obs-window W]]
#include <algorithm>
#include <cstdio>
#include <map>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"

#include "model/allocation.hpp"
#include "model/base/error.hpp"
#include "model/realism.hpp"
#include "model/io/safetensors.hpp"
#include "model/io/trace.hpp"
#include "scenarios/cli/commands.hpp"
#include "scenarios/cli/realism_output.hpp"
#include "scenarios/run/progress.hpp"

namespace tierlab::cli {

namespace {

// One value in a line: scalars as they are (strings without quotes), short arrays of
// scalars inline, anything deeper by its size (the whole of it: `tierlab info --json`).
std::string short_value(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v.get<double>());
    return b;
  }
  if (v.is_primitive()) return v.dump();
  if (v.is_array()) {
    bool scalars = v.size() <= 8;
    for (const auto& x : v) scalars = scalars && x.is_primitive();
    if (scalars) {
      std::string s = "[";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + short_value(v[i]);
      return s + "]";
    }
    return std::to_string(v.size()) + " entries";
  }
  return std::to_string(v.size()) + " fields";
}

// Words joined by ", " in lines of at most 100 characters, each starting with `indent`.
std::string wrapped(const std::vector<std::string>& items, const std::string& first, const std::string& indent) {
  std::string out, line = first;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string piece = items[i] + (i + 1 < items.size() ? "," : "");
    if (line.size() > indent.size() && line.size() + 1 + piece.size() > 100) {
      out += line + "\n";
      line = indent;
    }
    line += (line.size() > indent.size() || (line == first && !first.empty() && first.back() != ' ') ? " " : "") + piece;
  }
  return out + line + "\n";
}

// The provenance as lines a reader can scan: top-level scalars on the first line, each
// object as key=value pairs, each list of records by its count (and its kinds, if the
// records have a "kind"). Not JSON: printed as it is.
std::string readable_provenance(const std::string& raw, const nlohmann::json& j) {
  const std::string label = "provenance   ", indent(label.size(), ' ');
  if (raw.empty()) return label + "(none)\n";
  if (j.is_discarded() || !j.is_object()) return label + raw + "\n";
  std::vector<std::string> scalars;
  std::string rest;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const nlohmann::json& v = it.value();
    if (v.is_primitive()) {
      scalars.push_back(it.key() + " " + short_value(v));
    } else if (v.is_object()) {
      std::vector<std::string> kv;
      for (auto f = v.begin(); f != v.end(); ++f) kv.push_back(f.key() + "=" + short_value(f.value()));
      rest += wrapped(kv, indent + it.key() + ":", indent + "  ");
    } else {
      std::map<std::string, int> kinds;
      for (const auto& x : v)
        if (x.is_object() && x.contains("kind") && x["kind"].is_string()) ++kinds[x["kind"].get<std::string>()];
      std::string line = indent + it.key() + ": " + short_value(v);
      if (!kinds.empty()) {
        line += " (";
        bool first = true;
        for (const auto& [k, n] : kinds) line += (first ? "" : ", ") + k + " " + std::to_string(n), first = false;
        line += ")";
      }
      rest += line + "\n";
    }
  }
  std::string out = scalars.empty() ? label + "\n" : wrapped(scalars, label.substr(0, label.size() - 1), indent);
  return out + rest + indent + "(all of it: tierlab info --json)\n";
}

}  // namespace

namespace {

// tierlab info ALLOCATION: its ladder, shape, the share of tokens in each tier, its nominal
// code rate, and the trace it was solved for.
void describe_allocation(const std::string& path, bool json) {
  const Allocation a = read_allocation(path);
  std::vector<long long> count(a.ladder.size(), 0);
  long long total = 0;
  for (const auto& head : a.tiers)
    for (const std::uint8_t t : head) ++count[t], ++total;
  double bits = 0;
  for (std::size_t k = 0; k < count.size(); ++k) bits += a.ladder.tiers[k].bits * static_cast<double>(count[k]);
  bits /= std::max<long long>(total, 1);
  if (json) {
    nlohmann::json tiers = nlohmann::json::array();
    for (std::size_t k = 0; k < count.size(); ++k)
      tiers.push_back({{"tier", a.ladder.tiers[k].name()}, {"tokens", count[k]}, {"share", count[k] / double(std::max<long long>(total, 1))}});
    std::printf("%s\n", nlohmann::json({{"path", path}, {"kind", "allocation"}, {"ladder", a.ladder.name()},
                                        {"n_layers", a.n_layers}, {"n_kv_heads", a.n_kv_heads}, {"prompt_len", a.prompt_len},
                                        {"tiers", tiers}, {"nominal_code_bits", bits},
                                        {"trace", {{"name", a.trace_name}, {"sha256", a.trace_sha256}, {"tokens", a.trace_tokens}}}})
                             .dump(2)
                             .c_str());
    return;
  }
  std::printf("allocation   %s (tierlab solve --write-allocation; read by eval/replay --allocation)\n", path.c_str());
  std::printf("ladder       %s\n", a.ladder.name().c_str());
  std::printf("shape        %d layers x %d KV heads x T=%d tokens\n", a.n_layers, a.n_kv_heads, a.prompt_len);
  std::printf("tiers       ");
  for (std::size_t k = 0; k < count.size(); ++k)
    std::printf(" %s %.1f%%%s", a.ladder.tiers[k].name().c_str(), 100.0 * count[k] / std::max<long long>(total, 1),
                k + 1 < count.size() ? "," : "\n");
  std::printf("code rate    %.4g bits per key element (nominal: the tiers' code bits; total bits depend on grouping)\n", bits);
  if (a.trace_sha256.empty())
    std::printf("solved for   (not recorded: a file from before trace identities; eval cannot check it)\n");
  else
    std::printf("solved for   %s, SHA-256 %s%s\n", a.trace_name.c_str(), a.trace_sha256.c_str(),
                a.trace_tokens.empty() ? "" : (", prompt " + std::to_string(std::count(a.trace_tokens.begin(), a.trace_tokens.end(), ',') + 1) + " token ids").c_str());
}

}  // namespace

void add_info(CLI::App& app) {
  struct Args {
    std::string trace;
    bool json = false;
    bool realism = false;
    bool metadata_only = false;
    std::string lengths;
    int window = 0;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("info", "Show a trace's shapes, dtypes and provenance");
  cmd->add_option("trace", args->trace, "Trace file (safetensors)")->required();
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--metadata-only", args->metadata_only,
                "Read the header only (by default every head's tensors are read and checked as eval reads them)");
  cmd->add_flag("--realism", args->realism,
                "Print the realism statistics (entropy, first-token mass, tokens holding 90%, margin, 2-bit noise, "
                "channel spreads over the causal observation queries; docs/synthetic.md)");
  cmd->add_option("--lengths", args->lengths,
                  "With --realism: statistics of the trace cut to these prompt lengths (e.g. 64,128,256; needs "
                  "observation queries reaching back to L - window)");
  cmd->add_option("--obs-window", args->window, "With --realism: observation queries per query head at each length (default W)");
  cmd->callback([args, cmd]() {
    {  // an allocation file (tierlab solve --write-allocation) is described, not read as a trace
      const SafetensorsFile probe(args->trace);
      const auto kind = probe.metadata().find("tierlab.kind");
      if (kind != probe.metadata().end() && kind->second == "allocation") {
        describe_allocation(args->trace, args->json);
        return;
      }
    }
    TraceReader reader(args->trace);
    if ((cmd->count("--lengths") > 0 || cmd->count("--obs-window") > 0) && !args->realism)
      throw InputError("options --lengths and --obs-window go with --realism.");
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
    // The values, read as eval reads them (shapes, finiteness, storage dtype), one head at a
    // time: a trace eval refuses is never reported as fine here.
    if (!args->metadata_only) {
      TerminalProgress bar("checking values");
      const int heads = m.n_layers * m.n_kv_heads;
      for (int l = 0; l < m.n_layers; ++l)
        for (int h = 0; h < m.n_kv_heads; ++h) {
          (void)reader.head(l, h);
          bar.update(l * m.n_kv_heads + h + 1, heads);
        }
      bar.finish();
    }
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
                          {"provenance", provenance.is_discarded() ? nlohmann::json(m.provenance) : provenance},
                          {"values_checked", !args->metadata_only}};
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
    if (args->metadata_only)
      std::printf("values       not read (--metadata-only)\n");
    else
      std::printf("values       every tensor of the %d heads read as eval reads them: shapes and dtypes right, all finite\n",
                  m.n_layers * m.n_kv_heads);
    if (m.obs_window == 0)
      std::printf("queries      W = 0: no observation queries; eval, solve and scenario cells need W >= 1 (a decode-only trace)\n");
    std::printf("%s", readable_provenance(m.provenance, provenance).c_str());
    {  // where --backend auto recomputes, said here once rather than on every command
      std::string note;
      const auto be = make_recomputer(Backend::Auto, &note);
      std::printf("backend      auto -> %s%s%s\n", be ? be->description().c_str() : "none", note.empty() ? "" : "; ",
                  note.c_str());
    }
  });
}

}  // namespace tierlab::cli
