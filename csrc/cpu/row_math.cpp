// Row reductions of row_math.h: an AVX2+FMA path selected at run time, and a portable one.
//
// setup.py builds for baseline x86-64 (no -march), where gcc does not vectorize these
// NaN-aware reductions; the AVX2 functions carry __attribute__((target)) and only use
// intrinsics (no library code is compiled for AVX2, so nothing AVX2 can leak to other callers).
#include "row_math.h"

#include <cstdlib>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MHFAST_HAVE_AVX2_PATH 1
#endif

namespace mhfast {
namespace cpu {
namespace {

// ------------------------------------------------------------------------------------------
// Portable path.
// ------------------------------------------------------------------------------------------

float max_with_nan_portable(const float* x, int64_t n, bool* has_nan) {
  float m = -kInf;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  *has_nan = nan;
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

constexpr int kLanes = 8;

float sum_exp_shifted_portable(const float* x, int64_t n, float shift) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += exp_nonpos(x[i + j] - shift);
  }
  for (; i < n; ++i) acc[0] += exp_nonpos(x[i] - shift);
  float s = 0.0f;
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

void exp_shifted_store_portable(const float* x, int64_t n, float a, float b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = exp_nonpos((x[i] - a) - b);
}

#ifdef MHFAST_HAVE_AVX2_PATH
// ------------------------------------------------------------------------------------------
// AVX2 + FMA path (8 lanes; the exp is exp_nonpos's polynomial with fused multiply-adds).
// ------------------------------------------------------------------------------------------
#define MHFAST_AVX2 __attribute__((target("avx2,fma")))

MHFAST_AVX2 inline __m256 exp_nonpos_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 xc = _mm256_max_ps(x, lo);  // -inf -> -87 (masked to 0 below)
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, z, r), _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), result);
}

MHFAST_AVX2 float hmax(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  float m = t[0];
  for (int j = 1; j < 8; ++j) m = t[j] > m ? t[j] : m;
  return m;
}

MHFAST_AVX2 float hsum(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  float s = 0.0f;
  for (int j = 0; j < 8; ++j) s += t[j];
  return s;
}

MHFAST_AVX2 float max_with_nan_avx2(const float* x, int64_t n, bool* has_nan) {
  __m256 m0 = _mm256_set1_ps(-kInf), m1 = m0, nan0 = _mm256_setzero_ps(), nan1 = nan0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    m0 = _mm256_max_ps(m0, a);
    m1 = _mm256_max_ps(m1, b);
    nan0 = _mm256_or_ps(nan0, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    nan1 = _mm256_or_ps(nan1, _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
  }
  bool nan = _mm256_movemask_ps(_mm256_or_ps(nan0, nan1)) != 0;
  float m = hmax(_mm256_max_ps(m0, m1));
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    nan |= x[i] != x[i];
  }
  *has_nan = nan;
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

MHFAST_AVX2 float sum_exp_shifted_avx2(const float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
    a1 = _mm256_add_ps(a1, exp_nonpos_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), s)));
  }
  float total = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) total += exp_nonpos(x[i] - shift);
  return total;
}

MHFAST_AVX2 void exp_shifted_store_avx2(const float* x, int64_t n, float a, float b, float* out) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 arg = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), va), vb);
    _mm256_storeu_ps(out + i, exp_nonpos_avx2(arg));
  }
  for (; i < n; ++i) out[i] = exp_nonpos((x[i] - a) - b);
}

// fp16 -> fp32 with F16C (exact conversion: the same values as the scalar c10::Half cast).
__attribute__((target("avx2,fma,f16c"))) void half_to_float_f16c(const c10::Half* src, int64_t n,
                                                                      float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// MHFAST_CPU_PORTABLE=1 forces the portable path (tests run it on AVX2 machines too).
bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          std::getenv("MHFAST_CPU_PORTABLE") == nullptr;
  return has;
}
#endif

}  // namespace

float max_with_nan(const float* x, int64_t n, bool* has_nan) {
#ifdef MHFAST_HAVE_AVX2_PATH
  if (cpu_has_avx2()) return max_with_nan_avx2(x, n, has_nan);
#endif
  return max_with_nan_portable(x, n, has_nan);
}

float sum_exp_shifted(const float* x, int64_t n, float shift) {
#ifdef MHFAST_HAVE_AVX2_PATH
  if (cpu_has_avx2()) return sum_exp_shifted_avx2(x, n, shift);
#endif
  return sum_exp_shifted_portable(x, n, shift);
}

void half_to_float(const c10::Half* src, int64_t n, float* dst) {
#ifdef MHFAST_HAVE_AVX2_PATH
  static const bool f16c = __builtin_cpu_supports("f16c");
  if (f16c && cpu_has_avx2()) return half_to_float_f16c(src, n, dst);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void exp_shifted_store(const float* x, int64_t n, float a, float b, float* out) {
#ifdef MHFAST_HAVE_AVX2_PATH
  if (cpu_has_avx2()) return exp_shifted_store_avx2(x, n, a, b, out);
#endif
  exp_shifted_store_portable(x, n, a, b, out);
}

}  // namespace cpu
}  // namespace mhfast
