// Named methods as operating points beside a rate-distortion curve (rd_methods.hpp).
#include "scenarios/methods/rd_methods.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/base/error.hpp"
#include "model/base/text.hpp"
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
  for (std::size_t l = 0; l < heads.size(); ++l)
    for (std::size_t h = 0; h < heads[l].size(); ++h)  // the compressors index their plans by (layer, kv_head)
      if (heads[l][h].layer != static_cast<int>(l) || heads[l][h].kv_head != static_cast<int>(h))
        throw InputError("named methods: the head at position [" + std::to_string(l) + "][" + std::to_string(h) +
                         "] is head (" + std::to_string(heads[l][h].layer) + ", " + std::to_string(heads[l][h].kv_head) +
                         "); heads[layer][kv_head] must hold head (layer, kv_head).");
  const int step = curve.options.decode_step;
  std::function<ErrorMetrics(const HeadData&, const CompressedHead&)> recompute;
  if (backend)
    recompute = [&](const HeadData& hd, const CompressedHead& ch) {
      switch (curve.queries) {
        case RdQueries::Decode: return evaluate_decode_steps(hd, ch.keys, ch.kept, *backend);
        case RdQueries::Step: return evaluate_decode_step(hd, ch.keys, ch.kept, step, *backend);
        case RdQueries::Obs: break;
      }
      return evaluate_obs_queries(hd, ch.keys, ch.kept, *backend);
    };
  std::vector<RdMethodPoint> out;
  for (const MethodSpec& m : methods) {
    throw_if_cancelled(cancel);
    const MethodMeasure mm = measure_compressed(heads, make_model_compressor(m, mc)(heads), recompute);
    const double cb = mm.rate.code_bits, tb = mm.rate.total_bits, sur = mm.surrogate, err = mm.error;
    RdMethodPoint p;
    p.label = m.label;
    p.kind = m.kind;
    p.rate = Rate{cb, tb};
    p.x = mc.rate_kind == RateKind::Code ? cb : tb;
    p.surrogate = sur;
    p.error = err;
    const double at = curve.hull.at(p.x);
    p.above_hull = std::isfinite(at) && above_recomputed_hull(curve.hull, p.x, err);
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
