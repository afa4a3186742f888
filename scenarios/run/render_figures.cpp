// The figures of a scenario run (figures.hpp).
#include "scenarios/run/render_figures.hpp"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "model/base/error.hpp"
#include "scenarios/scenario/analysis.hpp"
#include "scenarios/figures/figure.hpp"

namespace tierlab {

namespace {

// A figure has content when some series has a point (reference lines alone are not content).
bool has_points(const Figure& f) {
  for (const Series& s : f.series)
    if (!s.name.empty() && !s.x.empty()) return true;
  return false;
}

}  // namespace

std::vector<NamedFigure> analysis_figures(const AnalysisType& t, const std::string& dir) {
  const auto fault = [&](const char* what) {
    return InputError("the tables of the '" + t.name + "' analysis under '" + dir + "/tables' do not hold what tierlab writes (" +
                      what + "); rerun `tierlab run` to rewrite them.");
  };
  try {
    return t.figures(dir);
  } catch (const nlohmann::json::exception& e) {
    throw fault(e.what());
  } catch (const std::out_of_range& e) {
    throw fault(e.what());
  }
}

FiguresWritten render_figures_of_run(const std::string& dir, const FigureStyle& style) {
  style.validate("figure style");
  FiguresWritten out;
  bool created = false;
  for (const AnalysisType& t : analysis_types())
    for (const NamedFigure& f : analysis_figures(t, dir)) {
      const std::string why = !f.skipped.empty() ? f.skipped : has_points(f.figure) ? std::string() : "no data points";
      std::error_code ec;
      if (!why.empty()) {
        out.skipped.push_back(f.name + ": " + why);
        for (const char* ext : {".png", ".pdf", ".svg"})  // a stale figure of an earlier run would mislead
          std::filesystem::remove(dir + "/figures/" + f.name + ext, ec);
        continue;
      }
      if (!created) std::filesystem::create_directories(dir + "/figures"), created = true;
      for (auto& x : render_figure(f.figure, dir + "/figures/" + f.name, style)) out.files.push_back(x);
      for (const auto& fault : layout_faults(figure_text_boxes(f.figure, style), figure_canvas(f.figure, style)))
        out.layout.push_back(f.name + ": " + fault);
    }
  return out;
}

std::vector<std::string> render_figures(const std::string& dir, const FigureStyle& style) {
  return render_figures_of_run(dir, style).files;
}

}  // namespace tierlab
