// Benchmark of the rate-distortion curve (scenarios/pipeline/rd_curve.hpp, issue 18): one
// T-token head (default 32,768, d = 128, 64 decode rows: group size 1 x 64 decode steps) and
// H heads (default 8), a 64-point curve (B = 0.25:16:0.25 bits per key element, code bits)
// for the families Q, E and M, recomputed on the decode rows, four ways side by side:
//   curve         rd_curve as it runs by default: costs once per head; every budget's exact
//                 optimum of each family option from ONE parametric pass (solvers/
//                 exact_parametric.hpp: one sort of the hull slopes); per head the exact part
//                 of the recomputation prepared once; the E points updated along their nested
//                 kept sets (cpu::IncrementalKeptSet: the tokens each point adds, rank-one
//                 updates); the other distinct allocations evaluated on the prepared head
//   per-point     rd_curve with those two switched off (RdCurveOptions sweep = incremental =
//                 false): one exact solve and one evaluation per point (the curve before them)
//   independent   the same points as `tierlab solve --budget B --recompute` computes them
//                 one by one: per point the costs' solve (allocate_heads), the materialised
//                 keys and evaluate_decode_steps through the Recomputer (prepare + evaluate
//                 per call); the errors must equal the curve's within 1e-5 relative
//   numpy         ../shared/bench/numpy_recompute_ref.py at the same sizes (tokens, d, heads,
//                 64 query rows) and the same number of allocations (3 x 64 per head), run by
//                 this program (--numpy PATH; skipped when the file or /usr/bin/python3 is
//                 missing). Its workload is the nearest the peer has: keys quantized densely
//                 per tier (one logit matrix per tier computed once), random allocations;
//                 it neither solves nor re-quantizes tier-local groups, so it does less per
//                 point than either tierlab side.
// The two curve forms run --repeat times (default 3; the median is reported), the
// independent and NumPy sides once. Prints one JSON object per head count with the times
// and the ratios; exit status 3 when the curve, the per-point curve and the independent
// errors disagree beyond 1e-5 relative.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/base/clock.hpp"
#include "model/base/openmp_policy.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/rd_curve.hpp"

using namespace tierlab;

namespace {

struct Options {
  int tokens = 32768, dim = 128, decode_rows = 64;
  std::vector<int> heads{1, 8};
  std::string budgets = "0.25:16:0.25";
  std::string numpy = "../shared/bench/numpy_recompute_ref.py";
  bool independent = true;
  std::string queries = "decode";
  int repeat = 3;
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
    else if (a == "--decode-rows") o.decode_rows = std::stoi(value());
    else if (a == "--heads") {
      o.heads.clear();
      const std::string v = value();
      for (std::size_t p = 0; p <= v.size();) {
        const std::size_t e = std::min(v.find(',', p), v.size());
        o.heads.push_back(std::stoi(v.substr(p, e - p)));
        p = e + 1;
      }
    } else if (a == "--budgets") o.budgets = value();
    else if (a == "--numpy") o.numpy = value();
    else if (a == "--no-independent") o.independent = false;
    else if (a == "--queries") o.queries = value();
    else if (a == "--repeat") o.repeat = std::max(1, std::stoi(value()));
    else throw std::runtime_error("unknown option " + a +
                                  " (--tokens T --dim D --decode-rows R --heads 1,8 --budgets A:B:STEP --numpy PATH --no-independent --repeat N)");
  }
  return o;
}

double numpy_seconds(const Options& o, int heads, int allocations, std::string* impl) {
  if (o.numpy.empty() || !std::filesystem::exists(o.numpy) || !std::filesystem::exists("/usr/bin/python3")) return NAN;
  const std::string cmd = "/usr/bin/python3 '" + o.numpy + "' --tokens " + std::to_string(o.tokens) + " --dim " +
                          std::to_string(o.dim) + " --kv-heads " + std::to_string(heads) + " --group-size 1 --queries " +
                          std::to_string(o.decode_rows) + " --allocations " + std::to_string(allocations);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return NAN;
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  if (::pclose(p) != 0) return NAN;
  const nlohmann::json j = nlohmann::json::parse(out);
  *impl = j.value("impl", "numpy");
  return j["seconds_per_allocation"].get<double>() * allocations + j.value("setup_seconds", 0.0);
}

}  // namespace

