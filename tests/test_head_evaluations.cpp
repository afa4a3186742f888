// A head's query sets prepared once for all of a cell's budgets (scenarios/pipeline/evaluation.hpp
// HeadEvaluations): the interior advantage of every budget is the same, bit for bit, as with each
// budget's recomputation prepared on its own.
#include <catch2/catch.hpp>

#include <cmath>
#include <utility>

#include "gpu/recompute.hpp"
#include "model/surrogate.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/head.hpp"

using namespace tierlab;

namespace {

void check_same(const ErrorMetrics& x, const ErrorMetrics& y) {
  CHECK(x.rel_error == y.rel_error);
  CHECK(x.abs_error == y.abs_error);
  CHECK(x.attn_tv == y.attn_tv);
  CHECK(x.logit_error == y.logit_error);
}

}  // namespace

TEST_CASE("a head's query sets prepared once give every budget the errors of a budget evaluated alone",
          "[pipeline][recompute]") {
  SynthParams p = synth_preset("tiny");
  p.prompt_len = 192;
  p.decode_steps = 6;
  auto cpu = make_recomputer(Backend::Cpu);
  const RopeParams rope = synth_meta(p).rope;
  int compared = 0;
  for (int h = 0; h < p.n_kv_heads; ++h) {
    const HeadData head = synth_head(p, 0, h);
    InteriorOptions io;
    io.ladder = RateLadder::parse("evict,kivi2,kivi4,exact");
    const SurrogateCosts costs = surrogate_costs(head, rope, observation_queries(head), io.ladder);
    const std::vector<double> rates = ladder_rates(head, rope, io.ladder, io.rate_kind);
    HeadEvaluations evaluations(head, *cpu);
    for (double B : {1.0, 2.5, 4.0, 8.0}) {
      io.budget = B;
      INFO("head " << h << ", B = " << B);
      const HeadInterior alone = head_interior(head, rope, costs, rates, io, *cpu);
      const HeadInterior shared = head_interior(head, rope, costs, rates, io, *cpu, &evaluations);
      for (const auto& [x, y] : {std::pair{&alone.Q, &shared.Q}, std::pair{&alone.E, &shared.E}, std::pair{&alone.M, &shared.M}}) {
        REQUIRE(x->feasible == y->feasible);
        if (!x->feasible) continue;
        CHECK(x->option == y->option);
        check_same(x->obs, y->obs);
        check_same(x->decode, y->decode);
        ++compared;
      }
      CHECK((alone.advantage_decode == shared.advantage_decode ||
             (std::isnan(alone.advantage_decode) && std::isnan(shared.advantage_decode))));
    }
  }
  CHECK(compared >= 3 * p.n_kv_heads);
}
