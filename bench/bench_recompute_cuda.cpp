// Benchmark of the CUDA recomputation backend on the workload of the PyTorch peer
// baseline (shared/bench/torch_recompute_ref.py): H KV heads of T tokens and head
// dimension d, G query heads x Q decode queries per KV head, keys with d/16 outlier
// channels (x8), values N(0,1), queries 2 N(0,1); variants KIVI per-channel 2-bit and
// 4-bit (groups of 32 tokens, model/quantizers/quantizer.hpp) and the exact keys; E random
// allocations, each a tier in {evict, kivi2, kivi4, exact} per token and head.
//
// It times evaluate() on all E allocations of all H heads (the first call prepares the
// heads and is reported apart; then the median of --repeats calls), checks the numbers
// against the CPU reference on --cpu-allocations allocations and against the simple CUDA
// path on a smaller subset, runs the PyTorch baseline side by side when --torch-ref is
// given, and prints one JSON object (also written to --json PATH).
//
// FLOPs counted: only the useful work of the output change D = delta V, 2 H (G Q) T d per
// allocation (a multiply-add is 2 FLOPs); the tensor-core path issues 3x that in fp16
// products (the error-compensated split) plus the element-wise softmax work, none of
// which is counted. The fraction of the fp32 peak is that rate over --fp32-peak-tflops
// (67 TFLOP/s: H200 SXM, non-tensor fp32).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/recompute.hpp"
#include "model/base/clock.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/quantizers/tier.hpp"

using namespace tierlab;
using json = nlohmann::json;

namespace {

struct Options {
  int tokens = 32768, dim = 128, kv_heads = 8, group_size = 4, queries = 64, allocations = 32;
  int repeats = 7, cpu_allocations = 2, simple_allocations = 1, simple_heads = 2;
  unsigned seed = 0;
  double fp32_peak_tflops = 67.0;
  double max_difference = 1e-5;  // the stated tolerance: CUDA vs CPU, relative
  std::string torch_ref, python = "python3", json_path;
};

const char* kUsage =
    "usage: bench_recompute_cuda [--tokens T] [--dim D] [--kv-heads H] [--group-size G] [--queries Q]\n"
    "       [--allocations E] [--repeats N] [--cpu-allocations N] [--simple-allocations N] [--simple-heads N]\n"
    "       [--seed S] [--fp32-peak-tflops F] [--torch-ref torch_recompute_ref.py] [--python python3]\n"
    "       [--max-difference TOL] [--json out.json]\n"
    "Exit status 3 when CUDA and the CPU reference differ by more than TOL (relative; default 1e-5).\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
      return argv[++i];
    };
    auto positive = [&](int* v) {
      *v = std::stoi(next());
      if (*v < 0 || (*v == 0 && a != "--cpu-allocations" && a != "--simple-allocations"))
        throw std::runtime_error("option " + a + " must be positive");
    };
    if (a == "--tokens") positive(&o.tokens);
    else if (a == "--dim") positive(&o.dim);
    else if (a == "--kv-heads") positive(&o.kv_heads);
    else if (a == "--group-size") positive(&o.group_size);
    else if (a == "--queries") positive(&o.queries);
    else if (a == "--allocations") positive(&o.allocations);
    else if (a == "--repeats") positive(&o.repeats);
    else if (a == "--cpu-allocations") positive(&o.cpu_allocations);
    else if (a == "--simple-allocations") positive(&o.simple_allocations);
    else if (a == "--simple-heads") positive(&o.simple_heads);
    else if (a == "--seed") o.seed = static_cast<unsigned>(std::stoul(next()));
    else if (a == "--fp32-peak-tflops") o.fp32_peak_tflops = std::stod(next());
    else if (a == "--torch-ref") o.torch_ref = next();
    else if (a == "--python") o.python = next();
    else if (a == "--json") o.json_path = next();
    else if (a == "--max-difference") o.max_difference = std::stod(next());
    else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw std::runtime_error("unknown option " + a);
    }
  }
  return o;
}