int main(int argc, char** argv) try {
  use_passive_openmp_wait(argv);
  const Options o = parse(argc, argv);
  int status = 0;
  for (const int H : o.heads) {
    SynthParams sp = synth_preset("llama-like");
    sp.seed = 7;
    sp.n_layers = 1;
    sp.n_kv_heads = H;
    sp.group_size = 1;
    sp.head_dim = o.dim;
    sp.prompt_len = o.tokens;
    sp.decode_steps = o.decode_rows;
    const TraceMeta meta = synth_meta(sp);
    std::vector<HeadData> data;
    for (int h = 0; h < H; ++h) data.push_back(synth_head(sp, 0, h));
    std::vector<const HeadData*> heads;
    for (const HeadData& h : data) heads.push_back(&h);

    RdCurveOptions ro;
    ro.budgets = parse_budget_grid(o.budgets);
    ro.families = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed};
    ro.solve.rate_kind = RateKind::Code;
    ro.solve.scope = Scope::Head;
    ro.queries = parse_rd_queries(o.queries);
    ro.decode_step = o.decode_rows;
    // The median of --repeat runs of one curve form, and its last curve.
    auto timed = [&](bool fast, RdCurve& last, std::vector<double>& times) {
      RdCurveOptions x = ro;
      x.sweep = x.incremental = fast;
      for (int r = 0; r < o.repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        last = rd_curve(heads, meta.rope, x);
        times.push_back(seconds_since(t0));
      }
      std::vector<double> sorted = times;
      std::sort(sorted.begin(), sorted.end());
      return sorted[sorted.size() / 2];
    };
    auto curve_json = [](const RdCurve& c, double median, const std::vector<double>& times) {
      return nlohmann::json{{"median_seconds", median},
                            {"seconds", times},
                            {"costs", c.seconds_costs},
                            {"solves", c.seconds_solve},
                            {"recompute", c.seconds_recompute},
                            {"evaluations", c.evaluations},
                            {"swept_points", c.swept_points},
                            {"incremental_points", c.incremental_points},
                            {"incremental_resets", c.incremental_resets},
                            {"incremental_updates", c.incremental_updates}};
    };
    RdCurve c, slow;
    std::vector<double> t_fast, t_slow;
    const double curve_s = timed(true, c, t_fast);
    const double slow_s = timed(false, slow, t_slow);
    double max_rel_slow = 0;
    for (std::size_t p = 0; p < c.points.size(); ++p) {
      if (!c.points[p].feasible) continue;
      const double a = c.points[p].error.rel_error, b = slow.points[p].error.rel_error;
      max_rel_slow = std::max(max_rel_slow, std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), 1e-300}));
    }
    if (!(max_rel_slow <= 1e-5)) status = 3;

    nlohmann::json j = {{"heads", H},
                        {"tokens", o.tokens},
                        {"dim", o.dim},
                        {"decode_rows", o.decode_rows},
                        {"points", c.points.size()},
                        {"repeat", o.repeat},
                        {"curve", curve_json(c, curve_s, t_fast)},
                        {"per_point", curve_json(slow, slow_s, t_slow)},
                        {"per_point_max_rel_diff", max_rel_slow},
                        {"speedup_vs_per_point", slow_s / curve_s},
                        {"solve_speedup_vs_per_point", slow.seconds_solve / std::max(c.seconds_solve, 1e-9)},
                        {"recompute_speedup_vs_per_point", slow.seconds_recompute / std::max(c.seconds_recompute, 1e-9)}};
    if (o.independent && ro.queries == RdQueries::Decode) {
      auto backend = make_recomputer(Backend::Cpu);
      const auto t1 = std::chrono::steady_clock::now();
      std::vector<HeadCosts> costs;
      for (const HeadData* h : heads) costs.push_back(head_costs(*h, meta.rope, ro.solve));
      TraceMeta m1 = meta;
      double max_rel = 0;
      int evaluated = 0;
      for (std::size_t p = 0; p < c.points.size(); ++p) {
        const RdPoint& pt = c.points[p];
        AllocateOptions ao = ro.solve;
        ao.family = pt.family;
        ao.budget = pt.budget;
        const AllocationReport rep = allocate_heads(m1, costs, ao, [&](int, const std::vector<std::uint8_t>& t) {
          return allocation_rate(o.tokens, o.dim, ao.ladder, t);
        });
        if (!rep.has_solution()) continue;
        double mean = 0;
        for (int i = 0; i < H; ++i) {
          const MaterializedKeys mk = materialize(*heads[static_cast<std::size_t>(i)], meta.rope, ao.ladder,
                                                  rep.allocation.tiers[static_cast<std::size_t>(i)]);
          mean += evaluate_decode_steps(*heads[static_cast<std::size_t>(i)], mk.keys, mk.kept, *backend).rel_error / H;
          ++evaluated;
        }
        const double a = pt.error.rel_error;
        max_rel = std::max(max_rel, std::fabs(a - mean) / std::max({std::fabs(a), std::fabs(mean), 1e-300}));
      }
      const double ind_s = seconds_since(t1);
      j["independent"] = {{"seconds", ind_s}, {"evaluations", evaluated}, {"max_rel_diff", max_rel}};
      j["speedup_vs_independent"] = ind_s / curve_s;
      j["per_point_speedup_vs_independent"] = ind_s / slow_s;
      if (!(max_rel <= 1e-5)) status = 3;
    }
    std::string impl;
    const double np_s = numpy_seconds(o, H, static_cast<int>(c.points.size()), &impl);
    if (std::isfinite(np_s)) {
      j["numpy"] = {{"impl", impl}, {"seconds", np_s}, {"allocations", c.points.size()}};
      j["speedup_vs_numpy"] = np_s / curve_s;
      j["per_point_speedup_vs_numpy"] = np_s / slow_s;
    } else {
      j["numpy"] = "skipped: " + o.numpy + " or /usr/bin/python3 not found, or it failed";
    }
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return status;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_rd_curve: %s\n", e.what());
  return 2;
}
