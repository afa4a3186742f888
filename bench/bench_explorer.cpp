// Interactivity of tierlab-explorer (issue 8): on one 32k-token head, a budget change
// re-solves, re-materialises, recomputes exactly and re-plots the water-filling view.
//
// Head: synthetic (custom: 1 layer, 1 KV head, g = 4, d = 128, T = 32768, W = 32
// observation queries per query head, S = 64 decode steps). Per budget change, the same
// work as the app's worker thread plus its UI update: Engine::waterfill (exact MCKP solve
// on the cached surrogate costs, the allocation's keys with tier-local groups as
// `tierlab eval --allocation` materialises them (the tiers whose token sets changed are
// quantized again), CPU preparation and recomputation on decode step s's 4 queries), then
// draw_figure + replot of both figures into offscreen QCustomPlots of the window's size.
// The first call (surrogate costs, noise fit, decode-step buffers: budget-independent,
// cached) is reported apart. The interactive update recomputes the error at decode step s
// (the step's g = 4 queries over the T + s tokens it sees); the recomputation on the 128
// observation queries, which the app shows right after (Engine::obs_error), is timed apart. Prints the median and p90 of the budget changes and the
// ratio of the median to the 50 ms target. Then the RD curve view (Engine::rd_curve): its first
// opening on the head (target 2 s) and its redraw per budget change (target 50 ms).
//
// With --live RUNS: every live view (head map, interior advantage, dominance, staleness, RD
// curve, and the RD curve with the window's default named methods) opened RUNS times from
// cold caches, medians (e.g. --tokens 2048 --kv-heads 32 --live 3).
//
//   bench_explorer [--changes N] [--tokens T] [--kv-heads H] [--solver exact|greedy|greedy-raw|waterfill] [--family mixed|routed|...] [--rate total|code] [--live RUNS]
#include <QApplication>
#include <sys/stat.h>
#include <unistd.h>
#include <qcustomplot.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gui/explorer_core.hpp"
#include "model/base/allocator_policy.hpp"
#include "model/base/openmp_policy.hpp"
#include "scenarios/figures/figure_qt.hpp"

using namespace tierlab;
using namespace tierlab::explorer;
using Clock = std::chrono::steady_clock;

static double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// The live views (no scenario tables) on the open source, each opened `runs` times from cold
// caches (Engine::clear_cache: what a fresh source costs), as the window's worker computes
// them (partial results on, every 400 ms: their drawing is not timed); medians in ms.
static void live_views(Engine& engine, Settings s, int runs) {
  struct Live {
    const char* name;
    std::function<ViewResult(const Settings&, const PartialView&)> open;
  };
  const std::vector<Live> views = {
      {"head map", [&](const Settings& st, const PartialView& p) { return engine.head_map(st, nullptr, {}, nullptr, p); }},
      {"interior (live)", [&](const Settings& st, const PartialView& p) { return engine.interior(st, {}, nullptr, p); }},
      {"dominance (live)", [&](const Settings& st, const PartialView&) { return engine.dominance(st); }},
      {"staleness (live)", [&](const Settings& st, const PartialView& p) { return engine.staleness(st, {}, nullptr, p); }},
      {"RD curve", [&](const Settings& st, const PartialView& p) { return engine.rd_curve(st, {}, nullptr, p); }},
      {"RD curve + methods", [&](const Settings& st, const PartialView& p) {
         Settings with = st;
         with.rd_methods = kDefaultRdMethods;  // the window's default field
         return engine.rd_curve(with, {}, nullptr, p);
       }},
  };
  std::printf("live views, %d heads, median of %d: cold caches (first partial result in brackets); warm: the heads'\n"
              "data and surrogate costs cached by a head map pass before (what switching to the view costs)\n",
              engine.source().meta().n_heads(), runs);
  for (const Live& lv : views) {
    std::vector<double> total, first, warm;
    for (int r = 0; r < runs; ++r) {
      engine.clear_cache();
      engine.head_map(s);
      const auto w = Clock::now();
      lv.open(s, {});
      warm.push_back(ms(w, Clock::now()));
      engine.clear_cache();
      const auto a = Clock::now();
      double at = -1;
      lv.open(s, [&](const ViewResult&) {
        if (at < 0) at = ms(a, Clock::now());
      });
      total.push_back(ms(a, Clock::now()));
      first.push_back(at);
    }
    std::sort(total.begin(), total.end());
    std::sort(first.begin(), first.end());
    std::sort(warm.begin(), warm.end());
    std::printf("  %-18s cold %7.0f ms", lv.name, total[total.size() / 2]);
    if (first[first.size() / 2] >= 0) std::printf(" [first partial %5.0f ms]", first[first.size() / 2]);
    else std::printf("%25s", "");
    std::printf("   warm %7.0f ms", warm[warm.size() / 2]);
    std::printf("\n");
  }
  // Choosing another head in the interior view (the heads' advantages at B are kept).
  std::vector<double> change;
  for (int r = 0; r < runs; ++r) {
    engine.clear_cache();
    Settings st = s;
    engine.interior(st);
    st.kv_head = (r + 1) % std::max(1, engine.source().meta().n_kv_heads);
    const auto a = Clock::now();
    engine.interior(st);
    change.push_back(ms(a, Clock::now()));
  }
  std::sort(change.begin(), change.end());
  std::printf("  interior (live), another head chosen: %.0f ms\n", change[change.size() / 2]);
}

