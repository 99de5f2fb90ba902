// mh_accept_ on CUDA: checks, output, launch (the kernel: mh_accept_kernel.cu).
// No host-device sync: value ranges are checked in Python (mhfast/_validate.py, validate=True) and the kernel
// stays in bounds on invalid values (ops_cuda.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "../checks.h"
#include "tensor_views.h"

namespace mhfast {
namespace cuda {
namespace {

at::Tensor mh_accept_cuda(at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& proposed,
                          const at::Tensor& energy, const at::Tensor& energy_proposed,
                          const at::Tensor& logq_forward, const at::Tensor& logq_reverse,
                          const at::Tensor& beta, const at::Tensor& uniforms) {
  check_mh_accept_args(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                       logq_reverse, beta, uniforms);
  check_device_type("mh_accept_", "tokens", tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(tokens.device());
  at::Tensor accepted = at::empty({tokens.size(0)}, tokens.options().dtype(at::kBool));
  const Strided2<const int64_t> pos = view2<int64_t>(positions);
  const MhAcceptArgs args{
      {tokens.mutable_data_ptr<int64_t>(), tokens.size(0), tokens.size(1), tokens.stride(0),
       tokens.stride(1)},
      pos,
      view2<int64_t>(proposed),
      view1<float>(energy),
      view1<float>(energy_proposed),
      view1<float>(logq_forward),
      view1<float>(logq_reverse),
      view1<float>(beta),
      view1<float>(uniforms),
      accepted.mutable_data_ptr<bool>(),
  };
  launch_mh_accept(args, current_stream());
  return accepted;
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) { m.impl("mh_accept_", &mhfast::cuda::mh_accept_cuda); }
