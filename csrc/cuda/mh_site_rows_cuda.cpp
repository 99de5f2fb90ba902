// mh_site_rows on CUDA: checks, outputs, the two launches around one device-side prefix sum
// (the kernels: mh_site_rows_kernel.cu).
// No host-device sync: value ranges are checked in Python (mhfast/_validate.py, validate=True) and the kernel
// stays in bounds on invalid values (ops_cuda.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "../checks.h"
#include "tensor_views.h"

namespace mhfast {
namespace cuda {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_site_rows_cuda(
    const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
    const at::Tensor& local_terms, const at::Tensor& ch, const at::Tensor& pos, const at::Tensor& proposed,
    int64_t num_rows, int64_t mask_id) {
  check_mh_site_rows_args(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows);
  check_device_type("mh_site_rows", "tokens", tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(tokens.device());
  const int64_t n = ch.size(0), T = tokens.size(1);
  const auto long_opts = tokens.options().memory_format(c10::MemoryFormat::Contiguous);
  const auto float_opts = raw_terms.options().memory_format(c10::MemoryFormat::Contiguous);
  at::Tensor x_new = at::empty({n, T}, long_opts), raw_new = at::empty({n, T}, float_opts),
             local_new = at::empty({n, T}, float_opts), counts = at::empty({n}, long_opts);
  // Zero-filled: slots a wrong num_rows leaves unwritten still index row 0, position 0 (in bounds).
  at::Tensor seq = at::zeros({num_rows}, long_opts), q = at::zeros({num_rows}, long_opts),
             targets = at::zeros({num_rows}, long_opts), rows = at::empty({num_rows, T}, long_opts);
  SiteRowsArgs a{view2<int64_t>(tokens), view2<bool>(energy_mask), view2<float>(raw_terms),
                 view2<float>(local_terms), view1<int64_t>(ch), view1<int64_t>(pos), view1<int64_t>(proposed),
                 n, num_rows, x_new.mutable_data_ptr<int64_t>(), raw_new.mutable_data_ptr<float>(),
                 local_new.mutable_data_ptr<float>(), counts.mutable_data_ptr<int64_t>(), nullptr,
                 seq.mutable_data_ptr<int64_t>(), q.mutable_data_ptr<int64_t>(), targets.mutable_data_ptr<int64_t>()};
  const cudaStream_t stream = current_stream();
  launch_site_rows_copy(a, stream);
  if (n > 0 && num_rows > 0) {
    const at::Tensor ends = at::cumsum(counts, 0);  // on the stream: no host sync
    a.ends = ends.const_data_ptr<int64_t>();
    launch_site_rows_index(a, stream);
    launch_masked_copies(view2<int64_t>(x_new), view1<int64_t>(seq), view1<int64_t>(q), num_rows, mask_id,
                         rows.mutable_data_ptr<int64_t>(), stream);
  }
  return {x_new, raw_new, local_new, seq, q, rows, targets};
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) { m.impl("mh_site_rows", &mhfast::cuda::mh_site_rows_cuda); }
