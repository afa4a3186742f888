// Whole-trace exact errors and the interior advantage in Python: tierlab.recompute (an
// allocation of a trace: evaluate_trace, what `tierlab eval --allocation` computes) and
// tierlab.interior (scenarios/pipeline/advantage.hpp), with their result types Evaluation and
// Interior.
#include <cmath>
#include <limits>
#include <memory>

#include "common.hpp"
#include "gpu/recompute.hpp"
#include "model/allocation.hpp"
#include "scenarios/pipeline/advantage.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/report.hpp"
#include "solvers/problem.hpp"
#include "scenarios/io/table_numbers.hpp"  // kNaN

namespace tierlab::python {

namespace {

struct PyEvaluation {
  std::shared_ptr<const TraceEvaluation> ev;
};

struct PyInterior {
  std::shared_ptr<const InteriorReport> rep;
};

// The per-head interior table: A (decode, obs, surrogate), dominance of the 2-bit tier, and
// each family's option, measured rates and recomputed relative errors.
py::dict interior_table(const InteriorReport& r) {
  const auto& hs = r.heads;
  auto col = [&](auto f) { return column<double>(hs, f); };
  py::dict d = head_table(hs);
  d["A_decode"] = col([](const HeadInterior& h) { return h.advantage_decode; });
  d["A_obs"] = col([](const HeadInterior& h) { return h.advantage_obs; });
  d["A_surrogate"] = col([](const HeadInterior& h) { return h.advantage_surrogate; });
  d["dominated_2bit"] = column<bool>(hs, [](const HeadInterior& h) { return h.dominated_2bit; });
  const std::pair<const char*, FamilyOutcome HeadInterior::*> fams[] = {
      {"Q", &HeadInterior::Q}, {"E", &HeadInterior::E}, {"M", &HeadInterior::M}};
  for (const auto& [name, f] : fams) {
    const std::string p = name;
    py::list option;
    for (const HeadInterior& h : hs) option.append((h.*f).option);
    d[py::str(p + "_option")] = option;
    // An infeasible family (Q below every finite tier's rate) has no numbers: NaN.
    auto value = [f = f](double FamilyOutcome::*inner) {
      return [f, inner](const HeadInterior& h) { return (h.*f).feasible ? (h.*f).*inner : kNaN; };
    };
    d[py::str(p + "_feasible")] = column<bool>(hs, [f = f](const HeadInterior& h) { return (h.*f).feasible; });
    d[py::str(p + "_decode_rel_error")] = col([f = f](const HeadInterior& h) { return (h.*f).feasible ? (h.*f).decode.rel_error : kNaN; });
    d[py::str(p + "_obs_rel_error")] = col([f = f](const HeadInterior& h) { return (h.*f).feasible ? (h.*f).obs.rel_error : kNaN; });
    d[py::str(p + "_surrogate")] = col(value(&FamilyOutcome::surrogate));
    d[py::str(p + "_code_rate")] = col([f = f](const HeadInterior& h) { return (h.*f).feasible ? (h.*f).rate.code_bits : kNaN; });
    d[py::str(p + "_total_rate")] = col([f = f](const HeadInterior& h) { return (h.*f).feasible ? (h.*f).rate.total_bits : kNaN; });
  }
  return d;
}

py::dict metrics_dict(const ErrorMetrics& e) {
  py::dict d;
  d["rel_error"] = e.rel_error;
  d["abs_error"] = e.abs_error;
  d["attn_tv"] = e.attn_tv;
  d["logit_error"] = e.logit_error;
  return d;
}

// The allocation argument of recompute: a Solution, or an integer array [L, H, T] (or [L*H, T]).
Allocation trace_allocation(const py::object& obj, const TraceMeta& m, const py::object& ladder) {
  if (py::isinstance<PySolution>(obj)) {
    const PySolution& s = obj.cast<const PySolution&>();
    if (!s.rep->has_solution()) throw InputError("argument allocation: the solution has no allocation: " + s.rep->message);
    return s.rep->allocation;
  }
  Allocation a;
  a.ladder = ladder.is_none() ? RateLadder::parse(kDefaultLadder) : ladder_arg(ladder);
  a.n_layers = m.n_layers;
  a.n_kv_heads = m.n_kv_heads;
  a.prompt_len = m.prompt_len;
  const py::array arr = py::reinterpret_borrow<py::array>(obj);
  if (!py::isinstance<py::array>(obj))
    throw InputError("argument allocation: expected a tierlab.Solution or an integer array [n_layers, n_kv_heads, T]");
  const int dims = arr.ndim() == 2 ? 2 : 3;
  const auto v = int_array(obj, "allocation", dims, dims == 3 ? "[n_layers, n_kv_heads, T]" : "[n_layers * n_kv_heads, T]",
                           a.ladder.size() - 1);
  const bool ok = dims == 3 ? (v.shape(0) == m.n_layers && v.shape(1) == m.n_kv_heads && v.shape(2) == m.prompt_len)
                            : (v.shape(0) == m.n_heads() && v.shape(1) == m.prompt_len);
  if (!ok)
    throw InputError("argument allocation: expected shape [" + std::to_string(m.n_layers) + ", " +
                     std::to_string(m.n_kv_heads) + ", " + std::to_string(m.prompt_len) + "] for this trace");
  a.tiers.assign(static_cast<std::size_t>(m.n_heads()), std::vector<std::uint8_t>(static_cast<std::size_t>(m.prompt_len)));
  for (std::size_t i = 0; i < a.tiers.size(); ++i)
    for (std::size_t t = 0; t < a.tiers[i].size(); ++t)
      a.tiers[i][t] = static_cast<std::uint8_t>(v.data()[i * a.tiers[i].size() + t]);
  a.validate();
  return a;
}

py::dict aggregate_dict(const Aggregate& a) {
  py::dict d;
  d["code_rate"] = a.rate.code_bits;
  d["total_rate"] = a.rate.total_bits;
  d["obs"] = metrics_dict(a.obs);
  d["decode"] = metrics_dict(a.decode);
  d["predicted_abs"] = a.predicted_abs;
  d["predicted_rel"] = a.predicted_rel;
  return d;
}

}  // namespace

// A whole trace's exact errors and interior advantage: Evaluation, Interior, interior, recompute.
void bind_evaluate(py::module_& m) {
  py::class_<PyEvaluation>(m, "Evaluation", R"doc(The exact errors of one allocation of a whole trace (`tierlab eval`):
per head (a dict of arrays, `heads`), per layer and for the model (means over heads),
next to the surrogate's prediction; obs = observation queries, decode = decode steps.)doc")
      .def_property_readonly("backend", [](const PyEvaluation& e) { return e.ev->backend; })
      .def_property_readonly("policy", [](const PyEvaluation& e) { return e.ev->policy; })
      .def_property_readonly("has_decode", [](const PyEvaluation& e) { return e.ev->has_decode; })
      .def_property_readonly("seconds", [](const PyEvaluation& e) { return e.ev->seconds; })
      .def_property_readonly("model", [](const PyEvaluation& e) { return aggregate_dict(e.ev->model); },
                             "Means over all heads: code_rate, total_rate, obs and decode metrics, predicted_abs/rel.")
      .def_property_readonly("layers", [](const PyEvaluation& e) {
        py::list out;
        for (const Aggregate& a : e.ev->layers) out.append(aggregate_dict(a));
        return out;
      }, "Means over each layer's heads.")
      .def_property_readonly("heads", [](const PyEvaluation& e) {
        const auto& hs = e.ev->heads;
        auto col = [&](auto f) { return column<double>(hs, f); };
        py::dict d = head_table(hs);
        d["code_rate"] = col([](const HeadEvaluation& h) { return h.rate.code_bits; });
        d["total_rate"] = col([](const HeadEvaluation& h) { return h.rate.total_bits; });
        d["evicted_fraction"] = col([](const HeadEvaluation& h) { return h.evicted_fraction; });
        d["obs_rel_error"] = col([](const HeadEvaluation& h) { return h.obs.rel_error; });
        d["obs_abs_error"] = col([](const HeadEvaluation& h) { return h.obs.abs_error; });
        d["obs_attn_tv"] = col([](const HeadEvaluation& h) { return h.obs.attn_tv; });
        d["obs_logit_error"] = col([](const HeadEvaluation& h) { return h.obs.logit_error; });
        d["decode_rel_error"] = col([](const HeadEvaluation& h) { return h.decode.rel_error; });
        d["decode_abs_error"] = col([](const HeadEvaluation& h) { return h.decode.abs_error; });
        d["decode_attn_tv"] = col([](const HeadEvaluation& h) { return h.decode.attn_tv; });
        d["decode_logit_error"] = col([](const HeadEvaluation& h) { return h.decode.logit_error; });
        d["predicted_abs"] = col([](const HeadEvaluation& h) { return h.predicted_abs; });
        d["predicted_rel"] = col([](const HeadEvaluation& h) { return h.predicted_rel; });
        return d;
      }, "Per head, a dict of arrays: layer, kv_head, code_rate, total_rate, evicted_fraction, obs_* and decode_* "
         "(rel_error, abs_error, attn_tv, logit_error), predicted_abs, predicted_rel.")
      .def("to_json", [](const PyEvaluation& e) { return json_to_python(to_json(*e.ev)); },
           "The report as `tierlab eval --json` prints it (a dict).")
      .def("__repr__", [](const PyEvaluation& e) {
        return "<tierlab.Evaluation of " + e.ev->policy + " on " + std::to_string(e.ev->heads.size()) + " heads (" +
               e.ev->backend + "): mean obs rel_error " + std::to_string(e.ev->model.obs.rel_error) + ">";
      });

  py::class_<PyInterior>(m, "Interior", R"doc(The interior advantage of every head of a trace at one budget
(docs/model.md section 6; `tierlab solve --advantage`): A = 1 - err(M*) / min(err(Q*), err(E*)) with
each family's surrogate-optimal allocation repaired to the measured budget (equal memory) and
recomputed exactly; `heads` is the per-head table (a dict of arrays), with the means, medians
and the dominated share (heads whose 2-bit tier has R_h >= 1).)doc")
      .def_property_readonly("budget", [](const PyInterior& r) { return r.rep->options.budget; })
      .def_property_readonly("rate", [](const PyInterior& r) { return std::string(to_string(r.rep->options.rate_kind)); })
      .def_property_readonly("backend", [](const PyInterior& r) { return r.rep->backend; })
      .def_property_readonly("mean_advantage_decode", [](const PyInterior& r) { return r.rep->mean_advantage_decode; })
      .def_property_readonly("mean_advantage_obs", [](const PyInterior& r) { return r.rep->mean_advantage_obs; })
      .def_property_readonly("median_advantage_decode", [](const PyInterior& r) { return r.rep->median_advantage_decode; })
      .def_property_readonly("median_advantage_obs", [](const PyInterior& r) { return r.rep->median_advantage_obs; })
      .def_property_readonly("dominated_share", [](const PyInterior& r) { return r.rep->dominated_share; },
                             "Fraction of heads whose 2-bit tier is dominated (R_h(2) >= 1).")
      .def_property_readonly("heads", [](const PyInterior& r) { return interior_table(*r.rep); },
                             "Per head: layer, kv_head, A_decode, A_obs, A_surrogate, dominated_2bit, and for F in Q, E, M: "
                             "F_feasible, F_option, F_decode_rel_error, F_obs_rel_error, F_surrogate, F_code_rate, F_total_rate.")
      .def("to_json", [](const PyInterior& r) { return json_to_python(to_json(*r.rep)); },
           "The report as `tierlab solve --advantage --json` prints it under \"interior\".")
      .def("__repr__", [](const PyInterior& r) {
        return "<tierlab.Interior B=" + std::to_string(r.rep->options.budget) + " " +
               std::string(to_string(r.rep->options.rate_kind)) + " on " + std::to_string(r.rep->heads.size()) +
               " heads: median A (decode) " + std::to_string(r.rep->median_advantage_decode) + ", dominated share " +
               std::to_string(r.rep->dominated_share) + ">";
      });

  m.def("interior", [](const PyTrace& trace, const py::object& budget, const std::string& rate, const py::object& ladder,
                       const std::string& backend, py::object progress) -> py::object {
    const bool many = py::hasattr(budget, "__len__") && !py::isinstance<py::str>(budget);
    std::vector<double> budgets;
    if (many)
      for (auto b : budget) budgets.push_back(real_arg(b, "budget"));
    else
      budgets.push_back(real_arg(budget, "budget"));
    if (budgets.empty()) throw InputError("argument budget: an empty list of budgets");
    InteriorOptions io;
    io.budget = budgets[0];
    io.rate_kind = parse_rate_kind(rate);
    io.ladder = ladder_arg(ladder);
    io.validate();
    for (double b : budgets) {
      check_budget(b, "argument budget");
      if (b == 0) throw InputError("argument budget = 0 bits per element; the interior advantage needs a budget > 0.");
    }
    auto be = backend_for(backend);
    WorkContext ctx;
    ctx.progress = progress;
    const Progress report = ctx.reporter();
    auto reps = call_released(ctx, [&] { return interior_advantage(*trace.reader, io, budgets, *be, &ctx.stop, report); });
    py::list out;
    for (auto& r : reps) out.append(PyInterior{std::make_shared<const InteriorReport>(std::move(r))});
    return many ? py::object(out) : py::object(out[0]);
  }, py::arg("trace"), py::arg("budget"), py::arg("rate") = std::string(to_string(kDefaultRateKind)),
     py::arg("ladder") = std::string(kDefaultLadder), py::arg("backend") = "auto", py::arg("progress") = py::none(),
     "The interior advantage of every head (tierlab.Interior) at a budget, or a list of them for a list of budgets "
     "(each head's costs computed once); rate: total (equal memory, the scenarios' default) or code.");

  m.def("recompute", [](const PyTrace& trace, const py::object& allocation, const py::object& ladder,
                        const std::string& backend, py::object progress) {
    const Allocation a = trace_allocation(allocation, trace.reader->meta(), ladder);
    auto be = backend_for(backend);
    WorkContext ctx;
    ctx.progress = progress;
    const Progress report = ctx.reporter();
    auto ev = call_released(ctx, [&] {
      auto e = std::make_shared<TraceEvaluation>(evaluate_trace(
          *trace.reader, a.ladder, [&a](const HeadData& h, const TokenWeights&) { return a.head(h.layer, h.kv_head); },
          *be, report));
      e->policy = "allocation";
      return std::shared_ptr<const TraceEvaluation>(e);
    });
    return PyEvaluation{ev};
  }, py::arg("trace"), py::arg("allocation"), py::arg("ladder") = py::none(), py::arg("backend") = "auto",
     py::arg("progress") = py::none(),
     R"doc(Exact recomputation of an allocation of a whole trace (what `tierlab eval --allocation` computes).

allocation: a tierlab.Solution, or an integer array [n_layers, n_kv_heads, T] of tier
indices into ladder (default: tierlab solve's default ladder); backend: "auto" | "cpu" |
"cuda" (tierlab.InputError when the one asked for is not there; tierlab.RecomputeError
when it fails). progress(done, total) per head; Ctrl-C raises KeyboardInterrupt.)doc");
}

}  // namespace tierlab::python
