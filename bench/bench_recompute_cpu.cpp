// Benchmark of the CPU recomputation backend on the workload of
// ../shared/bench/numpy_recompute_ref.py: H KV heads, T tokens, head dim D, G*Q query
// rows per head, key variants KIVI 2-bit, KIVI 4-bit (per channel, groups of 32 tokens)
// and exact, and E random allocations (tiers 0..3, 0 = evict). Run it through
// bench/run_recompute_cpu.sh, which runs the NumPy reference beside it.
//
// Times (medians over --repeats after one warm-up):
//   setup_seconds              prepare every head once (exact softmax, variant logits)
//   seconds_per_allocation     all E allocations over all heads, setup excluded, divided
//                              by E (what the NumPy reference's seconds_per_allocation measures)
//   seconds_per_allocation_amortized  Recomputer::evaluate over all E allocations,
//                              setup included, divided by E
//   cpu_seconds_per_allocation CPU time of all threads, per allocation (a measure of the
//                              work that a loaded machine inflates less than wall time)
// Errors: mean over allocations of the head-mean relative error e (docs/model.md section 8).
// With --data DIR (written by bench/numpy_recompute_dump.py) it runs on the reference's
// exact instance and compares its per-allocation errors with the reference's.
// Prints one JSON object.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu/cpu_recompute.hpp"
#include "model/base/clock.hpp"
#include "gpu/recompute.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/base/allocator_policy.hpp"
#include "model/base/openmp_policy.hpp"

using namespace tierlab;

namespace {

struct Options {
  int tokens = 8192, dim = 128, kv_heads = 8, group_size = 4, queries = 16, allocations = 8;
  int seed = 0, repeats = 5;
  std::string data;  // directory from numpy_recompute_dump.py, or empty
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error("option " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--tokens") o.tokens = std::stoi(value());
    else if (a == "--dim") o.dim = std::stoi(value());
    else if (a == "--kv-heads") o.kv_heads = std::stoi(value());
    else if (a == "--group-size") o.group_size = std::stoi(value());
    else if (a == "--queries") o.queries = std::stoi(value());
    else if (a == "--allocations") o.allocations = std::stoi(value());
    else if (a == "--seed") o.seed = std::stoi(value());
    else if (a == "--repeats") o.repeats = std::stoi(value());
    else if (a == "--data") o.data = value();
    else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: bench_recompute_cpu [--tokens T] [--dim D] [--kv-heads H] [--group-size G]\n"
          "       [--queries Q] [--allocations E] [--seed S] [--repeats R] [--data DIR]\n");
      std::exit(0);
    } else {
      throw std::runtime_error("unknown option " + a);
    }
  }
  if (o.tokens < 1 || o.dim < 1 || o.kv_heads < 1 || o.group_size < 1 || o.queries < 1 || o.allocations < 1 ||
      o.repeats < 1)
    throw std::runtime_error("every size and --repeats must be at least 1");
  return o;
}

// The instance: per head Q (G*Q x D), K, V (T x D); allocations [e][h] (T tier codes).
struct Instance {
  std::vector<MatrixRM> q, k, v, k2_ref, k4_ref;  // k*_ref: the reference's KIVI keys (dump only)
  std::vector<std::vector<Selection>> alloc;
  std::vector<double> ref_err_f32, ref_err_f64;    // the reference's per-allocation errors (dump only)
};

std::vector<char> read_file(const std::string& path, std::size_t bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<char> buf(bytes);
  f.read(buf.data(), std::streamsize(bytes));
  if (std::size_t(f.gcount()) != bytes || f.peek() != EOF)
    throw std::runtime_error(path + " does not hold " + std::to_string(bytes) +
                             " bytes: were the sizes passed to the dump the same?");
  return buf;
}

// (H, rows, D) float32 -> H row-major matrices.
std::vector<MatrixRM> read_heads(const std::string& path, int H, int rows, int D) {
  const std::vector<char> buf = read_file(path, std::size_t(H) * rows * D * sizeof(float));
  std::vector<MatrixRM> out(H);
  for (int h = 0; h < H; ++h) {
    out[h].resize(rows, D);
    std::memcpy(out[h].data(), buf.data() + std::size_t(h) * rows * D * sizeof(float),
                std::size_t(rows) * D * sizeof(float));
  }
  return out;
}

std::vector<double> read_doubles(const std::string& path, int n) {
  const std::vector<char> buf = read_file(path, std::size_t(n) * sizeof(double));
  std::vector<double> out(n);
  std::memcpy(out.data(), buf.data(), buf.size());
  return out;
}

