#pragma once
// Realism statistics of a trace (docs/synthetic.md, "Realism statistics"): what a trace's
// attention and keys look like, computed the same way for synthetic and captured traces, so
// that a synthetic preset can be set beside a real model.
//
// Query set of a head at prompt length L: its observation queries at positions L-w .. L-1
// (w = RealismOptions::window, the trace's W by default; at L = T the whole window). A query at
// position p is causal (docs/model.md section 12, convention 4): it attends to the keys at positions 0..p only.
// For one query q, with logits s_t = q.k_t / sqrt(d) (nats) and a = softmax(s) over t = 0..p:
//   entropy             H = -sum_t a_t ln a_t                                  (nats)
//   normalised entropy  H / ln(p + 1)                                          (0..1)
//   first-token mass    a_0
//   n90                 the fewest tokens whose attention sums to >= `mass` (0.9)  (tokens)
//   margin              max_t s_t - median_t s_t (median of p+1 values; even: mean of the two middle) (nats)
//   2-bit logit noise   mean_{t <= p} (q.(k^_t - k_t))^2 / d                   (nats^2)
//                       k^ the keys 0..L-1 quantized by KIVI per channel, `bits` bits in groups of
//                       `group` consecutive tokens (the dense kivi<bits>g<group> tier, quantizer.hpp)
// A head's value of each is the mean over its query set (g query heads x w positions). Also:
//   key channel spread    max_c rms_c / median_c rms_c, rms_c = sqrt(mean_{t < L} k_tc^2) (post-RoPE keys)
//   query channel spread  the same over the head's query set
// A summary gives, over the heads, the 10th, 50th and 90th percentiles (linear interpolation
// between order statistics) and the mean of each.
//
// Lengths: the statistics at L < T are those of the trace cut to its first L prompt positions.
// For a causal model they equal those of a trace captured with prompt length L and window w, so
// one capture with a long observation window gives them against T (tokens holding 90% vs T).
#include <functional>
#include <string>
#include <vector>

#include "model/base/cancel.hpp"
#include "model/io/trace.hpp"

namespace tierlab {

struct RealismOptions {
  int bits = 2;              // KIVI bits of the logit-noise tier
  int group = 32;            // KIVI group (tokens)
  double mass = 0.9;         // the attention share n90 counts tokens for
  int window = 0;            // queries per query head at each length (0: the trace's W)
  std::vector<int> lengths;  // prompt lengths L (empty: the trace's T)

  void validate() const;  // throws InputError naming the option
};

// One head at one length.
struct HeadRealism {
  int layer = 0, kv_head = 0;
  int length = 0;     // L
  int n_queries = 0;  // g * w
  double entropy = 0, norm_entropy = 0, first_token_mass = 0, n90 = 0, margin = 0, noise = 0;
  double key_spread = 0, query_spread = 0;
};

// Percentiles over heads.
struct RealismStat {
  double p10 = 0, median = 0, p90 = 0, mean = 0;
};

struct RealismSummary {
  int length = 0, window = 0, n_heads = 0;
  RealismStat entropy, norm_entropy, first_token_mass, n90, margin, noise, key_spread, query_spread;
};

struct RealismReport {
  RealismOptions options;
  std::vector<HeadRealism> heads;         // every head at every length, by length, then layer, then head
  std::vector<RealismSummary> summaries;  // one per length, in the order of options.lengths
  // The summary table: one row per length, each cell "median [p10, p90]" over the heads.
  std::string table(const std::string& label = "") const;
};

// The statistics of one head at prompt length L (0: the trace's T). Throws InputError when the
// trace has no observation queries at positions L-w .. L-1.
HeadRealism head_realism(const HeadData& head, const TraceMeta& meta, int length, const RealismOptions& options);

// Percentiles of the heads (all at one length).
RealismSummary summarize_realism(const std::vector<HeadRealism>& heads);

// Every head of a trace at every length, one head in memory at a time.
using HeadSource = std::function<HeadData(int layer, int kv_head)>;
RealismReport trace_realism(const TraceMeta& meta, const HeadSource& head_of, const RealismOptions& options,
                            const Progress& progress = {});
RealismReport trace_realism(const TraceReader& reader, const RealismOptions& options,
                            const Progress& progress = {});

}  // namespace tierlab
