#pragma once
// Internal to tierlab_explorer_core (gui/engine.cpp and gui/views/*.cpp): the Engine's cache
// entries and the helpers several views use. Not installed, not for the window.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gui/engine.hpp"
#include "model/base/cancel.hpp"
#include "model/dominance.hpp"
#include "model/surrogate.hpp"
#include "solvers/problem.hpp"

namespace tierlab::explorer {

namespace detail {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

inline void check(const std::atomic<bool>* cancel) { throw_if_cancelled(cancel); }

// When a view's partial result is due: the first after min(150 ms, every), then each
// `every` ms (Engine::set_partial_interval; drawing each head's result would cost more than
// computing it on a small trace).
struct PartialPacer {
  explicit PartialPacer(int every_ms) : wait(std::min(every_ms, 150)), every(every_ms) {}
  Clock::time_point last = Clock::now();
  std::chrono::milliseconds wait, every;
  bool due() {
    if (Clock::now() - last < wait) return false;
    last = Clock::now();
    wait = every;
    return true;
  }
};

inline double val(const nlohmann::json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : kNaN;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------
// Engine cache entries

struct Engine::LadderEntry {
  RateLadder ladder;
  RateKind rate_kind = kDefaultRateKind;
  int layer = 0, kv_head = 0;
  int T = 0, d = 0;
  SurrogateCosts costs;
  std::vector<double> rates;    // per ladder tier, on the rate kind
  std::vector<int> order;       // tokens by decreasing a_t
  HeadNoiseModel fit;           // fit_head_noise (model/surrogate.hpp), the one convention
  DominanceReport dom;
  std::map<int, MatrixRMd> smoothed;  // kernel -> pooled costs
};

// The interior advantage of one head at one budget (pipeline/head.hpp head_interior), as the
// live interior view plots it; cached per (head, ladder, rate kind, B).
struct Engine::Advantage {
  double A_decode = detail::kNaN, A_obs = detail::kNaN, A_sur = detail::kNaN;
  double err_dec[3] = {detail::kNaN, detail::kNaN, detail::kNaN};
  std::string options[3];
};

struct Engine::Last {
  std::string key;
  std::vector<std::uint8_t> tiers;
  bool obs_done = false;
  ErrorMetrics obs;
};

// The water-filling view's head and ladder (one at a time): the allocation's keys as
// model/quantizers/quantizer.hpp materialize gives them, built tier by tier so that a budget change
// quantizes again only the tiers whose token sets changed.
struct Engine::Work {
  int head_index = -1;  // l * n_kv_heads + h
  std::string ladder_name;
  std::shared_ptr<const HeadData> head;
  RateLadder ladder;
  int T = 0, d = 0;
  std::vector<std::vector<int>> tokens;  // per ladder tier: its tokens in position order (finite tiers)
  std::vector<MatrixRM> block;           // per ladder tier: their rows quantized as one block (TierQuantizer)
  std::vector<int> row_tier;             // per prompt token: the tier whose block row `keys` holds (0: the exact key)
  std::vector<std::uint8_t> tiers;       // the allocation held (empty: none yet)
  int step = 0;                          // s of the step buffers (0: none)
  // keys: T + step rows, the allocation's key of each prompt token (the exact key for
  // exact and for evicted tokens: an evicted token is not selected, so its row is unused)
  // then the step's decode keys (exact). exact, values: the T + step exact keys and values;
  // queries: step s's g queries.
  MatrixRM keys, exact, values, queries;
  bool step_done = false;  // step_err holds the allocation's error at `step`
  ErrorMetrics step_err;
};

}  // namespace tierlab::explorer
