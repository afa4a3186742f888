// The Qt-free part of figures (figure.hpp): colours, ticks, ranges and CSV. Compiled into
// tierlab_experiments, so that the analyses build their figures without Qt.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <sstream>
#include <string_view>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/base/text.hpp"
#include "scenarios/figures/figure.hpp"
#include "scenarios/io/csv.hpp"

namespace tierlab {

Rgb palette(int i) {
  // Okabe & Ito (2008), "Color Universal Design": distinguishable under the common forms of
  // colour-vision deficiency.
  static const Rgb p[] = {{0, 114, 178},  {230, 159, 0},   {0, 158, 115}, {204, 121, 167},
                          {213, 94, 0},   {86, 180, 233},  {240, 228, 66}, {0, 0, 0}};
  return p[((i % 8) + 8) % 8];
}

double parse_length_pt(const std::string& text, const std::string& field) {
  const std::string accepted = " (a positive length up to 100 in: 3.5in, 89mm, 8.9cm or 252pt; a bare number is points)";
  // The number is everything before the trailing letters (model/base/numbers.hpp: the whole of it).
  // A space may stand between the number and its unit ("3.5 in").
  std::size_t used = text.size();
  while (used > 0 && std::isalpha(static_cast<unsigned char>(text[used - 1]))) --used;
  const std::string unit = text.substr(used);
  std::size_t number_end = used;
  while (number_end > 0 && !unit.empty() && text[number_end - 1] == ' ') --number_end;
  const std::optional<double> number = read_real(std::string_view(text).substr(0, number_end));
  if (!number) throw InputError(field + " '" + text + "' is not a length" + accepted + ".");
  const double v = *number;
  double k = 0;
  if (unit.empty() || unit == "pt") k = 1;
  else if (unit == "in") k = 72;
  else if (unit == "mm") k = 72 / 25.4;
  else if (unit == "cm") k = 72 / 2.54;
  else throw InputError(field + " '" + text + "': unknown unit '" + unit + "'" + accepted + ".");
  const double pt = v * k;
  if (!std::isfinite(pt) || pt < 72 || pt > 7200)
    throw InputError(field + " '" + text + "' is out of range (1 in to 100 in)" + ".");
  return pt;
}

std::vector<std::string> parse_formats(const std::string& text, const std::string& field) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string f;
  while (std::getline(in, f, ',')) {
    f.erase(0, f.find_first_not_of(' '));
    f.erase(f.find_last_not_of(' ') + 1);
    if (f != "png" && f != "pdf" && f != "svg")
      throw InputError(field + " '" + f + "' in '" + text + "' is not a figure format (valid: png, pdf, svg).");
    if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  }
  if (out.empty()) throw InputError(field + " '" + text + "' names no format (valid: png, pdf, svg).");
  return out;
}

FigureStyle FigureStyle::preset(const std::string& name, const std::string& field) {
  FigureStyle s;
  if (name == "paper") return s;
  if (name == "slides") {
    s.name = "slides", s.width_pt = 720, s.font_pt = 16, s.dpi = 150;
    return s;
  }
  throw InputError(field + " '" + name + "' is not a figure style (valid: paper, slides).");
}

FigureStyle FigureStyle::screen() {
  FigureStyle s;
  s.name = "screen", s.width_pt = kFigureWidth * 0.75, s.height_pt = kFigureHeight * 0.75, s.font_pt = 10, s.dpi = 96;
  return s;
}

void FigureStyle::validate(const std::string& where) const {
  auto bad = [&](const std::string& field, const std::string& value, const std::string& range) {
    throw InputError(where + ": " + field + " = " + value + " is out of range (" + range + ").");
  };
  if (!(width_pt >= 72 && width_pt <= 7200)) bad("width", format_length(width_pt), "1 in to 100 in");
  if (!(height_pt == 0 || (height_pt >= 72 && height_pt <= 7200))) bad("height", format_length(height_pt), "1 in to 100 in, or auto");
  if (!(font_pt >= 4 && font_pt <= 48)) bad("font size", std::to_string(font_pt), "4 to 48 pt");
  if (!(dpi >= 50 && dpi <= 1200)) bad("dpi", std::to_string(dpi), "50 to 1200");
  if (formats.empty()) bad("formats", "(none)", "one or more of png, pdf, svg");
  for (const auto& f : formats)
    if (f != "png" && f != "pdf" && f != "svg") throw InputError(where + ": format '" + f + "' is not one of png, pdf, svg.");
}

std::string format_length(double pt) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4gpt (%.4g mm)", pt, pt * 25.4 / 72);
  return buf;
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
  CsvWriter csv({"series", "x", "y"});
  for (std::size_t k = 0; k < fig.series.size(); ++k) {
    const Series& se = fig.series[k];
    const std::string name = se.name.empty() ? "series " + std::to_string(k + 1) : se.name;
    for (std::size_t i = 0; i < se.x.size() && i < se.y.size(); ++i)
      csv.row() << name << format_number(se.x[i], 10) << format_number(se.y[i], 10);
  }
  return csv.text();
}

}  // namespace tierlab
