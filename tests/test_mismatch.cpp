// Distortion-model mismatch (scenarios/analyses/mismatch.hpp): the exact per-head bit allocation
// against exhaustive enumeration, the fitted beta against an independent least-squares fit
// of independently measured noise, and the allocation invariants on a tiny synthetic trace.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <random>
#include <sstream>

#include "gpu/recompute.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/analyses/mismatch.hpp"
#include "tests/support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {

// Least cost of every assignment of widths to heads within the budget (exhaustive).
double brute_force(const std::vector<std::vector<double>>& cost, const std::vector<int>& bits, int total) {
  const std::size_t H = cost.size(), K = bits.size();
  std::vector<std::size_t> k(H, 0);
  double best = INFINITY;
  while (true) {
    int used = 0;
    double c = 0;
    for (std::size_t h = 0; h < H; ++h) used += bits[k[h]], c += cost[h][k[h]];
    if (used <= total) best = std::min(best, c);
    std::size_t h = 0;
    for (; h < H; ++h) {
      if (++k[h] < K) break;
      k[h] = 0;
    }
    if (h == H) break;
  }
  return best;
}

const char* kScenario =
    "name: mm\n"
    "traces:\n"
    "  synthetic:\n"
    "    presets: [tiny]\n"
    "mismatch:\n"
    "  quantizers: [{quantizer: kivi, residual: 0}, token, turboquant]\n"
    "  bits: [2, 3, 4]\n"
    "  budgets: [3]\n";

struct TinyTrace {
  std::string path;
  TinyTrace() {
    SynthParams p = synth_preset("tiny");
    p.seed = 3;
    path = std::string(TIERLAB_BINARY_DIR) + "/test_mismatch_tiny.safetensors";
    write_synthetic_trace(p, path);
  }
  ~TinyTrace() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

std::unique_ptr<Recomputer> cpu() {
  std::string note;
  auto b = make_recomputer(Backend::Cpu, &note);
  REQUIRE(b);
  return b;
}

}  // namespace

TEST_CASE("allocate_bits_exact finds the exhaustive optimum within the budget") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const std::vector<int> bits{2, 3, 4, 6};
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t H = 1 + trial % 5;
    std::vector<std::vector<double>> cost(H, std::vector<double>(bits.size()));
    for (auto& row : cost) {
      double c = 1.0 + 10 * u(rng);
      for (auto& x : row) x = c, c *= 0.1 + 0.8 * u(rng);  // decreasing in bits
    }
    const int total = static_cast<int>(2 * H + trial % (4 * H + 1));
    const std::vector<int> b = allocate_bits_exact(cost, bits, total);
    REQUIRE(b.size() == H);
    int used = 0;
    double c = 0;
    for (std::size_t h = 0; h < H; ++h) {
      const auto k = std::find(bits.begin(), bits.end(), b[h]) - bits.begin();
      used += b[h], c += cost[h][static_cast<std::size_t>(k)];
    }
    CHECK(used <= total);
    CHECK(c == Approx(brute_force(cost, bits, total)).epsilon(1e-12));
  }
  // Infeasible: even 2 bits per head exceed the budget.
  CHECK(allocate_bits_exact({{1, 0.5}, {1, 0.5}}, {2, 4}, 3).empty());
  // Ties go to the fewer bits: equal costs at 2 and 4 bits.
  CHECK(allocate_bits_exact({{1, 1}}, {2, 4}, 4) == std::vector<int>{2});
}

