// Solving and exact recomputation in Python: tierlab.solve (a whole trace, any solver, family
// and scope, one budget or several: scenarios/pipeline/allocate.hpp, what `tierlab solve`
// computes), tierlab.solve_head (one head: scenarios/pipeline/head.hpp), tierlab.recompute (an
// allocation of a trace: evaluate_trace, what `tierlab eval --allocation` computes),
// tierlab.recompute_head and tierlab.recompute_variants (one head, many allocations, per-row
// and mean errors: gpu/recompute.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <memory>

#include "common.hpp"
#include "gpu/recompute.hpp"
#include "model/allocation.hpp"
#include "model/quantizers/quantizer.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/head.hpp"
#include "scenarios/pipeline/report.hpp"
#include "solvers/smoothing.hpp"

namespace tierlab::python {

namespace {


// Errors of E allocations of one head on one query set: means [E] and optionally per row [E, rows].
struct HeadErrors {
  std::string backend, queries;
  std::vector<ErrorMetrics> mean;
  std::vector<std::vector<ErrorMetrics>> rows;  // [E][row], empty unless asked
  std::vector<Rate> rates;                      // recompute_head: measured rate per allocation
};

py::array_t<double> metric_array(const std::vector<ErrorMetrics>& v, double ErrorMetrics::*f) {
  py::array_t<double> a(static_cast<py::ssize_t>(v.size()));
  for (std::size_t i = 0; i < v.size(); ++i) a.mutable_data()[i] = v[i].*f;
  return a;
}

py::object row_array(const HeadErrors& e, double ErrorMetrics::*f) {
  if (e.rows.empty()) return py::none();
  const py::ssize_t E = static_cast<py::ssize_t>(e.rows.size()), R = static_cast<py::ssize_t>(e.rows[0].size());
  py::array_t<double> a({E, R});
  for (py::ssize_t i = 0; i < E; ++i)
    for (py::ssize_t r = 0; r < R; ++r) a.mutable_data()[i * R + r] = e.rows[static_cast<std::size_t>(i)][static_cast<std::size_t>(r)].*f;
  return a;
}

// One query set of one head as the backends take it, with E candidate key matrices (one per
// allocation) and the kept flags of each.
struct QuerySetProblem {
  const MatrixRM* queries = nullptr;
  const MatrixRM* exact = nullptr;
  const MatrixRM* values = nullptr;
  std::vector<int> visible;
  std::vector<const MatrixRM*> variants;      // the variants every selection may use
  std::vector<Selection> selections;          // per allocation
  // The backend's batch of every row and selection.
  HeadBatch batch() const {
    HeadBatch b;
    b.problem.queries = queries;
    b.problem.exact_keys = exact;
    b.problem.values = values;
    b.problem.variants = variants;
    b.problem.visible = visible;
    b.selections = selections;
    return b;
  }
};

// Means (one batch over all rows) and, when asked, per-row errors (one batch per row: each
// row's errors exactly as the backend computes that row).
HeadErrors evaluate_problem(const QuerySetProblem& q, Recomputer& backend, bool per_row, WorkContext& ctx) {
  HeadErrors out;
  out.backend = backend.name();
  HeadBatch all = q.batch();
  throw_if_cancelled(&ctx.stop);
  out.mean = recompute(backend, {all})[0];
  if (per_row) {
    const Eigen::Index R = q.queries->rows();
    std::vector<MatrixRM> row_q(static_cast<std::size_t>(R));
    std::vector<HeadBatch> batches(static_cast<std::size_t>(R));
    for (Eigen::Index r = 0; r < R; ++r) {
      row_q[static_cast<std::size_t>(r)] = q.queries->row(r);
      HeadBatch& b = batches[static_cast<std::size_t>(r)];
      b.problem = all.problem;
      b.problem.queries = &row_q[static_cast<std::size_t>(r)];
      if (!q.visible.empty()) b.problem.visible = {q.visible[static_cast<std::size_t>(r)]};
      b.selections = q.selections;
    }
    out.rows.assign(q.selections.size(), std::vector<ErrorMetrics>(static_cast<std::size_t>(R)));
    constexpr std::size_t kChunk = 64;  // rows per backend call (a cancel point between calls)
    for (std::size_t r0 = 0; r0 < batches.size(); r0 += kChunk) {
      throw_if_cancelled(&ctx.stop);
      std::vector<HeadBatch> part(batches.begin() + static_cast<std::ptrdiff_t>(r0),
                                  batches.begin() + static_cast<std::ptrdiff_t>(std::min(batches.size(), r0 + kChunk)));
      const auto errs = recompute(backend, part);
      for (std::size_t k = 0; k < part.size(); ++k)
        for (std::size_t e = 0; e < q.selections.size(); ++e) out.rows[e][r0 + k] = errs[k][e];
    }
  }
  return out;
}

// Allocations argument: [E, T] or [T] integer tier indices of a ladder of n tiers.
std::vector<std::vector<std::uint8_t>> allocations_arg(const py::object& obj, const std::string& arg, Eigen::Index T,
                                                       int n_tiers) {
  const py::array a = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array>(obj))
    throw InputError("argument " + arg + ": expected a NumPy integer array [E, T] or [T] of tier indices");
  const int dims = a.ndim() == 1 ? 1 : 2;
  const auto v = int_array(obj, arg, dims, dims == 1 ? "[T]" : "[E, T]", n_tiers - 1);
  const py::ssize_t cols = dims == 1 ? v.shape(0) : v.shape(1), rows = dims == 1 ? 1 : v.shape(0);
  if (cols != T)
    throw InputError("argument " + arg + ": expected " + std::to_string(T) + " tokens per allocation (T), got " +
                     std::to_string(cols));
  std::vector<std::vector<std::uint8_t>> out(static_cast<std::size_t>(rows), std::vector<std::uint8_t>(static_cast<std::size_t>(T)));
  for (py::ssize_t i = 0; i < rows; ++i)
    for (py::ssize_t t = 0; t < T; ++t) out[static_cast<std::size_t>(i)][static_cast<std::size_t>(t)] = static_cast<std::uint8_t>(v.data()[i * T + t]);
  return out;
}

AllocateOptions solve_options(double budget, const std::string& solver, const std::string& family,
                              const std::string& scope, const py::object& ladder, const std::string& rate,
                              const std::string& smooth, int kernel, const std::string& padding, double route_tolerance) {
  AllocateOptions o;
  o.budget = budget;
  o.rate_kind = parse_rate_kind(rate);
  o.solver = parse_alloc_solver(solver);
  o.family = parse_family_choice(family);
  o.scope = parse_scope(scope);
  o.ladder = ladder_arg(ladder);
  o.smoothing.pool = parse_pool_kind(smooth);
  o.smoothing.kernel = kernel;
  o.smoothing.padding = parse_padding(padding);
  o.route_tolerance = route_tolerance;
  o.validate();
  return o;
}

py::dict head_table(const AllocationReport& r) {
  const std::size_t n = r.heads.size();
  py::array_t<int> layer(static_cast<py::ssize_t>(n)), kv(static_cast<py::ssize_t>(n));
  std::vector<double> obj(n), bound(n), gap(n), code(n), total(n), budget(n), rel(n), sec(n);
  py::list option, family;
  const py::ssize_t J = r.options.ladder.size();
  py::array_t<int> hist({static_cast<py::ssize_t>(n), J});
  for (std::size_t i = 0; i < n; ++i) {
    const HeadSolveReport& h = r.heads[i];
    layer.mutable_data()[i] = h.layer;
    kv.mutable_data()[i] = h.kv_head;
    obj[i] = h.objective, bound[i] = h.bound, gap[i] = h.gap, code[i] = h.rate.code_bits, total[i] = h.rate.total_bits;
    budget[i] = h.budget_rate, rel[i] = h.relative_objective, sec[i] = h.seconds;
    option.append(h.option);
    family.append(std::string(to_string(h.family)));
    for (py::ssize_t j = 0; j < J; ++j)
      hist.mutable_data()[static_cast<py::ssize_t>(i) * J + j] = j < static_cast<py::ssize_t>(h.histogram.size()) ? h.histogram[static_cast<std::size_t>(j)] : 0;
  }
  py::dict d;
  d["layer"] = layer;
  d["kv_head"] = kv;
  d["objective"] = to_array(obj);
  d["bound"] = to_array(bound);
  d["gap"] = to_array(gap);
  d["code_rate"] = to_array(code);
  d["total_rate"] = to_array(total);
  d["budget_rate"] = to_array(budget);
  d["relative_objective"] = to_array(rel);
  d["seconds"] = to_array(sec);
  d["option"] = option;
  d["family"] = family;
  d["histogram"] = hist;
  return d;
}

py::object allocation_array(const Allocation& a) {
  if (a.tiers.empty()) return py::none();
  py::array_t<std::uint8_t> out({static_cast<py::ssize_t>(a.n_layers), static_cast<py::ssize_t>(a.n_kv_heads),
                                 static_cast<py::ssize_t>(a.prompt_len)});
  for (std::size_t i = 0; i < a.tiers.size(); ++i)
    std::memcpy(out.mutable_data() + i * static_cast<std::size_t>(a.prompt_len), a.tiers[i].data(), a.tiers[i].size());
  return out;
}

// tierlab.RecomputeProblem: the arrays of one HeadProblem, owned.
struct PyProblem {
  MatrixRM queries, keys, values;
  std::vector<MatrixRM> variants;
  std::vector<int> visible;
  QuerySetProblem problem() const {
    QuerySetProblem q;
    q.queries = &queries;
    q.exact = &keys;
    q.values = &values;
    for (const auto& v : variants) q.variants.push_back(&v);
    q.visible = visible;
    return q;
  }
};

PyProblem make_problem(const py::object& queries, const py::object& keys, const py::object& values,
                       const std::vector<py::object>& variants, const py::object& visible) {
  PyProblem p;
  p.queries = float_matrix(queries, "queries", 2, "[rows, d]");
  p.keys = float_matrix(keys, "keys", 2, "[T, d]");
  p.values = float_matrix(values, "values", 2, "[T, d]");
  const MatrixRM &Q = p.queries, &K = p.keys, &V = p.values;
  if (K.rows() != V.rows() || K.cols() != V.cols() || Q.cols() != K.cols())
    throw InputError("arguments queries, keys, values: expected [rows, d], [T, d], [T, d]; got d = " +
                     std::to_string(Q.cols()) + ", keys [" + std::to_string(K.rows()) + ", " + std::to_string(K.cols()) +
                     "], values [" + std::to_string(V.rows()) + ", " + std::to_string(V.cols()) + "]");
  if (variants.empty() || variants.size() > 254)
    throw InputError("argument variants: expected 1 to 254 key matrices, got " + std::to_string(variants.size()));
  for (std::size_t i = 0; i < variants.size(); ++i) {
    p.variants.push_back(float_matrix(variants[i], "variants[" + std::to_string(i) + "]", 2, "[T, d]"));
    if (p.variants.back().rows() != K.rows() || p.variants.back().cols() != K.cols())
      throw InputError("argument variants[" + std::to_string(i) + "]: expected shape [" + std::to_string(K.rows()) +
                       ", " + std::to_string(K.cols()) + "] (as keys)");
  }
  if (!visible.is_none()) {
    const auto vis = int_array(visible, "visible", 1, "[rows]", K.rows());
    if (vis.size() != Q.rows())
      throw InputError("argument visible: expected one limit per query row (" + std::to_string(Q.rows()) + "), got " +
                       std::to_string(vis.size()));
    for (py::ssize_t i = 0; i < vis.size(); ++i) {
      if (vis.data()[i] < 1) throw InputError("argument visible: limits must be >= 1 (row " + std::to_string(i) + ")");
      p.visible.push_back(static_cast<int>(vis.data()[i]));
    }
  }
  return p;
}

}  // namespace

