#include "model/io/head_range.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/base/error.hpp"

namespace tierlab {

namespace {

// The largest row norm of m, computed in double (a float32 norm of a row near F overflows).
double max_row_norm(const MatrixRM& m) {
  double best = 0;
  for (Eigen::Index r = 0; r < m.rows(); ++r) best = std::max(best, m.row(r).cast<double>().norm());
  return best;
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

}  // namespace

HeadMagnitudes head_magnitudes(const HeadData& head) {
  HeadMagnitudes m;
  m.key_norm = std::max({max_row_norm(head.keys), max_row_norm(head.keys_pre_rope), max_row_norm(head.decode_keys)});
  m.query_norm = std::max(max_row_norm(head.obs_queries), max_row_norm(head.decode_queries));
  return m;
}

std::string head_magnitude_fault(const HeadData& head) {
  const HeadMagnitudes m = head_magnitudes(head);
  const std::string range = "its largest key norm is K = " + sci(m.key_norm) + " and its largest query norm Q = " +
                            sci(m.query_norm);
  const std::string why = "; tierlab forms logits and quantized keys in float32, which stay finite only while K <= " +
                          sci(kHeadMagnitudeLimit) + " and Q K <= " + sci(kHeadMagnitudeLimit) +
                          " (docs/model.md section 12, convention 10): rescale the keys and queries";
  if (!(m.key_norm <= kHeadMagnitudeLimit)) return range + ", K is beyond the limit" + why + ".";
  if (!(m.query_norm * m.key_norm <= kHeadMagnitudeLimit))
    return range + ", so logits can reach Q K = " + sci(m.query_norm * m.key_norm) + why + ".";
  return {};
}

void check_head_magnitudes(const HeadData& head, const std::string& where) {
  const std::string fault = head_magnitude_fault(head);
  if (!fault.empty()) throw InputError(where + ": " + fault);
}

}  // namespace tierlab
