#pragma once
// The element formulas of launch.hpp shared by the row statistics and both paths of D.
// Plain arithmetic: compiles as device code under nvcc and as host code elsewhere (the
// functions are the same in both, so a host build can check them).
#include <cmath>
#include <cstddef>

#include "gpu/cuda/launch.hpp"

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
// u cannot overflow expf: in the shifted form u = log p^' <= log psum ~ 0 (c normalises the
// kept mass); the direct form (c = 0) is used only where every kept E <= 60.
TIERLAB_HD float delta_from_logits(float s, double lse, float e, double c, float p) {
  const double u = (static_cast<double>(s) - lse) + (static_cast<double>(e) - c);
  const float u_hi = static_cast<float>(u);
  const float u_lo = static_cast<float>(u - static_cast<double>(u_hi));
  return fmaf(expf(u_hi), 1.0f + u_lo, -p);
}

// Row constants of delta in registers (from RowParams).
struct RowForm {
  float k_hi, k_lo, opw_hi, opw_lo;
  bool direct;
};

// delta of one element in the row's form (launch.hpp): code is clamped to nv by the caller
// (0 = evicted); e_row: E + row offset (plane stride `plane`); s_row: S + row offset;
// t: the token; lse, c_fallback: for the rare formation from the logits.
// *e2 receives E^2 for a kept token (0 for an evicted one).
TIERLAB_HD float delta_of(int code, float p, const float* __restrict__ e_row, std::size_t plane,
                          const float* __restrict__ s_row, int t, const RowForm& f, const double* lse,
                          const double* c_fallback, float* e2) {
  const float p_opw = fmaf(p, f.opw_hi, p * f.opw_lo);  // P (1 + ubar), or P
  if (code == 0) {
    *e2 = 0.0f;
    return -p_opw;
  }
  const float e = load_ro(e_row + static_cast<std::size_t>(code - 1) * plane + t);
  *e2 = e * e;
  const float x = f.direct ? e : (e - f.k_hi) - f.k_lo;
  if (needs_double(x, p)) return delta_from_logits(load_ro(s_row + t), *lse, e, *c_fallback, p_opw);
  float ex;
  const float em1 = expm1_and_exp(x, &ex);
  return p * (f.direct ? (em1 - f.k_hi) - f.k_lo : em1);
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

// RowParams of one (selection, row) from its sums (launch.hpp): m = M_i, aa = A_i,
// pe = Pev_i, fk = max_kept |P expm1(E)|, fe = max_evicted P, emax = max_kept E.
// *slow = 1 when the kept mass underflowed: the caller then sets c in the log domain
// (set_shifted_c). |delta| is bounded on each form for sigma:
//   direct:  |P (u - ubar)| <= fk + pmax |ubar|,  P (1 + ubar) <= fe (1 + ubar),  and
//            |delta''| = (1 + ubar) psum |p^ - p| <= (1 + ubar) psum;
//   shifted: |P expm1(E - c)| <= (|P expm1(E)| + P |expm1(c)|) exp(-c),  P <= fe,  and
//            |delta'| = psum |p^ - p| <= psum.
TIERLAB_HD RowParams row_params(int n_kept, double m, double aa, double pe, float fk, float fe, float emax,
                                double psum, double pmax, int* slow) {
  RowParams rp{};
  rp.opw_hi = 1.0f;
  rp.w = 1.0;
  double bound = 0.0;
  *slow = 0;
  if (n_kept == 0) {  // every token evicted: delta = -P
    bound = static_cast<double>(fe);
  } else if (!(m > kMinKeptMass * psum) || !std::isfinite(m) || !std::isfinite(aa)) {
    *slow = 1;
    bound = 1.01 * psum;
  } else {
    const double y = (aa - pe) / psum;  // ubar
    if (1.0 + y >= 1.0 / 64.0 && emax <= 60.0f) {
      rp.direct = 1;
      rp.k_hi = static_cast<float>(y);
      rp.k_lo = static_cast<float>(y - static_cast<double>(rp.k_hi));
      const double opw = 1.0 + y;
      rp.opw_hi = static_cast<float>(opw);
      rp.opw_lo = static_cast<float>(opw - static_cast<double>(rp.opw_hi));
      rp.w = 1.0 / opw;
      const double b = std::fmax(static_cast<double>(fk) + pmax * std::fabs(y), static_cast<double>(fe) * opw);
      bound = std::fmin(b * 1.001, 1.01 * psum * opw);
    } else {
      const double c = std::fabs(y) < 0.5 ? std::log1p(y) : std::log(m / psum);
      rp.k_hi = static_cast<float>(c);
      rp.k_lo = static_cast<float>(c - static_cast<double>(rp.k_hi));
      rp.c_fallback = c;
      const double b = (static_cast<double>(fk) + pmax * std::fabs(std::expm1(c))) * std::exp(-c);
      bound = std::fmin(std::fmax(b, static_cast<double>(fe)) * 1.001, 1.01 * psum);
    }
  }
  rp.sigma = scale_for(bound);
  rp.tv_factor = static_cast<float>(rp.w / psum);
  return rp;
}

// The shifted form with c from the log domain (rows whose kept mass underflowed).
TIERLAB_HD void set_shifted_c(RowParams* rp, double c) {
  rp->direct = 0;
  rp->k_hi = static_cast<float>(c);
  rp->k_lo = static_cast<float>(c - static_cast<double>(rp->k_hi));
  rp->c_fallback = c;
}

}  // namespace tierlab::cuda::detail
