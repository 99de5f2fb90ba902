// gather_energies on CUDA: per-row logsumexp + target gather, then per-sequence sums.
//
// Launch 1 (rows): a thread group per row streams the row once (16-byte loads where every row
// starts at the same offset mod 16 bytes, else element loads in an order fixed by V: see lse_row;
// online max / sum-exp in fp32 for f32/f16/bf16), reduces it with CUB (a fixed tree: deterministic), and
// writes token_logp[n] and target_logit[n]. Small vocabularies (V <= kWarpRowMaxV) use one
// warp per row so that a block is not mostly idle; larger ones one 256-thread block per row.
// The same launch flags seq_index as unsorted if any seq_index[n] > seq_index[n + 1].
// Launch 2 (sequences): one warp per sequence b sums -target_logit and -token_logp over the
// rows with seq_index == b in a fixed order (lane-strided partial sums + a xor-butterfly).
// Sorted seq_index (the sampler's pattern: arange, or rows grouped by sequence): the rows of b
// are one range found by binary search, so launch 2 reads each row once: O(N + S log N).
// Unsorted seq_index: each warp scans all N indices (O(N S), correct but slow; documented in
// mhfast.ops.gather_energies). Two launches because a deterministic sum needs all rows done and
// float atomics would make e_raw/e_local depend on scheduling.
#include <c10/cuda/CUDAException.h>
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

// Whether every row starts at the same offset mod 16 bytes (then lse_row may use 16-byte loads: see it).
__device__ __forceinline__ bool same_phase(int64_t row_stride, size_t elem_bytes) {
  return (static_cast<uint64_t>(row_stride) * elem_bytes) % 16u == 0;
}

template <typename T>
__device__ __forceinline__ void finish_row(const T* row, int64_t N, int64_t V, int64_t n, float lse,
                                           Strided1<const int64_t> targets,
                                           Strided1<const int64_t> seq_index, int* unsorted,
                                           float* token_logp, float* target_logit) {
  if (n + 1 < N && seq_index[n] > seq_index[n + 1]) atomicOr(unsorted, 1);  // integer: deterministic
  const int64_t t = targets[n];
  const float tl = (t >= 0 && t < V) ? to_float(row[t]) : kNaN;  // invalid target -> NaN
  token_logp[n] = tl - lse;
  target_logit[n] = tl;
}

template <typename T>
__global__ void __launch_bounds__(kBlockRowThreads)
    rows_block_kernel(const T* logits, int64_t N, int64_t V, int64_t row_stride,
                      Strided1<const int64_t> targets, Strided1<const int64_t> seq_index, int* unsorted,
                      float* token_logp, float* target_logit) {
  using Reduce = cub::BlockReduce<Lse, kBlockRowThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t n = blockIdx.x;
  const T* row = logits + n * row_stride;
  Lse acc = lse_empty();
  lse_row(row, V, threadIdx.x, kBlockRowThreads, same_phase(row_stride, sizeof(T)), acc);
  const Lse total = Reduce(tmp).Reduce(acc, LseMerge{});
  if (threadIdx.x == 0) {
    finish_row(row, N, V, n, lse_value(total), targets, seq_index, unsorted, token_logp, target_logit);
  }
}

