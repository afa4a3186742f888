// KV-COBRA's allocation (solvers/kvcobra_allocator.hpp): the distortion model and C1 on a
// hand-computed spectrum, the released C2 against an independent numpy transcription of
// kvcobra/allocation.py, and the exact redistribution against exhaustive search.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "model/base/error.hpp"
#include "model/synthetic/synthetic.hpp"
#include "model/io/trace.hpp"
#include "solvers/kvcobra_allocator.hpp"
#include "tests/support.hpp"

using namespace tierlab;

namespace {

std::vector<std::vector<double>> three_heads(int d) {
  std::vector<std::vector<double>> w(3);
  for (int i = 0; i < d; ++i) {
    w[0].push_back(10.0 * std::pow(2.0, -i));
    w[1].push_back(1.0 / (1 + i));
    w[2].push_back(0.1 * std::pow(0.9, i));
  }
  return w;
}

int pad(int r) {
  int p = 1;
  while (p < r) p <<= 1;
  return p;
}

}  // namespace

TEST_CASE("KV-COBRA distortion model and C1 on a hand-computed spectrum", "[kvcobra]") {
  // D(r, b) = sum_{i>r} w_i + 2^-2b / 12 sum_{i<=r} w_i.
  CHECK(kvcobra_distortion({4, 2, 1, 0.5}, 2, 2) == Approx(1.5 + 6.0 / 192));
  const std::vector<double> w = {8, 4, 2, 1, 0.5, 0.25, 0.125, 0.0625};
  KvcobraAllocOptions o;
  // B = 8: r = 2 (b = 4): 3.9375 + 12/3072 = 3.9414; r = 4 (b = 2): 0.9375 + 15/192 = 1.0156.
  const RankBits a = kvcobra_rank_bits(w, 8, 8, o);
  CHECK(a.rank == 4);
  CHECK(a.bits == 2);
  // B = 12: r = 6 (b = 2): 0.1875 + 15.75/192 = 0.2695 beats r = 2 (b = 6), r = 4 (b = 3).
  const RankBits b = kvcobra_rank_bits(w, 12, 8, o);
  CHECK(b.rank == 6);
  CHECK(b.bits == 2);
  // B = 11 (odd): r = 4, b = 2 by C1, then the fix-up fills the budget: r = 11 // 2 = 5.
  const RankBits c = kvcobra_rank_bits(w, 11, 8, o);
  CHECK(c.rank == 5);
  CHECK(c.bits == 2);
  CHECK(kvcobra_distortion(w, 5, 2) == Approx(0.4375 + 15.5 / 192));
}

TEST_CASE("KV-COBRA's released water-filling matches an independent transcription", "[kvcobra]") {
  // Budgets and (r, b) from an independent numpy transcription of kvcobra/allocation.py and
  // method.py (C1 floor, the fix-up, C2: 5 rounds, damping 0.3), run once; d = 16, three
  // heads of different spectra.
  const int d = 16;
  const auto w = three_heads(d);
  struct Case {
    double bpd;
    std::vector<long long> budgets;
    std::vector<std::pair<int, int>> rb;
  };
  const std::vector<Case> cases = {{2.0, {35, 30, 29}, {{11, 3}, {15, 2}, {14, 2}}},
                                   {1.0, {13, 19, 14}, {{6, 2}, {9, 2}, {7, 2}}},
                                   {3.5, {67, 59, 40}, {{13, 5}, {16, 3}, {16, 2}}}};
  for (const Case& c : cases) {
    INFO("bits per dim " << c.bpd);
    KvcobraAllocOptions o;
    o.budget = c.bpd;
    CHECK(kvcobra_waterfill_budgets(w, d, o) == c.budgets);
    const KvcobraAllocation a = allocate_kvcobra(w, d, o);
    REQUIRE(a.heads.size() == 3);
    for (int h = 0; h < 3; ++h) {
      CHECK(a.heads[h].rank == c.rb[h].first);
      CHECK(a.heads[h].bits == c.rb[h].second);
      CHECK(a.heads[h].head_budget == c.budgets[h]);
      CHECK(a.heads[h].rank * a.heads[h].bits <= a.heads[h].head_budget);
    }
  }
  // uniform: every head at floor(B d) = 32 bits, C1 alone.
  KvcobraAllocOptions u;
  u.redistribute = "uniform";
  const KvcobraAllocation a = allocate_kvcobra(w, d, u);
  for (const auto& h : a.heads) CHECK(h.head_budget == 32);
}

TEST_CASE("KV-COBRA optimal redistribution equals exhaustive search and meets the budget", "[kvcobra]") {
  const int d = 8;
  const auto w = three_heads(d);
  for (const std::string rate : {"paper", "code"}) {
    for (double B : {0.75, 1.5, 2.0, 3.0, 5.0}) {
      INFO(rate << " budget " << B);
      KvcobraAllocOptions o;
      o.redistribute = "optimal";
      o.rate = rate;
      o.budget = B;
      const KvcobraAllocation a = allocate_kvcobra(w, d, o);
      // Exhaustive: every (r in {2,4,6,8}, b in 2..8) for each of the three heads.
      double best = std::numeric_limits<double>::infinity();
      for (int r0 = 2; r0 <= d; r0 += 2)
        for (int b0 = 2; b0 <= 8; ++b0)
          for (int r1 = 2; r1 <= d; r1 += 2)
            for (int b1 = 2; b1 <= 8; ++b1)
              for (int r2 = 2; r2 <= d; r2 += 2)
                for (int b2 = 2; b2 <= 8; ++b2) {
                  auto R = [&](int r, int b) { return double(rate == "code" ? pad(r) : r) * b; };
                  if (R(r0, b0) + R(r1, b1) + R(r2, b2) > B * d * 3 + 1e-9) continue;
                  auto D = [&](int h, int r, int b) {
                    double tail = 0, head = 0;
                    for (int i = 0; i < d; ++i) (i < r ? head : tail) += w[h][i];
                    return tail + head / (12.0 * std::pow(4.0, b));
                  };
                  best = std::min(best, D(0, r0, b0) + D(1, r1, b1) + D(2, r2, b2));
                }
      if (!std::isfinite(best)) {
        CHECK(a.status == SolveStatus::Infeasible);
        continue;
      }
      REQUIRE(a.has_solution());
      CHECK(a.objective == Approx(best).epsilon(1e-12));
      CHECK((rate == "code" ? a.code_rate : a.nominal_rate) <= B + 1e-12);
    }
  }
}

