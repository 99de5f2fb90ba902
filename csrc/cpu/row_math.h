// Row primitives shared by gather_energies_cpu.cpp and propose_cpu.cpp.
//
// A branch-free exp (Cephes' polynomial) shared by the scalar and the AVX2 paths, and the row
// reductions built on it. All reductions use a fixed lane layout and combination order, so
// results never depend on the thread count.
#pragma once

#include <ATen/Dispatch.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mhfast {
namespace cpu {

constexpr float kInf = std::numeric_limits<float>::infinity();

// exp(x) for x <= 0 (NaN-free input), Cephes' single-precision polynomial (about 2 ulp).
// Results below FLT_MIN are flushed to 0 (a subnormal probability is irrelevant to any sum
// here); exp(-inf) = 0. No branches, no libm call: loops calling it vectorize.
inline float exp_nonpos(float x) {
  const float xc = x < -87.0f ? -87.0f : x;
  // Round xc * log2(e) to nearest with the 1.5 * 2^23 trick (exact for |value| < 2^22).
  const float shifter = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + shifter) - shifter;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x < -87.0f ? 0.0f : y * scale;
}

// Natural log of the smallest positive float (subnormal): exp(x) rounds to 0 below this.
// A token whose log-probability is below it has probability 0 in fp32 (as in the reference).
constexpr float kLogMinPositive = -103.972084f;

inline float to_float(float x) { return x; }
inline float to_float(c10::Half x) { return static_cast<float>(x); }
inline float to_float(c10::BFloat16 x) { return static_cast<float>(x); }

// Row reductions, in row_math.cpp: AVX2+FMA code chosen at run time when the CPU has it (the
// extension itself is compiled for baseline x86-64), portable loops otherwise. The choice is fixed
// for the process, so results are reproducible run to run and independent of the thread count.

// Max of x[0..n) that propagates NaN (as torch.amax does); *has_nan tells whether one was seen.
float max_with_nan(const float* x, int64_t n, bool* has_nan);

// sum_i exp(x[i] - shift) for a finite shift >= every x[i]; fp32 lanes, fixed combination order.
float sum_exp_shifted(const float* x, int64_t n, float shift);

// dst[i] = float(src[i]) for fp16 (F16C when the CPU has it: exact, same values as c10::Half).
void half_to_float(const c10::Half* src, int64_t n, float* dst);

// dst[i] = float(src[i]) for any logits dtype (a bf16 -> fp32 loop vectorizes on its own).
inline void to_float_block(const float* src, int64_t n, float* dst) {
  std::memcpy(dst, src, sizeof(float) * n);
}
inline void to_float_block(const c10::Half* src, int64_t n, float* dst) { half_to_float(src, n, dst); }
inline void to_float_block(const c10::BFloat16* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// Small vocabularies (V <= kSmallV): a whole range of rows in one call (data_end: one past the
// tensor's last entry, base + (N - 1) * row_stride + V), each row held in registers
// (read once; max then exp-sum over the registers). For rows n in [begin, end):
//   target_logit[n] = float(row[targets[n]]), token_logp[n] = target_logit[n] - logsumexp(row),
// with torch.logsumexp's special values (NaN if any NaN, +inf if any +inf, -inf if all -inf).
// A target outside [0, V) is not read: its outputs are NaN and *bad_target is set to true.
// The lane layout depends only on V, so results do not depend on how rows are split.
// Returns false (and does nothing) when has_small_rows_path() is false or V is outside
// [1, kSmallV]: the caller then uses the generic block loop.
constexpr int64_t kSmallV = 64;
bool has_small_rows_path();
template <typename scalar_t>
bool small_rows_log_softmax_target(const scalar_t* base, const scalar_t* data_end,
                                   int64_t row_stride, int64_t V, const int64_t* targets,
                                   int64_t begin, int64_t end, float* target_logit,
                                   float* token_logp, bool* bad_target);

// out[i] = exp((x[i] - a) - b) with that exact rounding order of the argument, for arguments <= 0.
void exp_shifted_store(const float* x, int64_t n, float a, float b, float* out);

}  // namespace cpu
}  // namespace mhfast

// Dispatch over the logits dtypes the ops accept (fp32, fp16, bf16): no fp64 instantiation.
#define MHFAST_DISPATCH_LOGITS(TYPE, NAME, ...)                 \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)  \
                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)   \
                     AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))
