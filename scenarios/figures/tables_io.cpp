// What the figure renderers share (tables_io.hpp).
#include "scenarios/figures/tables_io.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "model/base/error.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"

namespace tierlab {

namespace {

// A string that reads wholly as a number ("0.5", "nan", "-inf", "1e3").
bool reads_as_number(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

const char* json_kind(const nlohmann::json& v) {
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "true/false";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return "null";
}

std::string excerpt(const nlohmann::json& v) {
  std::string t = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return t.size() > 120 ? t.substr(0, 117) + "..." : t;
}

[[noreturn]] void table_fault(const std::string& path, const std::string& where, const std::string& column,
                              const std::string& what) {
  throw InputError("the table '" + path + "', " + where + ", column '" + column + "': " + what +
                   "; rerun `tierlab run` to rewrite the tables.");
}

// Every array of row objects in a JSON table (at any depth): a column holds one kind of
// value in every row (null aside, the tables' "not defined"), and no number is a string.
void check_rows(const std::string& path, const nlohmann::json& v, const std::string& at) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string here = at.empty() ? it.key() : at + "." + it.key();
      if (it.value().is_string() && reads_as_number(it.value().get<std::string>()))
        table_fault(path, "at '" + (at.empty() ? std::string("top level") : at) + "'", it.key(),
                    excerpt(it.value()) + " is a number given as a string");
      check_rows(path, it.value(), here);
    }
    return;
  }
  if (!v.is_array()) return;
  std::map<std::string, std::pair<const char*, std::size_t>> kind;  // column -> kind and first row with it
  for (std::size_t r = 0; r < v.size(); ++r) {
    const nlohmann::json& row = v[r];
    const std::string where = "row " + std::to_string(r + 1) + " of '" + (at.empty() ? std::string("the table") : at) + "'";
    if (!row.is_object()) {
      check_rows(path, row, at + "[" + std::to_string(r) + "]");
      continue;
    }
    for (auto it = row.begin(); it != row.end(); ++it) {
      const nlohmann::json& x = it.value();
      if (x.is_null()) continue;
      if (x.is_string() && reads_as_number(x.get<std::string>()))
        table_fault(path, where, it.key(), excerpt(x) + " is a number given as a string");
      const auto k = kind.emplace(it.key(), std::pair{json_kind(x), r}).first->second;
      if (std::string(k.first) != json_kind(x))
        table_fault(path, where, it.key(),
                    excerpt(x) + " is " + json_kind(x) + ", but row " + std::to_string(k.second + 1) + " holds " + k.first);
    }
    check_rows(path, row, at + "[" + std::to_string(r) + "]");
  }
}

// The columns the figure builders read from a CSV table, by file name.
const std::map<std::string, std::vector<std::string>>& required_csv_columns() {
  static const std::map<std::string, std::vector<std::string>> m = {{"heads.csv", {"budget", "A"}}};
  return m;
}

// A CSV cell that is a number ("nan" included: a number not defined).
bool csv_number(const std::string& s) { return reads_as_number(s); }

}  // namespace

nlohmann::json read_table_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("the table '" + path + "' is missing; run `tierlab run` first.");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("the table '" + path + "' is not valid JSON (" + e.what() + ").");
  }
  check_rows(path, j, "");
  return j;
}

std::map<std::string, std::vector<std::string>> read_table_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("the table '" + path + "' is missing; run `tierlab run` first.");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  CsvReader csv(all);
  std::size_t row = 0;  // the record being read: 0 the header, 1 the first after it
  auto next = [&]() {
    try {
      return csv.next();
    } catch (const InputError& e) {
      throw InputError("the table '" + path + "', " + (row == 0 ? std::string("header line") : "row " + std::to_string(row)) +
                       ": " + e.what() + "; rerun `tierlab run` to rewrite the tables.");
    }
  };
  const std::vector<std::string> names = next().value_or(std::vector<std::string>());
  std::map<std::string, std::vector<std::string>> cols;
  for (const auto& n : names)
    if (!cols.emplace(n, std::vector<std::string>()).second)
      throw InputError("the table '" + path + "', header line: the column '" + n +
                       "' appears twice; rerun `tierlab run` to rewrite the tables.");
  const std::string base = path.substr(path.find_last_of('/') + 1);
  if (const auto req = required_csv_columns().find(base); req != required_csv_columns().end())
    for (const auto& c : req->second)
      if (!cols.count(c))
        throw InputError("the table '" + path + "', header line: the column '" + c +
                         "' is missing (the header is '" + all.substr(0, std::min(all.find('\n'), std::size_t{200})) +
                         "'); rerun `tierlab run` to rewrite the tables.");
  while (true) {
    ++row;
    const auto fields = next();
    if (!fields) break;
    if (fields->size() != names.size())
      throw InputError("the table '" + path + "', row " + std::to_string(row) + ": " + std::to_string(fields->size()) +
                       " fields; the header has " + std::to_string(names.size()) +
                       " columns; rerun `tierlab run` to rewrite the tables.");
    for (std::size_t i = 0; i < names.size(); ++i) cols[names[i]].push_back((*fields)[i]);
  }
  // A column of numbers holds numbers (or "nan" / empty: not defined) in every row.
  for (const auto& [name, values] : cols) {
    std::size_t numbers = 0, texts = 0;
    for (const auto& v : values) {
      if (v.empty()) continue;
      if (csv_number(v)) {
        ++numbers;
      } else {
        ++texts;
      }
    }
    if (numbers == 0 || texts == 0 || texts >= numbers) continue;
    for (std::size_t r = 0; r < values.size(); ++r)
      if (!values[r].empty() && !csv_number(values[r]))
        throw InputError("the table '" + path + "', row " + std::to_string(r + 1) + ", column '" + name + "': '" +
                         values[r].substr(0, 120) + "' is not a number (the column's other rows are numbers); rerun "
                         "`tierlab run` to rewrite the tables.");
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
    if (const double se = double_or_nan(r, "share_E"); std::isfinite(se)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "E %.0f%%", 100 * se);
      p.e_share.push_back({x, y, buf, true});
    }
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