namespace {

// The trace-level solve: tierlab.cuda_available, Solution, solve.
void bind_trace_solve(py::module_& m) {
  m.def("cuda_available", [] {
    std::string reason;
    const bool ok = cuda_available(&reason);
    return py::make_tuple(ok, reason);
  }, "(available, reason): is the CUDA backend built and a device present?");

  py::class_<PySolution>(m, "Solution", R"doc(The allocation of a trace at one budget and its certificate
(`tierlab solve`): status (optimal | feasible | infeasible | trivial), message, objective
(sum of c_t over heads), bound (lower bound), gap, rates, and the allocation as a NumPy
uint8 array [n_layers, n_kv_heads, T] of tier indices into `ladder`.)doc")
      .def_property_readonly("status", [](const PySolution& s) { return std::string(to_string(s.rep->status)); },
                             "optimal | feasible | infeasible | trivial (the worst over the budget scopes).")
      .def_property_readonly("feasible_reason", [](const PySolution& s) -> py::object {
        if (s.rep->status != SolveStatus::Feasible) return py::none();
        return py::str(std::string(to_string(s.rep->feasible_reason)));
      }, "Why a feasible solution is not proven optimal: heuristic | tolerance | relaxation | limit "
         "(solvers/mckp.hpp FeasibleReason); None unless status is feasible.")
      .def_property_readonly("message", [](const PySolution& s) { return s.rep->message; },
                             "How the status was reached, in a sentence or two.")
      .def_property_readonly("feasible", [](const PySolution& s) { return s.rep->has_solution(); })
      .def_property_readonly("objective", [](const PySolution& s) { return s.rep->objective; },
                             "Surrogate objective sum_t c_t(tau_t) over every head (true costs).")
      .def_property_readonly("bound", [](const PySolution& s) { return s.rep->lower_bound; }, "Lower bound.")
      .def_property_readonly("gap", [](const PySolution& s) { return s.rep->gap; }, "objective - bound.")
      .def_property_readonly("relative_gap", [](const PySolution& s) { return s.rep->relative_gap; })
      .def_property_readonly("rate_used", [](const PySolution& s) { return s.rep->rate_used; }, "Bits used (budget's kind, nominal).")
      .def_property_readonly("rate_budget", [](const PySolution& s) { return s.rep->rate_budget; }, "Bits allowed.")
      .def_property_readonly("code_rate", [](const PySolution& s) { return s.rep->rate.code_bits; },
                             "Mean code bits per element over heads (groups actually formed).")
      .def_property_readonly("total_rate", [](const PySolution& s) { return s.rep->rate.total_bits; },
                             "Mean total bits per element over heads (groups actually formed).")
      .def_property_readonly("budget_rate", [](const PySolution& s) { return s.rep->budget_rate; },
                             "Mean nominal rate in the budget's kind.")
      .def_property_readonly("relative_objective", [](const PySolution& s) { return s.rep->relative_objective; })
      .def_property_readonly("seconds", [](const PySolution& s) { return s.rep->seconds; }, "Time of the whole call (C++).")
      .def_property_readonly("budget", [](const PySolution& s) { return s.rep->options.budget; })
      .def_property_readonly("method", [](const PySolution& s) { return s.rep->options.name(); })
      .def_property_readonly("ladder", [](const PySolution& s) { return s.rep->options.ladder; })
      .def_property_readonly("family_share", [](const PySolution& s) {
        return py::dict(py::arg("Q") = s.rep->family_share[0], py::arg("E") = s.rep->family_share[1],
                        py::arg("M") = s.rep->family_share[2]);
      }, "Fraction of heads routed to Q, E and M.")
      .def_property_readonly("allocation", [](const PySolution& s) { return allocation_array(s.rep->allocation); },
                             "Tier index per token [n_layers, n_kv_heads, T] (uint8), None when infeasible.")
      .def_property_readonly("heads", [](const PySolution& s) { return head_table(*s.rep); },
                             "Per head, a dict of arrays: layer, kv_head, objective, bound, gap, code_rate, total_rate, "
                             "budget_rate, relative_objective, seconds, option, family, histogram [heads, tiers].")
      .def("to_json", [](const PySolution& s) { return json_to_python(to_json(*s.rep)); },
           "The report as `tierlab solve --json` prints it (a dict).")
      .def("__repr__", [](const PySolution& s) {
        return "<tierlab.Solution " + s.rep->options.name() + ": " + std::string(to_string(s.rep->status)) +
               ", objective " + std::to_string(s.rep->objective) + ", gap " + std::to_string(s.rep->gap) +
               ", " + std::to_string(s.rep->rate.code_bits) + " code bits/element>";
      });

  m.def("solve", [](const PyTrace& trace, const py::object& budget, const std::string& solver, const std::string& family,
                    const std::string& scope, const py::object& ladder, const std::string& rate, const std::string& smooth,
                    int kernel, const std::string& padding, double route_tolerance, py::object progress) -> py::object {
    const bool many = py::hasattr(budget, "__len__") && !py::isinstance<py::str>(budget);
    std::vector<double> budgets;
    if (many) {
      for (auto b : budget) budgets.push_back(real_arg(b, "budget"));
      if (budgets.empty()) throw InputError("argument budget: an empty list of budgets");
    } else {
      budgets.push_back(real_arg(budget, "budget"));
    }
    std::vector<AllocateOptions> opts;
    for (double b : budgets) opts.push_back(solve_options(b, solver, family, scope, ladder, rate, smooth, kernel, padding, route_tolerance));
    WorkContext ctx;
    ctx.progress = progress;
    const Progress report = ctx.reporter();
    const int nb = static_cast<int>(budgets.size());
    auto reps = call_released(ctx, [&] {
      std::vector<std::shared_ptr<const AllocationReport>> out;
      for (int i = 0; i < nb; ++i)
        out.push_back(std::make_shared<const AllocationReport>(allocate_trace(
            *trace.reader, opts[static_cast<std::size_t>(i)], [&](int d, int t) { report(i * t + d, nb * t); })));
      return out;
    });
    if (!many) return py::cast(PySolution{reps[0]});
    py::list out;
    for (auto& r : reps) out.append(PySolution{r});
    return out;
  }, py::arg("trace"), py::arg("budget"), py::arg("solver") = "exact", py::arg("family") = "mixed",
     py::arg("scope") = std::string(to_string(ProblemOptions{}.scope)), py::arg("ladder") = std::string(kDefaultLadder), py::arg("rate") = std::string(to_string(kDefaultRateKind)),
     py::arg("smooth") = "avg", py::arg("kernel") = 5, py::arg("padding") = "reflect", py::arg("route_tolerance") = 0.0,
     py::arg("progress") = py::none(),
     R"doc(Allocates tiers to every token of a trace (what `tierlab solve` computes).

budget: B in bits per key element, or a list of budgets (a list of Solutions back);
solver: exact | greedy | greedy-raw | waterfill | smoothed; family: mixed | quantize |
evict | routed; scope: head | layer | model; rate: code | total; smooth/kernel/padding:
the smoothed solver's pooling. progress(done, total) is called per head. The GIL is
released; Ctrl-C raises KeyboardInterrupt.)doc");

}

// One head's optimum: HeadSolution, solve_head.
void bind_head_solve(py::module_& m) {
  py::class_<HeadSolution>(m, "HeadSolution", "One family's optimum for one head (scenarios/pipeline/head.hpp solve_head).")
      .def_readonly("feasible", &HeadSolution::feasible)
      .def_readonly("option", &HeadSolution::option, "\"Q:kivi4\", \"E\", \"M\".")
      .def_property_readonly("tiers", [](const HeadSolution& s) { return to_array(s.tiers); }, "Tier index per token (uint8).")
      .def_readonly("objective", &HeadSolution::objective, "sum_t c_t(tiers_t).")
      .def_readonly("bound", &HeadSolution::bound, "The solver's lower bound.")
      .def_property_readonly("gap", [](const HeadSolution& s) { return s.objective - s.bound; })
      .def_readonly("message", &HeadSolution::message, "Why infeasible.")
      .def("__repr__", [](const HeadSolution& s) {
        return s.feasible ? "<tierlab.HeadSolution " + s.option + ": objective " + std::to_string(s.objective) + ", bound " +
                                std::to_string(s.bound) + ">"
                          : "<tierlab.HeadSolution infeasible: " + s.message + ">";
      });

  m.def("solve_head", [](const PyHead& head, double budget, const std::string& family, const std::string& solver,
                         const py::object& ladder, const std::string& rate, const py::object& costs) {
    const RateLadder l = ladder_arg(ladder);
    const RateKind kind = parse_rate_kind(rate);
    FamilyOptions fo;
    fo.solver = parse_family_solver(solver);
    fo.validate();
    const FamilyChoice fc = parse_family_choice(family);
    std::optional<PyCosts> given;
    if (!costs.is_none()) {
      given = costs.cast<PyCosts>();
      if (given->costs.ladder.name() != l.name())
        throw InputError("argument costs: computed on ladder " + given->costs.ladder.name() + ", not " + l.name());
    }
    WorkContext ctx;  // Ctrl-C stops the costs of a long head (model/base/cancel.hpp)
    return call_released(ctx, [&] {
      const auto d = head.data();
      const SurrogateCosts sc = given ? given->costs : head_costs(*d, head.rope, l, "obs");
      const std::vector<double> rates = ladder_rates(*d, head.rope, l, kind);
      DistortionModel noise;
      if (fo.solver == FamilySolver::Waterfill) {
        const HeadNoiseModel n = fit_head_noise(sc, rates);
        noise = DistortionModel{n.alpha, n.beta};
      }
      // At equal memory, as every front door solves one head: the allocation's measured rate
      // meets B (scenarios/pipeline/head.hpp).
      return solve_head_at_equal_memory(*d, head.rope, sc.cost, sc.weights.a, rates, l, budget, kind, fc, fo, noise)
          .solution;
    });
  }, py::arg("head"), py::arg("budget"), py::arg("family") = "mixed", py::arg("solver") = "exact",
     py::arg("ladder") = std::string(kDefaultLadder), py::arg("rate") = std::string(to_string(kDefaultRateKind)), py::arg("costs") = py::none(),
     "One head's optimum at budget B (bits per element over its T tokens, measured on the materialised "
     "allocation: equal memory) for family mixed | quantize | evict | "
     "routed and solver exact | greedy | greedy-raw | waterfill; costs: its tierlab.Costs on the same ladder (else "
     "computed on the observation queries).");

}

// The exact errors of E allocations of one head: HeadErrors, recompute_head.
void bind_head_errors(py::module_& m) {
  py::class_<HeadErrors>(m, "HeadErrors", R"doc(Exactly recomputed errors (docs/model.md section 8) of E allocations of
one head: the means over the query rows as arrays [E] (rel_error, abs_error, attn_tv,
logit_error) and, when asked (per_row=True), each row's errors as arrays [E, rows], each row
recomputed on its own (their mean equals the batch mean within float32 rounding, about 1e-7
relative, since the backend's float32 products round differently for one row than for a block).)doc")
      .def_readonly("backend", &HeadErrors::backend)
      .def_readonly("queries", &HeadErrors::queries)
      .def_property_readonly("rel_error", [](const HeadErrors& e) { return metric_array(e.mean, &ErrorMetrics::rel_error); },
                             "||o^ - o||^2 / ||o||^2, mean over rows, [E].")
      .def_property_readonly("abs_error", [](const HeadErrors& e) { return metric_array(e.mean, &ErrorMetrics::abs_error); })
      .def_property_readonly("attn_tv", [](const HeadErrors& e) { return metric_array(e.mean, &ErrorMetrics::attn_tv); })
      .def_property_readonly("logit_error", [](const HeadErrors& e) { return metric_array(e.mean, &ErrorMetrics::logit_error); })
      .def_property_readonly("row_rel_error", [](const HeadErrors& e) { return row_array(e, &ErrorMetrics::rel_error); },
                             "Per row [E, rows], or None.")
      .def_property_readonly("row_abs_error", [](const HeadErrors& e) { return row_array(e, &ErrorMetrics::abs_error); })
      .def_property_readonly("row_attn_tv", [](const HeadErrors& e) { return row_array(e, &ErrorMetrics::attn_tv); })
      .def_property_readonly("row_logit_error", [](const HeadErrors& e) { return row_array(e, &ErrorMetrics::logit_error); })
      .def_property_readonly("code_rate", [](const HeadErrors& e) {
        std::vector<double> r;
        for (const Rate& x : e.rates) r.push_back(x.code_bits);
        return to_array(r);
      }, "recompute_head: measured code bits per element of each allocation.")
      .def_property_readonly("total_rate", [](const HeadErrors& e) {
        std::vector<double> r;
        for (const Rate& x : e.rates) r.push_back(x.total_bits);
        return to_array(r);
      }, "recompute_head: measured total bits per element of each allocation.")
      .def("__repr__", [](const HeadErrors& e) {
        return "<tierlab.HeadErrors " + std::to_string(e.mean.size()) + " allocations on the " + e.queries +
               " queries (" + e.backend + ")" + (e.rows.empty() ? "" : ", per row") + ">";
      });

  m.def("recompute_head", [](const PyHead& head, const py::object& allocations, const py::object& ladder,
                             const std::string& backend, const std::string& queries, bool per_row) {
    const RateLadder l = ladder_arg(ladder);
    if (queries != "obs" && queries != "decode") throw InputError("argument queries: '" + queries + "' is not obs or decode");
    const auto d = head.data();
    const auto allocs = allocations_arg(allocations, "allocations", d->keys.rows(), l.size());
    auto be = backend_for(backend);
    WorkContext ctx;
    return call_released(ctx, [&] {
      const Eigen::Index T = d->keys.rows(), dim = d->keys.cols();
      std::vector<MaterializedKeys> mats;
      for (const auto& a : allocs) mats.push_back(materialize(*d, head.rope, l, a));
      QuerySetProblem q;
      MatrixRM exact, approx_all, values;
      std::vector<MatrixRM> approx(mats.size());
      if (queries == "obs") {
        q.queries = &d->obs_queries;
        q.exact = &d->keys;
        q.values = &d->values;
        q.visible = observation_queries(*d).visible;
        for (auto& mk : mats) q.variants.push_back(&mk.keys);
      } else {
        const Eigen::Index S = d->decode_keys.rows();
        if (S == 0) throw InputError("argument queries: 'decode' but the head has no decode steps");
        exact.resize(T + S, dim);
        values.resize(T + S, dim);
        exact.topRows(T) = d->keys;
        exact.bottomRows(S) = d->decode_keys;
        values.topRows(T) = d->values;
        values.bottomRows(S) = d->decode_values;
        for (std::size_t k = 0; k < mats.size(); ++k) {
          approx[k].resize(T + S, dim);
          approx[k].topRows(T) = mats[k].keys;
          approx[k].bottomRows(S) = d->decode_keys;
          q.variants.push_back(&approx[k]);
        }
        q.queries = &d->decode_queries;
        q.exact = &exact;
        q.values = &values;
        const int g = static_cast<int>(d->decode_queries.rows() / S);
        for (int j = 0; j < g; ++j)
          for (int s = 1; s <= S; ++s) q.visible.push_back(static_cast<int>(T) + s);
      }
      // Selection of allocation k: its kept tokens take variant k (decode tokens stay exact).
      const std::size_t n = static_cast<std::size_t>(q.exact->rows());
      HeadErrors out;
      std::vector<const MatrixRM*> all_variants = q.variants;
      constexpr std::size_t kMaxVariants = 254;  // selections are uint8
      for (std::size_t k0 = 0; k0 < mats.size(); k0 += kMaxVariants) {
        const std::size_t k1 = std::min(mats.size(), k0 + kMaxVariants);
        QuerySetProblem part = q;
        part.variants.assign(all_variants.begin() + static_cast<std::ptrdiff_t>(k0), all_variants.begin() + static_cast<std::ptrdiff_t>(k1));
        for (std::size_t k = k0; k < k1; ++k) {
          Selection sel(n, static_cast<std::uint8_t>(k - k0 + 1));
          for (Eigen::Index t = 0; t < T; ++t)
            if (!mats[k].kept[static_cast<std::size_t>(t)]) sel[static_cast<std::size_t>(t)] = 0;
          part.selections.push_back(std::move(sel));
        }
        HeadErrors e = evaluate_problem(part, *be, per_row, ctx);
        out.backend = e.backend;
        out.mean.insert(out.mean.end(), e.mean.begin(), e.mean.end());
        out.rows.insert(out.rows.end(), e.rows.begin(), e.rows.end());
      }
      out.queries = queries;
      for (const auto& mk : mats) out.rates.push_back(mk.rate);
      return out;
    });
  }, py::arg("head"), py::arg("allocations"), py::arg("ladder") = std::string(kDefaultLadder),
     py::arg("backend") = "auto", py::arg("queries") = "obs", py::arg("per_row") = false,
     R"doc(Exact recomputation of one or many allocations of one head (tierlab.HeadErrors).

allocations: integer array [T] or [E, T] of tier indices into ladder; each is materialised
(tier-local groups, model/quantizers/quantizer.hpp) and recomputed on the "obs" (causal) or "decode"
queries, as `tierlab eval` does; backend: "auto" | "cpu" | "cuda". per_row: also each query
row's errors [E, rows].)doc");

}

// The backends' recomputation problem: RecomputeProblem, recompute_variants.
void bind_recompute_problem(py::module_& m) {
  py::class_<PyProblem>(m, "RecomputeProblem", R"doc(One head's recomputation problem as the backends take it
(gpu/recompute.hpp HeadProblem), built once and evaluated for many selections: exact keys
[T, d], values [T, d], queries [rows, d], candidate key matrices `variants` (each [T, d], at
most 254) and optional causal limits `visible` (row r sees tokens 0 .. visible[r] - 1). The
arrays are copied (float32) at construction; evaluate() then does only the recomputation.)doc")
      .def(py::init(&make_problem), py::arg("queries"), py::arg("keys"), py::arg("values"), py::arg("variants"),
           py::arg("visible") = py::none(), "Checks and copies the arrays (tierlab.InputError naming the argument).")
      .def("evaluate", [](const PyProblem& p, const py::object& selections, const std::string& backend, bool per_row) {
        QuerySetProblem q = p.problem();
        q.selections = allocations_arg(selections, "selections", p.keys.rows(), static_cast<int>(p.variants.size()) + 1);
        auto be = backend_for(backend);
        WorkContext ctx;
        HeadErrors out = call_released(ctx, [&] { return evaluate_problem(q, *be, per_row, ctx); });
        out.queries = "given";
        return out;
      }, py::arg("selections"), py::arg("backend") = "auto", py::arg("per_row") = false,
         "Errors (tierlab.HeadErrors) of selections [E, T] or [T]: per token 0 = evicted, v >= 1 = variants[v - 1].")
      .def("_time_cpp", [](const PyProblem& p, const py::object& selections, const std::string& backend, int repeats) {
        // For bench/bench_python.py: the same backend call timed in C++ (no Python in the loop).
        QuerySetProblem q = p.problem();
        q.selections = allocations_arg(selections, "selections", p.keys.rows(), static_cast<int>(p.variants.size()) + 1);
        auto be = backend_for(backend);
        HeadBatch b = q.batch();
        std::vector<double> seconds;
        py::gil_scoped_release release;
        for (int r = 0; r < repeats; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          recompute(*be, {b});
          seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return seconds;
      }, py::arg("selections"), py::arg("backend") = "cpu", py::arg("repeats") = 1,
         "Benchmark helper: seconds of each of `repeats` backend calls on the selections, timed in C++.")
      .def_property_readonly("tokens", [](const PyProblem& p) { return p.keys.rows(); })
      .def_property_readonly("rows", [](const PyProblem& p) { return p.queries.rows(); })
      .def("__repr__", [](const PyProblem& p) {
        return "<tierlab.RecomputeProblem " + std::to_string(p.queries.rows()) + " query rows x " +
               std::to_string(p.keys.rows()) + " tokens, d=" + std::to_string(p.keys.cols()) + ", " +
               std::to_string(p.variants.size()) + " variants>";
      });

  m.def("recompute_variants", [](const py::object& queries, const py::object& keys, const py::object& values,
                                 const std::vector<py::object>& variants, const py::object& selections,
                                 const std::string& backend, const py::object& visible, bool per_row) {
    const PyProblem p = make_problem(queries, keys, values, variants, visible);
    QuerySetProblem q = p.problem();
    q.selections = allocations_arg(selections, "selections", p.keys.rows(), static_cast<int>(p.variants.size()) + 1);
    auto be = backend_for(backend);
    WorkContext ctx;
    HeadErrors out = call_released(ctx, [&] { return evaluate_problem(q, *be, per_row, ctx); });
    out.queries = "given";
    return out;
  }, py::arg("queries"), py::arg("keys"), py::arg("values"), py::arg("variants"), py::arg("selections"),
     py::arg("backend") = "auto", py::arg("visible") = py::none(), py::arg("per_row") = false,
     "tierlab.RecomputeProblem(queries, keys, values, variants, visible).evaluate(selections, backend, per_row) in one "
     "call (tierlab.HeadErrors).");

}

}  // namespace

py::object json_to_python(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(j.dump());
}

std::unique_ptr<Recomputer> backend_for(const std::string& name) {
  std::string note;
  auto b = make_recomputer(parse_backend(name), &note);
  if (!b) throw InputError("backend '" + name + "' is not available: " + note);
  return b;
}

void bind_solve(py::module_& m) {
  bind_trace_solve(m);
  bind_head_solve(m);
  bind_head_errors(m);
  bind_recompute_problem(m);
}

}  // namespace tierlab::python
