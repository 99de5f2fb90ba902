// masked_copies on CUDA: out[n, t] = tokens[seq_index[n], t], out[n, pos_index[n]] = mask_id.
//
// One thread per output element, grid-stride: consecutive threads write consecutive elements
// of out (coalesced stores) and read consecutive columns of one tokens row.
#include <c10/cuda/CUDAException.h>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    masked_copies_kernel(Strided2<const int64_t> tokens, Strided1<const int64_t> seq_index,
                         Strided1<const int64_t> pos_index, int64_t N, int64_t mask_id,
                         int64_t* out) {
  const int64_t T = tokens.cols;
  const int64_t total = N * T;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t n = i / T;
    const int64_t t = i - n * T;
    const int64_t s = seq_index[n];
    const int64_t p = pos_index[n];
    int64_t value;
    if (s < 0 || s >= tokens.rows || p < 0 || p >= T) {
      value = -1;  // invalid index (only reachable with validate=False): never read out of bounds
    } else {
      value = (t == p) ? mask_id : tokens(s, t);
    }
    out[i] = value;
  }
}

}  // namespace

void launch_masked_copies(Strided2<const int64_t> tokens, Strided1<const int64_t> seq_index,
                          Strided1<const int64_t> pos_index, int64_t N, int64_t mask_id, int64_t* out,
                          cudaStream_t stream) {
  const int64_t total = N * tokens.cols;
  if (total == 0) return;
  // Enough blocks to fill any GPU; the grid-stride loop covers the rest.
  const int64_t blocks = std::min<int64_t>(ceil_div(total, kThreads), 8192);
  masked_copies_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      tokens, seq_index, pos_index, N, mask_id, out);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
