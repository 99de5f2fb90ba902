// gather_energies on CUDA: per-row logsumexp + target gather, then per-sequence sums.
//
// Launch 1 (rows): a thread group per row streams the row once (16-byte loads, online max /
// sum-exp in fp32 for f32/f16/bf16), reduces it with CUB (a fixed tree: deterministic), and
// writes token_logp[n] and target_logit[n]. Small vocabularies (V <= kWarpRowMaxV) use one
// warp per row so that a block is not mostly idle; larger ones one 256-thread block per row.
// Launch 2 (sequences): one block per sequence b sums -target_logit and -token_logp over the
// rows with seq_index == b in a fixed order (thread-strided partial sums + CUB block reduce).
// Two launches because a deterministic sum needs all rows done and float atomics would make
// e_raw/e_local depend on scheduling; launch 2 reads num_seqs * N indices from L2, negligible
// next to the logits for the sampler's sizes (num_seqs <= a few thousand).
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kBlockRowThreads = 256;
constexpr int kWarpRowBlock = 256;  // 8 rows per block
constexpr int64_t kWarpRowMaxV = 4096;
constexpr int kSeqThreads = 256;

template <typename T>
__device__ __forceinline__ void finish_row(const T* row, int64_t V, int64_t n, float lse,
                                           Strided1<const int64_t> targets, float* token_logp,
                                           float* target_logit) {
  const int64_t t = targets[n];
  const float tl = (t >= 0 && t < V) ? to_float(row[t]) : kNaN;  // invalid target -> NaN
  token_logp[n] = tl - lse;
  target_logit[n] = tl;
}

template <typename T>
__global__ void __launch_bounds__(kBlockRowThreads)
    rows_block_kernel(const T* logits, int64_t V, int64_t row_stride, Strided1<const int64_t> targets,
                      float* token_logp, float* target_logit) {
  using Reduce = cub::BlockReduce<Lse, kBlockRowThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t n = blockIdx.x;
  const T* row = logits + n * row_stride;
  Lse acc = lse_empty();
  lse_row(row, V, threadIdx.x, kBlockRowThreads, acc);
  const Lse total = Reduce(tmp).Reduce(acc, LseMerge{});
  if (threadIdx.x == 0) finish_row(row, V, n, lse_value(total), targets, token_logp, target_logit);
}

template <typename T>
__global__ void __launch_bounds__(kWarpRowBlock)
    rows_warp_kernel(const T* logits, int64_t N, int64_t V, int64_t row_stride,
                     Strided1<const int64_t> targets, float* token_logp, float* target_logit) {
  constexpr int kWarps = kWarpRowBlock / 32;
  using Reduce = cub::WarpReduce<Lse>;
  __shared__ typename Reduce::TempStorage tmp[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (n >= N) return;  // whole warp leaves: no block-wide barrier below
  const T* row = logits + n * row_stride;
  Lse acc = lse_empty();
  lse_row(row, V, lane, 32, acc);
  const Lse total = Reduce(tmp[warp]).Reduce(acc, LseMerge{});
  if (lane == 0) finish_row(row, V, n, lse_value(total), targets, token_logp, target_logit);
}

__global__ void __launch_bounds__(kSeqThreads)
    sequence_sums_kernel(int64_t N, Strided1<const int64_t> seq_index, const float* target_logit,
                         const float* token_logp, float* e_raw, float* e_local) {
  using Reduce = cub::BlockReduce<float2, kSeqThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t b = blockIdx.x;
  // Accumulate the negated values onto +0.0, as the reference's index_add_ onto zeros does.
  float2 acc = make_float2(0.0f, 0.0f);
  for (int64_t n = threadIdx.x; n < N; n += kSeqThreads) {
    if (seq_index[n] == b) {
      acc.x += -target_logit[n];
      acc.y += -token_logp[n];
    }
  }
  const float2 total = Reduce(tmp).Reduce(acc, Float2Sum{});
  if (threadIdx.x == 0) {
    e_raw[b] = total.x;
    e_local[b] = total.y;
  }
}

template <typename T>
cudaError_t launch_rows(const T* logits, int64_t N, int64_t V, int64_t row_stride,
                        Strided1<const int64_t> targets, float* token_logp, float* target_logit,
                        cudaStream_t stream) {
  if (V <= kWarpRowMaxV) {
    const int64_t blocks = ceil_div(N, kWarpRowBlock / 32);
    rows_warp_kernel<T><<<static_cast<unsigned>(blocks), kWarpRowBlock, 0, stream>>>(
        logits, N, V, row_stride, targets, token_logp, target_logit);
  } else {
    rows_block_kernel<T><<<static_cast<unsigned>(N), kBlockRowThreads, 0, stream>>>(
        logits, V, row_stride, targets, token_logp, target_logit);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gather_energies(const void* logits, FloatKind kind, int64_t N, int64_t V,
                                   int64_t row_stride, Strided1<const int64_t> targets,
                                   Strided1<const int64_t> seq_index, int64_t num_seqs,
                                   float* e_raw, float* e_local, float* token_logp,
                                   float* target_logit, cudaStream_t stream) {
  // Grids are 1-D: more rows or sequences than gridDim.x allows is refused, never truncated.
  if (N > INT32_MAX || num_seqs > INT32_MAX) return cudaErrorInvalidConfiguration;
  if (N > 0) {
    cudaError_t err = cudaSuccess;
    switch (kind) {
      case FloatKind::kFloat32:
        err = launch_rows(static_cast<const float*>(logits), N, V, row_stride, targets, token_logp,
                          target_logit, stream);
        break;
      case FloatKind::kFloat16:
        err = launch_rows(static_cast<const __half*>(logits), N, V, row_stride, targets, token_logp,
                          target_logit, stream);
        break;
      case FloatKind::kBFloat16:
        err = launch_rows(static_cast<const __nv_bfloat16*>(logits), N, V, row_stride, targets,
                          token_logp, target_logit, stream);
        break;
    }
    if (err != cudaSuccess) return err;
  }
  if (num_seqs > 0) {  // also for N == 0: writes the zeros
    sequence_sums_kernel<<<static_cast<unsigned>(num_seqs), kSeqThreads, 0, stream>>>(
        N, seq_index, target_logit, token_logp, e_raw, e_local);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace mhfast
