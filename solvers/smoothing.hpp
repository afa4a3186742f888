#pragma once
// Smoothed token scores (docs/model.md section 9, "smoothed-score") and the span truncation
// rate they are meant to lower.
//
// Pooling. A score row x_0..x_{T-1} (one tier's costs c_t(tau), or c_t(0)) is replaced by
// its pool over a centred window of odd size k = 2h + 1:
//   avg:  y_t = (1 / n_t) sum_{u = t-h}^{t+h} x~_u        max:  y_t = max_{u = t-h}^{t+h} x~_u
// where x~ extends x past the ends by the padding:
//   zero       x~_u = 0 outside [0, T), counted in the window (n_t = k; PyTorch
//              avg_pool1d's count_include_pad); for max the 0 takes part in the max
//   reflect    x~_{-u} = x_u, x~_{T-1+u} = x_{T-1-u} (the edge is not repeated; numpy/PyTorch
//              "reflect", repeated as often as a short row needs); n_t = k
//   replicate  x~_u = x_0 left of the row, x_{T-1} right of it; n_t = k
//   none       only positions inside the row: the window shrinks at the ends and n_t is
//              the number of positions in [0, T) it covers (count_include_pad = false)
// Default: avg, k = 5, reflect (the RDKV setting; SnapKV's avg_pool1d(kernel 5, padding
// k/2) is the `zero` variant). k = 1 is the identity.
//
// Smoothed-score solver: every row of a head's cost matrix (tier-major, ladder.size() x T)
// is pooled this way (the exact tier's zero row stays zero), the allocation is solved
// exactly on the pooled costs, and its objective is reported on the true costs.
//
// Span truncation. A planted span [begin, end) is truncated by an allocation when some but
// not all of its tokens are evicted (tier index 0):
//   truncation rate = (truncated spans) / (spans)
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/base/linalg.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

enum class PoolKind { Avg, Max };
std::string_view to_string(PoolKind);
PoolKind parse_pool_kind(std::string_view);  // "avg" | "max"; InputError lists the choices

enum class Padding { Zero, Reflect, Replicate, None };
std::string_view to_string(Padding);
Padding parse_padding(std::string_view);  // "zero" | "reflect" | "replicate" | "none"

struct SmoothingOptions {
  PoolKind pool = PoolKind::Avg;
  int kernel = 5;  // k, odd, >= 1
  Padding padding = Padding::Reflect;

  void validate() const;     // InputError naming the option and value
  std::string name() const;  // "avg5-reflect"
};

// y = pool(x) as above (same length as x).
std::vector<double> smooth_scores(const std::vector<double>& x, const SmoothingOptions& = {});
// The same on a raw row (in and out may not alias).
void smooth_row(const double* in, double* out, std::int64_t n, const SmoothingOptions& = {});
// Every row of a tier-major cost matrix pooled along the token axis.
MatrixRMd smooth_costs(const MatrixRMd& tier_major_costs, const SmoothingOptions& = {});

struct SpanTruncation {
  int spans = 0;           // spans checked
  int truncated = 0;       // some but not all tokens evicted
  int fully_evicted = 0;   // every token evicted
  double rate() const { return spans > 0 ? static_cast<double>(truncated) / spans : 0.0; }
  SpanTruncation& operator+=(const SpanTruncation& o) {
    spans += o.spans;
    truncated += o.truncated;
    fully_evicted += o.fully_evicted;
    return *this;
  }
};

// Spans of one head against its allocation (tier index per token; `evict_tier` is the
// eviction tier, 0 in every RateLadder). InputError when a span is empty or outside [0, T).
SpanTruncation span_truncation(const std::vector<Span>& spans, const std::vector<std::uint8_t>& tiers,
                               int evict_tier = 0);

}  // namespace tierlab
