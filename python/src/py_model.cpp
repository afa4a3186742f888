// The model in Python: tiers and ladders (model/quantizers/tier.hpp), the registries of methods
// (tierlab.methods(), as `tierlab methods` lists them), the surrogate costs of a head
// (model/surrogate.hpp), dominance and R_h(b) (model/dominance.hpp), the per-head noise model.
#include <cmath>
#include <limits>

#include "common.hpp"
#include "model/dominance.hpp"
#include "model/surrogate.hpp"
#include "model/quantizers/tier.hpp"
#include "scenarios/methods/catalogue.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "solvers/families.hpp"
#include "solvers/problem.hpp"

namespace tierlab::python {

namespace {

// tierlab.methods(kind): the catalogue (scenarios/methods/catalogue.hpp), entry for entry what
// `tierlab methods --json --kind KIND` prints.
py::list methods(const std::string& kind) {
  py::list out;
  for (const CatalogueEntry& e : method_catalogue(kind, "argument kind")) {
    py::list params;
    for (const MethodParam& p : e.info.params) {
      py::dict d;
      d["name"] = p.name;
      d["default"] = p.default_value;
      d["help"] = p.help;
      d["choices"] = p.choices;
      params.append(d);
    }
    py::dict d;
    d["name"] = e.info.name;
    d["kind"] = e.info.kind;
    d["summary"] = e.info.summary;
    d["source"] = e.info.source;
    d["params"] = params;
    out.append(d);
  }
  return out;
}

py::object costs_view(const py::object& self, const MatrixRMd& m) {
  return readonly_view(py::dtype::of<double>(), {m.rows(), m.cols()}, m.data(), self);
}
py::object costs_view(const py::object& self, const VectorD& v) {
  return readonly_view(py::dtype::of<double>(), {v.size()}, v.data(), self);
}

}  // namespace

RateLadder ladder_arg(const py::object& obj) {
  if (py::isinstance<RateLadder>(obj)) return obj.cast<RateLadder>();
  if (py::isinstance<py::str>(obj)) return RateLadder::parse(obj.cast<std::string>());
  if (py::isinstance<py::sequence>(obj)) {
    std::string text;
    for (auto x : obj) text += (text.empty() ? "" : ",") + py::str(x).cast<std::string>();
    return RateLadder::parse(text);
  }
  throw InputError("argument ladder: expected a tierlab.Ladder, a comma-separated string or a list of tier names");
}

SurrogateCosts head_costs(const HeadData& d, const RopeParams& rope, const RateLadder& ladder, const std::string& queries) {
  if (queries == "obs") return surrogate_costs(d, rope, observation_queries(d), ladder);
  if (queries == "decode") {
    if (d.decode_queries.rows() == 0) throw InputError("argument queries: 'decode' but the head has no decode steps");
    return surrogate_costs(d, rope, all_visible(d.decode_queries, d.keys.rows()), ladder);
  }
  throw InputError("argument queries: '" + queries + "' is not obs or decode");
}

void bind_model(py::module_& m) {
  py::class_<Tier>(m, "Tier", "A precision level of one key vector, tau = (bits, quantizer) (model/quantizers/tier.hpp).")
      .def(py::init([](const std::string& name) { return Tier::parse(name); }), py::arg("name"),
           "From its name: evict, exact, kivi2 (G=32) or kivi2g64, token4 or token4g64, turboquant2, quarot4, "
           "kvquant3, kvcobra2.")
      .def_property_readonly("name", &Tier::name, "Its name (the inverse of the constructor).")
      .def_property_readonly("kind", [](const Tier& t) { return std::string(to_string(t.kind)); },
                             "evict, exact, kivi, token or published.")
      .def_readonly("bits", &Tier::bits, "Code bits per element (0 evict, 16 exact).")
      .def_readonly("group", &Tier::group, "KIVI: tokens per group; per-token/quarot: channels per group (0 = default).")
      .def_readonly("method", &Tier::method, "The registered key quantizer of a published tier, else empty.")
      .def_property_readonly("quantizer", &Tier::quantizer, "The quantizer family.")
      .def("nominal_rate", [](const Tier& t, int d) {
        const Rate r = t.nominal_rate(d);
        return py::make_tuple(r.code_bits, r.total_bits);
      }, py::arg("head_dim"), "(code bits, total bits) per element at head dim d (closed form; InputError for data-dependent tiers).")
      .def("__eq__", [](const Tier& a, const Tier& b) { return a == b; })
      .def("__repr__", [](const Tier& t) { return "<tierlab.Tier " + t.name() + ">"; });

  py::class_<RateLadder>(m, "Ladder", "The tiers an allocation may use: tiers[0] is evict, the last exact (model/quantizers/tier.hpp).")
      .def(py::init([](const py::object& o) { return ladder_arg(o); }), py::arg("tiers"),
           "From a comma-separated string or a list of tier names; evict and exact are added when missing.")
      .def_readonly("tiers", &RateLadder::tiers, "The tiers, evict first, exact last.")
      .def_property_readonly("name", &RateLadder::name, "\"evict,kivi2,kivi4,exact\".")
      .def_property_readonly("exact_index", &RateLadder::exact_index, "Index of the exact tier.")
      .def("index_of_bits", &RateLadder::index_of_bits, py::arg("bits"),
           "Index of the first finite tier with `bits` code bits, -1 when none.")
      .def_static("kivi", &RateLadder::kivi, py::arg("bits") = std::vector<int>{2, 4, 8}, py::arg("group") = 32,
                  "evict, kivi<b> for each b, exact.")
      .def("__len__", &RateLadder::size)
      .def("__getitem__", [](const RateLadder& l, int i) {
        if (i < 0) i += l.size();
        if (i < 0 || i >= l.size()) throw py::index_error("ladder index out of range");
        return l.tiers[static_cast<std::size_t>(i)];
      })
      .def("__repr__", [](const RateLadder& l) { return "<tierlab.Ladder " + l.name() + ">"; });

  m.def("methods", &methods, py::arg("kind") = "all",
        R"doc(The catalogue of methods, as a list of dicts {name, kind, summary, source, params:
[{name, default, help, choices}]}: key quantizers, eviction scorers, seed allocators (with
kvcobra), uniform policies and the solvers of tierlab.solve, exactly as `tierlab methods --json`
lists them. kind: "all", "quantizer", "scorer", "allocator", "policy" or "solver".)doc");

