// Named methods as operating points beside a rate-distortion curve (rd_methods.hpp).
#include "scenarios/scenario/rd_methods.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/error.hpp"
#include "model/text.hpp"
#include "scenarios/pipeline/evaluation.hpp"

namespace tierlab {

std::vector<MethodSpec> parse_rd_methods(const std::vector<std::string>& texts, const std::string& option,
                                         const RdCurveOptions& curve) {
  std::vector<std::string> grid_keep;
  for (const double b : curve.budgets)
    if (b > 0 && b <= 16) grid_keep.push_back("ratio:" + format_number(b / 16, 12));
  std::vector<MethodSpec> methods;
  for (const std::string& text : texts)
    for (MethodSpec& m : parse_method_spec_text(text, option, curve.solve.ladder, grid_keep)) {
      for (const MethodSpec& seen : methods)
        if (seen.label == m.label)
          throw InputError(option + " '" + text + "': the method '" + m.label + "' is given twice.");
      methods.push_back(std::move(m));
    }
  return methods;
}

namespace {

// One decode step s's g query rows over the T + s tokens they see (the s decode keys exact and
// kept): the curve's RdQueries::Step, through the recomputation seam.
ErrorMetrics evaluate_step(const HeadData& head, const MatrixRM& keys, const std::vector<std::uint8_t>& kept, int step,
                           Recomputer& backend) {
  const int S = static_cast<int>(head.decode_keys.rows()), T = static_cast<int>(head.keys.rows());
  const int d = static_cast<int>(head.keys.cols());
  if (step < 1 || step > S)
    throw InputError("named methods: decode step " + std::to_string(step) + " is outside 1.." + std::to_string(S) +
                     " (the head has " + std::to_string(S) + " decode steps).");
  const int g = static_cast<int>(head.decode_queries.rows() / S);
  MatrixRM exact(T + step, d), approx(T + step, d), values(T + step, d), queries(g, d);
  exact.topRows(T) = head.keys, exact.bottomRows(step) = head.decode_keys.topRows(step);
  approx.topRows(T) = keys, approx.bottomRows(step) = head.decode_keys.topRows(step);
  values.topRows(T) = head.values, values.bottomRows(step) = head.decode_values.topRows(step);
  for (int j = 0; j < g; ++j) queries.row(j) = head.decode_queries.row(j * S + (step - 1));
  HeadBatch b;
  b.problem.queries = &queries;
  b.problem.exact_keys = &exact;
  b.problem.values = &values;
  b.problem.variants = {&approx};
  b.problem.visible.assign(static_cast<std::size_t>(g), T + step);
  Selection sel(static_cast<std::size_t>(T + step), 1);
  std::copy(kept.begin(), kept.end(), sel.begin());
  b.selections.push_back(std::move(sel));
  return recompute(backend, std::vector<HeadBatch>{std::move(b)}).at(0).at(0);
}

}  // namespace

std::vector<RdMethodPoint> rd_method_points(const TraceReader& trace, const RdCurve& curve,
                                            const std::vector<MethodSpec>& methods, Recomputer* backend,
                                            const Progress& progress, const std::atomic<bool>* cancel) {
  const TraceMeta& meta = trace.meta();
  std::vector<std::vector<HeadData>> heads(static_cast<std::size_t>(meta.n_layers));
  for (int l = 0; l < meta.n_layers; ++l)
    for (int h = 0; h < meta.n_kv_heads; ++h) heads[static_cast<std::size_t>(l)].push_back(trace.head(l, h));
  MethodContext mc;
  mc.rope = meta.rope;
  mc.group_size = meta.group_size;
  return rd_method_points(heads, mc, curve, methods, backend, progress, cancel);
}

std::vector<RdMethodPoint> rd_method_points(const std::vector<std::vector<HeadData>>& heads, MethodContext mc,
                                            const RdCurve& curve, const std::vector<MethodSpec>& methods,
                                            Recomputer* backend, const Progress& progress,
                                            const std::atomic<bool>* cancel) {
  mc.rate_kind = curve.options.solve.rate_kind;
  double H = 0;
  for (std::size_t l = 0; l < heads.size(); ++l) {
    H += static_cast<double>(heads[l].size());
    for (std::size_t h = 0; h < heads[l].size(); ++h)  // the compressors index their plans by (layer, kv_head)
      if (heads[l][h].layer != static_cast<int>(l) || heads[l][h].kv_head != static_cast<int>(h))
        throw InputError("named methods: the head at position [" + std::to_string(l) + "][" + std::to_string(h) +
                         "] is head (" + std::to_string(heads[l][h].layer) + ", " + std::to_string(heads[l][h].kv_head) +
                         "); heads[layer][kv_head] must hold head (layer, kv_head).");
  }
  std::vector<RdMethodPoint> out;
  for (const MethodSpec& m : methods) {
    throw_if_cancelled(cancel);
    const std::vector<std::vector<CompressedHead>> comp = make_model_compressor(m, mc)(heads);
    double sur = 0, err = backend ? 0.0 : std::numeric_limits<double>::quiet_NaN(), cb = 0, tb = 0;
    for (std::size_t l = 0; l < heads.size(); ++l)
      for (std::size_t h = 0; h < heads[l].size(); ++h) {
        const HeadData& hd = heads[l][h];
        const CompressedHead& ch = comp.at(l).at(h);
        double on2 = 0;
        const double abs = surrogate_abs_cost(hd.keys, hd.values, observation_queries(hd), ch.keys, ch.kept, &on2);
        sur += (on2 > 0 ? abs / on2 : 0.0) / H;
        if (backend)
          err += (curve.queries == RdQueries::Decode ? evaluate_decode_steps(hd, ch.keys, ch.kept, *backend)
                  : curve.queries == RdQueries::Step
                      ? evaluate_step(hd, ch.keys, ch.kept, curve.options.decode_step, *backend)
                      : evaluate_obs_queries(hd, ch.keys, ch.kept, *backend))
                     .rel_error / H;
        cb += ch.rate.code_bits / H, tb += ch.rate.total_bits / H;
      }
    RdMethodPoint p;
    p.label = m.label;
    p.kind = m.kind;
    p.rate = Rate{cb, tb};
    p.x = mc.rate_kind == RateKind::Code ? cb : tb;
    p.surrogate = sur;
    p.error = err;
    const double at = curve.hull.at(p.x);
    p.above_hull = std::isfinite(at) && err > at * (1 + kRdMethodHullTolerance);
    out.push_back(std::move(p));
    if (progress) progress(static_cast<int>(out.size()), static_cast<int>(methods.size()));
  }
  return out;
}

nlohmann::json to_json(const std::vector<RdMethodPoint>& points) {
  auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json out = nlohmann::json::array();
  for (const RdMethodPoint& p : points)
    out.push_back({{"label", p.label}, {"kind", to_string(p.kind)}, {"code_bits", p.rate.code_bits},
                   {"total_bits", p.rate.total_bits}, {"rate", p.x}, {"surrogate", finite(p.surrogate)},
                   {"error", finite(p.error)}, {"above_hull", p.above_hull}});
  return out;
}

std::string text_report(const std::vector<RdMethodPoint>& points, RateKind kind) {
  std::ostringstream s;
  char buf[512];
  s << "named methods (operating points; rate in " << to_string(kind) << " bits):\n";
  for (const RdMethodPoint& p : points) {
    std::snprintf(buf, sizeof buf, "  %-34s %-9s code %7.4f  total %7.4f  surrogate %12.5g  recomputed %12.5g%s\n",
                  p.label.c_str(), to_string(p.kind).c_str(), p.rate.code_bits, p.rate.total_bits, p.surrogate, p.error,
                  p.above_hull ? "  above the hull" : "");
    s << buf;
  }
  return s.str();
}

}  // namespace tierlab
