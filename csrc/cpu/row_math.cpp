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


// ------------------------------------------------------------------------------------------
// Small vocabularies: one call per range of rows, each row in NV registers of 8 lanes.
// ------------------------------------------------------------------------------------------
#define MHFAST_AVX2_F16C __attribute__((target("avx2,fma,f16c")))

MHFAST_AVX2_F16C inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
MHFAST_AVX2_F16C inline __m256 load8(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
MHFAST_AVX2_F16C inline __m256 load8(const c10::BFloat16* p) {  // bf16 bits << 16: exact
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// The first n (1..8) entries at p, without reading past them; the other lanes are -inf.
MHFAST_AVX2_F16C inline __m256 load_tail(const float* p, int n, __m256i mask) {
  return _mm256_blendv_ps(_mm256_set1_ps(-kInf), _mm256_maskload_ps(p, mask),
                          _mm256_castsi256_ps(mask));
}
template <typename scalar_t>
MHFAST_AVX2_F16C inline __m256 load_tail(const scalar_t* p, int n, __m256i mask) {
  alignas(16) scalar_t t[8];
  std::memcpy(t, p, sizeof(scalar_t) * n);
  return _mm256_blendv_ps(_mm256_set1_ps(-kInf), load8(t), _mm256_castsi256_ps(mask));
}

// Max over the 8 lanes (no NaN among them), broadcast to every lane.
MHFAST_AVX2_F16C inline __m256 all_lanes_max(__m256 v) {
  v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
  v = _mm256_max_ps(v, _mm256_permute_ps(v, 0x4E));
  return _mm256_max_ps(v, _mm256_permute_ps(v, 0xB1));
}

// Sum of the 8 lanes in a fixed order.
MHFAST_AVX2_F16C inline float lanes_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// logsumexp of a row held in NV registers (-inf in the unused lanes): NaN if any entry is NaN, +-inf for an
// infinite max (+inf if any +inf; -inf if every entry is -inf).
template <int NV>
MHFAST_AVX2_F16C inline float registers_lse(const __m256 (&v)[NV]) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  __m256 mx = v[0], nan = _mm256_cmp_ps(v[0], v[0], _CMP_UNORD_Q);
  for (int k = 1; k < NV; ++k) {
    mx = _mm256_max_ps(mx, v[k]);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan) != 0) return kNaN;
  mx = all_lanes_max(mx);
  const float m = _mm256_cvtss_f32(mx);
  if (m == kInf || m == -kInf) return m;
  __m256 acc = exp_nonpos_avx2(_mm256_sub_ps(v[0], mx));  // -inf lanes add exactly 0
  for (int k = 1; k < NV; ++k) acc = _mm256_add_ps(acc, exp_nonpos_avx2(_mm256_sub_ps(v[k], mx)));
  return m + std::log(lanes_sum(acc));
}

template <int NV, typename scalar_t>
MHFAST_AVX2_F16C void small_rows_avx2(const scalar_t* base, const scalar_t* data_end, int64_t s0, int64_t V,
                                      const int64_t* targets, int64_t begin, int64_t end,
                                      float* target_logit, float* token_logp, bool* bad_target) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  const int tail = static_cast<int>(V - 8 * (NV - 1));  // 1..8 entries in the last register
  const __m256i tail_mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(tail), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  bool bad = false;
  for (int64_t n = begin; n < end; ++n) {
    const scalar_t* row = base + n * s0;
    __m256 v[NV];
    for (int k = 0; k + 1 < NV; ++k) v[k] = load8(row + 8 * k);
    // Reading 8 entries past the row's end is safe while they stay inside the tensor's data
    // (so for all rows but the last few): a plain load, blended; else a load of the tail only.
    if (row + 8 * NV <= data_end) {
      v[NV - 1] = _mm256_blendv_ps(_mm256_set1_ps(-kInf), load8(row + 8 * (NV - 1)),
                                   _mm256_castsi256_ps(tail_mask));
    } else {
      v[NV - 1] = load_tail(row + 8 * (NV - 1), tail, tail_mask);
    }
    const int64_t t = targets[n];
    if (static_cast<uint64_t>(t) >= static_cast<uint64_t>(V)) {  // never read outside the row
      bad = true;
      target_logit[n] = token_logp[n] = kNaN;
      continue;
    }
    const float target = to_float(row[t]);
    target_logit[n] = target;
    token_logp[n] = target - registers_lse<NV>(v);
  }
  if (bad) *bad_target = true;
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

bool has_small_rows_path() {
#ifdef MHFAST_HAVE_AVX2_PATH
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("f16c");
  return has;
#else
  return false;
#endif
}

template <typename scalar_t>
bool small_rows_log_softmax_target(const scalar_t* base, const scalar_t* data_end,
                                   int64_t row_stride, int64_t V, const int64_t* targets,
                                   int64_t begin, int64_t end, float* target_logit,
                                   float* token_logp, bool* bad_target) {
  if (V < 1 || V > kSmallV || !has_small_rows_path()) return false;
#ifdef MHFAST_HAVE_AVX2_PATH
  // One dispatch per range of rows: the register count is a template argument.
#define MHFAST_SMALL_CASE(NV)                                                                  \
  case NV:                                                                                     \
    small_rows_avx2<NV>(base, data_end, row_stride, V, targets, begin, end, target_logit, token_logp,    \
                        bad_target);                                                           \
    return true;
  static_assert(kSmallV == 64, "one case per register count below");
  switch ((V + 7) / 8) {
    MHFAST_SMALL_CASE(1)
    MHFAST_SMALL_CASE(2)
    MHFAST_SMALL_CASE(3)
    MHFAST_SMALL_CASE(4)
    MHFAST_SMALL_CASE(5)
    MHFAST_SMALL_CASE(6)
    MHFAST_SMALL_CASE(7)
    MHFAST_SMALL_CASE(8)
  }
#undef MHFAST_SMALL_CASE
#endif
  return false;
}

#define MHFAST_INSTANTIATE_SMALL_ROWS(T)                                                  \
  template bool small_rows_log_softmax_target<T>(const T*, const T*, int64_t, int64_t,     \
                                                 const int64_t*,                             \
                                                 int64_t, int64_t, float*, float*, bool*);
MHFAST_INSTANTIATE_SMALL_ROWS(float)
MHFAST_INSTANTIATE_SMALL_ROWS(c10::Half)
MHFAST_INSTANTIATE_SMALL_ROWS(c10::BFloat16)
#undef MHFAST_INSTANTIATE_SMALL_ROWS

}  // namespace cpu
}  // namespace mhfast