  py::class_<PyCosts>(m, "Costs", R"doc(The surrogate costs of one head on one query set (docs/model.md section 3):
cost[j, t] = c_t(tau_j) for every tier j of the ladder (row 0 eviction, last row exact = 0),
noise[j, t] = n_t(tau_j), the token weights a_t, c_t(0) and mean attention, each tier's
nominal rate, and mean_q ||o_q||^2. Arrays are read-only views owned by this object.)doc")
      .def_property_readonly("cost", [](py::object s) { return costs_view(s, s.cast<const PyCosts&>().costs.cost); },
                             "c_t(tau_j), [len(ladder), T], absolute squared-output units.")
      .def_property_readonly("noise", [](py::object s) { return costs_view(s, s.cast<const PyCosts&>().costs.noise); },
                             "n_t(tau_j) [nats^2], [len(ladder), T].")
      .def_property_readonly("a", [](py::object s) { return costs_view(s, s.cast<const PyCosts&>().costs.weights.a); },
                             "Token weights a_t = mean_q p_{q,t}^2 ||v_t - o_q||^2, [T].")
      .def_property_readonly("evict_cost", [](py::object s) {
        return costs_view(s, s.cast<const PyCosts&>().costs.weights.evict_cost);
      }, "c_t(0), [T].")
      .def_property_readonly("attention", [](py::object s) {
        return costs_view(s, s.cast<const PyCosts&>().costs.weights.attention);
      }, "mean_q p_{q,t}, [T].")
      .def_property_readonly("code_rates", [](const PyCosts& c) {
        std::vector<double> r;
        for (const Rate& x : c.costs.rates) r.push_back(x.code_bits);
        return to_array(r);
      }, "Nominal code bits per element of each tier.")
      .def_property_readonly("total_rates", [](const PyCosts& c) {
        std::vector<double> r;
        for (const Rate& x : c.costs.rates) r.push_back(x.total_bits);
        return to_array(r);
      }, "Nominal total bits (codes + metadata) per element of each tier.")
      .def_property_readonly("output_norm2", [](const PyCosts& c) { return c.costs.output_norm2; },
                             "mean_q ||o_q||^2 (divide a cost by it for a relative error).")
      .def_property_readonly("ladder", [](const PyCosts& c) { return c.costs.ladder; }, "The ladder.")
      .def_readonly("layer", &PyCosts::layer)
      .def_readonly("kv_head", &PyCosts::kv_head)
      .def_readonly("queries", &PyCosts::queries, "The query set: obs or decode.")
      .def("__repr__", [](const PyCosts& c) {
        return "<tierlab.Costs L" + std::to_string(c.layer) + ".H" + std::to_string(c.kv_head) + " (" + c.queries +
               " queries): " + std::to_string(c.costs.cost.cols()) + " tokens x ladder " + c.costs.ladder.name() + ">";
      });