Instance load_dump(const Options& o) {
  const int H = o.kv_heads, T = o.tokens, D = o.dim, R = o.group_size * o.queries, E = o.allocations;
  Instance in;
  in.k = read_heads(o.data + "/K.f32", H, T, D);
  in.v = read_heads(o.data + "/V.f32", H, T, D);
  in.q = read_heads(o.data + "/Q.f32", H, R, D);
  in.k2_ref = read_heads(o.data + "/K2.f32", H, T, D);
  in.k4_ref = read_heads(o.data + "/K4.f32", H, T, D);
  const std::vector<char> a = read_file(o.data + "/alloc.u8", std::size_t(E) * H * T);
  in.alloc.assign(E, std::vector<Selection>(H, Selection(T)));
  for (int e = 0; e < E; ++e)
    for (int h = 0; h < H; ++h)
      std::memcpy(in.alloc[e][h].data(), a.data() + (std::size_t(e) * H + h) * T, T);
  in.ref_err_f32 = read_doubles(o.data + "/errors_f32.f64", E);
  in.ref_err_f64 = read_doubles(o.data + "/errors_f64.f64", E);
  return in;
}

// The reference's distribution with this program's own generator: keys N(0,1) with D/16
// random outlier channels x8, values N(0,1), queries N(0,1) * 2, tiers uniform in 0..3.
Instance generate(const Options& o) {
  const int H = o.kv_heads, T = o.tokens, D = o.dim, R = o.group_size * o.queries, E = o.allocations;
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<int> perm(D);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> chan(D, 1.0f);
  for (int j = 0; j < D / 16; ++j) chan[perm[j]] = 8.0f;
  Instance in;
  auto fill = [&](std::vector<MatrixRM>& m, int rows, auto&& value) {
    m.assign(H, MatrixRM(rows, D));
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < D; ++j) m[h](r, j) = value(j);
  };
  fill(in.k, T, [&](int j) { return n01(rng) * chan[j]; });
  fill(in.v, T, [&](int) { return n01(rng); });
  fill(in.q, R, [&](int) { return n01(rng) * 2.0f; });
  std::uniform_int_distribution<int> tier(0, 3);
  in.alloc.assign(E, std::vector<Selection>(H, Selection(T)));
  for (auto& per_head : in.alloc)
    for (auto& sel : per_head)
      for (auto& c : sel) c = std::uint8_t(tier(rng));
  return in;
}

// CPU time of the whole process (all threads), seconds.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// Per-allocation mean (over heads) of the relative error, via Recomputer::evaluate.
std::vector<double> allocation_errors(Recomputer& rc, const std::vector<HeadBatch>& batches, int E) {
  const EvalResult r = rc.evaluate(batches);
  if (!r.ok) throw std::runtime_error(r.message);
  std::vector<double> err(E, 0.0);
  for (std::size_t h = 0; h < batches.size(); ++h)
    for (int e = 0; e < E; ++e) err[e] += r.errors[h][e].rel_error / double(batches.size());
  return err;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return m;
}

}  // namespace

