// The analysis registry (scenarios/scenario/analysis.hpp declares it): one line per analysis.
#include "scenarios/scenario/analysis.hpp"

#include "scenarios/analyses/channel_variance.hpp"
#include "scenarios/analyses/claims.hpp"
#include "scenarios/analyses/entropy_phase.hpp"
#include "scenarios/analyses/granularity.hpp"
#include "scenarios/analyses/interior.hpp"
#include "scenarios/analyses/mismatch.hpp"
#include "scenarios/analyses/phase_map.hpp"
#include "scenarios/analyses/proxy.hpp"
#include "scenarios/analyses/rd_curve.hpp"
#include "scenarios/analyses/score_error.hpp"
#include "scenarios/analyses/smoothing.hpp"
#include "scenarios/analyses/staleness.hpp"
#include "scenarios/analyses/variance.hpp"
#include "scenarios/analyses/waterfill.hpp"

namespace tierlab {

const std::vector<AnalysisType>& analysis_types() {
  static const std::vector<AnalysisType> types = {
      InteriorAnalysis::type(),      // always; first: the others read its cell keys
      PhaseMapAnalysis::type(),      // traces.synthetic.logit_scales
      WaterfillAnalysis::type(),     // waterfill
      StalenessAnalysis::type(),     // staleness
      EntropyPhaseAnalysis::type(),  // entropy_bins (or logit_scales)
      SmoothingAnalysis::type(),     // smoothing
      MismatchAnalysis::type(),      // mismatch
      ProxyAnalysis::type(),         // proxy (with methods)
      RdCurveAnalysis::type(),       // rd_curve
      ChannelVarianceAnalysis::type(),  // channel_variance
      ScoreErrorAnalysis::type(),    // score_error
      GranularityAnalysis::type(),   // granularity
      VarianceAnalysis::type(),      // variance (with methods)
      ClaimAnalysis::type(),         // claim; last: it reads the other analyses' tables
  };
  return types;
}

}  // namespace tierlab
