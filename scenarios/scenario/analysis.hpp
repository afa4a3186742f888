#pragma once
// The analyses of a scenario (docs/model.md section 11) behind one interface.
//
// An analysis owns
//   - its YAML key(s) and spec: AnalysisType::parse reads them (scenarios/io/yaml_reader.hpp)
//     and returns the analysis, or nullptr when the scenario does not ask for it;
//   - its per-cell computation: Analysis::compute_cell adds its part to the cell's JSON
//     (DIR/cells/<id>.json), from the cell's trace and the run's recomputation backend;
//   - its tables and summary section: Analysis::write_tables reads every cell's JSON, writes
//     DIR/tables/<its tables> and returns its section of DIR/summary.md;
//   - its figures: AnalysisType::figures builds them (scenarios/figures/figure.hpp, data only)
//     from the saved tables of a run folder; nothing when its tables are not there.
// The scenario holds the list of its analyses in registry order; the runner, the table
// writer, the summary and the figure renderer each loop over it. Adding an analysis is one
// file pair in scenarios/analyses/, one line in analysis_types() (scenarios/analyses/registry.cpp), its docs
// (docs/scenarios.md) and its test (docs/extending.md shows how).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/recompute.hpp"
#include "model/io/trace.hpp"
#include "model/base/cancel.hpp"
#include "scenarios/figures/figure.hpp"

namespace YAML {
class Node;
}

namespace tierlab {

struct Scenario;
struct ScenarioCell;
class YamlReader;

// What a cell's computation sees.
struct CellContext {
  const Scenario& scenario;
  const ScenarioCell& cell;
  const TraceReader& trace;
  Recomputer& backend;
  const std::atomic<bool>* stop = nullptr;  // set: abandon the cell (throws Cancelled)
  // Where the cell is (the runner's progress line: "cell ID: interior, head 12 of 256"):
  // step = the analysis or its stage, done of total units (heads; 0 of 0: just started).
  std::function<void(const std::string& step, int done, int total)> on_step;
  void check_stop() const { throw_if_cancelled(stop); }
  // A Progress for `step`'s units, for the pipeline functions that take one.
  Progress step(const std::string& name) const {
    if (!on_step) return {};
    on_step(name, 0, 0);
    return [f = on_step, name](int done, int total) { f(name, done, total); };
  }
};

class Analysis {
 public:
  virtual ~Analysis() = default;
  virtual std::string name() const = 0;  // the registry name ("staleness")
  // Adds this analysis's keys to the cell JSON. Default: nothing per cell.
  virtual void compute_cell(const CellContext&, nlohmann::json& /*cell*/) const {}
  // Writes the tables under dir (= DIR/tables) and returns the summary.md section ("" for none).
  virtual std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                                   const std::string& dir) const = 0;
  // Does it use the scenario's `methods` list? (A file that gives `methods` needs one that does.)
  virtual bool uses_methods() const { return false; }
};

struct NamedFigure {
  std::string name;  // file base under DIR/figures ("staleness")
  Figure figure;
  // Why the figure has no content and is not drawn (e.g. a correlation across one cell);
  // empty: drawn. render_figures names each skipped figure with its reason.
  std::string skipped = {};
};

struct AnalysisType {
  std::string name;                    // "staleness"
  std::string summary;                 // one line for the docs and `tierlab methods`
  std::vector<std::string> yaml_keys;  // the top-level scenario keys it owns
  // The analysis the scenario asks for, or nullptr. The scenario's common keys and cells
  // are already read.
  std::shared_ptr<const Analysis> (*parse)(const YAML::Node& root, const YamlReader&, const Scenario&) = nullptr;
  // Its figures from a run folder's tables (empty when its tables are not there).
  std::vector<NamedFigure> (*figures)(const std::string& run_dir) = nullptr;
};

// Every analysis, in the order their summary sections and figures appear.
const std::vector<AnalysisType>& analysis_types();

}  // namespace tierlab
