// mh_memo_store_ on CUDA: one block per miss. The misses of one step hold distinct entries (the lookup
// never reserves one entry twice in a step), so blocks never write the same entry; the block's threads
// copy the L terms, then thread 0 marks the entry ready.
#include <c10/cuda/CUDAException.h>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) mh_memo_store_kernel(MemoStoreArgs a) {
  const int64_t j = blockIdx.x;
  const int64_t i = a.sel[j];
  if (i < 0 || i >= a.A) return;  // invalid input: nothing written
  const int64_t c = a.act[i], s = a.slot[i];
  if (c < 0 || c >= a.M || s < 0 || s >= a.S) return;  // no entry (or invalid input): nothing written
  const int64_t g = a.group[c];
  if (g < 0 || g >= a.G) return;
  const int64_t e = g * a.S + s;
  if (a.stamp[e] != -(a.step + 2)) return;  // not reserved in this step (read before thread 0's write below)
  float* r = a.raw + e * a.L;
  float* l = a.local + e * a.L;
  for (int64_t t = threadIdx.x; t < a.L; t += blockDim.x) {
    r[t] = a.raw_new(j, t);
    l[t] = a.local_new(j, t);
  }
  __syncthreads();
  if (threadIdx.x == 0) a.stamp[e] = a.step;
}

}  // namespace

void launch_mh_memo_store(const MemoStoreArgs& args, cudaStream_t stream) {
  if (args.num_misses == 0) return;
  TORCH_CHECK(args.num_misses <= INT32_MAX, "mhfast.mh_memo_store_: too many misses for one grid");
  mh_memo_store_kernel<<<static_cast<unsigned>(args.num_misses), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
