// tierlab-explorer [TRACE|SCENARIO|RUN_DIR|PRESET|CHECKPOINT]: the interactive explorer
// (gui/main_window.hpp). --screenshot DIR grabs each view into DIR/explorer-<view>.png and exits;
// without a display it runs on Qt's offscreen platform.
#include <QApplication>
#include <QTimer>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gui/main_window.hpp"
#include "model/base/allocator_policy.hpp"
#include "model/base/openmp_policy.hpp"

namespace {

const char* kHelp =
    "usage: tierlab-explorer [options] [SOURCE]\n"
    "\n"
    "Interactive what-if exploration of key-cache allocation (reverse water-filling, dominance,\n"
    "the interior advantage, staleness over decode steps). SOURCE is one of\n"
    "  TRACE.safetensors         a trace file (tierlab synth / tierlab capture)\n"
    "  SCENARIO.yaml             a scenario file; its run (out/<name>) feeds the interior,\n"
    "                            phase-map and staleness views (Scenario > Run when missing)\n"
    "  RUN_DIR                   a folder written by `tierlab run` (holds scenario.yaml)\n"
    "  PRESET or preset:NAME[:T] a synthetic preset (tierlab synth --help lists them: tiny, llama-like, ..., llama-3.1-8b, mistral-7b, qwen3-8b)\n"
    "                            at context length T, generated in memory\n"
    "  CHECKPOINT.bin            a llama2.c checkpoint captured on the fly, e.g.\n"
    "                            data/stories260K/stories260K.bin\n"
    "Default: preset:llama-like:1024.\n"
    "\n"
    "options:\n"
    "  --view NAME               view in front: waterfill, headmap, interior, dominance, staleness, rdcurve\n"
    "  --budget B                budget in bits per key element, 0.05 to 16 (default 2; a scenario's own\n"
    "                            budget when SOURCE is one)\n"
    "  --head L.H                the head (layer L, KV head H)\n"
    "  --type FIELD=TEXT         type TEXT into a field and press Enter, as a user does (repeatable;\n"
    "                            fields: budget, context, layer, kv_head, step, bits, rd_methods); with\n"
    "                            --screenshot only the view in front is grabbed, after the fields took\n"
    "                            the text (or refused it, beside the field and in the status bar)\n"
    "  --out DIR                 the run folder of a SCENARIO.yaml (default out/<name>)\n"
    "  --run                     run the scenario first when its tables are missing\n"
    "  --screenshot DIR          open SOURCE, grab every view into DIR/explorer-<view>.png, exit (no\n"
    "                            display needed: Qt's offscreen platform when DISPLAY is unset)\n"
    "  -h, --help                this help\n";

}  // namespace

int main(int argc, char** argv) {
  tierlab::use_passive_openmp_wait(argv);  // model/base/openmp_policy.hpp
  tierlab::same_bits_on_any_thread_count();  // Eigen's products on one thread each (model/base/openmp_policy.hpp)
  tierlab::keep_freed_buffers();           // model/base/allocator_policy.hpp
  std::string source = "preset:llama-like:1024", shots, view, out, budget, layer, head;
  std::vector<std::pair<std::string, std::string>> typed;  // --type FIELD=TEXT, in order
  bool run = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "tierlab-explorer: %s needs a value (see --help)\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kHelp, stdout);
      return 0;
    } else if (a == "--screenshot") {
      shots = value();
    } else if (a == "--out") {
      out = value();
    } else if (a == "--run") {
      run = true;
    } else if (a == "--view") {
      view = value();
    } else if (a == "--budget") {
      budget = value();  // typed into the budget field: checked there, never clamped
    } else if (a == "--head") {
      const std::string v = value();
      const auto dot = v.find('.');
      if (dot == std::string::npos || dot == 0 || dot + 1 == v.size()) {
        std::fprintf(stderr, "tierlab-explorer: --head wants L.H (e.g. 0.3), not '%s'\n", v.c_str());
        return 2;
      }
      layer = v.substr(0, dot), head = v.substr(dot + 1);
    } else if (a == "--type") {
      const std::string v = value();
      const auto eq = v.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "tierlab-explorer: --type wants FIELD=TEXT (e.g. budget=100), not '%s'\n", v.c_str());
        return 2;
      }
      typed.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      std::fprintf(stderr, "tierlab-explorer: unknown option '%s' (see --help)\n", a.c_str());
      return 2;
    } else {
      source = a;
    }
  }
  if (!std::getenv("XDG_RUNTIME_DIR")) {  // Qt warns without one; a private folder keeps it quiet
    const std::string dir = "/tmp/tierlab-runtime-" + std::to_string(::getuid());
    ::mkdir(dir.c_str(), 0700);
    setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  }
  // --screenshot needs no display: Qt's offscreen platform, as scenarios/figures does.
  if (!shots.empty() && !std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") && !std::getenv("QT_QPA_PLATFORM"))
    setenv("QT_QPA_PLATFORM", "offscreen", 1);
  QApplication app(argc, argv);
  app.setApplicationName("tierlab-explorer");
  tierlab::explorer::MainWindow w;
  w.show();
  try {
    tierlab::explorer::SourceSpec spec = tierlab::explorer::parse_source(source);
    spec.run_dir = out;
    w.openSpec(spec);
  } catch (const std::exception&) {
    w.openArgument(QString::fromStdString(source));  // shows the error in the window
  }
  if (!w.waitIdle(600000) || !w.source()) {
    if (!shots.empty()) {
      std::fprintf(stderr, "tierlab-explorer: %s\n", w.lastError().toLocal8Bit().constData());
      return 1;
    }
  }
  if (run && w.source() && w.source()->is_scenario() && !w.source()->has_tables()) {
    w.runScenario();
    w.waitIdle(3600000);
  }
  // The command line's values go through the fields, as typed: a refused one is said and,
  // for a screenshot, ends the run (exit 2).
  std::vector<std::pair<std::string, std::string>> fields;
  if (!layer.empty()) fields.emplace_back("layer", layer), fields.emplace_back("kv_head", head);
  if (!budget.empty()) fields.emplace_back("budget", budget);
  for (const auto& [field, text] : fields)
    if (!w.typeIntoField(QString::fromStdString(field), QString::fromStdString(text))) {
      std::fprintf(stderr, "tierlab-explorer: %s\n", w.lastError().toLocal8Bit().constData());
      if (!shots.empty()) return 2;
    }
  for (int v = 0; v < tierlab::explorer::ViewCount; ++v)
    if (view == tierlab::explorer::view_name(v)) w.setCurrentView(v);
  if (!shots.empty() && !typed.empty()) {  // the fields' answers to what was typed, over the view in front
    w.waitIdle(600000);
    for (const auto& [field, text] : typed) w.typeIntoField(QString::fromStdString(field), QString::fromStdString(text));
    w.waitIdle(600000);
    const QStringList files = w.saveScreenshots(QString::fromStdString(shots), true);
    for (const QString& f : files) std::printf("%s\n", f.toLocal8Bit().constData());
    return files.size() == 1 ? 0 : 1;
  }
  for (const auto& [field, text] : typed) w.typeIntoField(QString::fromStdString(field), QString::fromStdString(text));
  if (!shots.empty()) {
    w.waitIdle(600000);
    const QStringList files = w.saveScreenshots(QString::fromStdString(shots));
    for (const QString& f : files) std::printf("%s\n", f.toLocal8Bit().constData());
    return files.size() == tierlab::explorer::ViewCount ? 0 : 1;
  }
  return app.exec();
}