struct Head {
  MatrixRM q, k, v, kivi2, kivi4;
};

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// The first `n_sel` selections of the first `n_heads` batches.
std::vector<HeadBatch> subset(const std::vector<HeadBatch>& all, int n_heads, int n_sel) {
  std::vector<HeadBatch> out;
  for (int h = 0; h < std::min<int>(n_heads, all.size()); ++h) {
    HeadBatch b{all[h].problem, {}};
    for (int s = 0; s < std::min<int>(n_sel, all[h].selections.size()); ++s) b.selections.push_back(all[h].selections[s]);
    out.push_back(std::move(b));
  }
  return out;
}

// Largest relative difference of `got` from `want` per metric over the selections both hold
// (relative to |want|, over entries with |want| > 1e-12).
json max_relative_difference(const EvalResult& got, const EvalResult& want) {
  double worst[4] = {0, 0, 0, 0};
  for (std::size_t b = 0; b < want.errors.size() && b < got.errors.size(); ++b)
    for (std::size_t s = 0; s < want.errors[b].size() && s < got.errors[b].size(); ++s) {
      const ErrorMetrics& x = got.errors[b][s];
      const ErrorMetrics& y = want.errors[b][s];
      const double xs[4] = {x.rel_error, x.abs_error, x.attn_tv, x.logit_error};
      const double ys[4] = {y.rel_error, y.abs_error, y.attn_tv, y.logit_error};
      for (int m = 0; m < 4; ++m) {
        if (!(std::abs(ys[m]) > 1e-12)) continue;
        const double r = std::abs(xs[m] - ys[m]) / std::abs(ys[m]);
        worst[m] = std::isnan(r) ? INFINITY : std::max(worst[m], r);
      }
    }
  return {{"rel_error", worst[0]},
          {"abs_error", worst[1]},
          {"attn_tv", worst[2]},
          {"logit_error", worst[3]},
          {"max", *std::max_element(worst, worst + 4)}};
}

// Runs the PyTorch baseline with the same sizes; its JSON object, or {"error": ...}.
json run_torch(const Options& o) {
  std::ostringstream cmd;
  cmd << o.python << " " << o.torch_ref << " --tokens " << o.tokens << " --dim " << o.dim << " --kv-heads "
      << o.kv_heads << " --group-size " << o.group_size << " --queries " << o.queries << " --allocations "
      << o.allocations << " 2>&1";
  std::FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return {{"error", "could not start: " + cmd.str()}};
  std::string out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  const std::size_t open = out.find('{'), close = out.rfind('}');
  if (status != 0 || open == std::string::npos || close == std::string::npos)
    return {{"error", "exit status " + std::to_string(status) + ": " + out.substr(0, 2000)}, {"command", cmd.str()}};
  try {
    return json::parse(out.substr(open, close - open + 1));
  } catch (const std::exception& e) {
    return {{"error", std::string("unparsable output: ") + e.what()}, {"output", out.substr(0, 2000)}};
  }
}

// The workload: H heads (keys with d/16 outlier channels x8, values N(0,1), queries
// 2 N(0,1), the KIVI 2- and 4-bit variants) and E random allocations per head, in that
// order from one generator seeded with --seed.
void make_workload(const Options& o, std::vector<Head>& heads, std::vector<HeadBatch>& batches) {
  const int H = o.kv_heads, T = o.tokens, d = o.dim, nq = o.group_size * o.queries, E = o.allocations;
  std::mt19937 rng(o.seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> chan(d, 1.0f);
  {
    std::vector<int> perm(d);
    for (int j = 0; j < d; ++j) perm[j] = j;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < d / 16; ++j) chan[perm[j]] = 8.0f;
  }
  const Tier kivi2 = Tier::parse("kivi2"), kivi4 = Tier::parse("kivi4");
  for (Head& h : heads) {
    h.k.resize(T, d);
    h.v.resize(T, d);
    h.q.resize(nq, d);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < d; ++j) h.k(t, j) = n01(rng) * chan[j];
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < d; ++j) h.v(t, j) = n01(rng);
    for (int i = 0; i < nq; ++i)
      for (int j = 0; j < d; ++j) h.q(i, j) = 2.0f * n01(rng);
    h.kivi2 = dense_tier_keys(h.k, kivi2);
    h.kivi4 = dense_tier_keys(h.k, kivi4);
  }
  std::uniform_int_distribution<int> tier(0, 3);  // 0 evict, 1 kivi2, 2 kivi4, 3 exact
  for (int h = 0; h < H; ++h) {
    HeadProblem& p = batches[h].problem;
    p.queries = &heads[h].q;
    p.exact_keys = &heads[h].k;
    p.values = &heads[h].v;
    p.variants = {&heads[h].kivi2, &heads[h].kivi4, &heads[h].k};
    batches[h].selections.assign(E, Selection(T));
  }
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) batches[h].selections[e][t] = static_cast<std::uint8_t>(tier(rng));
}

