#pragma once
// The element formulas of launch.hpp shared by the row statistics and both paths of D.
// Plain arithmetic: compiles as device code under nvcc and as host code elsewhere (the
// functions are the same in both, so a host build can check them).
#include <cmath>
#include <cstddef>

#ifdef __CUDACC__
#define TIERLAB_HD __host__ __device__ __forceinline__
#else
#define TIERLAB_HD inline
#endif

namespace tierlab::cuda::detail {

#ifdef __CUDA_ARCH__
template <class T>
__device__ __forceinline__ T load_ro(const T* p) {
  return __ldg(p);
}
#else
template <class T>
inline T load_ro(const T* p) {
  return *p;
}
#endif

// ---- the element formulas (launch.hpp), shared by the row statistics and both paths ----

// expm1(x) in float with a relative error of a few 1e-7 for every x: a Taylor polynomial
// for |x| <= 1/4 (truncation below 2e-9 relative), expf(x) - 1 beyond (where the
// cancellation costs at most a factor 4.6). *ex receives exp(x) (1 + the polynomial for
// small x). expf overflows to inf past 88.7; callers route such x elsewhere.
TIERLAB_HD float expm1_and_exp(float x, float* ex) {
  float q = fmaf(x, 1.0f / 5040.0f, 1.0f / 720.0f);
  q = fmaf(x, q, 1.0f / 120.0f);
  q = fmaf(x, q, 1.0f / 24.0f);
  q = fmaf(x, q, 1.0f / 6.0f);
  q = fmaf(x, q, 0.5f);
  q = fmaf(x, q, 1.0f);
  const float small = x * q;
  const float big = expf(x);
  const bool use_small = fabsf(x) <= 0.25f;
  *ex = use_small ? 1.0f + small : big;
  return use_small ? small : big - 1.0f;
}

// Whether P exp(x) must be formed from the logits in double: P may have lost its
// precision (P < 1e-30, subnormal or underflowed) while exp(x) is large, or exp(x) is
// near float's range.
TIERLAB_HD bool needs_double(float x, float p) { return x > 10.0f && (x > 60.0f || p < 1e-30f); }

// P exp(x) - P formed from the logits: u = S - lse + E - c = log p^' in double (exact
// additions), then exp(u) = expf(u_hi) (1 + u_lo) with u = u_hi + u_lo: relative error
// about 2e-7 without a double exponential (which would cost the hot loops registers).
// u <= log psum ~ 0 because c normalises the kept mass, so expf cannot overflow.
TIERLAB_HD float delta_from_logits(float s, double lse, float e, double c, float p) {
  const double u = (static_cast<double>(s) - lse) + (static_cast<double>(e) - c);
  const float u_hi = static_cast<float>(u);
  const float u_lo = static_cast<float>(u - static_cast<double>(u_hi));
  return fmaf(expf(u_hi), 1.0f + u_lo, -p);
}

// delta' of one element (launch.hpp). code is clamped to nv by the caller (0 = evicted).
// e_row: E + row offset (plane stride `plane`), s_row: S + row offset, t: the token.
// *e2 receives E^2 for a kept token (0 for an evicted one).
TIERLAB_HD float delta_prime(int code, float p, const float* __restrict__ e_row, std::size_t plane,
                            const float* __restrict__ s_row, int t, float c_hi, float c_lo, const double* c_exact,
                            const double* lse, float* e2) {
  if (code == 0) {
    *e2 = 0.0f;
    return -p;
  }
  const float e = load_ro(e_row + static_cast<std::size_t>(code - 1) * plane + t);
  *e2 = e * e;
  const float x = (e - c_hi) - c_lo;
  if (needs_double(x, p)) return delta_from_logits(load_ro(s_row + t), *lse, e, *c_exact, p);
  float ex;
  return p * expm1_and_exp(x, &ex);
}

constexpr double kScaleTarget = 16384.0;  // sigma_i |delta'| <= 2^14 (fp16 holds up to 65504)
constexpr double kMinKeptMass = 1e-20;    // below (relative to psum), redo the row in the log domain

// sigma_i: the largest power of two with sigma_i * bound <= 2^14 (1 for a zero bound).
TIERLAB_HD float scale_for(double bound) {
  if (!(bound > 0.0) || !std::isfinite(bound)) return 1.0f;
  int ex = 0;
  std::frexp(kScaleTarget / bound, &ex);  // kScaleTarget / bound = f 2^ex, f in [0.5, 1)
  int k = ex - 1;
  k = k < -120 ? -120 : (k > 120 ? 120 : k);
  return std::ldexp(1.0f, k);
}

// c_i and the bound on |delta'_it| of one (selection, row) from the row sums (launch.hpp):
// m = M_i, aa = A_i, pe = Pev_i, fk = max_kept |P expm1(E)|, fe = max_evicted P.
// slow = 1 when the kept mass underflowed: c is then recomputed in the log domain.
struct RowConstants {
  double c = 0.0, bound = 0.0;
  int slow = 0;
};
TIERLAB_HD RowConstants row_constants(int n_kept, double m, double aa, double pe, float fk, float fe, double psum,
                                      double pmax) {
  RowConstants out;
  if (n_kept == 0) {  // every token evicted: delta' = -P, c unused
    out.bound = static_cast<double>(fe);
  } else if (!(m > kMinKeptMass * psum) || !std::isfinite(m) || !std::isfinite(aa)) {
    out.slow = 1;
    out.bound = 1.01 * psum;  // |delta'| <= max(p^', P) <= psum
  } else {
    const double y = (aa - pe) / psum;
    out.c = std::fabs(y) < 0.5 ? std::log1p(y) : std::log(m / psum);
    // |delta'| <= (|P expm1(E)| + P |expm1(c)|) exp(-c) on kept tokens, P on evicted ones.
    double b = (static_cast<double>(fk) + pmax * std::fabs(std::expm1(out.c))) * std::exp(-out.c);
    b = std::fmax(b, static_cast<double>(fe)) * 1.001;
    out.bound = std::fmin(b, 1.01 * psum);
  }
  return out;
}

}  // namespace tierlab::cuda::detail
