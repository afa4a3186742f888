// Heads side by side (scenarios/pipeline/parallel_heads.hpp): the numbers of a cell are those of
// a run on one thread, bit for bit; every head is computed once; errors, cancellation and the
// phase totals reach the caller as they would from one thread.
#include <omp.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "gpu/cpu_recompute.hpp"
#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "model/base/phases.hpp"
#include "model/io/trace.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/pipeline/parallel_heads.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using namespace tierlab::testing;

namespace {

// Restores the OpenMP thread count a test changed.
struct OmpThreads {
  int saved = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(saved); }
};

// A backend that says it takes no concurrent calls (as CUDA's does); it is never called here.
struct OneQueue final : Recomputer {
  std::string name() const override { return "one-queue"; }
  std::string description() const override { return "one-queue"; }
  EvalResult evaluate(const std::vector<HeadBatch>&) override { return {}; }
};

nlohmann::json family_json(const ModelFamily& f) {
  return {{"feasible", f.feasible}, {"err_decode", f.err_decode}, {"err_obs", f.err_obs},
          {"total_bits", f.rate.total_bits}, {"surrogate", f.surrogate}, {"repaired", f.repaired}};
}

// Every number of the reports, the model-wide ones included; timings and the backend's
// description (it names the thread count) left out.
nlohmann::json without_timings(const std::vector<InteriorReport>& reps) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : reps) {
    nlohmann::json x = to_json(r);
    x.erase("seconds");
    x.erase("backend");
    const ModelScopeReport& m = r.model;
    x["model"] = {{"Q", family_json(m.Q)}, {"E", family_json(m.E)}, {"routed", family_json(m.routed)},
                  {"routed_is_endpoint", m.routed_is_endpoint}, {"A_decode", m.advantage_decode},
                  {"A_obs", m.advantage_obs}, {"routed_QEM", {m.routed_Q, m.routed_E, m.routed_M}}};
    j.push_back(x);
  }
  return j;
}

}  // namespace

TEST_CASE("A trace's heads computed side by side give the interior advantage the bits of a one-thread run, "
          "the model-wide allocations included",
          "[parallel_heads]") {
  TempDir dir("parallel-heads");
  SynthParams p = synth_preset("tiny");
  p.n_layers = 2;
  p.n_kv_heads = 3;
  p.prompt_len = 1536;  // products large enough for Eigen to split them over threads
  p.head_dim = 64;
  p.decode_steps = 16;
  p.seed = 3;
  const std::string path = dir.file("t.safetensors");
  write_synthetic_trace(p, path);
  const TraceReader trace(path);
  InteriorOptions opt;
  opt.ladder = RateLadder::parse("evict,kivi2,kivi4,kivi8,exact");
  opt.rate_kind = RateKind::Total;
  const std::vector<double> budgets = {2, 3};
  auto backend = make_cpu_recomputer();
  nlohmann::json one, two;
  {
    OmpThreads t(1);
    REQUIRE(head_threads(trace.meta().n_heads(), *backend) == 1);
    one = without_timings(interior_advantage(trace, opt, budgets, *backend, nullptr, {}, /*model_scope=*/true));
  }
  {
    OmpThreads t(2);
    REQUIRE(head_threads(trace.meta().n_heads(), *backend) == 2);
    reset_phase_totals();
    // Progress comes from the team's threads, one report at a time (Catch's checks are not
    // thread-safe: the reports are recorded and checked afterwards).
    std::vector<std::pair<int, int>> reports;
    two = without_timings(interior_advantage(trace, opt, budgets, *backend, nullptr,
                                             [&](int done, int total) { reports.emplace_back(done, total); },
                                             /*model_scope=*/true));
    REQUIRE(reports.size() == 6);
    for (int k = 0; k < 6; ++k) CHECK(reports[static_cast<std::size_t>(k)] == std::make_pair(k + 1, 6));
    CHECK(phase_totals().threads == 2);
    CHECK(omp_get_max_threads() == 2);  // the team's one-thread setting ended with it
  }
  CHECK(one.dump() == two.dump());
  CHECK(two[0]["model"]["routed"]["feasible"] == true);
}