TEST_CASE("KV-COBRA allocator options are checked and name the field", "[kvcobra]") {
  const std::string e = testing::error_of<InputError>(
      [] { KvcobraAllocOptions::from_params(2.0, {{"redistribute", "greedy"}}); });
  CHECK(e.find("redistribute") != std::string::npos);
  const std::string u = testing::error_of<InputError>([] { KvcobraAllocOptions::from_params(2.0, {{"rnk", "4"}}); });
  CHECK(u.find("min_rank") != std::string::npos);
  const KvcobraAllocOptions o = KvcobraAllocOptions::from_params(1.5, {{"redistribute", "optimal"}, {"rate", "code"}});
  CHECK(o.redistribute == "optimal");
  CHECK(o.name() == "kvcobra:B=1.5,redistribute=optimal,rate=code");
  CHECK(kvcobra_allocator_method().name == "kvcobra");
  CHECK_THROWS_AS(allocate_kvcobra({{1.0, 2.0}}, 2, KvcobraAllocOptions{}), InputError);  // not descending
}

TEST_CASE("KV-COBRA allocation of a trace is applied by the kvcobra quantizer with its exact rate", "[kvcobra]") {
  testing::TempDir dir("kvcobra-alloc");
  const std::string path = dir.file("tiny.safetensors");
  const SynthParams sp = synth_preset("tiny");
  write_synthetic_trace(sp, path);
  const TraceReader trace(path);
  const TraceMeta& m = trace.meta();
  KvcobraAllocOptions o = KvcobraAllocOptions::from_params(1.5, {{"redistribute", "optimal"}, {"rate", "code"}});
  const KvcobraAllocation a = allocate_kvcobra(trace, o);
  REQUIRE(a.has_solution());
  REQUIRE(static_cast<int>(a.heads.size()) == m.n_heads());
  double code = 0;
  for (std::size_t i = 0; i < a.heads.size(); ++i) {
    const auto& h = a.heads[i];
    INFO("head " << i << " rank " << h.rank << " bits " << h.bits);
    CHECK(h.layer == static_cast<int>(i) / m.n_kv_heads);
    CHECK(h.kv_head == static_cast<int>(i) % m.n_kv_heads);
    const HeadData head = trace.head(h.layer, h.kv_head);
    // The weights the allocator saw are the quantizer's basis weights.
    const auto w = kvcobra_direction_weights(head, m.rope, "auto");
    CHECK(h.distortion == Approx(kvcobra_distortion(w, h.rank, h.bits)));
    const QuantizedHeadKeys q = a.quantizer(i)->quantize(head, m.rope);
    const double n = double(m.prompt_len), d = double(m.head_dim), p = pad(h.rank);
    CHECK(q.rate().code_bits == Approx(p * h.bits / d));
    CHECK(q.meta_bits() == Approx(32.0 * p + 16.0 * d * h.rank));  // one group; fp16 basis
    CHECK(q.rate().total_bits == Approx((n * p * h.bits + 32.0 * p + 16.0 * d * h.rank) / (n * d)));
    code += q.rate().code_bits;
  }
  CHECK(code / double(a.heads.size()) <= 1.5 + 1e-12);
  CHECK(code / double(a.heads.size()) == Approx(a.code_rate));
}

TEST_CASE("kvcobra's declared parameter defaults are the options' defaults, read by the one parameter reader") {
  const KvcobraAllocOptions d;
  const KvcobraAllocOptions r = KvcobraAllocOptions::from_params(d.budget, {});
  CHECK(r.redistribute == d.redistribute);
  CHECK(r.rate == d.rate);
  CHECK(r.rounding == d.rounding);
  CHECK(r.min_rank == d.min_rank);
  CHECK(r.min_bits == d.min_bits);
  CHECK(r.max_bits == d.max_bits);
  CHECK(r.iterations == d.iterations);
  CHECK(r.damping == d.damping);
  CHECK(r.basis == d.basis);
  CHECK(r.basis_cost == d.basis_cost);
  CHECK(r.group == d.group);
  CHECK(r.seed == d.seed);
  CHECK(r.name() == d.name());
  // Given values are read (and checked) the same way as every method's.
  CHECK(KvcobraAllocOptions::from_params(2, {{"min_rank", "4"}}).min_rank == 4);
  CHECK_THROWS_WITH(KvcobraAllocOptions::from_params(2, {{"min_rank", "four"}}),
                    "kvcobra allocator: parameter min_rank = 'four' is not an integer.");
  CHECK_THROWS_WITH(KvcobraAllocOptions::from_params(2, {{"rank", "4"}}),
                    Catch::StartsWith("kvcobra allocator: unknown parameter 'rank'; valid parameters are redistribute, "));
}
