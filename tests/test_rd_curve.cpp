// The rate-distortion curve (scenarios/pipeline/rd_curve.hpp) against independent
// single-budget solves and evaluations (allocate_trace + evaluate_trace through the
// Recomputer seam: the path `tierlab solve --budget B --recompute` takes), its hull, its
// family ordering, the budget grid's messages, the one-head form, and `tierlab solve --budgets`.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/cpu_recompute.hpp"
#include "gpu/recompute.hpp"
#include "model/llama2c/capture.hpp"
#include "model/base/error.hpp"
#include "model/llama2c/llama2c.hpp"
#include "model/quantizers/quantizer.hpp"
#include "model/synthetic/synthetic.hpp"
#include "scenarios/pipeline/allocate.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/pipeline/rd_curve.hpp"
#include "scenarios/methods/rd_methods.hpp"
#include "support.hpp"

using namespace tierlab;
namespace fs = std::filesystem;

namespace {

const std::string& tiny_trace() {
  static tierlab::testing::TempDir tmp("rd_curve");
  static const std::string path = [] {
    const std::string p = tmp.file("tiny.safetensors");
    SynthParams params = synth_preset("tiny");
    params.seed = 11;
    write_synthetic_trace(params, p);
    return p;
  }();
  return path;
}

bool close(double a, double b, double rel = 1e-5, double abs = 1e-12) {
  return std::fabs(a - b) <= abs + rel * std::max(std::fabs(a), std::fabs(b));
}

RdCurveOptions options(RateKind kind, Scope scope, std::vector<double> budgets) {
  RdCurveOptions o;
  o.budgets = std::move(budgets);
  o.solve.rate_kind = kind;
  o.solve.scope = scope;
  return o;
}

}  // namespace

TEST_CASE("Every point of the curve equals an independent solve at its budget and its recomputation") {
  TraceReader trace(tiny_trace());
  auto backend = make_recomputer(Backend::Cpu);
  const auto kind = GENERATE(RateKind::Code, RateKind::Total);
  const auto scope = GENERATE(Scope::Head, Scope::Layer, Scope::Model);
  const auto queries = GENERATE(RdQueries::Decode, RdQueries::Obs);
  RdCurveOptions o = options(kind, scope, {0.0, 0.5, 1.7, 2.0, 3.25, 4.0, 6.0, 9.5, 16.0});
  o.queries = queries;
  const RdCurve c = rd_curve(trace, o);
  REQUIRE(c.points.size() == o.families.size() * o.budgets.size());
  int compared = 0;
  for (std::size_t f = 0; f < o.families.size(); ++f)
    for (std::size_t k = 0; k < o.budgets.size(); ++k) {
      const RdPoint& p = c.at(static_cast<int>(f), static_cast<int>(k));
      AllocateOptions single = o.solve;
      single.budget = o.budgets[k];
      single.family = o.families[f];
      const AllocationReport rep = allocate_trace(trace, single);
      INFO(to_string(o.families[f]) << " B=" << o.budgets[k] << " " << to_string(kind) << " " << to_string(scope));
      REQUIRE(p.feasible == rep.has_solution());
      if (!p.feasible) continue;
      CHECK(p.rate.code_bits == Approx(rep.rate.code_bits).epsilon(1e-12));
      CHECK(p.rate.total_bits == Approx(rep.rate.total_bits).epsilon(1e-12));
      CHECK(p.x <= o.budgets[k] + 1e-9);  // equal memory: the measured rate meets the budget
      CHECK(p.surrogate == Approx(rep.relative_objective).epsilon(1e-12));
      const Allocation alloc = rep.allocation;
      const TraceEvaluation ev = evaluate_trace(
          trace, alloc.ladder, [&](const HeadData& h, const TokenWeights&) { return alloc.head(h.layer, h.kv_head); },
          *backend);
      const ErrorMetrics& want = queries == RdQueries::Decode ? ev.model.decode : ev.model.obs;
      CHECK(close(p.error.rel_error, want.rel_error));
      CHECK(close(p.error.attn_tv, want.attn_tv));
      CHECK(close(p.error.abs_error, want.abs_error));
      for (std::size_t i = 0; i < ev.heads.size(); ++i)
        CHECK(close(p.head_error[i], queries == RdQueries::Decode ? ev.heads[i].decode.rel_error : ev.heads[i].obs.rel_error));
      ++compared;
    }
  CHECK(compared >= 20);
  CHECK(c.swept_points > 0);  // pooled too: E and M are one knapsack per scope, swept
}

