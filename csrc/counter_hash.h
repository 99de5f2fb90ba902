// The counter-based hash behind every random number of the sampler (mhfast/sampler/rng.py).
//
// A chain's key is splitmix64-style hash of (seed, input, chain); a draw absorbs
// (epoch, step, stream, lane): h = mix(h + GOLDEN * (c + 1)) per counter, with the splitmix64
// finalizer as mix, all in wrapping uint64 arithmetic. The uniform is the top 23 bits k of the
// final hash as (k + 0.5) / 2^23, exact in float32, never 0 and never 1. This header is the one
// C++ definition, used by the CPU and CUDA kernels; mhfast/reference.py has the PyTorch twin and
// tests/ops/test_counter_uniforms.py holds them equal bit for bit.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MHFAST_HASH_FN __host__ __device__ __forceinline__
#else
#define MHFAST_HASH_FN inline
#endif

namespace mhfast {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

MHFAST_HASH_FN uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

MHFAST_HASH_FN uint64_t absorb(uint64_t h, uint64_t counter) { return mix64(h + (counter + 1) * kGolden); }

// (k + 0.5) / 2^23 for the top 23 bits k: computed as (2k + 1) * 2^-24, exact in float32.
MHFAST_HASH_FN float top23_uniform(uint64_t h) {
  return static_cast<float>(2 * (h >> 41) + 1) * 5.9604644775390625e-08f;
}

// The uniform of one draw: key absorbed with (epoch, step, stream, lane).
MHFAST_HASH_FN float counter_uniform(uint64_t key, uint64_t epoch, uint64_t step, uint64_t stream,
                                     uint64_t lane) {
  return top23_uniform(absorb(absorb(absorb(absorb(key, epoch), step), stream), lane));
}

}  // namespace mhfast
