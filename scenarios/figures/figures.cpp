// The figures of a scenario run (figures.hpp).
#include "scenarios/figures/figures.hpp"

#include <filesystem>

#include "scenarios/analyses/analysis.hpp"
#include "scenarios/figures/figure.hpp"

namespace tierlab {

std::vector<std::string> render_figures(const std::string& dir) {
  std::vector<std::string> files;
  bool created = false;
  for (const AnalysisType& t : analysis_types())
    for (const NamedFigure& f : t.figures(dir)) {
      if (!created) std::filesystem::create_directories(dir + "/figures"), created = true;
      for (auto& x : render_figure(f.figure, dir + "/figures/" + f.name)) files.push_back(x);
    }
  return files;
}

}  // namespace tierlab