TEST_CASE("The lower hull is convex, made of operating points, and below every point and ladder tier") {
  TraceReader trace(tiny_trace());
  const auto kind = GENERATE(RateKind::Code, RateKind::Total);
  const RdCurve c = rd_curve(trace, options(kind, Scope::Head, parse_budget_grid("0:16:0.5")));
  for (const RdHull* h : {&c.hull, &c.surrogate_hull}) {
    REQUIRE(h->x.size() >= 2);
    for (std::size_t i = 1; i < h->x.size(); ++i) CHECK(h->x[i] > h->x[i - 1]);
    for (std::size_t i = 2; i < h->x.size(); ++i) {
      const double s0 = (h->y[i - 1] - h->y[i - 2]) / (h->x[i - 1] - h->x[i - 2]);
      const double s1 = (h->y[i] - h->y[i - 1]) / (h->x[i] - h->x[i - 1]);
      CHECK(s1 >= s0 - 1e-12 * std::max(1.0, std::fabs(s0)));  // slopes increase: convex
    }
  }
  auto below = [](const RdHull& h, double x, double y) { return h.at(x) <= y + 1e-12 * std::max(1.0, std::fabs(y)); };
  for (const RdPoint& p : c.points) {
    if (!p.feasible) continue;
    CHECK(below(c.hull, p.x, p.error.rel_error));
    CHECK(below(c.surrogate_hull, p.x, p.surrogate));
  }
  for (const RdLadderPoint& l : c.ladder) {
    CHECK(below(c.hull, l.x, l.error));
    CHECK(l.above_hull == (l.error > c.hull.at(l.x) * (1 + kRecomputedHullTolerance) + 1e-15));
  }
  // Eviction of every prompt token is the point (0, 1) on the observation queries (no output
  // at all); the decode queries still see the decode steps' own (exact) tokens. Exact: error 0.
  CHECK(c.ladder.front().tier == "evict");
  CHECK(c.ladder.front().x == 0.0);
  RdCurveOptions obs = options(kind, Scope::Head, {0.0, 4.0});
  obs.queries = RdQueries::Obs;
  CHECK(rd_curve(trace, obs).ladder.front().error == Approx(1.0).epsilon(1e-9));
  CHECK(c.ladder.back().tier == "exact");
  CHECK(c.ladder.back().error == 0.0);
  CHECK_FALSE(c.ladder.front().above_hull);
  CHECK_FALSE(c.ladder.back().above_hull);
}

TEST_CASE("A point equal to a hull vertex within float32 rounding is on the hull, not above it") {
  // The hull's own vertex, and the same value off by the rounding of two recomputation paths.
  RdHull h;
  h.x = {0.0, 1.0, 16.0};
  h.y = {2.4569, 0.7434, 0.0};
  h.label = {"E B=0", "M B=1", "tier exact"};
  CHECK_FALSE(above_recomputed_hull(h, 0.0, 2.4569));
  CHECK_FALSE(above_recomputed_hull(h, 0.0, 2.4569 * (1 + 1e-8)));
  CHECK_FALSE(above_recomputed_hull(h, 0.0, 2.4569 * (1 + 0.5 * kRecomputedHullTolerance)));
  CHECK(above_recomputed_hull(h, 0.0, 2.4569 * (1 + 2 * kRecomputedHullTolerance)));
  CHECK(above_recomputed_hull(h, 0.5, 1.7));  // well above the edge (0.5: 1.60)
  CHECK_FALSE(above_recomputed_hull(h, 20.0, 5.0));  // the hull does not reach x = 20
  CHECK_FALSE(above_recomputed_hull(h, 0.5, std::nan("")));

  // The real model: with total bits the eviction tier is the E B=0 operating point, the hull's
  // first vertex, recomputed by another path (issue: it was flagged "above the hull").
  Llama2cModel model(std::string(TIERLAB_SOURCE_DIR) + "/data/stories260K/stories260K.bin");
  CaptureOptions opt;
  opt.prompt.generate = 64;
  opt.decode_steps = 8;
  const tierlab::testing::TempDir tmp("rd-curve-stories");
  const std::string path = tmp.file("stories.safetensors");
  write_trace(path, capture(model, opt));
  TraceReader trace(path);
  const RdCurve c = rd_curve(trace, options(RateKind::Total, Scope::Head, parse_budget_grid("0:8:1")));
  REQUIRE(c.ladder.front().tier == "evict");
  REQUIRE(c.hull.x.front() == 0.0);
  CHECK(c.ladder.front().error == Approx(c.hull.y.front()).epsilon(1e-6));
  CHECK_FALSE(c.ladder.front().above_hull);
}

