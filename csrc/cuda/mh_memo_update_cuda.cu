// mh_memo_update_ on CUDA: one block per tested chain (the chains are distinct, so blocks never
// write the same memo row). Thread 0 reads the chain's next slot into shared memory and updates
// keys / next; the block's threads copy the T terms of a stored proposal.
#include <c10/cuda/CUDAException.h>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) mh_memo_update_kernel(MemoUpdateArgs a) {
  const int64_t j = blockIdx.x;
  const int64_t c = a.ch[j];
  if (c < 0 || c >= a.C) return;  // invalid chain index: nothing written
  const bool accepted = a.accepted[j];
  if (accepted) {  // the chain moved: forget every entry
    for (int64_t s = threadIdx.x; s < a.S; s += blockDim.x) a.keys[c * a.S + s] = -1;
    if (threadIdx.x == 0) a.next[c] = 0;
    return;
  }
  if (j >= a.num_misses) return;  // a rejected hit: already in the memo
  __shared__ int64_t slot;
  if (threadIdx.x == 0) slot = a.next[c];
  __syncthreads();
  const int64_t s = slot;
  if (s < 0 || s >= a.S) return;  // invalid next: nothing written
  if (threadIdx.x == 0) {
    a.keys[c * a.S + s] = a.pos[j] * a.vocab_size + a.proposed[j];
    a.next[c] = (s + 1) % a.S;
  }
  float* r = a.raw + (c * a.S + s) * a.T;
  float* l = a.local + (c * a.S + s) * a.T;
  for (int64_t t = threadIdx.x; t < a.T; t += blockDim.x) {
    r[t] = a.raw_new(j, t);
    l[t] = a.local_new(j, t);
  }
}

}  // namespace

void launch_mh_memo_update(const MemoUpdateArgs& args, cudaStream_t stream) {
  if (args.n == 0) return;
  TORCH_CHECK(args.n <= INT32_MAX, "mhfast.mh_memo_update_: too many chains for one grid");
  mh_memo_update_kernel<<<static_cast<unsigned>(args.n), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
