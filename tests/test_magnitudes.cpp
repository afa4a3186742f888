// The magnitude range of a head (docs/model.md section 12, convention 10; issue 33): finite
// inputs whose float32 logits or quantized keys would overflow are refused, naming the head
// with its largest key and query norms, by the functions every reader and writer calls. The
// end-to-end case (a trace file with keys near the float32 maximum given to eval and solve)
// is python/tests/test_magnitudes.py.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "model/base/error.hpp"
#include "model/io/head_range.hpp"
#include "model/io/trace.hpp"
#include "tests/support.hpp"

using namespace tierlab;
using Catch::Matchers::Contains;

namespace {

// A head of T = 4 tokens, d = 4, one query head, W = 2, S = 1: keys and queries are unit
// vectors times key_scale and query_scale (row norms are exactly the scales).
HeadData scaled_head(double key_scale, double query_scale) {
  HeadData h;
  const auto unit_rows = [](int rows, double scale) {
    MatrixRM m = MatrixRM::Zero(rows, 4);
    for (int r = 0; r < rows; ++r) m(r, r % 4) = static_cast<float>(scale);
    return m;
  };
  h.keys = unit_rows(4, key_scale);
  h.values = unit_rows(4, 1.0);
  h.obs_queries = unit_rows(2, query_scale);
  h.decode_queries = unit_rows(1, query_scale);
  h.decode_keys = unit_rows(1, key_scale);
  h.decode_values = unit_rows(1, 1.0);
  return h;
}

}  // namespace

TEST_CASE("A head's largest key and query norms are measured in double, over every key and query it holds") {
  HeadData h = scaled_head(2.0, 3.0);
  h.decode_keys(0, 0) = 2.0f;  // the decode key (2, 5, 0, 0): norm sqrt(29), above every prompt key's 2
  h.decode_keys(0, 1) = 5.0f;
  const HeadMagnitudes m = head_magnitudes(h);
  CHECK(m.key_norm == Approx(std::sqrt(29.0)));
  CHECK(m.query_norm == Approx(3.0));
  // float32 rows near the maximum: a float norm would be inf, the double one is finite
  const HeadMagnitudes big = head_magnitudes(scaled_head(3e38, 1.0));
  CHECK(std::isfinite(big.key_norm));
  CHECK(big.key_norm == Approx(3e38).epsilon(1e-6));
}

TEST_CASE("A head at the magnitude limit is accepted and one just beyond it is refused, naming K, Q and the limit") {
  const double limit = kHeadMagnitudeLimit;  // 2^120, exact in float32
  CHECK(head_magnitude_fault(scaled_head(limit, 1.0)).empty());
  CHECK(head_magnitude_fault(scaled_head(0x1p60, 0x1p60)).empty());  // Q K = 2^120 exactly
  const std::string keys = head_magnitude_fault(scaled_head(0x1p121, 0.0));
  CHECK_THAT(keys, Contains("K = 2.66e+36") && Contains("K is beyond the limit") && Contains("1.33e+36") &&
                       Contains("convention 10"));
  const std::string logits = head_magnitude_fault(scaled_head(0x1p61, 0x1p60));
  CHECK_THAT(logits, Contains("Q K = 2.66e+36") && Contains("Q = 1.15e+18"));
  CHECK_THROWS_AS(check_head_magnitudes(scaled_head(3e38, 1.0), "head L0.H0"), InputError);
  CHECK_THAT(testing::error_of<InputError>([] { check_head_magnitudes(scaled_head(3e38, 1.0), "trace 'x', head L1.H2"); }),
             Contains("trace 'x', head L1.H2: its largest key norm is K = 3e+38"));
}

TEST_CASE("The trace writer refuses a head beyond the magnitude range and names it") {
  testing::TempDir dir("magnitudes");
  TraceMeta meta;
  meta.n_layers = 1;
  meta.n_kv_heads = 1;
  meta.head_dim = 4;
  meta.prompt_len = 4;
  meta.obs_window = 2;
  meta.decode_steps = 1;
  TraceWriter writer(dir.file("big.safetensors"), meta);
  CHECK_THAT(testing::error_of<InputError>([&] { writer.write_head(scaled_head(1e20, 1e20)); }),
             Contains("head (0, 0)") && Contains("Q K = 1e+40"));
}

TEST_CASE("A decode-only trace (no observation queries) is readable, and computing from its observation queries is an input error saying so") {
  HeadData h = scaled_head(1.0, 1.0);
  h.obs_queries = MatrixRM(0, 4);
  CHECK_THAT(testing::error_of<InputError>([&] { observation_queries(h); }),
             Contains("head (0, 0): has no observation queries (obs_window = 0: a decode-only trace)"));
}