template <typename T>
__global__ void __launch_bounds__(kWarpRowBlock)
    rows_warp_kernel(const T* logits, int64_t N, int64_t V, int64_t row_stride,
                     Strided1<const int64_t> targets, Strided1<const int64_t> seq_index, int* unsorted,
                     float* token_logp, float* target_logit) {
  constexpr int kWarps = kWarpRowBlock / 32;
  using Reduce = cub::WarpReduce<Lse>;
  __shared__ typename Reduce::TempStorage tmp[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (n >= N) return;  // whole warp leaves: no block-wide barrier below
  const T* row = logits + n * row_stride;
  Lse acc = lse_empty();
  lse_row(row, V, lane, 32, same_phase(row_stride, sizeof(T)), acc);
  const Lse total = Reduce(tmp[warp]).Reduce(acc, LseMerge{});
  if (lane == 0) {
    finish_row(row, N, V, n, lse_value(total), targets, seq_index, unsorted, token_logp, target_logit);
  }
}

// First index n in [lo, hi) with seq_index[n] >= key (seq_index sorted).
__device__ __forceinline__ int64_t lower_bound(Strided1<const int64_t> seq_index, int64_t lo, int64_t hi,
                                               int64_t key) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (seq_index[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Launch 2: warp per sequence. `unsorted` was set by launch 1 (read once per warp: uniform).
__global__ void __launch_bounds__(kSeqThreads)
    sequence_sums_kernel(int64_t N, int64_t num_seqs, Strided1<const int64_t> seq_index,
                         const int* unsorted, const float* target_logit, const float* token_logp,
                         float* e_raw, float* e_local) {
  const int lane = threadIdx.x % 32;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (kSeqThreads / 32) + threadIdx.x / 32;
  if (b >= num_seqs) return;  // whole warp leaves: no block-wide barrier below
  const bool scan_all = *unsorted != 0;
  const int64_t lo = scan_all ? 0 : lower_bound(seq_index, 0, N, b);
  const int64_t hi = scan_all ? N : lower_bound(seq_index, lo, N, b + 1);
  // Accumulate the negated values onto +0.0, as the reference's index_add_ onto zeros does.
  float raw = 0.0f, local = 0.0f;
  for (int64_t n = lo + lane; n < hi; n += 32) {
    if (scan_all && seq_index[n] != b) continue;
    raw += -target_logit[n];
    local += -token_logp[n];
  }
  for (int o = 16; o > 0; o >>= 1) {
    raw += __shfl_xor_sync(0xffffffffu, raw, o);
    local += __shfl_xor_sync(0xffffffffu, local, o);
  }
  if (lane == 0) {
    e_raw[b] = raw;
    e_local[b] = local;
  }
}

template <typename T>
void launch_rows(const T* logits, int64_t N, int64_t V, int64_t row_stride,
                 Strided1<const int64_t> targets, Strided1<const int64_t> seq_index, int* unsorted,
                 float* token_logp, float* target_logit, cudaStream_t stream) {
  if (V <= kWarpRowMaxV) {
    const int64_t blocks = ceil_div(N, kWarpRowBlock / 32);
    rows_warp_kernel<T><<<static_cast<unsigned>(blocks), kWarpRowBlock, 0, stream>>>(
        logits, N, V, row_stride, targets, seq_index, unsorted, token_logp, target_logit);
  } else {
    rows_block_kernel<T><<<static_cast<unsigned>(N), kBlockRowThreads, 0, stream>>>(
        logits, N, V, row_stride, targets, seq_index, unsorted, token_logp, target_logit);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void launch_gather_energies(const void* logits, FloatKind kind, int64_t N, int64_t V, int64_t row_stride,
                            Strided1<const int64_t> targets, Strided1<const int64_t> seq_index,
                            int64_t num_seqs, float* e_raw, float* e_local, float* token_logp,
                            float* target_logit, int* unsorted, cudaStream_t stream) {
  // Grids are 1-D: more rows or sequences than gridDim.x allows is refused, never truncated.
  TORCH_CHECK(N <= INT32_MAX && num_seqs <= INT32_MAX,
              "mhfast.gather_energies: too many rows or sequences for one grid");
  C10_CUDA_CHECK(cudaMemsetAsync(unsorted, 0, sizeof(int), stream));
  if (N > 0) {
    switch (kind) {
      case FloatKind::kFloat32:
        launch_rows(static_cast<const float*>(logits), N, V, row_stride, targets, seq_index, unsorted,
                    token_logp, target_logit, stream);
        break;
      case FloatKind::kFloat16:
        launch_rows(static_cast<const __half*>(logits), N, V, row_stride, targets, seq_index, unsorted,
                    token_logp, target_logit, stream);
        break;
      case FloatKind::kBFloat16:
        launch_rows(static_cast<const __nv_bfloat16*>(logits), N, V, row_stride, targets, seq_index,
                    unsorted, token_logp, target_logit, stream);
        break;
    }
  }
  if (num_seqs > 0) {  // also for N == 0: writes the zeros
    const int64_t blocks = ceil_div(num_seqs, kSeqThreads / 32);
    sequence_sums_kernel<<<static_cast<unsigned>(blocks), kSeqThreads, 0, stream>>>(
        N, num_seqs, seq_index, unsorted, target_logit, token_logp, e_raw, e_local);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace cuda
}  // namespace mhfast
