// propose on CUDA: checks, outputs, scratch, launch (the kernel: propose_kernel.cu).
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> propose_cuda(const at::Tensor& logits_in,
                                                            const at::Tensor& current,
                                                            double temperature, double top_p,
                                                            const at::Tensor& uniforms,
                                                            double uniform_mix) {
  check_propose_args(logits_in, current, temperature, top_p, uniforms, uniform_mix);
  check_device_type("propose", "logits", logits_in, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(logits_in.device());
  const at::Tensor logits = unit_column_stride(logits_in);
  const int64_t B = logits.size(0), V = logits.size(1);
  at::Tensor proposed = at::empty({B}, current.options());
  at::Tensor logq_proposed = at::empty({B}, uniforms.options());
  at::Tensor logq_current = at::empty({B}, uniforms.options());
  at::Tensor scratch;  // rows too long for shared memory live here
  const int64_t scratch_stride = B > 0 ? propose_scratch_stride(V, logits.get_device()) : 0;
  if (scratch_stride > 0) scratch = at::empty({B, scratch_stride}, logits.options().dtype(at::kFloat));
  launch_propose(logits.const_data_ptr(), float_kind(logits), B, V, logits.stride(0),
                 view1<int64_t>(current), static_cast<float>(temperature), top_p, uniform_mix,
                 view1<float>(uniforms),
                 scratch.defined() ? scratch.mutable_data_ptr<float>() : nullptr, scratch_stride,
                 proposed.mutable_data_ptr<int64_t>(), logq_proposed.mutable_data_ptr<float>(),
                 logq_current.mutable_data_ptr<float>(), current_stream());
  return {proposed, logq_proposed, logq_current};
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) { m.impl("propose", &mhfast::cuda::propose_cuda); }