TEST_CASE("The mixed family's surrogate is at most the endpoints' at every budget counted in code bits") {
  // Code bits are what the budget counts exactly (no metadata, no repair), so M's tiers
  // containing Q's and E's make its optimum no worse than theirs.
  TraceReader trace(tiny_trace());
  const auto scope = GENERATE(Scope::Head, Scope::Layer, Scope::Model);
  RdCurveOptions o = options(RateKind::Code, scope, parse_budget_grid("0:16:0.25"));
  o.families = {FamilyChoice::Quantize, FamilyChoice::Evict, FamilyChoice::Mixed, FamilyChoice::Routed};
  o.recompute = false;
  const RdCurve c = rd_curve(trace, o);
  for (std::size_t k = 0; k < o.budgets.size(); ++k) {
    const RdPoint &q = c.at(0, static_cast<int>(k)), &e = c.at(1, static_cast<int>(k)), &m = c.at(2, static_cast<int>(k)),
                  &r = c.at(3, static_cast<int>(k));
    INFO("B = " << o.budgets[k] << " scope " << to_string(scope));
    REQUIRE(e.feasible);
    REQUIRE(m.feasible);
    const double tol = 1e-9 * std::max(1e-300, e.surrogate);
    CHECK(m.surrogate <= e.surrogate + tol);
    if (q.feasible) CHECK(m.surrogate <= q.surrogate + 1e-9 * q.surrogate);
    CHECK(m.surrogate <= r.surrogate + 1e-9 * r.surrogate);  // routed picks among Q, E and M
    CHECK(std::isnan(m.error.rel_error));                    // not recomputed
  }
  // More budget never hurts the optimum of one family.
  for (int f = 0; f < 4; ++f)
    for (std::size_t k = 1; k < o.budgets.size(); ++k) {
      const RdPoint &a = c.at(f, static_cast<int>(k - 1)), &b = c.at(f, static_cast<int>(k));
      if (a.feasible && b.feasible) CHECK(b.surrogate <= a.surrogate * (1 + 1e-9) + 1e-300);
    }
}

TEST_CASE("One head's curve in memory equals that head's share of the trace's curve at head scope") {
  TraceReader trace(tiny_trace());
  const RdCurveOptions o = options(RateKind::Total, Scope::Head, {0.0, 1.5, 2.5, 5.0, 12.0});
  const RdCurve all = rd_curve(trace, o);
  const int i = 2;  // layer 1, head 0
  const HeadData head = trace.head(1, 0);
  const RdCurve one = rd_curve(std::vector<const HeadData*>{&head}, trace.meta().rope, o);
  REQUIRE(one.heads == 1);
  for (std::size_t p = 0; p < one.points.size(); ++p) {
    REQUIRE(one.points[p].feasible == all.points[p].feasible);
    if (!one.points[p].feasible) continue;
    CHECK(one.points[p].error.rel_error == Approx(all.points[p].head_error[i]).epsilon(1e-12));
    CHECK(one.points[p].surrogate == Approx(all.points[p].head_surrogate[i]).epsilon(1e-12));
  }
}

TEST_CASE("Setting a prepared head's variants gives what preparing with them gives") {
  TraceReader trace(tiny_trace());
  const HeadData head = trace.head(0, 1);
  const RateLadder ladder = RateLadder::parse("evict,kivi2,kivi4,exact");
  std::vector<std::uint8_t> tiers(static_cast<std::size_t>(head.keys.rows()));
  for (std::size_t t = 0; t < tiers.size(); ++t) tiers[t] = static_cast<std::uint8_t>(1 + t % 3);
  const MaterializedKeys mk = materialize(head, trace.meta().rope, ladder, tiers);
  HeadProblem hp;
  hp.queries = &head.obs_queries;
  hp.exact_keys = &head.keys;
  hp.values = &head.values;
  hp.visible = observation_queries(head).visible;
  HeadProblem with = hp;
  with.variants = {&mk.keys};
  const int rows = static_cast<int>(head.obs_queries.rows());
  const cpu::PreparedHead direct = cpu::prepare_head(with, 0, rows);
  cpu::PreparedHead later = cpu::prepare_head(hp, 0, rows);
  cpu::set_variants(later, {&mk.keys});
  Selection sel(tiers.size(), 1);
  sel[3] = sel[17] = 0;
  cpu::Workspace ws;
  const ErrorMetrics a = cpu::evaluate_selection(direct, sel, ws), b = cpu::evaluate_selection(later, sel, ws);
  CHECK(a.rel_error == b.rel_error);
  CHECK(a.attn_tv == b.attn_tv);
  CHECK(a.logit_error == b.logit_error);
  CHECK(a.rel_error > 0);
  const MatrixRM short_keys = head.values.topRows(3);
  CHECK_THROWS_AS(cpu::set_variants(later, {&short_keys}), std::invalid_argument);
}

