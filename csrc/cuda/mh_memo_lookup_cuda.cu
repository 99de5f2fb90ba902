// mh_memo_lookup on CUDA: one thread per proposal scans its chain's S slots (S is a handful: the
// memo keeps up to `memo` entries per chain), then writes its two order flags and its slot.
#include <c10/cuda/CUDAException.h>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) mh_memo_lookup_kernel(MemoLookupArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.A) return;
  const int64_t c = a.act[i];
  int64_t found = -1;
  if (c >= 0 && c < a.C) {
    const int64_t key = a.pos[i] * a.vocab_size + a.proposed[i];
    for (int64_t s = 0; s < a.S && found < 0; ++s) found = a.keys[c * a.S + s] == key ? s : -1;
  }
  const bool hit = found >= 0, changed = a.changed[i];
  a.order[i] = changed && !hit;
  a.order[a.A + i] = changed && hit;
  a.slot[i] = hit ? found : 0;
}

}  // namespace

void launch_mh_memo_lookup(const MemoLookupArgs& args, cudaStream_t stream) {
  if (args.A == 0) return;
  const int64_t blocks = (args.A + kThreads - 1) / kThreads;
  mh_memo_lookup_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
