// mh_memo_lookup_ on CUDA: one block per group. The block's threads first hash the X' of every
// proposal of the group in parallel (A x L tokens: the bulk of the work); then thread 0 walks the
// group's proposals in order, as the CPU kernel does, so that entries are reserved and evicted in the
// same order on both backends (csrc/memo_table.h: same function). Groups are independent tables, so
// blocks never write the same entry.
#include <c10/cuda/CUDAException.h>

#include "../memo_table.h"
#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ int64_t group_of(const MemoLookupArgs& a, int64_t i) {
  const int64_t c = a.act[i];
  if (c < 0 || c >= a.M) return -1;
  const int64_t g = a.group[c];
  return g >= 0 && g < a.G ? g : -1;
}

__global__ void __launch_bounds__(kThreads) mh_memo_lookup_kernel(MemoLookupArgs a) {
  const int64_t g = blockIdx.x;
  for (int64_t i = threadIdx.x; i < a.A; i += blockDim.x) {
    if (group_of(a, i) != g || !a.changed[i]) continue;
    a.hash[i] = static_cast<int64_t>(memo_hash(a.tokens + a.act[i] * a.L, a.L, a.pos[i], a.proposed[i]));
  }
  if (g == 0) {  // block 0 also writes the result of proposals that touch no table
    for (int64_t i = threadIdx.x; i < a.A; i += blockDim.x) {
      if (group_of(a, i) >= 0 && a.changed[i]) continue;
      a.order[i] = a.changed[i];  // a changed proposal with an invalid chain or group: a miss
      a.order[a.A + i] = false;
      a.slot[i] = -1;
    }
  }
  __syncthreads();
  if (threadIdx.x != 0 || g >= a.G) return;
  const MemoGroup table{a.stamp + g * a.S, a.hashes + g * a.S, a.stored + g * a.S * a.L, a.S, a.L, a.ways};
  for (int64_t i = 0; i < a.A; ++i) {
    if (group_of(a, i) != g || !a.changed[i]) continue;
    bool hit = false;
    a.slot[i] = memo_lookup_one(table, a.tokens + a.act[i] * a.L, a.pos[i], a.proposed[i],
                                static_cast<uint64_t>(a.hash[i]), a.step, &hit);
    a.order[i] = !hit;
    a.order[a.A + i] = hit;
  }
}

}  // namespace

void launch_mh_memo_lookup(const MemoLookupArgs& args, cudaStream_t stream) {
  if (args.A == 0) return;
  TORCH_CHECK(args.G <= INT32_MAX, "mhfast.mh_memo_lookup_: too many groups for one grid");
  // At least one block: block 0 also writes the result of the proposals that touch no table (all of them
  // when there is no group at all).
  const int64_t blocks = args.G > 0 ? args.G : 1;
  mh_memo_lookup_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