  m.def("surrogate_costs", [](const PyHead& h, const py::object& ladder, const std::string& queries) {
    const RateLadder l = ladder_arg(ladder);
    PyCosts out;
    out.layer = h.layer;
    out.kv_head = h.kv_head;
    out.queries = queries;
    WorkContext ctx;  // Ctrl-C stops a long head (the surrogate checks the flag: model/base/cancel.hpp)
    out.costs = call_released(ctx, [&] {
      const auto d = h.data();
      return head_costs(*d, h.rope, l, queries);
    });
    return out;
  }, py::arg("head"), py::arg("ladder") = std::string(kDefaultLadder), py::arg("queries") = "obs",
     "The surrogate costs of a head (tierlab.Costs) on its observation queries (causal) or its decode queries.");

  py::class_<DominanceReport>(m, "Dominance", R"doc(Strict and hull dominance of a head's tiers (docs/model.md section 4):
R[j] = R_h(tau_j) = sum_t c_t(tau_j) / sum_t c_t(0) (evict 1, exact 0), the rate used for the
hull, dominated (R >= 1, finite tiers) and hull_dominated (above the lower convex hull).)doc")
      .def_property_readonly("R", [](const DominanceReport& d) { return to_array(d.R); }, "R_h per tier.")
      .def_property_readonly("rate", [](const DominanceReport& d) { return to_array(d.rate); }, "Rate per tier.")
      .def_property_readonly("dominated", [](const DominanceReport& d) { return to_bool_array(d.dominated); },
                             "R >= 1 per tier.")
      .def_property_readonly("hull_dominated", [](const DominanceReport& d) { return to_bool_array(d.hull_dominated); },
                             "Above the lower convex hull per tier.")
      .def("__repr__", [](const DominanceReport& d) {
        int n = 0, hn = 0;
        for (bool b : d.dominated) n += b;
        for (bool b : d.hull_dominated) hn += b;
        return "<tierlab.Dominance " + std::to_string(d.R.size()) + " tiers: " + std::to_string(n) + " dominated, " +
               std::to_string(hn) + " hull-dominated>";
      });
  m.def("dominance", [](const PyCosts& c, const std::string& rate) { return dominance(c.costs, parse_rate_kind(rate)); },
        py::arg("costs"), py::arg("rate") = std::string(to_string(kDefaultRateKind)), "Dominance of a head's tiers (tierlab.Dominance) from its costs.");
  m.def("dominance_ratio", [](const PyCosts& c, int bits) {
    const int j = c.costs.ladder.index_of_bits(bits);
    if (j < 0)
      throw InputError("argument bits: the ladder " + c.costs.ladder.name() + " has no tier with " +
                       std::to_string(bits) + " code bits");
    return dominance(c.costs, kDefaultRateKind).R[static_cast<std::size_t>(j)];  // R is the same in either kind
  }, py::arg("costs"), py::arg("bits") = 2,
     "R_h(b) = sum_t c_t(tau_b) / sum_t c_t(0) for the ladder's first tier with b code bits; >= 1: dominated.");

  py::class_<HeadNoiseModel>(m, "NoiseModel", "The per-head noise model n_h(b) = alpha beta^(-b) (model/surrogate.hpp fit_head_noise).")
      .def_readonly("alpha", &HeadNoiseModel::alpha)
      .def_readonly("beta", &HeadNoiseModel::beta)
      .def_readonly("residual", &HeadNoiseModel::residual, "RMS of the log fit (NaN when not fitted).")
      .def_readonly("fitted", &HeadNoiseModel::fitted, "False: the textbook beta = 4 fallback (see note).")
      .def_readonly("quantizer", &HeadNoiseModel::quantizer, "Whose tiers were fitted.")
      .def_readonly("note", &HeadNoiseModel::note, "Why fitted is False.")
      .def("__call__", [](const HeadNoiseModel& n, double b) { return n(b); }, py::arg("bits"), "n_h(b).")
      .def("__repr__", [](const HeadNoiseModel& n) {
        return "<tierlab.NoiseModel n(b) = " + std::to_string(n.alpha) + " * " + std::to_string(n.beta) + "^(-b)" +
               (n.fitted ? "" : " (not fitted: " + n.note + ")") + ">";
      });
  m.def("fit_noise", [](const PyCosts& c, const std::string& rate) {
    std::vector<double> rates;
    const RateKind k = parse_rate_kind(rate);
    for (const Rate& r : c.costs.rates) rates.push_back(rate_of(r, k));
    return fit_head_noise(c.costs, rates);
  }, py::arg("costs"), py::arg("rate") = std::string(to_string(kDefaultRateKind)),
     "Fits n_h(b) on the nominal rates of the given kind (the convention of `tierlab solve --solver waterfill`).");
}

}  // namespace tierlab::python
