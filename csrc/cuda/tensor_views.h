// What every CUDA entry point (csrc/cuda/<op>_cuda.cpp) needs between ATen and the raw-pointer launchers of
// ops_cuda.h: strided views of tensors, the logits dtype, and the current stream. Host code only (ATen headers,
// compiled by the C++ compiler, never by nvcc: see ops_cuda.h for why).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>

#include "ops_cuda.h"

namespace mhfast {
namespace cuda {

template <typename T>
Strided1<const T> view1(const at::Tensor& t) {
  return {t.const_data_ptr<T>(), t.stride(0)};
}

// A 1-D tensor is seen as [n, 1] (column stride 0).
template <typename T>
Strided2<const T> view2(const at::Tensor& t) {
  if (t.dim() == 1) return {t.const_data_ptr<T>(), t.size(0), 1, t.stride(0), 0};
  return {t.const_data_ptr<T>(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

inline FloatKind float_kind(const at::Tensor& logits) {
  switch (logits.scalar_type()) {
    case at::ScalarType::Half:
      return FloatKind::kFloat16;
    case at::ScalarType::BFloat16:
      return FloatKind::kBFloat16;
    default:
      return FloatKind::kFloat32;  // the checks admitted only these three
  }
}

// The kernels read each row with unit column stride (vector loads); any row stride is fine.
inline at::Tensor unit_column_stride(const at::Tensor& logits) {
  return (logits.size(1) > 1 && logits.stride(1) != 1) ? logits.contiguous() : logits;
}

inline cudaStream_t current_stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

}  // namespace cuda
}  // namespace mhfast
