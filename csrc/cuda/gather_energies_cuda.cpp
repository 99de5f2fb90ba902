// gather_energies on CUDA: checks, outputs, launches (the kernels: gather_energies_kernel.cu).
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> gather_energies_cuda(const at::Tensor& logits_in,
                                                                    const at::Tensor& targets,
                                                                    const at::Tensor& seq_index,
                                                                    int64_t num_seqs) {
  check_gather_energies_args(logits_in, targets, seq_index, num_seqs);
  check_device_type("gather_energies", "logits", logits_in, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(logits_in.device());
  const at::Tensor logits = unit_column_stride(logits_in);
  const int64_t N = logits.size(0), V = logits.size(1);
  const auto f32 = logits.options().dtype(at::kFloat);
  at::Tensor e_raw = at::empty({num_seqs}, f32);
  at::Tensor e_local = at::empty({num_seqs}, f32);
  at::Tensor token_logp = at::empty({N}, f32);
  at::Tensor target_logit = at::empty({N}, f32);  // scratch between the two launches
  at::Tensor unsorted = at::empty({1}, logits.options().dtype(at::kInt));  // set by launch 1
  launch_gather_energies(logits.const_data_ptr(), float_kind(logits), N, V, logits.stride(0),
                         view1<int64_t>(targets), view1<int64_t>(seq_index), num_seqs,
                         e_raw.mutable_data_ptr<float>(), e_local.mutable_data_ptr<float>(),
                         token_logp.mutable_data_ptr<float>(), target_logit.mutable_data_ptr<float>(),
                         unsorted.mutable_data_ptr<int>(), current_stream());
  return {e_raw, e_local, token_logp};
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) { m.impl("gather_energies", &mhfast::cuda::gather_energies_cuda); }
