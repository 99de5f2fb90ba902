// Device helpers shared by the kernels: fp16/bf16 -> fp32 loads and the online logsumexp.
//
// Only CUDA/CUB headers here (no ATen): see ops_cuda.h for why.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "ops_cuda.h"

namespace mhfast {
namespace cuda {

constexpr float kInf = __builtin_huge_valf();
constexpr float kNaN = __builtin_nanf("");

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __uint_as_float(static_cast<uint32_t>(__bfloat16_as_ushort(x)) << 16);
}

// Elements per 16-byte vector load.
template <typename T>
struct VecWidth {
  static constexpr int value = 16 / static_cast<int>(sizeof(T));
};

// Two elements packed in one 32-bit word -> floats (exact conversions).
__device__ __forceinline__ void unpack2(uint32_t w, __half, float* out) {
  out[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  out[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
}
__device__ __forceinline__ void unpack2(uint32_t w, __nv_bfloat16, float* out) {
  out[0] = __uint_as_float(w << 16);
  out[1] = __uint_as_float(w & 0xffff0000u);
}

// 16-byte streaming load (read once: evict-first in L2) of an aligned vector, as floats.
__device__ __forceinline__ void load16(const float* p, float* out) {
  const float4 v = __ldcs(reinterpret_cast<const float4*>(p));
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}
template <typename T>
__device__ __forceinline__ void load16(const T* p, float* out) {
  const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
  unpack2(v.x, T{}, out);
  unpack2(v.y, T{}, out + 2);
  unpack2(v.z, T{}, out + 4);
  unpack2(v.w, T{}, out + 6);
}

// Online logsumexp state: lse = m + log(s), s = sum exp(x - m). Empty: (-inf, 0).
// Matches torch.logsumexp on special values: all -inf -> -inf, any +inf -> +inf, any NaN -> NaN.
struct Lse {
  float m;
  float s;
};

__device__ __forceinline__ Lse lse_empty() { return Lse{-kInf, 0.0f}; }

// Adds n values. The chunk's max is taken first so that the rescale (an exp) is paid once per
// chunk, not once per element.
__device__ __forceinline__ void lse_add(Lse& a, const float* x, int n) {
  float cm = a.m;
  for (int i = 0; i < n; ++i) cm = fmaxf(cm, x[i]);  // fmaxf ignores NaN: NaN goes into s below
  if (cm > a.m) {
    a.s *= __expf(a.m - cm);  // a.m = -inf -> exp(-inf) = 0
    a.m = cm;
  }
  if (a.m > -kInf) {
    // x == m covers m = +inf (inf - inf would be NaN); -inf - m = -inf -> 0; NaN stays NaN.
    for (int i = 0; i < n; ++i) a.s += (x[i] == a.m) ? 1.0f : __expf(x[i] - a.m);
  } else {
    for (int i = 0; i < n; ++i) {
      if (x[i] != x[i]) a.s = x[i];  // a NaN among -infs still makes the result NaN
    }
  }
}

struct LseMerge {
  __device__ __forceinline__ Lse operator()(const Lse& a, const Lse& b) const {
    const float m = fmaxf(a.m, b.m);
    // Equal maxima (both -inf, both +inf, or equal) need no rescale and must not compute inf - inf.
    const float sa = (a.m == m) ? a.s : a.s * expf(a.m - m);
    const float sb = (b.m == m) ? b.s : b.s * expf(b.m - m);
    return Lse{m, sa + sb};
  }
};

__device__ __forceinline__ float lse_value(const Lse& a) { return a.m + logf(a.s); }

struct Float2Sum {
  __device__ __forceinline__ float2 operator()(const float2& a, const float2& b) const {
    return make_float2(a.x + b.x, a.y + b.y);
  }
};

// Streams one row of V logits through `acc`: threads lane, lane + group, ... of a group of
// `group` threads. vector = true: scalar head up to 16-byte alignment, 16-byte vectors (two in flight
// per thread), scalar tail. Which thread sums which id then depends on where the row starts, so the
// rounding of the result does too: callers pass vector = true only when every row of the launch starts
// at the same offset mod 16 bytes (the row stride a multiple of 16 bytes). Otherwise (odd vocabularies)
// each thread reads ids lane, lane + group, ... one by one (8 loads in flight), an order fixed by V and
// the group alone, so a row's result does not depend on its place in the batch (seen on an H200,
// 2026-11-26: the same rows forwarded in batches of other sizes gave energies 1 ulp apart).
template <typename T>
__device__ __forceinline__ void lse_row(const T* row, int64_t V, int lane, int group, bool vector, Lse& acc) {
  if (!vector) {
    constexpr int U = 8;
    int64_t i = lane;
    for (; i + (U - 1) * static_cast<int64_t>(group) < V; i += U * static_cast<int64_t>(group)) {
      float x[U];
#pragma unroll
      for (int k = 0; k < U; ++k) x[k] = to_float(row[i + k * static_cast<int64_t>(group)]);
      lse_add(acc, x, U);
    }
    for (; i < V; i += group) {
      const float x = to_float(row[i]);
      lse_add(acc, &x, 1);
    }
    return;
  }
  constexpr int W = VecWidth<T>::value;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(row);
  int64_t head = static_cast<int64_t>(((16u - (addr & 15u)) & 15u) / sizeof(T));
  if (head > V) head = V;
  for (int64_t i = lane; i < head; i += group) {
    const float x = to_float(row[i]);
    lse_add(acc, &x, 1);
  }
  const T* body = row + head;
  const int64_t nvec = (V - head) / W;
  int64_t v = lane;
  for (; v + group < nvec; v += 2 * static_cast<int64_t>(group)) {
    float a[W], b[W];
    load16(body + v * W, a);
    load16(body + (v + group) * W, b);
    lse_add(acc, a, W);
    lse_add(acc, b, W);
  }
  if (v < nvec) {
    float a[W];
    load16(body + v * W, a);
    lse_add(acc, a, W);
  }
  for (int64_t i = head + nvec * W + lane; i < V; i += group) {
    const float x = to_float(row[i]);
    lse_add(acc, &x, 1);
  }
}

MHFAST_HD int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace cuda
}  // namespace mhfast
