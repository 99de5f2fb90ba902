// mh_accept_ on CUDA: one thread per chain.
//
// log_alpha = beta * (energy - energy_proposed) + logq_reverse - logq_forward, evaluated left to
// right with explicitly rounded operations (no FMA contraction) so that it rounds like the
// reference; accept iff log(u) < log_alpha (NaN rejects). An accepted chain writes its K
// proposed tokens (slots with position -1 are unused); `energy` is read only.
#include <c10/cuda/CUDAException.h>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) mh_accept_kernel(MhAcceptArgs a) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= a.tokens.rows) return;
  const float e = a.energy[b], e_new = a.energy_proposed[b];
  const float log_alpha =
      __fsub_rn(__fadd_rn(__fmul_rn(a.beta[b], __fsub_rn(e, e_new)), a.logq_reverse[b]),
                a.logq_forward[b]);
  const bool accept = logf(a.uniforms[b]) < log_alpha;
  a.accepted[b] = accept;
  if (!accept) return;
  const int64_t T = a.tokens.cols;
  for (int64_t k = 0; k < a.positions.cols; ++k) {
    const int64_t pos = a.positions(b, k);
    if (pos >= 0 && pos < T) a.tokens(b, pos) = a.proposed(b, k);  // -1 (unused) or invalid: skipped
  }
}

}  // namespace

void launch_mh_accept(const MhAcceptArgs& args, cudaStream_t stream) {
  const int64_t B = args.tokens.rows;
  if (B == 0) return;
  const int64_t blocks = ceil_div(B, kThreads);
  TORCH_CHECK(blocks <= INT32_MAX, "mhfast.mh_accept_: too many chains for one grid");
  mh_accept_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
