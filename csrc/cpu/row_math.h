// Row primitives shared by gather_energies_cpu.cpp and propose_cpu.cpp.
//
// Written as plain loops over small fixed-size lane arrays with a branch-free exp, so that
// gcc -O3 vectorizes them for whatever ISA the file is compiled for (the extension is built
// for baseline x86-64; no -march flags are assumed). All reductions use a fixed lane layout
// and a fixed combination order, so results never depend on the thread count.
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

constexpr int kLanes = 16;
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

// Max of x[0..n) that propagates NaN (as torch.amax does), plus whether a NaN was seen.
inline float max_with_nan(const float* x, int64_t n, bool* has_nan) {
  float m[kLanes];
  int32_t nan[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    m[j] = -kInf;
    nan[j] = 0;
  }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      m[j] = v > m[j] ? v : m[j];
      nan[j] |= (v != v);
    }
  }
  for (; i < n; ++i) {
    const float v = x[i];
    m[0] = v > m[0] ? v : m[0];
    nan[0] |= (v != v);
  }
  float out = -kInf;
  int32_t any_nan = 0;
  for (int j = 0; j < kLanes; ++j) {
    out = m[j] > out ? m[j] : out;
    any_nan |= nan[j];
  }
  *has_nan = any_nan != 0;
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : out;
}

// sum_i exp((x[i] - shift) * scale) for finite shift with (x[i] - shift) * scale <= 0,
// accumulated in fp32 lanes, combined in a fixed order.
inline float sum_exp_shifted(const float* x, int64_t n, float shift) {
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

}  // namespace cpu
}  // namespace mhfast

// Dispatch over the logits dtypes the ops accept (fp32, fp16, bf16): no fp64 instantiation.
#define MHFAST_DISPATCH_LOGITS(TYPE, NAME, ...)                 \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)  \
                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)   \
                     AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))
