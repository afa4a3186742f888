// Scenarios and figures in Python: validate a scenario file (scenarios/scenario/scenario.hpp),
// run it with a progress callback (scenarios/run/runner.hpp, what `tierlab run` does), read its
// CSV tables (tables_io.hpp; tierlab.read_tables makes NumPy arrays of them), and its figures
// as data (each analysis's figure builders) or drawn to PNG/PDF/SVG/CSV (figure.hpp).
#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "scenarios/scenario/analysis.hpp"
#include "scenarios/figures/figure.hpp"
#include "scenarios/run/render_figures.hpp"
#include "scenarios/figures/tables_io.hpp"
#include "scenarios/run/estimate.hpp"
#include "scenarios/run/runner.hpp"
#include "scenarios/scenario/scenario.hpp"

namespace tierlab::python {

namespace {

std::string style_name(Style s) {
  switch (s) {
    case Style::Points: return "points";
    case Style::Line: return "line";
    case Style::Dashed: return "dashed";
    case Style::Squares: return "squares";
    case Style::Cells: return "cells";
  }
  return "points";
}

py::dict series_dict(const Series& s) {
  py::dict d;
  d["name"] = s.name;
  d["style"] = style_name(s.style);
  d["color"] = py::make_tuple(s.color.r, s.color.g, s.color.b, s.color.a);
  d["x"] = to_array(s.x);
  d["y"] = to_array(s.y);
  d["size"] = s.size;
  return d;
}

std::vector<NamedFigure> run_figures(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw InputError("run folder " + dir + " does not exist");
  std::vector<NamedFigure> out;
  for (const AnalysisType& t : analysis_types())
    for (NamedFigure& f : analysis_figures(t, dir)) out.push_back(std::move(f));
  return out;
}

}  // namespace

void bind_scenarios(py::module_& m) {
  py::class_<Scenario>(m, "Scenario", "A validated scenario file (docs/scenarios.md): its cells, budgets, ladder and analyses.")
      .def_readonly("file", &Scenario::file)
      .def_readonly("name", &Scenario::name)
      .def_readonly("description", &Scenario::description)
      .def_readonly("budgets", &Scenario::budgets, "Budgets B, bits per key element.")
      .def_readonly("primary_budget", &Scenario::primary_budget)
      .def_readonly("ladder", &Scenario::ladder)
      .def_property_readonly("rate_kind", [](const Scenario& s) { return std::string(to_string(s.rate_kind)); })
      .def_property_readonly("queries", [](const Scenario& s) { return std::string(to_string(s.queries)); })
      .def_property_readonly("cells", [](const Scenario& s) {
        py::list out;
        for (const ScenarioCell& c : s.cells) {
          py::dict d;
          d["id"] = c.id;
          d["source"] = c.source;
          d["path"] = c.path;
          d["preset"] = c.synth.preset;
          d["prompt_len"] = c.source == "synthetic" ? c.synth.prompt_len : c.prompt_len;
          d["seed"] = c.source == "synthetic" ? c.synth.seed : c.seed;
          out.append(d);
        }
        return out;
      }, "The cells: dicts with id, source (synthetic | file | model), path, preset, prompt_len, seed.")
      .def_property_readonly("analyses", [](const Scenario& s) {
        std::vector<std::string> names;
        for (const AnalysisType& t : analysis_types())
          for (const auto& a : s.analyses)
            if (t.parse && a && std::string(a->name()) == t.name) names.push_back(t.name);
        return names;
      }, "The analyses the file asks for, in registry order.")
      .def("__repr__", [](const Scenario& s) {
        return "<tierlab.Scenario " + s.name + " (" + s.file + "): " + std::to_string(s.cells.size()) + " cells, " +
               std::to_string(s.budgets.size()) + " budgets>";
      });

  m.def("load_scenario", &load_scenario, py::arg("path"),
        "Reads and validates a scenario file; tierlab.InputError names the file, the line and the key at fault.");

  m.def("run_scenario", [](const py::object& scenario, const std::string& out, const py::object& backend, int jobs,
                           bool force, py::object progress, bool force_size, const py::object& max_memory,
                           const py::object& max_disk) {
    const Scenario s = py::isinstance<Scenario>(scenario) ? scenario.cast<Scenario>()
                                                          : load_scenario(py::str(scenario).cast<std::string>());
    RunOptions o;
    o.out = out;
    if (!backend.is_none()) o.backend = parse_backend(backend.cast<std::string>());
    if (jobs < 1) throw InputError("argument jobs: must be >= 1, got " + std::to_string(jobs));
    o.jobs = jobs;
    o.force = force;
    o.progress = false;
    // The size check of `tierlab run` (scenarios/run/estimate.hpp): the estimate is printed on
    // stderr, a run beyond the limits is an InputError unless force_size.
    o.force_size = force_size;
    if (!max_memory.is_none()) o.max_memory = parse_size(py::str(max_memory).cast<std::string>(), "argument max_memory");
    if (!max_disk.is_none()) o.max_disk = parse_size(py::str(max_disk).cast<std::string>(), "argument max_disk");
    WorkContext ctx;
    ctx.progress = progress;
    const int total = static_cast<int>(s.cells.size());
    std::atomic<int> done{0};
    if (!progress.is_none())
      o.on_cell = [&](const std::string&, bool) {
        const int d = ++done;
        py::gil_scoped_acquire gil;
        ctx.progress(d, total);
      };
    const RunResult r = call_released(ctx, [&] { return run_scenario(s, o); });
    if (r.interrupted) {
      PyErr_SetString(PyExc_KeyboardInterrupt,
                      ("scenario run interrupted: " + std::to_string(r.cells_computed) + " cells computed, finished cells kept in " + out + "/cells").c_str());
      throw py::error_already_set();
    }
    py::dict d;
    d["cells_total"] = r.cells_total;
    d["cells_computed"] = r.cells_computed;
    d["cells_skipped"] = r.cells_skipped;
    d["tables_written"] = r.tables_written;
    d["backend"] = r.backend;
    d["out"] = out;
    return d;
  }, py::arg("scenario"), py::arg("out"), py::arg("backend") = py::none(), py::arg("jobs") = 1, py::arg("force") = false,
     py::arg("progress") = py::none(), py::arg("force_size") = false, py::arg("max_memory") = py::none(),
     py::arg("max_disk") = py::none(),
     R"doc(Runs a scenario (a file path or a tierlab.Scenario) into the folder `out`, as `tierlab run` does:
each cell is written to out/cells/<id>.json as it finishes (a rerun skips finished cells
unless force), then the tables (out/tables) and summary.md. progress(done, total) is called
per cell. Ctrl-C stops the run (finished cells are kept) and raises KeyboardInterrupt. Before any
work the run's size is estimated (printed on stderr) and a run beyond the machine's memory or
free disk, or max_memory / max_disk ("8G", or bytes), is an InputError unless force_size.
Returns a dict: cells_total, cells_computed, cells_skipped, tables_written, backend, out.)doc");

  m.def("_read_table_csv", &read_table_csv, py::arg("path"), "A CSV table's columns by name, as text.");

  py::class_<Figure>(m, "Figure", R"doc(One figure as data (scenarios/figures/figure.hpp): title, axis labels,
ranges (log axes flagged) and its series (dicts: name, style, color, x and y as arrays).
save(path) draws it to .png, .pdf, .svg or .csv by the path's extension.)doc")
      .def_readonly("title", &Figure::title)
      .def_readonly("xlabel", &Figure::xlabel)
      .def_readonly("ylabel", &Figure::ylabel)
      .def_readonly("xmin", &Figure::xmin)
      .def_readonly("xmax", &Figure::xmax)
      .def_readonly("ymin", &Figure::ymin)
      .def_readonly("ymax", &Figure::ymax)
      .def_readonly("xlog", &Figure::xlog)
      .def_readonly("ylog", &Figure::ylog)
      .def_property_readonly("series", [](const Figure& f) {
        py::list out;
        for (const Series& s : f.series) out.append(series_dict(s));
        return out;
      }, "The series: dicts with name, style (points | line | dashed | squares), color (r, g, b, a), x, y, size.")
      .def("save", [](const Figure& f, const std::string& path) { export_figure(f, path); }, py::arg("path"),
           "Writes the figure to path; the format follows the extension (.png, .pdf, .svg, .csv).")
      .def("csv", &figure_csv, "The figure's data as CSV text (series,x,y).")
      .def("__repr__", [](const Figure& f) {
        return "<tierlab.Figure '" + f.title + "': " + std::to_string(f.series.size()) + " series>";
      });

  m.def("figures", [](const std::string& dir) {
    py::dict out;
    for (NamedFigure& f : run_figures(dir)) out[py::str(f.name)] = py::cast(std::move(f.figure));
    return out;
  }, py::arg("run_dir"),
     "Every figure `tierlab figure DIR` draws from a run folder's tables, as data: a dict name -> tierlab.Figure.");
  m.def(
      "render_figures",
      [](const std::string& dir, const std::string& style, const std::optional<std::string>& width,
         const std::optional<std::string>& height, const std::optional<double>& font_size,
         const std::optional<std::vector<std::string>>& formats, const std::optional<int>& dpi) {
        FigureStyle st = FigureStyle::preset(style, "style");
        if (width) st.width_pt = parse_length_pt(*width, "width");
        if (height) st.height_pt = *height == "auto" ? 0 : parse_length_pt(*height, "height");
        if (font_size) st.font_pt = *font_size;
        if (dpi) st.dpi = *dpi;
        if (formats) {
          std::string joined;
          for (const auto& f : *formats) joined += (joined.empty() ? "" : ",") + f;
          st.formats = parse_formats(joined, "formats");
        }
        st.validate("render_figures");
        py::gil_scoped_release release;
        return render_figures(dir, st);
      },
      py::arg("run_dir"), py::arg("style") = "paper", py::arg("width") = py::none(), py::arg("height") = py::none(),
      py::arg("font_size") = py::none(), py::arg("formats") = py::none(), py::arg("dpi") = py::none(),
      "Draws every figure of a run folder to run_dir/figures, as `tierlab figure` does; returns the files. style: "
      "'paper' (89 mm wide, 8 pt, 300 dpi) or 'slides'; width/height as '3.5in', '89mm' or '252pt' (height 'auto'); "
      "font_size in points; formats: any of 'png', 'pdf', 'svg'; dpi of the PNG.");
}

}  // namespace tierlab::python