int main(int argc, char** argv) try {
  tierlab::use_passive_openmp_wait(argv);  // model/base/openmp_policy.hpp
  tierlab::same_bits_on_any_thread_count();  // Eigen's products on one thread each (model/base/openmp_policy.hpp)
  tierlab::keep_freed_buffers();           // as tierlab and the explorer do (model/base/allocator_policy.hpp)
  const Options o = parse(argc, argv);
  const int H = o.kv_heads, E = o.allocations;
  const Instance in = o.data.empty() ? generate(o) : load_dump(o);

  // Key variants with the project's own KIVI (model/quantizers/quantizer.hpp).
  const Tier kivi2{QuantizerKind::KiviPerChannel, 2, 32}, kivi4{QuantizerKind::KiviPerChannel, 4, 32};
  std::vector<MatrixRM> k2(H), k4(H);
  for (int h = 0; h < H; ++h) {
    k2[h] = dense_tier_keys(in.k[h], kivi2);
    k4[h] = dense_tier_keys(in.k[h], kivi4);
  }
  std::vector<HeadBatch> batches(H);
  for (int h = 0; h < H; ++h) {
    batches[h].problem = HeadProblem{&in.q[h], &in.k[h], &in.v[h], {&k2[h], &k4[h], &in.k[h]}, {}};
    for (int e = 0; e < E; ++e) batches[h].selections.push_back(in.alloc[e][h]);
    const std::string why = check_batch(batches[h]);
    if (!why.empty()) throw std::runtime_error(why);
  }
  const auto rc = make_recomputer(Backend::Cpu);

  // Setup: prepare every head (heads in parallel, as Recomputer::evaluate does).
  std::vector<cpu::PreparedHead> prepared(H);
  std::vector<double> setup_times;
  for (int r = 0; r <= o.repeats; ++r) {  // r == 0 is the warm-up
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic, 1)
    for (int h = 0; h < H; ++h) prepared[h] = cpu::prepare_head(batches[h].problem, 0, int(in.q[h].rows()));
    if (r > 0) setup_times.push_back(seconds_since(t0));
  }

  // The E allocations over all heads (setup excluded), (allocation, head) pairs in
  // parallel; time / E, as the NumPy reference measures its loop.
  std::vector<cpu::Workspace> ws(omp_get_max_threads());
  std::vector<double> alloc_times, alloc_cpu, err(E, 0.0);
  std::vector<ErrorMetrics> per_pair(std::size_t(E) * H);
  for (int r = 0; r <= o.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
#pragma omp parallel for schedule(dynamic, 1)
    for (int task = 0; task < E * H; ++task) {
      const int e = task / H, h = task % H;
      per_pair[task] = cpu::evaluate_selection(prepared[h], in.alloc[e][h], ws[omp_get_thread_num()]);
    }
    if (r > 0) {
      alloc_times.push_back(seconds_since(t0) / E);
      alloc_cpu.push_back((process_cpu_seconds() - c0) / E);
    }
  }
  for (int e = 0; e < E; ++e) {
    double sum = 0;
    for (int h = 0; h < H; ++h) sum += per_pair[std::size_t(e) * H + h].rel_error;
    err[e] = sum / H;
  }

  // The public interface end to end (setup included), amortized over the E allocations.
  std::vector<double> amortized;
  std::vector<double> err_api;
  for (int r = 0; r <= o.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    err_api = allocation_errors(*rc, batches, E);
    if (r > 0) amortized.push_back(seconds_since(t0) / E);
  }

  const double mean_err = std::accumulate(err.begin(), err.end(), 0.0) / E;
  std::printf("{\n \"impl\": \"tierlab %s\",\n", rc->description().c_str());
  std::printf(" \"data\": \"%s\",\n", o.data.empty() ? "own generator (same distribution)" : "numpy dump");
  std::printf(" \"tokens\": %d,\n \"dim\": %d,\n \"kv_heads\": %d,\n \"query_heads_per_kv\": %d,\n"
              " \"queries_per_head\": %d,\n \"allocations\": %d,\n \"repeats\": %d,\n",
              o.tokens, o.dim, H, o.group_size, o.queries, E, o.repeats);
  std::printf(" \"setup_seconds\": %.6g,\n \"seconds_per_allocation\": %.6g,\n"
              " \"seconds_per_allocation_amortized\": %.6g,\n \"cpu_seconds_per_allocation\": %.6g,\n",
              median(setup_times), median(alloc_times), median(amortized), median(alloc_cpu));
  std::printf(" \"mean_rel_error\": %.12g,\n \"api_vs_two_phase_max_rel_diff\": %.3g", mean_err,
              max_rel_diff(err_api, err));
  if (!o.data.empty()) {
    // Same instance: our KIVI against the reference's, and the errors against the reference's.
    double kivi_max = 0;
    long long kivi_diff = 0;
    for (int h = 0; h < H; ++h) {
      kivi_max = std::max({kivi_max, double((k2[h] - in.k2_ref[h]).cwiseAbs().maxCoeff()),
                           double((k4[h] - in.k4_ref[h]).cwiseAbs().maxCoeff())});
      kivi_diff += (k2[h].array() != in.k2_ref[h].array()).count() + (k4[h].array() != in.k4_ref[h].array()).count();
    }
    std::vector<HeadBatch> ref_batches = batches;  // the reference's own KIVI keys
    for (int h = 0; h < H; ++h) ref_batches[h].problem.variants = {&in.k2_ref[h], &in.k4_ref[h], &in.k[h]};
    const std::vector<double> err_refkeys = allocation_errors(*rc, ref_batches, E);
    const double ref_mean = std::accumulate(in.ref_err_f32.begin(), in.ref_err_f32.end(), 0.0) / E;
    std::printf(",\n \"kivi_elements_differing_from_numpy\": %lld,\n \"kivi_max_abs_diff_from_numpy\": %.3g,\n",
                kivi_diff, kivi_max);
    std::printf(" \"numpy_mean_rel_error\": %.12g,\n", ref_mean);
    std::printf(" \"max_rel_diff_per_allocation_vs_numpy_f32\": %.3g,\n", max_rel_diff(err, in.ref_err_f32));
    std::printf(" \"max_rel_diff_per_allocation_vs_numpy_f64\": %.3g,\n", max_rel_diff(err, in.ref_err_f64));
    std::printf(" \"max_rel_diff_vs_numpy_f64_with_numpy_kivi_keys\": %.3g", max_rel_diff(err_refkeys, in.ref_err_f64));
  }
  std::printf("\n}\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_recompute_cpu: %s\n", e.what());
  return 1;
}
