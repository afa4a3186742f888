#pragma once
// The ledger of the reference papers' claims (docs/claims.md, issue 35).
//
// A scenario states the claim it tests in its top-level key `claim` (one mapping, or a list of
// them when one run tests several claims):
//
//   claim:
//     id: a                                     # a..q, docs/claims.md
//     claim: The dominated share orders the interior's recomputed advantage.
//     source: Quantize, Evict, or Both? (Table 3)
//     paper: Spearman rho = -0.978 over 25 cells
//
// After the other analyses have written their tables, ClaimAnalysis computes each claim's
// verdict row FROM THOSE TABLES (DIR/tables/interior.json, staleness.json, smoothing.json,
// mismatch.json, mismatch_beta.json, proxy.json, channel_variance.json, score_error.json; the cells only where an existing verdict helper reads
// them, e.g. context_trends): the paper's number as the file states it, tierlab's number with
// its interval, the verdict and the settings it depends on. The rows go to
// DIR/tables/claims.json and .csv, DIR/claims.md and a section of DIR/summary.md; `tierlab run`
// of several scenarios gathers every row into one table of the combined summary.
//
// The key is not a cell setting: it is erased from the settings that make a cell's hash, as
// `figures` is (scenarios/scenario/scenario.cpp), so adding or rewording a claim never
// recomputes a cell.
//
// Verdicts (one of four words, then why):
//   reproduced        the tested statement holds within its interval (and at the paper's size
//                     where the paper gives one and the interval can say so)
//   partly            a named part holds and another does not, or is not measured here
//   refuted           the measurement contradicts the claim (for a correlation: the interval
//                     contains 0 or lies on the other side, and excludes the paper's value)
//   not testable here the run cannot decide it (why: too few cells, the family does not exist
//                     at the budget, an interval too wide to tell, ...)
// The thresholds each evaluator uses are named constants below and stated in the row.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scenarios/scenario/analysis.hpp"

namespace tierlab {

struct ClaimSpec {
  std::string id;      // "a".."q"
  std::string claim;   // the claim in one sentence
  std::string source;  // the paper (and where in it)
  std::string paper;   // the paper's number, as the file states it
  std::string where;   // "FILE:LINE" of the mapping
  // The robustness variation this row was measured under ("rate_kind=code"); empty for the
  // file's own settings. Set on the variation scenarios claim_variations() makes.
  std::string variant;
};

// A robustness variation of a claim scenario (`claim.vary`): top-level scenario keys replaced.
struct ClaimVariation {
  std::string label;     // "rate_kind=code, ladder=evict,kivi2,exact"
  std::string mapping;   // the replacements, as a YAML flow mapping
};

enum class ClaimStanding { Reproduced, Partly, Refuted, NotTestable };
std::string_view to_string(ClaimStanding);  // "reproduced" | "partly" | "refuted" | "not testable here"

struct ClaimVerdict {
  ClaimSpec spec;
  std::string scenario;    // the scenario file
  std::string measured;    // tierlab's number with its interval (or why it has none)
  ClaimStanding standing = ClaimStanding::NotTestable;
  std::string why;         // which part holds, why it is refuted or not testable
  std::string depends_on;  // the settings the verdict depends on
  nlohmann::json to_json() const;
  static ClaimVerdict from_json(const nlohmann::json&);
};

// The claims tierlab measures today and the analysis each needs ("interior" is always there).
struct ClaimMeasure {
  std::string id;
  std::string analysis;  // interior | staleness | smoothing | mismatch | proxy | channel_variance | score_error
  std::string what;      // what is measured, one line
};
const std::vector<ClaimMeasure>& claim_measures();

// Thresholds of the verdicts (stated in the rows).
inline constexpr double kStaleRatio = 1.10;        // (d) re-deciding pays: median err_stale/err_fresh >= this
inline constexpr int kStaleWithinSteps = 8;        // (d) ... at some step s <= this ("within a few steps")
inline constexpr double kStableFamilyShare = 0.80; // (d) family stable: same family as after prefill, share >= this
inline constexpr double kSmoothingRemovesMost = 0.5;  // (h) smoothed truncation <= this x raw
inline constexpr double kPaperBetaLo = 3.6, kPaperBetaHi = 5.3;  // (j) RateQuant's range of beta
inline constexpr double kMostRemoved = 0.5;  // (q) "most of the excess error": a removed share >= this
inline constexpr double kWeakRank = 0.5;
inline constexpr double kEqualisedPar = 1.5;  // (o) equalised: median peak-to-average variance ratio <= this  // (g) a ranking is weak when its Spearman interval lies below this

class ClaimAnalysis final : public Analysis {
 public:
  explicit ClaimAnalysis(std::vector<ClaimSpec> c, std::vector<ClaimVariation> v = {})
      : claims(std::move(c)), variations(std::move(v)) {}
  std::string name() const override { return "claims"; }
  std::string write_tables(const Scenario&, const std::vector<nlohmann::json>& cells,
                           const std::string& dir) const override;
  static AnalysisType type();

  std::vector<ClaimSpec> claims;
  std::vector<ClaimVariation> variations;  // `vary` of its claims, in order (none on a variation)
};

// The robustness variations of a claim scenario (docs/claims.md, "Robustness"): for every
// `claim.vary` entry, the scenario file with those top-level keys replaced (a replaced `traces`
// of checkpoints is labelled "on trained models ..."), and for a `claim.dose: {preset, seeds,
// SETTING: [values]}` the file on that one preset with the generator setting swept (labelled
// "dose-response of SETTING [values] within PRESET"); each named "<name>-vary<k>", its claims
// marked with the variation's label. `tierlab run` runs them
// after the scenario, and claims_table() folds their verdicts into the scenario's rows.
std::vector<Scenario> claim_variations(const Scenario&);

// The verdict rows of one claim scenario's run, from its tables (tables_dir = DIR/tables) and
// cells. Throws InputError when a table the claim needs is missing.
std::vector<ClaimVerdict> evaluate_claims(const Scenario&, const std::vector<nlohmann::json>& cells,
                                          const std::string& tables_dir);
// The rows of a run folder (DIR/tables/claims.json), empty when it has none.
std::vector<ClaimVerdict> read_claim_rows(const std::string& run_dir);
// One markdown table of rows (sorted by claim id), with a line per row's settings beneath. A
// row measured under a variation is folded into its claim's row: the verdict names each
// variation's verdict, and a reproduced or refuted claim whose verdict a variation changes is
// "partly", with the variation named.
std::string claims_table(std::vector<ClaimVerdict> rows);

}  // namespace tierlab