TEST_CASE("for_each_head computes every head once, and after a failure rethrows the error of the first failing "
          "head",
          "[parallel_heads]") {
  OmpThreads t(2);
  auto backend = make_cpu_recomputer();
  std::mutex m;
  std::multiset<int> seen;
  for_each_head(37, *backend, [&](int i) {
    const std::lock_guard<std::mutex> lock(m);
    seen.insert(i);
  });
  REQUIRE(seen.size() == 37);
  for (int i = 0; i < 37; ++i) CHECK(seen.count(i) == 1);

  // Heads 5 and 9 fail (9 first in time): the error is head 5's, as on one thread, and every
  // head before 5 was computed.
  std::set<int> done;
  std::atomic<bool> nine_failed{false};
  try {
    for_each_head(40, *backend, [&](int i) {
      if (i == 9) {
        nine_failed = true;
        throw std::runtime_error("head 9");
      }
      if (i == 5) {
        for (int k = 0; k < 2000 && !nine_failed; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        throw std::runtime_error("head 5");
      }
      const std::lock_guard<std::mutex> lock(m);
      done.insert(i);
    });
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "head 5");
  }
  for (int i = 0; i < 5; ++i) CHECK(done.count(i) == 1);
  CHECK(done.size() < 38);  // heads after the failure were not all started
}

TEST_CASE("for_each_head's threads see the caller's cancel flag and add their phase totals to the caller's",
          "[parallel_heads]") {
  OmpThreads t(2);
  auto backend = make_cpu_recomputer();
  std::atomic<bool> flag{false};
  const CancelScope scope(&flag);
  reset_phase_totals();
  std::atomic<int> wrong_flag{0}, in_team{0}, one_thread{0};
  for_each_head(8, *backend, [&](int) {
    if (current_cancel_flag() != &flag) ++wrong_flag;
    if (omp_in_parallel()) ++in_team;
    if (omp_get_max_threads() == 1) ++one_thread;
    const PhaseScope ps(Phase::Surrogate);
    add_phase_work(Phase::Surrogate, 1000.0, 10.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  CHECK(wrong_flag == 0);
  CHECK(in_team == 8);
  CHECK(one_thread == 8);
  CHECK(phase_totals().flops[static_cast<std::size_t>(Phase::Surrogate)] == 8000.0);
  CHECK(phase_totals().bytes[static_cast<std::size_t>(Phase::Surrogate)] == 80.0);
  CHECK(phase_totals().seconds[static_cast<std::size_t>(Phase::Surrogate)] >= 8 * 0.005);
  CHECK(phase_totals().threads == 2);

  // A cancel request reaches every head's thread.
  flag = true;
  CHECK_THROWS_AS(for_each_head(8, *backend, [&](int) { throw_if_cancelled(current_cancel_flag()); }), Cancelled);
}

TEST_CASE("Heads run one at a time on the calling thread for a backend without concurrent calls, inside a "
          "parallel region, with one OpenMP thread, and under a limit of one",
          "[parallel_heads]") {
  OneQueue queue;
  auto cpu = make_cpu_recomputer();
  {
    OmpThreads t(2);
    CHECK(head_threads(8, queue) == 1);
    CHECK(head_threads(8, *cpu) == 2);
    CHECK(head_threads(1, *cpu) == 1);
    const std::thread::id caller = std::this_thread::get_id();
    int order = 0;
    bool same_thread = true, in_order = true;
    for_each_head(6, queue, [&](int i) {
      same_thread = same_thread && std::this_thread::get_id() == caller;
      in_order = in_order && i == order++;
    });
    CHECK(same_thread);
    CHECK(in_order);
    int inside = -1;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      inside = head_threads(8, *cpu);
    }
    CHECK(inside == 1);
  }
  {
    OmpThreads t(1);
    CHECK(head_threads(8, *cpu) == 1);
  }
  {
    OmpThreads t(4);
    limit_head_threads(2);  // a `tierlab run --jobs 2` worker's share
    CHECK(head_threads(8, *cpu) == 2);
    limit_head_threads(1);
    CHECK(head_threads(8, *cpu) == 1);
    limit_head_threads(0);
    CHECK(head_threads(8, *cpu) == 4);
  }
}