TEST_CASE("mismatch on a tiny synthetic trace: fits, allocations and their invariants") {
  const TinyTrace tiny;
  const Scenario sc = parse_scenario(kScenario, "mm.yaml");
  TraceReader trace(tiny.path);
  auto backend = cpu();
  const nlohmann::json j = mismatch_cell(sc, sc.find<MismatchAnalysis>()->spec, trace, *backend);
  const std::vector<std::string> labels = j["quantizers"].get<std::vector<std::string>>();
  REQUIRE(labels == std::vector<std::string>{"kivi residual=0", "token", "turboquant"});
  REQUIRE(j["heads"].size() == 4);

  SECTION("the fitted beta equals an independent fit of independently measured noise") {
    const TraceMeta& meta = trace.meta();
    for (const auto& jh : j["heads"]) {
      const HeadData head = trace.head(jh["layer"].get<int>(), jh["kv_head"].get<int>());
      for (std::size_t q = 0; q < labels.size(); ++q) {
        const MethodSpec& spec = sc.find<MismatchAnalysis>()->spec.quantizers[q];
        std::vector<double> xs, ys;
        for (const int b : sc.find<MismatchAnalysis>()->spec.bits) {
          MethodParams p = spec.params;
          p["bits"] = std::to_string(b);
          const QuantizedHeadKeys k = make_key_quantizer(spec.name, p)->quantize(head, meta.rope);
          // mean_t of n_t = mean over the queries that see t of (q.(k^_t - k_t))^2 / d, plain
          // loops in double; query i = j W + r sits at position T - W + r (causal).
          double s = 0;
          const int T = static_cast<int>(head.keys.rows()), d = static_cast<int>(head.keys.cols());
          const int nq = static_cast<int>(head.obs_queries.rows()), W = nq / meta.group_size;
          for (int t = 0; t < T; ++t) {
            double sum = 0;
            int seen = 0;
            for (int i = 0; i < nq; ++i) {
              if (t > T - W + i % W) continue;
              double e = 0;
              for (int c = 0; c < d; ++c)
                e += static_cast<double>(head.obs_queries(i, c)) * (static_cast<double>(k.keys(t, c)) - head.keys(t, c));
              sum += e * e / d, ++seen;
            }
            s += sum / seen;
          }
          xs.push_back(b), ys.push_back(std::log(s / T));
        }
        // log n = log alpha - b log beta: the least-squares slope gives -log beta.
        const double n = static_cast<double>(xs.size());
        double mx = 0, my = 0;
        for (std::size_t i = 0; i < xs.size(); ++i) mx += xs[i] / n, my += ys[i] / n;
        double sxy = 0, sxx = 0;
        for (std::size_t i = 0; i < xs.size(); ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
        const double beta = std::exp(-sxy / sxx), alpha = std::exp(my + mx * std::log(beta));
        const auto& fit = jh["quantizers"][labels[q]];
        CHECK(fit["beta"].get<double>() == Approx(beta).epsilon(1e-6));
        CHECK(fit["alpha"].get<double>() == Approx(alpha).epsilon(1e-5));
        CHECK(beta > 1.0);  // more bits, less noise
      }
    }
  }

  SECTION("matched is never worse than mismatched under the actual quantizer's model; measured is optimal for the surrogate") {
    std::map<std::pair<std::string, std::string>, nlohmann::json> by;
    for (const auto& a : j["allocations"]) by[{a["model"].get<std::string>(), a["actual"].get<std::string>()}] = a;
    for (const auto& y : labels) {
      REQUIRE(by.count({y, y}));
      REQUIRE(by.count({"uniform", y}));
      REQUIRE(by.count({"measured", y}));
      const double matched = by[{y, y}]["predicted"].get<double>();
      const double measured_sur = by[{"measured", y}]["surrogate"].get<double>();
      for (const auto& x : labels) {
        const auto& a = by[{x, y}];
        CHECK(matched <= a["predicted"].get<double>() * (1 + 1e-12));
        CHECK(measured_sur <= a["surrogate"].get<double>() * (1 + 1e-12));
        CHECK(a["mean_bits"].get<double>() <= 3.0 + 1e-12);
      }
      CHECK(measured_sur <= by[{"uniform", y}]["surrogate"].get<double>() * (1 + 1e-12));
      // Uniform: every head at B = 3 bits, its error the mean of the per-head errors at 3 bits.
      double e = 0;
      for (const auto& jh : j["heads"]) e += jh["quantizers"][y]["error"][1].get<double>();
      CHECK(by[{"uniform", y}]["err"].get<double>() == Approx(e / 4).epsilon(1e-12));
      for (const auto& b : by[{"uniform", y}]["bits"]) CHECK(b.get<int>() == 3);
    }
  }

  SECTION("the beta table is the median and quartiles over heads; the run is deterministic") {
    const tierlab::testing::TempDir tmp("mismatch-tables");
    const std::string dir = tmp.path.string();
    const std::vector<nlohmann::json> cells{{{"id", "c0"}, {"mismatch", j}}};
    const std::string summary = write_mismatch_tables(sc, sc.find<MismatchAnalysis>()->spec, cells, dir);
    CHECK_THAT(summary, Catch::Contains("## Distortion-model mismatch"));
    std::ifstream in(dir + "/mismatch_beta.json");
    const nlohmann::json bt = nlohmann::json::parse(in);
    for (const auto& row : bt["rows"]) {
      std::vector<double> b;
      for (const auto& jh : j["heads"]) b.push_back(jh["quantizers"][row["quantizer"].get<std::string>()]["beta"].get<double>());
      std::sort(b.begin(), b.end());  // 4 heads: median = mean of the middle two, q25 at 0.75 between b0 and b1
      CHECK(row["beta_median"].get<double>() == Approx(0.5 * (b[1] + b[2])));
      CHECK(row["beta_q25"].get<double>() == Approx(b[0] + 0.75 * (b[1] - b[0])));
      CHECK(row["beta_q75"].get<double>() == Approx(b[2] + 0.25 * (b[3] - b[2])));
    }
    REQUIRE(fs::exists(dir + "/mismatch.csv"));
    REQUIRE(fs::exists(dir + "/mismatch_fits.csv"));
    const nlohmann::json again = mismatch_cell(sc, sc.find<MismatchAnalysis>()->spec, trace, *backend);
    CHECK(again.dump() == j.dump());
  }
}
