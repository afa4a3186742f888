// The Qt-free part of figures (figure.hpp): colours, ticks, ranges and CSV. Compiled into
// tierlab_experiments, so that the analyses build their figures without Qt.
#include <cmath>
#include <sstream>

#include "scenarios/figures/figure.hpp"

namespace tierlab {

Rgb palette(int i) {
  static const Rgb p[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}, {148, 103, 189}, {140, 86, 75}};
  return p[((i % 6) + 6) % 6];
}

Rgb faded(Rgb c, int alpha) {
  c.a = alpha;
  return c;
}

// Ticks 1..n labelled with the quantizers' names (a categorical x axis).
std::vector<Tick> category_ticks(const std::vector<std::string>& names) {
  std::vector<Tick> ticks;
  for (std::size_t i = 0; i < names.size(); ++i) ticks.push_back({static_cast<double>(i + 1), names[i]});
  return ticks;
}

void log_range(double lo, double hi, double& a, double& b) {
  if (!(lo > 0) || !std::isfinite(hi)) lo = 1e-6, hi = 1;
  if (hi <= lo) hi = lo * 10;
  a = lo / 2, b = hi * 2;
}

std::string figure_csv(const Figure& fig) {
  std::ostringstream s;
  s.precision(10);
  s << "series,x,y\n";
  for (std::size_t k = 0; k < fig.series.size(); ++k) {
    const Series& se = fig.series[k];
    std::string name = se.name.empty() ? "series " + std::to_string(k + 1) : se.name;
    // CSV quoting (RFC 4180): names may hold commas.
    std::string q = "\"";
    for (char c : name) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    q += '"';
    for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) s << q << ',' << se.x[i] << ',' << se.y[i] << '\n';
  }
  return s.str();
}

}  // namespace tierlab