TEST_CASE("The budget grid reads A:B:STEP and names the option and the valid range when it is wrong") {
  const std::vector<double> g = parse_budget_grid("0:2:0.5");
  REQUIRE(g.size() == 5);
  CHECK(g.back() == 2.0);
  CHECK(parse_budget_grid("0:16:0.25").size() == 65);
  CHECK(parse_budget_grid("3:3:1") == std::vector<double>{3.0});
  using tierlab::testing::error_of;
  for (const char* bad : {"0:16", "a:2:1", "-1:2:1", "4:2:1", "0:2:0", "0:2:-1", "0:1e9:0.001", "0:2:1:3"}) {
    const std::string msg = error_of<InputError>([&] { parse_budget_grid(bad, "--budgets"); });
    INFO(msg);
    CHECK(msg.find("--budgets") != std::string::npos);
    CHECK(msg.find("A:B:STEP") != std::string::npos);
  }
  RdCurveOptions o;
  CHECK(error_of<InputError>([&] { o.validate(); }).find("budgets") != std::string::npos);
  o.budgets = {1.0};
  o.families = {FamilyChoice::Mixed, FamilyChoice::Mixed};
  CHECK(error_of<InputError>([&] { o.validate(); }).find("mixed is named twice") != std::string::npos);
}

TEST_CASE("tierlab solve --budgets prints the curve the library computes, as JSON and as a table") {
  const tierlab::testing::TempDir tmp("rd_cli");
  const std::string bin = std::string(TIERLAB_BINARY_DIR) + "/tierlab";
  const std::string out = tmp.file("out.json"), err = tmp.file("err.txt");
  auto run = [&](const std::string& args) {
    const std::string cmd = "'" + bin + "' " + args + " > '" + out + "' 2> '" + err + "'";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  REQUIRE(run("solve '" + tiny_trace() + "' --budgets 0:8:2 --recompute --rate total --scope layer --json") == 0);
  const nlohmann::json j = nlohmann::json::parse(tierlab::testing::slurp(out));
  TraceReader trace(tiny_trace());
  RdCurveOptions o = options(RateKind::Total, Scope::Layer, {0, 2, 4, 6, 8});
  const RdCurve c = rd_curve(trace, o);
  CHECK(j["budgets"].size() == 5);
  CHECK(j["queries"] == "decode");
  for (std::size_t f = 0; f < o.families.size(); ++f) {
    const nlohmann::json& fj = j["families"][std::string(to_string(o.families[f]))];
    for (int k = 0; k < 5; ++k) {
      const RdPoint& p = c.at(static_cast<int>(f), k);
      REQUIRE(fj["feasible"][k].get<bool>() == p.feasible);
      if (!p.feasible) continue;
      CHECK(fj["error"][k].get<double>() == Approx(p.error.rel_error).epsilon(1e-12));
      CHECK(fj["surrogate"][k].get<double>() == Approx(p.surrogate).epsilon(1e-12));
      CHECK(fj["total_bits"][k].get<double>() == Approx(p.rate.total_bits).epsilon(1e-12));
    }
  }
  CHECK(j["hull"]["rate"].size() == c.hull.x.size());
  REQUIRE(run("solve '" + tiny_trace() + "' --budgets 0:4:2 --recompute") == 0);
  const std::string text = tierlab::testing::slurp(out);
  CHECK(text.find("lower convex hull of the recomputed errors") != std::string::npos);
  CHECK(text.find("ladder points") != std::string::npos);
  CHECK(run("solve '" + tiny_trace() + "' --budgets 0:4") != 0);
  CHECK(tierlab::testing::slurp(err).find("--budgets") != std::string::npos);
  CHECK(run("solve '" + tiny_trace() + "' --budget 2 --budgets 0:4:1") != 0);
  CHECK(run("solve '" + tiny_trace() + "'") != 0);
  CHECK(tierlab::testing::slurp(err).find("--budget") != std::string::npos);
  CHECK(run("solve '" + tiny_trace() + "' --budgets 0:4:1 --families mixed,bogus") != 0);
  CHECK(tierlab::testing::slurp(err).find("bogus") != std::string::npos);
}

TEST_CASE("The rd_curve analysis writes each cell's curve, the tables and one figure per cell") {
  const tierlab::testing::TempDir tmp("rd_analysis");
  {
    std::ofstream(tmp.file("rd.yaml")) << "name: rd\n"
                                          "traces:\n"
                                          "  synthetic:\n"
                                          "    presets: [tiny]\n"
                                          "    seeds: [0]\n"
                                          "    overrides: {n_layers: 1}\n"
                                          "budgets: [2]\n"
                                          "backend: cpu\n"
                                          "bootstrap: 100\n"
                                          "rd_curve:\n"
                                          "  budgets: 0:6:1\n"
                                          "  scope: model\n"
                                          "  families: [quantize, evict, mixed]\n";
  }
  const std::string out = tmp.file("out");
  const std::string cmd = "'" + std::string(TIERLAB_BINARY_DIR) + "/tierlab' run '" + tmp.file("rd.yaml") + "' --out '" +
                          out + "' > '" + tmp.file("log.txt") + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(tierlab::testing::slurp(tmp.file("log.txt")));
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  const std::string csv = tierlab::testing::slurp(out + "/tables/rd_curve.csv");
  CHECK(csv.rfind("cell,family,budget,code_bits,total_bits,rate,surrogate,error,attn_tv\n", 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1 + 3 * 7);
  const nlohmann::json j = nlohmann::json::parse(tierlab::testing::slurp(out + "/tables/rd_curve.json"));
  REQUIRE(j["cells"].size() == 1);
  const std::string id = j["cells"][0]["id"].get<std::string>();
  CHECK(j["cells"][0]["rd_curve"]["scope"] == "model");
  CHECK(fs::exists(out + "/tables/rd_curve_hull.csv"));
  CHECK(fs::exists(out + "/tables/rd_curve_ladder.csv"));
  CHECK(fs::exists(out + "/figures/rd_curve_" + id + ".png"));
  CHECK(tierlab::testing::slurp(tmp.file("log.txt")).find("figure layout") == std::string::npos);  // laid out cleanly
  CHECK(tierlab::testing::slurp(out + "/summary.md").find("## Rate-distortion curves") != std::string::npos);
  // A wrong key names itself.
  {
    std::ofstream(tmp.file("bad.yaml")) << "name: bad\ntraces:\n  synthetic:\n    presets: [tiny]\n    seeds: [0]\n"
                                           "budgets: [2]\nrd_curve:\n  budgets: 0:6\n";
  }
  const std::string bad = "'" + std::string(TIERLAB_BINARY_DIR) + "/tierlab' run '" + tmp.file("bad.yaml") + "' --out '" +
                          tmp.file("out2") + "' > '" + tmp.file("log2.txt") + "' 2>&1";
  CHECK(std::system(bad.c_str()) != 0);
  CHECK(tierlab::testing::slurp(tmp.file("log2.txt")).find("rd_curve.budgets") != std::string::npos);
}

TEST_CASE("On one decode step's queries every point equals that step's recomputation of the independent solve") {
  TraceReader trace(tiny_trace());
  auto backend = make_recomputer(Backend::Cpu);
  const TraceMeta& meta = trace.meta();
  const int s = 3;
  RdCurveOptions o = options(RateKind::Total, Scope::Head, {0.0, 1.0, 2.5, 4.0, 9.0});
  o.queries = RdQueries::Step;
  o.decode_step = s;
  const RdCurve c = rd_curve(trace, o);
  REQUIRE(c.queries == RdQueries::Step);
  for (std::size_t p = 0; p < c.points.size(); ++p) {
    const RdPoint& pt = c.points[p];
    if (!pt.feasible) continue;
    AllocateOptions single = o.solve;
    single.budget = pt.budget;
    single.family = pt.family;
    const AllocationReport rep = allocate_trace(trace, single);
    for (int i = 0; i < meta.n_heads(); ++i) {
      const HeadData head = trace.head(i / meta.n_kv_heads, i % meta.n_kv_heads);
      const MaterializedKeys mk = materialize(head, meta.rope, o.solve.ladder, rep.allocation.tiers[static_cast<std::size_t>(i)]);
      // Step s's g rows (row j * S + s - 1) over the T + s tokens they see, built here.
      const int T = meta.prompt_len, S = meta.decode_steps, g = meta.group_size, d = meta.head_dim;
      MatrixRM q(g, d), exact(T + s, d), approx(T + s, d), values(T + s, d);
      for (int j = 0; j < g; ++j) q.row(j) = head.decode_queries.row(j * S + s - 1);
      exact << head.keys, head.decode_keys.topRows(s);
      approx << mk.keys, head.decode_keys.topRows(s);
      values << head.values, head.decode_values.topRows(s);
      HeadBatch b;
      b.problem.queries = &q;
      b.problem.exact_keys = &exact;
      b.problem.values = &values;
      b.problem.variants = {&approx};
      Selection sel(static_cast<std::size_t>(T + s), 1);
      std::copy(mk.kept.begin(), mk.kept.end(), sel.begin());
      b.selections = {sel};
      const double want = recompute(*backend, {b}).at(0).at(0).rel_error;
      INFO(to_string(pt.family) << " B=" << pt.budget << " head " << i);
      CHECK(close(pt.head_error[static_cast<std::size_t>(i)], want));
    }
  }
  o.decode_step = 99;
  CHECK(tierlab::testing::error_of<InputError>([&] { rd_curve(trace, o); }).find("decode_step = 99") != std::string::npos);
}

TEST_CASE("After thousands of allocations on one prepared head, the points still equal fresh evaluations") {
  // The evaluators keep their variant keys between allocations (only the rows an allocation
  // changes are written back); a long sweep must not drift from a fresh evaluation.
  auto backend = make_recomputer(Backend::Cpu);
  SynthParams sp = synth_preset("tiny");
  sp.seed = 4;
  sp.prompt_len = 1024;
  const TraceMeta meta = synth_meta(sp);
  const HeadData head = synth_head(sp, 0, 1);
  RdCurveOptions o = options(RateKind::Code, Scope::Head, parse_budget_grid("0:16:0.005"));
  o.families = {FamilyChoice::Evict, FamilyChoice::Mixed};
  const RdCurve c = rd_curve(std::vector<const HeadData*>{&head}, meta.rope, o);
  CHECK(c.evaluations >= 3000);
  const std::vector<HeadCosts> costs{head_costs(head, meta.rope, o.solve)};
  TraceMeta one;
  one.n_layers = 1, one.n_kv_heads = 1, one.prompt_len = static_cast<int>(head.keys.rows()), one.head_dim = static_cast<int>(head.keys.cols());
  int checked = 0;
  for (std::size_t p = 0; p < c.points.size(); p += 97) {
    const RdPoint& pt = c.points[p];
    AllocateOptions single = o.solve;
    single.budget = pt.budget;
    single.family = pt.family;
    const AllocationReport rep = allocate_heads(one, costs, single, [&](int, const std::vector<std::uint8_t>& t) {
      return allocation_rate(one.prompt_len, one.head_dim, single.ladder, t);
    });
    REQUIRE(rep.has_solution());
    const MaterializedKeys mk = materialize(head, meta.rope, single.ladder, rep.allocation.tiers[0]);
    const ErrorMetrics want = evaluate_decode_steps(head, mk.keys, mk.kept, *backend);
    INFO(to_string(pt.family) << " B = " << pt.budget);
    CHECK(close(pt.error.rel_error, want.rel_error));
    CHECK(close(pt.error.attn_tv, want.attn_tv));
    ++checked;
  }
  CHECK(checked >= 60);
}

TEST_CASE("Named methods of the scenario are points beside the curves, recomputed as tierlab eval recomputes them") {
  const tierlab::testing::TempDir tmp("rd_methods");
  {
    std::ofstream(tmp.file("m.yaml")) << "name: rdm\n"
                                         "traces:\n"
                                         "  synthetic:\n"
                                         "    presets: [tiny]\n"
                                         "    seeds: [2]\n"
                                         "budgets: [2]\n"
                                         "backend: cpu\n"
                                         "bootstrap: 100\n"
                                         "rate_kind: code\n"
                                         "methods:\n"
                                         "  - {quantizer: kivi, bits: 2, residual: 0}\n"
                                         "  - {scorer: snapkv, keep: [\"ratio:0.25\", \"ratio:0.5\"], window: 8}\n"
                                         "rd_curve:\n"
                                         "  budgets: 0:8:2\n"
                                         "  scope: head\n";
  }
  const std::string out = tmp.file("out");
  const std::string cmd = "'" + std::string(TIERLAB_BINARY_DIR) + "/tierlab' run '" + tmp.file("m.yaml") + "' --out '" +
                          out + "' > '" + tmp.file("log.txt") + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(tierlab::testing::slurp(tmp.file("log.txt")));
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  const nlohmann::json j = nlohmann::json::parse(tierlab::testing::slurp(out + "/tables/rd_curve.json"));
  const nlohmann::json& ms = j["cells"][0]["rd_curve"]["methods"];
  REQUIRE(ms.size() == 3);
  CHECK(fs::exists(out + "/tables/rd_curve_methods.csv"));
  // Independently: the same trace (the cell's), each method through evaluate_trace.
  SynthParams sp = synth_preset("tiny");
  sp.seed = 2;
  const std::string trace_path = tmp.file("cell.safetensors");
  write_synthetic_trace(sp, trace_path);
  TraceReader trace(trace_path);
  auto backend = make_recomputer(Backend::Cpu);
  const std::vector<double> keep = {0.25, 0.5};
  for (int k = 0; k < 2; ++k) {
    const nlohmann::json& m = ms[static_cast<std::size_t>(1 + k)];
    INFO(m.dump());
    CHECK(m["kind"] == "scorer");
    CHECK(m["code_bits"].get<double>() == Approx(16 * keep[static_cast<std::size_t>(k)]).epsilon(0.05));
  }
  const TraceEvaluation ev = evaluate_trace(trace, [&](const HeadData& h) {
    CompressedHead c;
    c.keys = dense_tier_keys(h.keys, Tier::parse("kivi2"));
    c.kept.assign(static_cast<std::size_t>(h.keys.rows()), 1);
    c.rate = nominal_rate(h, trace.meta().rope, Tier::parse("kivi2"));
    return c;
  }, *backend);
  // KIVI-2 of the registry without its fp16 residual window quantizes every prompt token per
  // channel in groups of 32, as the kivi2 tier does densely.
  CHECK(ms[0]["kind"] == "quantizer");
  CHECK(ms[0]["error"].get<double>() == Approx(ev.model.decode.rel_error).epsilon(1e-5));
  CHECK(ms[0]["code_bits"].get<double>() == Approx(2.0));
}

TEST_CASE("tierlab solve --budgets --method places a named method beside the curve as tierlab eval measures it") {
  const tierlab::testing::TempDir tmp("rd_cli_methods");
  // More prompt tokens than KIVI's default fp16 residual window, so that kivi:2 quantizes some.
  SynthParams sp = synth_preset("tiny");
  sp.seed = 5;
  sp.prompt_len = 256;
  const std::string trace = tmp.file("t.safetensors");
  write_synthetic_trace(sp, trace);
  const std::string bin = std::string(TIERLAB_BINARY_DIR) + "/tierlab";
  const std::string out = tmp.file("out.json"), err = tmp.file("err.txt");
  auto run = [&](const std::string& args) {
    const std::string cmd = "'" + bin + "' " + args + " > '" + out + "' 2> '" + err + "'";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  REQUIRE(run("solve '" + trace + "' --budgets 0:8:2 --recompute --method kivi:2 --method '{scorer: snapkv, window: 8}' "
              "--method '{family: M, budget: 2}' --json") == 0);
  const nlohmann::json j = nlohmann::json::parse(tierlab::testing::slurp(out));
  // kivi:2, snapkv at the keep ratios B/16 of the budgets 2, 4, 6, 8, then M* at B = 2
  REQUIRE(j["methods"].size() == 6);
  const nlohmann::json& kivi = j["methods"][0];
  CHECK(kivi["label"] == "kivi:2");
  CHECK(kivi["kind"] == "policy");
  for (int k = 1; k <= 4; ++k) CHECK(j["methods"][static_cast<std::size_t>(k)]["rate"].get<double>() == Approx(2.0 * k));
  // The mixed family's optimum named as a method is the curve's M point (recomputed by another
  // path), so it is not above the hull.
  const nlohmann::json& mstar = j["methods"][5];
  CHECK(mstar["label"] == "M* B=2");
  CHECK(close(mstar["error"].get<double>(), j["families"]["mixed"]["error"][1].get<double>(), 1e-6));
  CHECK_FALSE(mstar["above_hull"].get<bool>());
  // Independently: the same policy through tierlab eval (another process, evaluate_trace).
  REQUIRE(run("eval '" + trace + "' --policy kivi:2 --json") == 0);
  const nlohmann::json ev = nlohmann::json::parse(tierlab::testing::slurp(out));
  const nlohmann::json& model = ev["model"];
  CHECK(kivi["code_bits"].get<double>() == Approx(model["rate"]["code_bits"].get<double>()).epsilon(1e-12));
  CHECK(kivi["total_bits"].get<double>() == Approx(model["rate"]["total_bits"].get<double>()).epsilon(1e-12));
  // The method's rate is counted as the curve counts it (its rate kind, total bits by default).
  const std::string rate_key = j["rate_kind"].get<std::string>() + "_bits";
  CHECK(rate_key == "total_bits");
  CHECK(kivi["rate"].get<double>() == Approx(model["rate"][rate_key].get<double>()).epsilon(1e-12));
  CHECK(kivi["code_bits"].get<double>() < 16.0);  // the residual window did not keep every token exact
  CHECK(close(kivi["error"].get<double>(), model["decode"]["rel_error"].get<double>(), 1e-9));
  CHECK(close(kivi["surrogate"].get<double>(), model["surrogate"]["predicted_rel"].get<double>(), 1e-9));
  CHECK(kivi["error"].get<double>() > 0);
  // Above the hull exactly when the recomputed error exceeds the families' hull at its rate.
  RdHull hull;
  for (std::size_t i = 0; i < j["hull"]["rate"].size(); ++i) {
    hull.x.push_back(j["hull"]["rate"][i].get<double>());
    hull.y.push_back(j["hull"]["value"][i].get<double>());
    hull.label.push_back(j["hull"]["label"][i].get<std::string>());
  }
  CHECK(kivi["above_hull"].get<bool>() == (kivi["error"].get<double>() > hull.at(kivi["rate"].get<double>()) * (1 + kRecomputedHullTolerance)));
  // Without --recompute: the surrogate only.
  REQUIRE(run("solve '" + trace + "' --budgets 0:8:2 --method kivi:2 --json") == 0);
  const nlohmann::json s = nlohmann::json::parse(tierlab::testing::slurp(out));
  CHECK(s["methods"][0]["error"].is_null());
  CHECK(s["methods"][0]["surrogate"].get<double>() == Approx(kivi["surrogate"].get<double>()).epsilon(1e-12));
  // A bad method names the option and the value.
  CHECK(run("solve '" + trace + "' --budgets 0:8:2 --method kivi:9") != 0);
  std::string e = tierlab::testing::slurp(err);
  CHECK(e.find("--method") != std::string::npos);
  CHECK(e.find("kivi:9") != std::string::npos);
  CHECK(run("solve '" + trace + "' --budgets 0:8:2 --method '{quantizer: bogus}'") != 0);
  e = tierlab::testing::slurp(err);
  CHECK(e.find("--method") != std::string::npos);
  CHECK(e.find("bogus") != std::string::npos);
  CHECK(run("solve '" + trace + "' --budget 2 --method kivi:2") != 0);
  CHECK(tierlab::testing::slurp(err).find("--budgets") != std::string::npos);
}

TEST_CASE("With the curve on one decode step's queries, a named method is recomputed on that step alone") {
  TraceReader trace(tiny_trace());
  const int S = trace.meta().decode_steps, step = std::min(3, S);
  REQUIRE(step >= 1);
  RdCurveOptions o = options(RateKind::Code, Scope::Head, {0.0, 2.0, 4.0, 8.0});
  o.families = {FamilyChoice::Mixed};
  o.queries = RdQueries::Step;
  o.decode_step = step;
  const RdCurve c = rd_curve(trace, o);
  REQUIRE(c.queries == RdQueries::Step);
  const std::vector<MethodSpec> methods =
      parse_rd_methods({"{quantizer: kivi, bits: 2, residual: 0}", "{family: M, budget: 2}"}, "--method", c.options);
  auto backend = make_recomputer(Backend::Cpu);
  const std::vector<RdMethodPoint> pts = rd_method_points(trace, c, methods, backend.get());
  REQUIRE(pts.size() == 2);
  // M* at B = 2 named as a method is the curve's M point at B = 2 (the curve's own, prepared path).
  CHECK(close(pts[1].error, c.at(0, 1).error.rel_error, 1e-6));
  CHECK_FALSE(pts[1].above_hull);
  // KIVI-2 without its residual window: every prompt key quantized per channel (the dense kivi2
  // tier); independently, step s's g query rows over the T + s tokens, in double precision.
  double want = 0;
  const double H = trace.meta().n_heads();
  for (int l = 0; l < trace.meta().n_layers; ++l)
    for (int h = 0; h < trace.meta().n_kv_heads; ++h) {
      const HeadData hd = trace.head(l, h);
      const MatrixRM kq = dense_tier_keys(hd.keys, Tier::parse("kivi2"));
      const int T = static_cast<int>(hd.keys.rows()), d = static_cast<int>(hd.keys.cols());
      const int g = static_cast<int>(hd.decode_queries.rows() / S);
      double e = 0;
      for (int j = 0; j < g; ++j) {
        const auto q = hd.decode_queries.row(j * S + (step - 1)).cast<double>();
        auto output = [&](const MatrixRM& prompt_keys) {
          std::vector<double> s(static_cast<std::size_t>(T + step));
          for (int t = 0; t < T + step; ++t)
            s[static_cast<std::size_t>(t)] =
                q.dot((t < T ? prompt_keys.row(t) : hd.decode_keys.row(t - T)).cast<double>()) / std::sqrt(double(d));
          const double mx = *std::max_element(s.begin(), s.end());
          double z = 0;
          for (double& x : s) z += (x = std::exp(x - mx));
          Eigen::VectorXd o = Eigen::VectorXd::Zero(d);
          for (int t = 0; t < T + step; ++t)
            o += s[static_cast<std::size_t>(t)] / z * (t < T ? hd.values.row(t) : hd.decode_values.row(t - T)).cast<double>().transpose();
          return o;
        };
        const Eigen::VectorXd exact = output(hd.keys), approx = output(kq);
        e += (approx - exact).squaredNorm() / exact.squaredNorm() / g;
      }
      want += e / H;
    }
  CHECK(close(pts[0].error, want, 1e-4));
  CHECK(pts[0].error > 0);
}
