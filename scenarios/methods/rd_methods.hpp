#pragma once
// Named methods as operating points beside a rate-distortion curve (issue 18): what the
// rd_curve analysis reports for a scenario's `methods` and `tierlab solve --budgets --method`
// for its --method entries (one implementation for both).
//
// For a method m (methods_spec.hpp: a key quantizer, an eviction scorer at a keep ratio, a seed
// allocator, a uniform policy or a family optimum) every head h = 1..H of the trace is
// compressed by m (make_model_compressor) and
//   code_bits, total_bits  its measured rate, mean over the heads (bits per key element)
//   rate                   the one of the two the curve counts (curve.options.solve.rate_kind)
//   surrogate              mean_h sum_t c_t(m) / mean_q ||o_q||^2 on the observation queries
//                          (surrogate_abs_cost: the predicted relative error)
//   error                  mean_h of the exactly recomputed relative error on the curve's query
//                          set (decode steps, the observation queries, or one decode step s's g
//                          query rows over the T + s tokens they see); NaN when not recomputed
//   above_hull             above_recomputed_hull (rd_curve.hpp): error > hull(rate) (1 +
//                          kRecomputedHullTolerance), the families' lower convex hull of the
//                          recomputed errors (RdCurve::hull); false where the hull does not
//                          reach the rate or the error is not recomputed. The tolerance covers
//                          the two recomputation paths' agreement (a method's error:
//                          evaluate_decode_steps; the curve's: the prepared CPU head), so that a
//                          family optimum named as a method (M* B=2) is not above the hull it
//                          is a vertex of
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/base/cancel.hpp"
#include "model/quantizers/tier.hpp"
#include "model/io/trace.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "scenarios/methods/methods_spec.hpp"

namespace tierlab {

struct RdMethodPoint {
  std::string label;
  MethodSpec::Kind kind = MethodSpec::Kind::Quantizer;
  Rate rate;  // measured, mean over the heads
  double x = std::numeric_limits<double>::quiet_NaN();          // rate in the curve's kind
  double surrogate = std::numeric_limits<double>::quiet_NaN();  // predicted relative error
  double error = std::numeric_limits<double>::quiet_NaN();      // recomputed relative error
  bool above_hull = false;
};

// The methods given as text (`tierlab solve --method SPEC`, tierlab.rd_curve(methods=...)), each
// read by parse_method_spec_text on the curve's ladder; a scorer without `keep` is placed at the
// keep ratios B/16 of the curve's budgets B in (0, 16] (its rate 16 x kept fraction = B). Labels
// must be unique. InputError naming `option` and the text.
std::vector<MethodSpec> parse_rd_methods(const std::vector<std::string>& texts, const std::string& option,
                                         const RdCurveOptions& curve);

// The methods' points beside `curve` (computed on `trace`, every head of it). `backend` null: the
// surrogate only. `progress` is told after each method; `cancel` set: throws Cancelled between
// methods.
std::vector<RdMethodPoint> rd_method_points(const TraceReader& trace, const RdCurve& curve,
                                            const std::vector<MethodSpec>& methods, Recomputer* backend,
                                            const Progress& progress = {}, const std::atomic<bool>* cancel = nullptr);
// The same for heads in memory, heads[layer][kv_head] (those the curve was computed on: the
// explorer's one head, numbered (0, 0), or every head of its trace; a head whose own (layer,
// kv_head) is not its position is an InputError), with the model's RoPE and g in `context`
// (its rate_kind is replaced by the curve's). The trace form above reads the heads and calls this.
std::vector<RdMethodPoint> rd_method_points(const std::vector<std::vector<HeadData>>& heads, MethodContext context,
                                            const RdCurve& curve, const std::vector<MethodSpec>& methods,
                                            Recomputer* backend, const Progress& progress = {},
                                            const std::atomic<bool>* cancel = nullptr);

// [{label, kind, code_bits, total_bits, rate, surrogate, error, above_hull}] (NaN as null).
nlohmann::json to_json(const std::vector<RdMethodPoint>&);
// A table of the points (one row per method), after the curve's report.
std::string text_report(const std::vector<RdMethodPoint>&, RateKind);

}  // namespace tierlab
