// counter_uniforms on CUDA: one thread per key, the hash of csrc/counter_hash.h.
#include "../counter_hash.h"
#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    counter_uniforms_kernel(const int64_t* keys, const int64_t* lanes, int64_t n, uint64_t epoch,
                            uint64_t step, uint64_t stream, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t lane = lanes ? static_cast<uint64_t>(lanes[i]) : 0;
    out[i] = counter_uniform(static_cast<uint64_t>(keys[i]), epoch, step, stream, lane);
  }
}

}  // namespace

cudaError_t launch_counter_uniforms(const int64_t* keys, const int64_t* lanes, int64_t n, int64_t epoch,
                                    int64_t step, int64_t stream, float* out, cudaStream_t cuda_stream) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  counter_uniforms_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, cuda_stream>>>(
      keys, lanes, n, static_cast<uint64_t>(epoch), static_cast<uint64_t>(step), static_cast<uint64_t>(stream),
      out);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace mhfast