// The first call (it prepares and caches the heads), then --repeats timed calls: the
// "cuda" and "flops" entries of out and the median seconds per call. False (and
// out["error"]) when a call fails.
bool time_cuda_calls(const Options& o, Recomputer& gpu, const std::vector<HeadBatch>& batches, json& out, double& med) {
  const int H = o.kv_heads, T = o.tokens, d = o.dim, nq = o.group_size * o.queries, E = o.allocations;
  auto t0 = std::chrono::steady_clock::now();
  EvalResult res = gpu.evaluate(batches);
  const double first = seconds_since(t0);
  if (!res.ok) {
    out["error"] = "cuda evaluate failed: " + res.message;
    return false;
  }
  std::vector<double> times;
  for (int r = 0; r < o.repeats; ++r) {
    t0 = std::chrono::steady_clock::now();
    res = gpu.evaluate(batches);
    times.push_back(seconds_since(t0));
    if (!res.ok) {
      out["error"] = "cuda evaluate failed: " + res.message;
      return false;
    }
  }
  med = median(times);
  const double useful_flops = 2.0 * H * nq * double(T) * d;  // per allocation: D = delta V
  double mean_rel = 0;
  for (const auto& per_head : res.errors)
    for (const ErrorMetrics& m : per_head) mean_rel += m.rel_error;
  mean_rel /= double(H) * E;
  out["cuda"] = {{"first_call_seconds", first},
                 {"preparation_seconds_estimate", first - med},
                 {"seconds_per_call_median", med},
                 {"call_seconds", times},
                 {"seconds_per_allocation", med / E},
                 {"allocations_per_second", E / med},
                 {"query_token_pairs_per_second", double(E) * H * nq * T / med},
                 {"mean_rel_error", mean_rel}};
  out["flops"] = {{"counted", "D = delta V only: 2 H (G Q) T d per allocation"},
                  {"useful_flops_per_allocation", useful_flops},
                  {"achieved_tflops", useful_flops * E / med / 1e12},
                  {"fp32_peak_tflops", o.fp32_peak_tflops},
                  {"fraction_of_fp32_peak", useful_flops * E / med / 1e12 / o.fp32_peak_tflops}};
  return true;
}

// The numbers against the CPU reference on --cpu-allocations allocations (out["cpu_check"]);
// status 3 when they differ beyond --max-difference.
void check_against_cpu(const Options& o, Recomputer& gpu, const std::vector<HeadBatch>& batches, json& out,
                       int& status) {
  const int H = o.kv_heads, E = o.allocations;
  const std::vector<HeadBatch> sub = subset(batches, H, o.cpu_allocations);
  std::unique_ptr<Recomputer> cpu = make_recomputer(Backend::Cpu);
  const auto t0 = std::chrono::steady_clock::now();
  const EvalResult want = cpu->evaluate(sub);
  const double cpu_s = seconds_since(t0);
  const EvalResult got = gpu.evaluate(sub);
  json c = {{"backend", cpu->description()}, {"allocations", std::min(E, o.cpu_allocations)}, {"seconds", cpu_s}};
  if (want.ok && got.ok) {
    const json diff = max_relative_difference(got, want);
    c["max_relative_difference_cuda_vs_cpu"] = diff;
    c["tolerance"] = o.max_difference;
    c["within_tolerance"] = diff["max"].get<double>() <= o.max_difference;
    if (!(diff["max"].get<double>() <= o.max_difference)) status = 3;
  } else {
    c["error"] = want.ok ? got.message : want.message;
    status = 3;
  }
  out["cpu_check"] = c;
}

