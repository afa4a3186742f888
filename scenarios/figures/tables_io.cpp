// What the figure renderers share (tables_io.hpp).
#include "scenarios/figures/tables_io.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "model/error.hpp"
#include "scenarios/run/table_numbers.hpp"

namespace tierlab {

nlohmann::json read_table_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("the table '" + path + "' is missing; run `tierlab run` first.");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("the table '" + path + "' is not valid JSON (" + e.what() + ").");
  }
}

std::map<std::string, std::vector<std::string>> read_table_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("the table '" + path + "' is missing; run `tierlab run` first.");
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names;
  {
    std::stringstream ss(line);
    std::string x;
    while (std::getline(ss, x, ',')) names.push_back(x);
  }
  std::map<std::string, std::vector<std::string>> cols;
  for (const auto& n : names) cols[n];  // every header column exists, even with no rows
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string x;
    for (std::size_t i = 0; i < names.size() && std::getline(ss, x, ','); ++i) cols[names[i]].push_back(x);
  }
  return cols;
}

std::string format_label(double v, const char* fmt) { return format_or_nan(v, fmt, "n/a"); }

void pad_range(double& lo, double& hi, double frac) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = -1, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const double p = (hi - lo) * frac;
  lo -= p, hi += p;
}

std::string phase_outcome(const nlohmann::json& row) {
  const double sh[3] = {double_or_nan(row, "share_Q"), double_or_nan(row, "share_E"), double_or_nan(row, "share_M")};
  double top = -1;
  for (double v : sh)
    if (std::isfinite(v)) top = std::max(top, v);
  if (!(top > 0)) return row.value("winner", std::string());
  int at_top = 0, which = 0;
  for (int k = 0; k < 3; ++k)
    if (std::isfinite(sh[k]) && std::abs(sh[k] - top) <= 1e-9) ++at_top, which = k;
  if (at_top > 1) return "tie";
  return std::string(1, "QEM"[which]);
}

namespace {

// The distinct values of `key` over rows, ascending, and each one's cell [lo, hi].
struct Edges {
  std::vector<double> at, lo, hi;
  void of(double v, double& l, double& h) const {
    const auto i = static_cast<std::size_t>(std::lower_bound(at.begin(), at.end(), v) - at.begin());
    l = lo[i], h = hi[i];
  }
};

Edges edges_of(const nlohmann::json& rows, const char* key, bool log) {
  Edges e;
  for (const auto& r : rows)
    if (const double v = double_or_nan(r, key); std::isfinite(v) && (!log || v > 0)) e.at.push_back(v);
  std::sort(e.at.begin(), e.at.end());
  e.at.erase(std::unique(e.at.begin(), e.at.end()), e.at.end());
  const std::size_t n = e.at.size();
  auto mid = [log](double a, double b) { return log ? std::sqrt(a * b) : 0.5 * (a + b); };
  for (std::size_t i = 0; i < n; ++i) {
    const double v = e.at[i];
    double l = i > 0 ? mid(e.at[i - 1], v) : 0, h = i + 1 < n ? mid(v, e.at[i + 1]) : 0;
    if (n == 1) l = log ? v / 1.5 : v - 0.5, h = log ? v * 1.5 : v + 0.5;
    else if (i == 0) l = log ? v * v / h : 2 * v - h;
    else if (i + 1 == n) h = log ? v * v / l : 2 * v - l;
    e.lo.push_back(l), e.hi.push_back(h);
  }
  return e;
}

}  // namespace

std::vector<Series> PhaseCells::present() const {
  std::vector<Series> out;
  for (const Series* s : {&q, &e, &m, &tie})
    if (!s->x.empty()) out.push_back(*s);
  return out;
}

PhaseCells phase_cells(const nlohmann::json& rows, const char* xkey, bool xlog) {
  PhaseCells p;
  p.q = {"Q wins (quantize only)", palette(0), Style::Cells, {}, {}, 0};
  p.e = {"E wins (evict only)", palette(1), Style::Cells, {}, {}, 0};
  p.m = {"M wins (mixed tiers)", palette(2), Style::Cells, {}, {}, 0};
  p.tie = {"tie (two families win equal shares of heads)", Rgb{190, 190, 190}, Style::Cells, {}, {}, 0};
  const Edges ex = edges_of(rows, xkey, xlog), ey = edges_of(rows, "budget", false);
  for (const auto& r : rows) {
    const double x = double_or_nan(r, xkey), y = double_or_nan(r, "budget");
    if (!std::isfinite(x) || !std::isfinite(y) || (xlog && !(x > 0))) continue;
    double x0, x1, y0, y1;
    ex.of(x, x0, x1);
    ey.of(y, y0, y1);
    p.xlo = std::min(p.xlo, x0), p.xhi = std::max(p.xhi, x1), p.ylo = std::min(p.ylo, y0), p.yhi = std::max(p.yhi, y1);
    const std::string w = phase_outcome(r);
    Series* s = w == "Q" ? &p.q : w == "E" ? &p.e : w == "M" ? &p.m : w == "tie" ? &p.tie : nullptr;
    if (!s) continue;
    s->x.push_back(x), s->y.push_back(y);
    s->x_lo.push_back(x0), s->x_hi.push_back(x1), s->y_lo.push_back(y0), s->y_hi.push_back(y1);
  }
  return p;
}

Series recomputed_phase_boundary(const nlohmann::json& rows, const char* xkey, bool xlog) {
  Series rb{"recomputed boundary: E wins from here (per budget)", Rgb{40, 40, 40}, Style::Line, {}, {}, 6};
  const Edges ex = edges_of(rows, xkey, xlog);
  std::map<double, std::vector<std::pair<double, std::string>>> by_budget;
  for (const auto& r : rows) {
    const double x = double_or_nan(r, xkey), y = double_or_nan(r, "budget");
    if (std::isfinite(x) && std::isfinite(y) && (!xlog || x > 0)) by_budget[y].push_back({x, phase_outcome(r)});
  }
  for (auto& [b, row] : by_budget) {
    std::sort(row.begin(), row.end());
    for (std::size_t i = 1; i < row.size(); ++i)
      if (row[i].second == "E" && row[i - 1].second != "E") {
        double lo, hi;
        ex.of(row[i].first, lo, hi);
        rb.x.push_back(lo), rb.y.push_back(b);
        break;
      }
  }
  return rb;
}

}  // namespace tierlab
