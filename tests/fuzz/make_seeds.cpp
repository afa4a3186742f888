// Writes the seed corpora of the fuzz harnesses with the project's own writers:
//   make_seeds OUT_DIR SOURCE_DIR
// OUT_DIR/{safetensors,trace,allocation,llama2c,scenario,cell,tables}/ each get a few small
// valid inputs: a synthetic trace (TraceWriter), an allocation (write_allocation), a llama2.c
// checkpoint of the smallest valid shape, the shipped scenario files, the cell files of a tiny
// scenario computed by the runner (compute_cell), and for fuzz_tables the cell files and
// tables of its run (tests/fuzz/tables_run.hpp: write_run_tables). Nothing binary is committed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/allocation.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/quantizers/tier.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "tests/fuzz/tables_run.hpp"

namespace fs = std::filesystem;
using namespace tierlab;

namespace {

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("make_seeds: cannot write " + p.string());
}

SynthParams tiny(int decode_steps, int spans) {
  SynthParams p = synth_preset("tiny");
  p.n_layers = 1;
  p.n_kv_heads = 2;
  p.group_size = 2;
  p.head_dim = 8;
  p.prompt_len = 16;
  p.obs_window = 4;
  p.decode_steps = decode_steps;
  p.spans_per_head = spans;
  p.span_len = 2;
  return p;
}

