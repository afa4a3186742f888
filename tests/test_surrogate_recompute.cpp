// The surrogate's eviction cost c_t(0) against the exact recomputation (docs/model.md sections 8
// and 3): removing token t alone changes the output by exactly
//   ||o^ - o||^2 = p_t^2 ||v_t - o||^2 / (1 - p_t)^2,
// so mean_q of it is c_t(0). The recomputation backend (not the model's own code) is the
// judge here, on every backend that is available.
#include <catch2/catch.hpp>

#include <random>

#include "gpu/recompute.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"

using namespace tierlab;

TEST_CASE("c_t(0) equals the recomputed error of removing token t alone", "[surrogate][recompute]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (const std::string name : {"cpu", "cuda"}) {
    DYNAMIC_SECTION("backend " << name) {
      std::string note;
      auto rc = make_recomputer(parse_backend(name), &note);
#ifdef TIERLAB_TEST_EMULATED_CUDA
      if (name == "cuda") {  // the emulated build must run the CUDA case, on the tensor-core path
        INFO("no emulated CUDA backend: " << note);
        REQUIRE(rc);
        INFO(rc->description());
        REQUIRE(rc->description().find("tensor-core path") != std::string::npos);
        REQUIRE(rc->description().find("failed") == std::string::npos);
      }
#endif
      if (!rc) {
        WARN("SKIPPED: " << note);
        continue;
      }
      for (const int T : {5, 40, 300}) {
        const int d = 16, nq = 6;
        MatrixRM q(nq, d), k(T, d), v(T, d);
        for (int i = 0; i < q.size(); ++i) q.data()[i] = 2.5f * n01(rng);
        for (int i = 0; i < k.size(); ++i) k.data()[i] = n01(rng);
        for (int i = 0; i < v.size(); ++i) v.data()[i] = n01(rng);
        const TokenWeights w = token_weights(k, v, all_visible(q, k.rows()));
        HeadBatch batch;
        batch.problem.queries = &q;
        batch.problem.exact_keys = &k;
        batch.problem.values = &v;
        batch.problem.variants = {&k};
        for (int t = 0; t < T; ++t) {
          Selection sel(T, 1);
          sel[t] = 0;
          batch.selections.push_back(sel);
        }
        const EvalResult r = rc->evaluate({batch});
        INFO(r.message);
        REQUIRE(r.ok);
        for (int t = 0; t < T; ++t) {
          INFO("T " << T << " token " << t << ": recomputed " << r.errors[0][t].abs_error << ", c_t(0) "
                    << w.evict_cost[t]);
          CHECK(r.errors[0][t].abs_error == Approx(w.evict_cost[t]).epsilon(1e-5).margin(1e-12));
        }
      }
      CHECK(rc->description().find("redone") == std::string::npos);  // no fp16 overflow on the tc path
    }
  }
}
