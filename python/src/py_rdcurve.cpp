// The rate-distortion curve in Python: tierlab.rd_curve (scenarios/pipeline/rd_curve.hpp),
// what `tierlab solve TRACE --budgets A:B:STEP --recompute --json` computes, as NumPy arrays.
#include <cmath>
#include <limits>

#include "common.hpp"
#include "gpu/recompute.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "scenarios/methods/rd_methods.hpp"
#include "scenarios/io/table_numbers.hpp"  // kNaN

namespace tierlab::python {

namespace {

py::dict curve_dict(const RdCurve& c) {
  const RdCurveOptions& o = c.options;
  const std::size_t nb = o.budgets.size();
  py::dict d;
  d["budgets"] = to_array(o.budgets);
  d["rate_kind"] = std::string(to_string(o.solve.rate_kind));
  d["scope"] = std::string(to_string(o.solve.scope));
  d["queries"] = std::string(to_string(c.queries));
  d["heads"] = c.heads;
  d["tokens"] = c.tokens;
  py::dict fams;
  for (std::size_t f = 0; f < o.families.size(); ++f) {
    std::vector<double> rate(nb), code(nb), total(nb), sur(nb), err(nb), tv(nb);
    py::array_t<bool> feasible(static_cast<py::ssize_t>(nb));
    for (std::size_t k = 0; k < nb; ++k) {
      const RdPoint& p = c.at(static_cast<int>(f), static_cast<int>(k));
      feasible.mutable_data()[k] = p.feasible;
      rate[k] = p.feasible ? p.x : kNaN;
      code[k] = p.feasible ? p.rate.code_bits : kNaN;
      total[k] = p.feasible ? p.rate.total_bits : kNaN;
      sur[k] = p.feasible ? p.surrogate : kNaN;
      err[k] = p.feasible ? p.error.rel_error : kNaN;
      tv[k] = p.feasible && o.recompute ? p.error.attn_tv : kNaN;
    }
    py::dict fd;
    fd["feasible"] = feasible;
    fd["rate"] = to_array(rate);
    fd["code_bits"] = to_array(code);
    fd["total_bits"] = to_array(total);
    fd["surrogate"] = to_array(sur);
    fd["error"] = to_array(err);
    fd["attn_tv"] = to_array(tv);
    fams[py::str(std::string(to_string(o.families[f])))] = fd;
  }
  d["families"] = fams;
  std::vector<double> lr, ls, le;
  py::list tiers;
  py::array_t<bool> above(static_cast<py::ssize_t>(c.ladder.size()));
  for (std::size_t j = 0; j < c.ladder.size(); ++j) {
    const RdLadderPoint& l = c.ladder[j];
    tiers.append(l.tier);
    lr.push_back(l.x), ls.push_back(l.surrogate), le.push_back(l.error);
    above.mutable_data()[j] = l.above_hull;
  }
  py::dict ld;
  ld["tier"] = tiers;
  ld["rate"] = to_array(lr);
  ld["surrogate"] = to_array(ls);
  ld["error"] = to_array(le);
  ld["above_hull"] = above;
  d["ladder"] = ld;
  auto hull = [](const RdHull& h) {
    py::dict hd;
    hd["rate"] = to_array(h.x);
    hd["value"] = to_array(h.y);
    hd["label"] = py::cast(h.label);
    return hd;
  };
  d["hull"] = hull(c.hull);
  d["surrogate_hull"] = hull(c.surrogate_hull);
  d["seconds"] = c.seconds;
  return d;
}

// The named methods' points: a list of dicts (NaN where not recomputed).
py::list methods_list(const std::vector<RdMethodPoint>& points) {
  py::list out;
  for (const RdMethodPoint& p : points) {
    py::dict d;
    d["label"] = p.label;
    d["kind"] = to_string(p.kind);
    d["code_bits"] = p.rate.code_bits;
    d["total_bits"] = p.rate.total_bits;
    d["rate"] = p.x;
    d["surrogate"] = p.surrogate;
    d["error"] = p.error;
    d["above_hull"] = p.above_hull;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_rdcurve(py::module_& m) {
  m.def("rd_curve", [](const PyTrace& trace, const py::object& budgets, const std::vector<std::string>& families,
                       const std::string& scope, const std::string& rate, const py::object& ladder,
                       const std::string& solver, const std::string& queries, int decode_step, bool recompute,
                       const std::vector<std::string>& methods, py::object progress) {
    RdCurveOptions o;
    if (py::isinstance<py::str>(budgets)) {
      o.budgets = parse_budget_grid(budgets.cast<std::string>(), "budgets");
    } else {
      for (auto b : budgets) o.budgets.push_back(real_arg(b, "budgets"));
    }
    o.families.clear();
    for (const std::string& f : families) o.families.push_back(parse_family_choice(f));
    o.solve.rate_kind = parse_rate_kind(rate);
    o.solve.solver = parse_alloc_solver(solver);
    o.solve.scope = parse_scope(scope);
    o.solve.ladder = ladder_arg(ladder);
    o.queries = parse_rd_queries(queries);
    o.decode_step = decode_step;
    o.recompute = recompute;
    o.validate();
    const std::vector<MethodSpec> specs = parse_rd_methods(methods, "methods", o);
    WorkContext ctx;
    ctx.progress = progress;
    const Progress report = ctx.reporter();
    const RdCurve c = call_released(ctx, [&] { return rd_curve(*trace.reader, o, report); });
    py::dict d = curve_dict(c);
    if (!specs.empty()) {
      // Recomputed on the CPU reference, as the curve's points are (tierlab solve --method).
      std::unique_ptr<Recomputer> cpu = recompute ? make_recomputer(Backend::Cpu) : nullptr;
      const std::vector<RdMethodPoint> points = call_released(ctx, [&] {
        return rd_method_points(*trace.reader, c, specs, cpu.get(), report, &ctx.stop);
      });
      d["methods"] = methods_list(points);
    }
    return d;
  }, py::arg("trace"), py::arg("budgets"),
     py::arg("families") = std::vector<std::string>{"quantize", "evict", "mixed", "routed"}, py::arg("scope") = std::string(to_string(ProblemOptions{}.scope)),
     py::arg("rate") = std::string(to_string(kDefaultRateKind)), py::arg("ladder") = std::string(kDefaultLadder), py::arg("solver") = "exact",
     py::arg("queries") = "decode", py::arg("decode_step") = 1, py::arg("recompute") = true,
     py::arg("methods") = std::vector<std::string>{}, py::arg("progress") = py::none(),
     R"doc(The rate-distortion curve of a trace (what `tierlab solve TRACE --budgets A:B:STEP --recompute
--json` computes; scenarios/pipeline/rd_curve.hpp).

budgets: "A:B:STEP" or a list of budgets (bits per key element, counted as `rate`: code |
total); families: any of quantize, evict, mixed, routed; scope: head | layer | model (heads
trade budget); queries: decode | obs | step (where the errors are recomputed: every decode
step, the observation queries, or decode step `decode_step` alone, named methods included).
Returns a dict of
NumPy arrays: budgets; families[name] with feasible, rate (measured, mean over heads),
code_bits, total_bits, surrogate (predicted relative error), error (recomputed relative
error), attn_tv, one entry per budget (NaN where infeasible); ladder (every token at one
tier: tier, rate, surrogate, error, above_hull); hull and surrogate_hull (lower convex hull
vertices: rate, value, label). methods: named methods as points beside the curves, each a
`tierlab solve --method` SPEC (a uniform policy "kivi:2" or a scenario methods entry in YAML
flow form "{quantizer: kivi, bits: 2}"; a scorer without keep: keep ratios B/16 of the
budgets); then methods is a list of dicts (label, kind, code_bits, total_bits, rate,
surrogate, error (NaN unless recompute), above_hull). The GIL is released; Ctrl-C raises KeyboardInterrupt.)doc");
}

}  // namespace tierlab::python
