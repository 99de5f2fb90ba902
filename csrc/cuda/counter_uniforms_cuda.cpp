// counter_uniforms on CUDA: checks, output, launch (the kernel: counter_uniforms_kernel.cu).
// No host-device sync: value ranges are checked in Python (mhfast/_validate.py, validate=True) and the kernel
// stays in bounds on invalid values (ops_cuda.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "../checks.h"
#include "tensor_views.h"

namespace mhfast {
namespace cuda {
namespace {

at::Tensor counter_uniforms_cuda(const at::Tensor& keys, int64_t epoch, int64_t step, int64_t stream,
                                 const c10::optional<at::Tensor>& lanes) {
  check_counter_uniforms_args(keys, epoch, step, stream, lanes);
  check_device_type("counter_uniforms", "keys", keys, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(keys.device());
  const at::Tensor k = keys.contiguous();
  const at::Tensor l = lanes.has_value() ? lanes->contiguous() : at::Tensor();
  at::Tensor out = at::empty(keys.sizes(), keys.options().dtype(at::kFloat));
  C10_CUDA_CHECK(launch_counter_uniforms(k.const_data_ptr<int64_t>(), l.defined() ? l.const_data_ptr<int64_t>()
                                         : nullptr, k.numel(), epoch, step, stream, out.mutable_data_ptr<float>(),
                                         current_stream()));
  return out;
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) { m.impl("counter_uniforms", &mhfast::cuda::counter_uniforms_cuda); }