int main(int argc, char** argv) {
  tierlab::use_passive_openmp_wait(argv);  // model/base/openmp_policy.hpp
  tierlab::same_bits_on_any_thread_count();  // Eigen's products on one thread each (model/base/openmp_policy.hpp)
  tierlab::keep_freed_buffers();           // as tierlab and the explorer do (model/base/allocator_policy.hpp)
  int changes = 30, tokens = 32768, kv_heads = 1, live = 0;
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_explorer: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--changes") changes = std::atoi(next().c_str());
    else if (a == "--tokens") tokens = std::atoi(next().c_str());
    else if (a == "--kv-heads") kv_heads = std::atoi(next().c_str());
    else if (a == "--live") live = std::atoi(next().c_str());
    else if (a == "--solver") s.solver = parse_family_solver(next());
    else if (a == "--family") s.family = parse_family_choice(next());
    else if (a == "--rate") s.rate_kind = parse_rate_kind(next());
    else if (a == "--help" || a == "-h") {
      std::printf("usage: bench_explorer [--changes N] [--tokens T] [--kv-heads H] [--solver exact|greedy|greedy-raw|waterfill] [--family F] [--live RUNS]\n");
      return 0;
    } else {
      std::fprintf(stderr, "bench_explorer: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (!std::getenv("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  if (!std::getenv("XDG_RUNTIME_DIR")) {  // a private folder keeps Qt quiet
    const std::string dir = "/tmp/tierlab-runtime-" + std::to_string(::getuid());
    ::mkdir(dir.c_str(), 0700);
    qputenv("XDG_RUNTIME_DIR", QByteArray::fromStdString(dir));
  }
  QApplication app(argc, argv);

  SynthParams p = synth_preset("llama-like");
  p.preset = "bench";
  p.n_layers = 1;
  p.n_kv_heads = kv_heads;  // > 1: the RD view adds the model-wide curve
  p.group_size = 4;
  p.head_dim = 128;
  p.prompt_len = tokens;
  p.obs_window = 32;
  p.decode_steps = 64;
  SourceSpec spec;
  spec.kind = SourceKind::Synthetic;
  spec.synth = p;
  const auto t_open = Clock::now();
  auto src = Source::open(spec);
  Engine engine(src, Backend::Cpu);
  s.decode_step = 16;
  s.recompute_obs = false;  // the app's interactive update; obs_error() follows it (timed apart)

  // Two plots, as the water-filling tab shows them.
  QCustomPlot top, bottom;
  top.resize(1000, 420);
  bottom.resize(1000, 300);
  for (QCustomPlot* pl : {&top, &bottom}) {  // the app's plot settings (gui/main_window.cpp)
    pl->setNotAntialiasedElements(QCP::aeScatters);
    pl->setPlottingHint(QCP::phFastPolylines, true);
  }
  auto update = [&](const Settings& st, WaterfillNumbers* n) {
    ViewResult v = engine.waterfill(st, n);
    draw_figure(v.figures[0], top);
    top.replot();
    draw_figure(v.figures[1], bottom);
    bottom.replot();
  };
  const auto t0 = Clock::now();
  WaterfillNumbers n0;
  update(s, &n0);
  const auto t1 = Clock::now();
  std::printf("bench_explorer: head T = %d, d = %d, %d observation queries, decode step %d; backend %s\n", tokens,
              p.head_dim, p.group_size * p.obs_window, s.decode_step, engine.backend_description().c_str());
  std::printf("  first view (open %.0f ms; head generation, surrogate costs, noise fit, step buffers, solve,\n"
              "  tier-local keys, recompute, plot): %.0f ms\n", ms(t_open, t0), ms(t0, t1));

  std::vector<double> total, solve, mat, rec, plot, obs, rest;
  double requantized = 0;
  double theta_prev = n0.theta;
  int theta_changes = 0;
  for (int i = 0; i < changes; ++i) {
    s.budget = 0.5 + 0.25 * (i % 25) + (i / 25) * 0.1;  // 0.5 .. 6.5 bits
    WaterfillNumbers n;
    const auto a = Clock::now();
    ViewResult v = engine.waterfill(s, &n);
    const auto b = Clock::now();
    draw_figure(v.figures[0], top);
    top.replot();
    draw_figure(v.figures[1], bottom);
    bottom.replot();
    const auto c = Clock::now();
    total.push_back(ms(a, c));
    rest.push_back(ms(a, b) - n.solve_ms - n.materialize_ms - n.recompute_ms);
    requantized += static_cast<double>(n.tiers_quantized) / changes;
    solve.push_back(n.solve_ms), mat.push_back(n.materialize_ms), rec.push_back(n.recompute_ms), plot.push_back(ms(b, c));
    const auto d = Clock::now();
    const ErrorMetrics eo = engine.obs_error(s);
    obs.push_back(ms(d, Clock::now()));
    if (!std::isfinite(eo.rel_error) || !std::isfinite(n.step.rel_error)) {
      std::fprintf(stderr, "bench_explorer: non-finite recomputed error at B = %g\n", s.budget);
      return 1;
    }
    if (n.theta != theta_prev) ++theta_changes;
    theta_prev = n.theta;
  }
  auto q = [](std::vector<double> v, double f) {
    std::sort(v.begin(), v.end());
    return v[static_cast<std::size_t>(std::min<double>(v.size() - 1, std::floor(f * (v.size() - 1) + 0.5)))];
  };
  std::printf("  budget changes: %d (B from 0.5 to 6.5 bits; water level changed %d times; %.2f tiers quantized again per change)\n",
              changes, theta_changes, requantized);
  std::printf("  per change, median: solve %.2f ms, keys %.2f ms, recompute %.2f ms, water level + figures %.2f ms, plot %.2f ms\n",
              q(solve, 0.5), q(mat, 0.5), q(rec, 0.5), q(rest, 0.5), q(plot, 0.5));
  std::printf("  then, off the interactive path: recompute on the %d observation queries, median %.1f ms, p90 %.1f ms\n",
              p.group_size * p.obs_window, q(obs, 0.5), q(obs, 0.9));
  const double med = q(total, 0.5), p90 = q(total, 0.9);
  std::printf("budget change -> re-solve + recompute + re-plot: median %.2f ms, p90 %.2f ms; target 50 ms: median/target = %.3f (%s)\n",
              med, p90, med / 50.0, med <= 50.0 ? "meets it" : "MISSES it");

  // The RD curve view (Engine::rd_curve, issue 18): first opening (the head's curve over
  // kRdCurveGrid for Q, E and M, recomputed on decode step s's queries, then one plot), then
  // budget changes (the cached curve redrawn with the new B marked).
  QCustomPlot rd;
  rd.resize(1000, 720);
  rd.setNotAntialiasedElements(QCP::aeScatters);
  rd.setPlottingHint(QCP::phFastPolylines, true);
  const auto r0 = Clock::now();
  ViewResult rv = engine.rd_curve(s);
  for (const Figure& f : rv.figures) draw_figure(f, rd), rd.replot();
  const double rd_open = ms(r0, Clock::now());
  std::vector<double> rd_changes;
  for (int i = 0; i < changes; ++i) {
    s.budget = 0.5 + 0.25 * (i % 25) + (i / 25) * 0.1;
    const auto a = Clock::now();
    ViewResult v = engine.rd_curve(s);
    for (const Figure& f : v.figures) draw_figure(f, rd), rd.replot();
    rd_changes.push_back(ms(a, Clock::now()));
  }
  const double rmed = q(rd_changes, 0.5), rp90 = q(rd_changes, 0.9);
  std::printf("RD curve view (grid %s, Q/E/M, decode step %d, %d figure(s)): first opening %.0f ms (target 2000 ms: %s); "
              "budget change -> redraw: median %.2f ms, p90 %.2f ms (target 50 ms: %s)\n",
              kRdCurveGrid, s.decode_step, static_cast<int>(rv.figures.size()), rd_open, rd_open <= 2000 ? "meets it" : "MISSES it", rmed, rp90,
              rmed <= 50.0 ? "meets it" : "MISSES it");
  if (live > 0) live_views(engine, s, live);
  return 0;
}
