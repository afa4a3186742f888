// The rate-distortion curve of every cell (rd_curve.hpp).
#include "scenarios/analyses/rd_curve.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include "model/base/error.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/pipeline/evaluation.hpp"
#include "scenarios/methods/methods_spec.hpp"
#include "scenarios/methods/rd_methods.hpp"
#include "scenarios/io/atomic_file.hpp"
#include "scenarios/io/csv.hpp"
#include "scenarios/io/table_numbers.hpp"
#include "scenarios/scenario/scenario.hpp"
#include "scenarios/io/yaml_reader.hpp"

namespace tierlab {

namespace {

std::shared_ptr<const Analysis> read_rd_curve_section(const YAML::Node& root, const YamlReader& c, const Scenario& s) {
  const YAML::Node n = root["rd_curve"];
  if (!n) return nullptr;
  RdCurveSpec spec;
  if (n.IsMap()) {
    c.keys(n, "rd_curve", {"budgets", "scope", "queries", "families", "cells"});
    if (n["cells"])
      for (const YAML::Node& id : c.list(n["cells"], "rd_curve.cells")) {
        const std::string name = c.str(id, "rd_curve.cells");
        std::string choices;
        bool found = false;
        for (const auto& cell : s.cells) found = found || cell.id == name, choices += (choices.empty() ? "" : ", ") + cell.id;
        if (!found) c.fail(id, "key 'rd_curve.cells' names '" + name + "', not a cell of this scenario; the cells are " + choices + ".");
        spec.cells.push_back(name);
      }
    if (n["budgets"])
      spec.budgets = c.wrap(n["budgets"], "rd_curve.budgets",
                            [&] { return parse_budget_grid(c.str(n["budgets"], "rd_curve.budgets"), "rd_curve.budgets"); });
    if (n["scope"]) spec.scope = c.wrap(n["scope"], "rd_curve.scope", [&] { return parse_scope(c.str(n["scope"], "rd_curve.scope")); });
    if (n["queries"])
      spec.queries = c.wrap(n["queries"], "rd_curve.queries", [&] { return parse_rd_queries(c.str(n["queries"], "rd_curve.queries")); });
    if (n["families"]) {
      spec.families.clear();
      for (const YAML::Node& f : c.list(n["families"], "rd_curve.families"))
        spec.families.push_back(c.wrap(f, "rd_curve.families", [&] { return parse_family_choice(c.str(f, "rd_curve.families")); }));
    }
  } else if (!(n.IsScalar() && c.str(n, "rd_curve") == "on")) {
    c.fail(n, "key 'rd_curve' is a mapping (budgets, scope, queries, families, cells) or 'on' (the defaults).");
  }
  RdCurveOptions o;
  o.budgets = spec.budgets;
  o.families = spec.families;
  c.wrap(n, "rd_curve", [&] { o.validate(); });
  return std::make_shared<RdCurveAnalysis>(spec);
}

// A number of the cell JSON (null, for an undefined value: NaN).
double jnum(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN(); }

const char* const kFamilyOrder[] = {"quantize", "evict", "mixed", "routed"};

std::vector<NamedFigure> figures_rd_curve(const std::string& dir) {
  std::vector<NamedFigure> out;
  if (!std::filesystem::exists(dir + "/tables/rd_curve.json")) return out;
  const nlohmann::json all = read_table_json(dir + "/tables/rd_curve.json");
  for (const nlohmann::json& cell : all.at("cells")) {
    const nlohmann::json& c = cell.at("rd_curve");
    Figure f;
    f.title = "Rate-distortion curve, cell " + cell.at("id").get<std::string>() + " (" + std::to_string(c.at("heads").get<int>()) +
              " heads, scope " + c.at("scope").get<std::string>() + ")";
    f.note = "Solid lines with markers: each family's optimum, recomputed; dashed lines of the same colour: its surrogate "
             "prediction; black dashed: the lower convex hull of the recomputed errors.";
    f.xlabel = "key rate, " + c.at("rate_kind").get<std::string>() + " bits per element (measured)";
    f.ylabel = "relative output error, recomputed on the " + c.at("queries").get<std::string>() + " queries (log)";
    double lo = INFINITY, hi = 0, xmax = 0;
    auto keep = [&](double x, double y, Series& s) {
      if (!(y > 0) || !std::isfinite(x)) return;
      s.x.push_back(x), s.y.push_back(y), lo = std::min(lo, y), hi = std::max(hi, y), xmax = std::max(xmax, x);
    };
    int colour = 0;
    for (const char* fam : kFamilyOrder) {
      if (!c.at("families").contains(fam)) {
        ++colour;
        continue;
      }
      const nlohmann::json& fj = c.at("families").at(fam);
      // Routed coincides with one of Q, E, M at each budget: its points only, as squares on
      // the curves, so that the family it picked stays visible under it.
      const bool routed = std::string(fam) == "routed";
      // Routed: reddish purple diamonds, apart in hue and shape from the red squares of the
      // dominated tiers and the black squares of the tiers on the hull.
      const Rgb col = palette(routed ? 3 : colour);
      Series s{routed ? "routed (diamonds: the family each head picked)" : std::string(fam), col,
               routed ? Style::Points : Style::Line, {}, {}, routed ? 7.0 : 3.0};
      if (routed) s.marker = Marker::Diamond;
      Series pts{"", col, Style::Points, {}, {}, 4};
      Series sur{"", col, Style::Dashed, {}, {}, 1};
      for (std::size_t k = 0; k < fj.at("feasible").size(); ++k) {
        if (!fj.at("feasible").at(k).get<bool>()) continue;
        keep(jnum(fj.at("rate").at(k)), jnum(fj.at("error").at(k)), s);
        keep(jnum(fj.at("rate").at(k)), jnum(fj.at("error").at(k)), pts);
        keep(jnum(fj.at("rate").at(k)), jnum(fj.at("surrogate").at(k)), sur);
      }
      f.series.push_back(s);
      if (!routed) f.series.push_back(pts), f.series.push_back(sur);
      ++colour;
    }
    Series hull{"lower convex hull", Rgb{0, 0, 0}, Style::Dashed, {}, {}, 1};
    for (std::size_t i = 0; i < c.at("hull")["rate"].size(); ++i)
      keep(c.at("hull")["rate"][i].get<double>(), jnum(c.at("hull")["value"][i]), hull);
    f.series.push_back(hull);
    Series on{"ladder tier on the hull", Rgb{0, 0, 0}, Style::Squares, {}, {}, 9};
    Series off{"ladder tier above the hull (dominated)", Rgb{200, 0, 0}, Style::Squares, {}, {}, 9};
    for (const nlohmann::json& l : c.at("ladder_points"))
      keep(l.at("rate").get<double>(), jnum(l.at("error")), l.at("above_hull").get<bool>() ? off : on);
    f.series.push_back(on);
    if (!off.x.empty()) f.series.push_back(off);
    if (c.contains("methods") && !c.at("methods").empty()) {
      Series named{"named methods (tables/rd_curve_methods.csv)", Rgb{90, 90, 90}, Style::Points, {}, {}, 9};
      for (const nlohmann::json& m : c.at("methods")) keep(jnum(m.at("rate")), jnum(m.at("error")), named);
      f.series.push_back(named);
    }
    if (!(hi > 0)) continue;  // nothing recomputed above zero: no figure
    f.ylog = true;
    f.ymin = lo / 3, f.ymax = hi * 3;
    f.xmin = 0, f.xmax = std::max(1.0, xmax * 1.05);
    out.push_back({"rd_curve_" + cell.at("id").get<std::string>(), f});
  }
  return out;
}

}  // namespace

void RdCurveAnalysis::compute_cell(const CellContext& ctx, nlohmann::json& j) const {
  if (!spec.cells.empty() && std::find(spec.cells.begin(), spec.cells.end(), ctx.cell.id) == spec.cells.end()) return;
  RdCurveOptions o;
  o.budgets = spec.budgets;
  o.families = spec.families;
  o.queries = spec.queries;
  o.solve.ladder = ctx.scenario.ladder;
  o.solve.rate_kind = ctx.scenario.rate_kind;
  o.solve.scope = spec.scope;
  const RdCurve c = rd_curve(ctx.trace, o, {}, ctx.stop);
  j["rd_curve"] = to_json(c);
  if (ctx.scenario.methods.empty() || c.queries == RdQueries::Step) return;
  // The scenario's named methods (`methods`) as single operating points beside the curves
  // (scenarios/methods/rd_methods.hpp).
  j["rd_curve"]["methods"] = to_json(rd_method_points(ctx.trace, c, ctx.scenario.methods, &ctx.backend, {}, ctx.stop));
}

std::string RdCurveAnalysis::write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                                          const std::string& dir) const {
  std::ostringstream md;
  CsvWriter meth({"cell", "label", "kind", "code_bits", "total_bits", "rate", "surrogate", "error", "above_hull"});
  CsvWriter csv({"cell", "family", "budget", "code_bits", "total_bits", "rate", "surrogate", "error", "attn_tv"});
  CsvWriter lad({"cell", "tier", "code_bits", "total_bits", "rate", "surrogate", "error", "above_hull",
                 "above_surrogate_hull"});
  CsvWriter hull({"cell", "vertex", "rate", "error", "point"});
  nlohmann::json all = {{"cells", nlohmann::json::array()}};
  md << "\n## Rate-distortion curves\n\n"
     << "Per cell: each family's surrogate optimum over the budget grid, recomputed exactly (mean over the heads), "
     << "with the lower convex hull of all operating points; a ladder tier above the hull is dominated "
     << "(figures rd_curve_<cell>; tables rd_curve*.csv).\n\n"
     << "| cell | scope | queries | hull vertices | tiers above the hull |\n|---|---|---|---|---|\n";
  auto num = [](const nlohmann::json& v) { return format_or_nan(jnum(v)); };
  for (const nlohmann::json& cell : cells) {
    if (!cell.contains("rd_curve")) continue;
    const std::string id = cell["id"].get<std::string>();
    const nlohmann::json& c = cell["rd_curve"];
    // Tables are the same on every run of the same inputs (one process, shards, MPI ranks):
    // no timings and no temporary trace paths (both stay in the cell file).
    nlohmann::json table = c;
    table.erase("seconds");
    table.erase("source");
    all["cells"].push_back({{"id", id}, {"rd_curve", std::move(table)}});
    for (const char* fam : kFamilyOrder) {
      if (!c["families"].contains(fam)) continue;
      const nlohmann::json& fj = c["families"][fam];
      for (std::size_t k = 0; k < fj["feasible"].size(); ++k)
        csv.row() << id << fam << num(c["budgets"][k]) << num(fj["code_bits"][k]) << num(fj["total_bits"][k])
                  << num(fj["rate"][k]) << num(fj["surrogate"][k]) << num(fj["error"][k]) << num(fj["attn_tv"][k]);
    }
    std::string above;
    for (const nlohmann::json& l : c["ladder_points"]) {
      lad.row() << id << l["tier"].get<std::string>() << num(l["code_bits"]) << num(l["total_bits"]) << num(l["rate"])
                << num(l["surrogate"]) << num(l["error"]) << l["above_hull"].get<bool>()
                << l["above_surrogate_hull"].get<bool>();
      if (l["above_hull"].get<bool>()) above += (above.empty() ? "" : ", ") + l["tier"].get<std::string>();
    }
    if (c.contains("methods"))
      for (const nlohmann::json& m : c["methods"])
        meth.row() << id << m["label"].get<std::string>() << m["kind"].get<std::string>() << num(m["code_bits"])
                   << num(m["total_bits"]) << num(m["rate"]) << num(m["surrogate"]) << num(m["error"])
                   << m["above_hull"].get<bool>();
    for (std::size_t i = 0; i < c["hull"]["rate"].size(); ++i)
      hull.row() << id << i << num(c["hull"]["rate"][i]) << num(c["hull"]["value"][i])
                 << c["hull"]["label"][i].get<std::string>();
    md << "| " << id << " | " << c["scope"].get<std::string>() << " | " << c["queries"].get<std::string>() << " | "
       << c["hull"]["rate"].size() << " | " << (above.empty() ? "none" : above) << " |\n";
  }
  if (all["cells"].empty()) return "";
  write_file_atomically(dir + "/rd_curve.csv", csv.text());
  write_file_atomically(dir + "/rd_curve_ladder.csv", lad.text());
  write_file_atomically(dir + "/rd_curve_hull.csv", hull.text());
  write_file_atomically(dir + "/rd_curve.json", all.dump(1) + "\n");
  if (meth.rows() > 0) write_file_atomically(dir + "/rd_curve_methods.csv", meth.text());
  return md.str();
}

AnalysisType RdCurveAnalysis::type() {
  return {"rd_curve", "rate-distortion curves: every family's optimum over a budget grid, recomputed, with the lower hull",
          {"rd_curve"}, read_rd_curve_section, figures_rd_curve};
}

}  // namespace tierlab
