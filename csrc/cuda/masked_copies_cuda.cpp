// masked_copies on CUDA: checks, output, launch (the kernel: masked_copies_kernel.cu).
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

at::Tensor masked_copies_cuda(const at::Tensor& tokens, const at::Tensor& seq_index,
                              const at::Tensor& pos_index, int64_t mask_id) {
  check_masked_copies_args(tokens, seq_index, pos_index);
  check_device_type("masked_copies", "tokens", tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(tokens.device());
  const int64_t N = seq_index.size(0);
  at::Tensor out = at::empty({N, tokens.size(1)}, tokens.options());
  launch_masked_copies(view2<int64_t>(tokens), view1<int64_t>(seq_index), view1<int64_t>(pos_index), N,
                       mask_id, out.mutable_data_ptr<int64_t>(), current_stream());
  return out;
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) { m.impl("masked_copies", &mhfast::cuda::masked_copies_cuda); }
