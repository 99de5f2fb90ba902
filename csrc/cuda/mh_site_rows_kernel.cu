// mh_site_rows on CUDA: two launches over the n moving chains, then masked_copies for the rows.
//
// 1. one thread per chain: X' row (the chain's tokens with the proposed token at pos), copies of
//    its term rows, and how many of its energy positions other than pos need a model row;
// 2. (after an inclusive cumsum of those counts on the stream: no host sync) one thread per chain
//    writes its (seq, q, targets) slots at [ends[j] - counts[j], ends[j]).
// n * T elements per launch (a few chains of a few hundred tokens): one thread per chain is
// enough; the O(num_rows * T) masked rows go through the coalesced masked_copies kernel.
#include <c10/cuda/CUDAException.h>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ bool chain_ok(const SiteRowsArgs& a, int64_t j) {
  const int64_t c = a.ch[j], p = a.pos[j];
  return c >= 0 && c < a.tokens.rows && p >= 0 && p < a.tokens.cols;
}

__global__ void __launch_bounds__(kThreads) site_rows_copy_kernel(SiteRowsArgs a) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= a.n) return;
  const int64_t T = a.tokens.cols;
  int64_t* x = a.x_new + j * T;
  float* rn = a.raw_new + j * T;
  float* ln = a.local_new + j * T;
  if (!chain_ok(a, j)) {
    for (int64_t t = 0; t < T; ++t) {
      x[t] = -1;
      rn[t] = kNaN;
      ln[t] = kNaN;
    }
    a.counts[j] = 0;
    return;
  }
  const int64_t c = a.ch[j], p = a.pos[j];
  int64_t count = 0;
  for (int64_t t = 0; t < T; ++t) {
    x[t] = t == p ? a.proposed[j] : a.tokens(c, t);
    rn[t] = a.raw_terms(c, t);
    ln[t] = a.local_terms(c, t);
    count += (a.energy_mask(c, t) && t != p) ? 1 : 0;
  }
  a.counts[j] = count;
}

__global__ void __launch_bounds__(kThreads) site_rows_index_kernel(SiteRowsArgs a) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= a.n || !chain_ok(a, j)) return;
  const int64_t T = a.tokens.cols;
  const int64_t c = a.ch[j], p = a.pos[j];
  int64_t r = a.ends[j] - a.counts[j];
  for (int64_t t = 0; t < T && r < a.num_rows; ++t) {
    if (a.energy_mask(c, t) && t != p) {
      if (r >= 0) {
        a.seq[r] = j;
        a.q[r] = t;
        a.targets[r] = a.x_new[j * T + t];
      }
      ++r;
    }
  }
}

}  // namespace

void launch_site_rows_copy(const SiteRowsArgs& args, cudaStream_t stream) {
  if (args.n == 0) return;
  const int64_t blocks = ceil_div(args.n, kThreads);
  site_rows_copy_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void launch_site_rows_index(const SiteRowsArgs& args, cudaStream_t stream) {
  if (args.n == 0 || args.num_rows == 0) return;
  const int64_t blocks = ceil_div(args.n, kThreads);
  site_rows_index_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