// The numbers against the simple CUDA path on a smaller subset (out["simple_check"]).
void check_against_simple_path(const Options& o, Recomputer& gpu, const std::vector<HeadBatch>& batches, json& out) {
  const int H = o.kv_heads, E = o.allocations;
  const std::vector<HeadBatch> sub = subset(batches, o.simple_heads, o.simple_allocations);
  const char* old = std::getenv("TIERLAB_CUDA_PATH");
  const std::string saved = old ? old : "";
  setenv("TIERLAB_CUDA_PATH", "simple", 1);
  std::string why;
  std::unique_ptr<Recomputer> simple = make_recomputer(Backend::Cuda, &why);
  if (old) setenv("TIERLAB_CUDA_PATH", saved.c_str(), 1);
  else unsetenv("TIERLAB_CUDA_PATH");
  json s = {{"heads", std::min(H, o.simple_heads)}, {"allocations", std::min(E, o.simple_allocations)}};
  if (!simple) {
    s["error"] = why;
  } else {
    s["backend"] = simple->description();
    const auto t0 = std::chrono::steady_clock::now();
    const EvalResult want = simple->evaluate(sub);
    s["seconds_including_preparation"] = seconds_since(t0);
    const EvalResult got = gpu.evaluate(sub);
    if (want.ok && got.ok) s["max_relative_difference_main_vs_simple"] = max_relative_difference(got, want);
    else s["error"] = want.ok ? got.message : want.message;
  }
  out["simple_check"] = s;
}

// The PyTorch baseline, same sizes, same device (out["torch"] and the speedups over it).
void compare_with_torch(const Options& o, double med, json& out) {
  const int E = o.allocations;
  const json torch = run_torch(o);
  out["torch"] = torch;
  if (torch.contains("gather") && torch["gather"].contains("allocations_per_second")) {
    const double tg = torch["gather"]["allocations_per_second"].get<double>();
    out["speedup_vs_torch_gather"] = (E / med) / tg;
    out["target_speedup"] = 10.0;
    out["meets_target"] = (E / med) / tg >= 10.0;
  }
  if (torch.contains("naive") && torch["naive"].contains("allocations_per_second"))
    out["speedup_vs_torch_naive"] = (E / med) / torch["naive"]["allocations_per_second"].get<double>();
}

int run(const Options& o) {
  const int H = o.kv_heads, T = o.tokens, d = o.dim, nq = o.group_size * o.queries, E = o.allocations;
  json out = {{"benchmark", "bench_recompute_cuda"},
              {"tokens", T},
              {"dim", d},
              {"kv_heads", H},
              {"query_heads_per_kv", o.group_size},
              {"queries_per_head", o.queries},
              {"query_rows_per_head", nq},
              {"allocations", E},
              {"seed", o.seed}};
  int status = 0;  // 3 when the numbers disagree beyond the tolerance
  auto finish = [&](int code) {
    const std::string text = out.dump(1);
    std::cout << text << std::endl;
    if (!o.json_path.empty()) std::ofstream(o.json_path) << text << "\n";
    return code;
  };

  std::string note;
  std::unique_ptr<Recomputer> gpu = make_recomputer(Backend::Cuda, &note);
  if (!gpu) {
    out["error"] = note;
    return finish(2);
  }
  out["backend"] = gpu->description();
  out["tensor_core_path"] = gpu->description().find("tensor-core path") != std::string::npos;

  // ---- the workload --------------------------------------------------------------
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Head> heads(H);
  std::vector<HeadBatch> batches(H);
  make_workload(o, heads, batches);
  out["workload_seconds"] = seconds_since(t0);

  // ---- CUDA: first call (prepares and caches the heads), then timed repeats -------------
  double med = 0;
  if (!time_cuda_calls(o, *gpu, batches, out, med)) return finish(1);

  // ---- numbers: against the CPU reference and the simple CUDA path ---------------------
  if (o.cpu_allocations > 0) check_against_cpu(o, *gpu, batches, out, status);
  if (o.simple_allocations > 0) check_against_simple_path(o, *gpu, batches, out);

  // ---- the PyTorch baseline, same sizes, same device -----------------------------------
  if (!o.torch_ref.empty()) {
    gpu.reset();  // give the device memory back first
    compare_with_torch(o, med, out);
  }
  return finish(status);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "bench_recompute_cuda: " << e.what() << "\n" << kUsage;
    return 2;
  }
}
