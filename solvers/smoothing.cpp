// Pooled token scores and span truncation (smoothing.hpp).
#include "solvers/smoothing.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"

namespace tierlab {

constexpr auto kPoolKinds = enum_table<PoolKind>("smoothing pool", {{PoolKind::Avg, "avg"}, {PoolKind::Max, "max"}});
constexpr auto kPaddings = enum_table<Padding>("smoothing padding", {{Padding::Zero, "zero"},
                                                                     {Padding::Reflect, "reflect"},
                                                                     {Padding::Replicate, "replicate"},
                                                                     {Padding::None, "none"}});

std::string_view to_string(PoolKind k) { return enum_name(kPoolKinds, k); }

PoolKind parse_pool_kind(std::string_view s) { return parse_enum(kPoolKinds, s); }

std::string_view to_string(Padding p) { return enum_name(kPaddings, p); }

Padding parse_padding(std::string_view s) { return parse_enum(kPaddings, s); }

void SmoothingOptions::validate() const {
  if (kernel < 1 || kernel % 2 == 0)
    throw InputError("smoothing kernel = " + std::to_string(kernel) +
                     "; the window is centred, so the kernel must be an odd size >= 1 (e.g. 5).");
}

std::string SmoothingOptions::name() const {
  return std::string(to_string(pool)) + std::to_string(kernel) + "-" + std::string(to_string(padding));
}

namespace {

// Index of x~_u inside the row for reflect padding (period 2 (n - 1)).
std::int64_t reflect_index(std::int64_t u, std::int64_t n) {
  if (n == 1) return 0;
  const std::int64_t period = 2 * (n - 1);
  std::int64_t r = u % period;
  if (r < 0) r += period;
  return r < n ? r : period - r;
}

}  // namespace

void smooth_row(const double* in, double* out, std::int64_t n, const SmoothingOptions& opt) {
  opt.validate();
  const std::int64_t h = opt.kernel / 2;
  const bool avg = opt.pool == PoolKind::Avg;
  for (std::int64_t t = 0; t < n; ++t) {
    double acc = avg ? 0.0 : -std::numeric_limits<double>::infinity();
    std::int64_t count = 0;
    for (std::int64_t u = t - h; u <= t + h; ++u) {
      double v;
      if (u >= 0 && u < n) {
        v = in[u];
      } else {
        switch (opt.padding) {
          case Padding::Zero: v = 0.0; break;
          case Padding::Reflect: v = in[reflect_index(u, n)]; break;
          case Padding::Replicate: v = in[u < 0 ? 0 : n - 1]; break;
          case Padding::None: continue;
          default: v = 0.0;
        }
      }
      ++count;
      if (avg)
        acc += v;
      else
        acc = std::max(acc, v);
    }
    out[t] = avg ? acc / static_cast<double>(count) : acc;
  }
}

std::vector<double> smooth_scores(const std::vector<double>& x, const SmoothingOptions& opt) {
  std::vector<double> y(x.size());
  smooth_row(x.data(), y.data(), static_cast<std::int64_t>(x.size()), opt);
  return y;
}

MatrixRMd smooth_costs(const MatrixRMd& c, const SmoothingOptions& opt) {
  opt.validate();
  MatrixRMd out(c.rows(), c.cols());
  for (Eigen::Index r = 0; r < c.rows(); ++r) smooth_row(c.row(r).data(), out.row(r).data(), c.cols(), opt);
  return out;
}

SpanTruncation span_truncation(const std::vector<Span>& spans, const std::vector<std::uint8_t>& tiers,
                               int evict_tier) {
  SpanTruncation out;
  const auto T = static_cast<std::int64_t>(tiers.size());
  for (const Span& s : spans) {
    if (s.begin < 0 || s.end > T || s.begin >= s.end)
      throw InputError("span [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                       ") is empty or outside the allocation's " + std::to_string(T) + " tokens.");
    int evicted = 0;
    for (std::int32_t t = s.begin; t < s.end; ++t)
      if (tiers[static_cast<std::size_t>(t)] == evict_tier) ++evicted;
    ++out.spans;
    if (evicted == s.end - s.begin)
      ++out.fully_evicted;
    else if (evicted > 0)
      ++out.truncated;
  }
  return out;
}

}  // namespace tierlab
