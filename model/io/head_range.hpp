#pragma once
// The magnitude range a head must lie in (docs/model.md section 12, convention 10).
//
// tierlab forms logits s = q.k / sqrt(d) and quantized keys in float32 (largest finite value
// F = 3.4e38). For a key k and a query q, every partial sum of q.k is at most ||q|| ||k||
// (Cauchy-Schwarz), a dequantized key's elements lie within its group's range (at most twice
// the largest |k|), and a rotation (TurboQuant, QuaRot) keeps ||k||. So with
//   K = max_t ||k_t||  (prompt keys, pre-RoPE keys and decode keys)
//   Q = max_r ||q_r||  (observation and decode queries)
// every logit, key range and rotated key stays finite when K <= L and Q K <= L, with the
// limit L = 2^120 (about 1.3e36, F / 2^8: room for the factor 2 of a range, the factor 4 of a
// dequantized key's distance to the exact one and squares taken in double). A head outside the
// range is refused before any computation, naming the head and its K and Q: finite inputs
// never give an inf or NaN result (issue 33). Values are not limited: outputs, their errors
// and their norms are formed in double.
#include <string>

#include "model/io/trace.hpp"

namespace tierlab {

inline constexpr double kHeadMagnitudeLimit = 0x1p120;

struct HeadMagnitudes {
  double key_norm = 0;    // K
  double query_norm = 0;  // Q
};
HeadMagnitudes head_magnitudes(const HeadData& head);

// "" when the head lies in the range, else the sentence saying which bound it breaks, with
// K, Q and the limit.
std::string head_magnitude_fault(const HeadData& head);

// Throws InputError "<where>: <fault>" when the head is outside the range.
void check_head_magnitudes(const HeadData& head, const std::string& where);

}  // namespace tierlab