// The smallest llama2.c checkpoint with every array present (dim 4, 2 heads, vocab 8).
std::string llama2c_checkpoint(bool shared) {
  const std::int32_t dim = 4, hidden = 8, layers = 1, heads = 2, kv = 2, vocab = 8, seq = 4;
  const std::int32_t header[7] = {dim, hidden, layers, heads, kv, shared ? vocab : -vocab, seq};
  const std::size_t hs = dim / heads;
  const std::size_t weights = vocab * dim + layers * dim + 2 * layers * dim * dim + 2 * layers * kv * hs * dim +
                              layers * dim + 3 * layers * hidden * dim + dim;
  std::string out(reinterpret_cast<const char*>(header), sizeof header);
  auto append = [&](float v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto append_weights = [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) append(0.05f * static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 0.3)));
  };
  append_weights(weights);
  // The RoPE tables (cos, then sin) of pos / 10000^(2i/hs), which the loader checks.
  for (int t = 0; t < 2; ++t) {
    for (std::size_t pos = 0; pos < static_cast<std::size_t>(seq); ++pos) {
      for (std::size_t i = 0; i < hs / 2; ++i) {
        const double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(2 * i) / static_cast<double>(hs));
        append(static_cast<float>(t == 0 ? std::cos(angle) : std::sin(angle)));
      }
    }
  }
  if (!shared) append_weights(vocab * dim);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR SOURCE_DIR\n");
    return 1;
  }
  const fs::path out = argv[1], src = argv[2];
  for (const char* d : {"safetensors", "trace", "allocation", "llama2c", "scenario", "cell", "tables"})
    fs::create_directories(out / d);

  // Traces (also safetensors seeds).
  write_synthetic_trace(tiny(4, 1), (out / "trace/tiny-decode.safetensors").string());
  SynthParams f16 = tiny(2, 1);
  f16.storage = DType::F16;
  write_synthetic_trace(f16, (out / "trace/tiny-f16.safetensors").string());
  fs::copy_file(out / "trace/tiny-decode.safetensors", out / "safetensors/trace.safetensors",
                fs::copy_options::overwrite_existing);

  // Allocations.
  Allocation a;
  a.ladder = RateLadder::parse("evict,kivi2,kivi4,exact");
  a.n_layers = 1;
  a.n_kv_heads = 2;
  a.prompt_len = 8;
  a.tiers = {{0, 1, 2, 3, 3, 2, 1, 0}, {3, 3, 3, 3, 0, 0, 0, 0}};
  write_allocation((out / "allocation/alloc.safetensors").string(), a);
  fs::copy_file(out / "allocation/alloc.safetensors", out / "safetensors/alloc.safetensors",
                fs::copy_options::overwrite_existing);
  {
    SafetensorsWriter w((out / "safetensors/mixed.safetensors").string(), {{"note", "seed"}, {"k", "v"}});
    w.declare("a", DType::F32, {2, 2});
    w.declare("b", DType::BF16, {3});
    w.declare("c", DType::I64, {2});
    w.declare("empty", DType::U8, {0});
    const float fa[4] = {1, -2, 3.5f, 0}, fb[3] = {0.25f, 8, -1};
    const std::int32_t ic[2] = {7, -7};
    w.write_f32("a", fa, 4);
    w.write_f32("b", fb, 3);
    w.write_i32("c", ic, 2);
    w.write_u8("empty", nullptr, 0);
    w.commit();
  }

  // llama2.c checkpoints.
  write_bytes(out / "llama2c/shared.bin", llama2c_checkpoint(true));
  write_bytes(out / "llama2c/unshared.bin", llama2c_checkpoint(false));

  // Scenarios: the shipped files and a tiny one.
  for (const auto& e : fs::directory_iterator(src / "scenarios/files"))
    if (e.path().extension() == ".yaml") fs::copy_file(e.path(), out / "scenario" / e.path().filename(), fs::copy_options::overwrite_existing);
  const std::string tiny_yaml =
      "name: tiny-seed\n"
      "traces:\n"
      "  synthetic:\n"
      "    presets: [tiny]\n"
      "    seeds: [0]\n"
      "    context_lengths: [32]\n"
      "    overrides: {n_layers: 1, n_kv_heads: 2, head_dim: 16, obs_window: 8, decode_steps: 8}\n"
      "budgets: [2, 4]\n"
      "backend: cpu\n"
      "bootstrap: 100\n";
  write_bytes(out / "scenario/tiny.yaml", tiny_yaml);

  // Cell files: the tiny scenario's cell as the runner writes it.
  const Scenario sc = parse_scenario(tiny_yaml, (out / "scenario/tiny.yaml").string());
  auto backend = make_recomputer(Backend::Cpu);
  ContentHashes hashes;
  for (const ScenarioCell& c : sc.cells) {
    nlohmann::json j = compute_cell(sc, c, *backend, (out / "work").string());
    j["cell_hash"] = cell_hash(sc, c, hashes);
    write_bytes(out / "cell" / (c.id + ".json"), j.dump(1) + "\n");
  }
  fs::remove_all(out / "work");

  // fuzz_tables: the cells of its run as the runner writes them (one also with its content
  // hash), then each table of the run as "tables/NAME\n" + the table's bytes.
  {
    const Scenario ts = parse_scenario(fuzz::kTablesScenarioYaml, "/nonexistent-tierlab-fuzz/tables.yaml");
    const fs::path run = out / "tables-run";
    fs::create_directories(run / "cells");
    ContentHashes th;
    std::map<std::string, std::string> ids;
    for (const ScenarioCell& c : ts.cells) {
      nlohmann::json j = compute_cell(ts, c, *backend, (out / "work").string());
      ids[c.id] = cell_hash(ts, c, th);
      j["cell_hash"] = ids[c.id];
      write_bytes(run / "cells" / (c.id + ".json"), j.dump(1) + "\n");
      write_bytes(out / "tables" / ("cell-" + c.id + ".json"), j.dump(1) + "\n");
      if (&c == &ts.cells.front()) {
        j["content_hash"] = cell_content_hash(j);
        write_bytes(out / "tables" / ("cell-" + c.id + "-hashed.json"), j.dump(1) + "\n");
      }
    }
    write_run_tables(ts, run.string(), ids);
    for (const auto& e : fs::directory_iterator(run / "tables")) {
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      write_bytes(out / "tables" / ("table-" + e.path().filename().string()),
                  fuzz::kTableInputPrefix + e.path().filename().string() + "\n" + bytes);
    }
    fs::remove_all(run);
    fs::remove_all(out / "work");
  }
  std::printf("make_seeds: wrote the seed corpora under %s\n", out.string().c_str());
  return 0;
}
