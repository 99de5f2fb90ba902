// mh_memo_store_ on CUDA: the op's tensors (unpacked and checked once, csrc/op_args.h), one launch
// (mh_memo_store_kernel.cu). No host-device sync: an invalid index writes nothing (ops_cuda.h).
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../checks.h"
#include "../op_args.h"
#include "tensor_views.h"

namespace mhfast {
namespace cuda {
namespace {

void mh_memo_store_cuda(const MemoStoreTensors& x) {
  check_device_type("mh_memo_store_", "table.stamp", x.stamp, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(x.stamp.device());
  MemoStoreArgs a{x.stamp.mutable_data_ptr<int64_t>(), x.raw.mutable_data_ptr<float>(),
                  x.local.mutable_data_ptr<float>(), x.stamp.size(0), x.stamp.size(1), x.raw.size(2),
                  x.group.size(0), x.act.size(0), x.num_misses, x.step, view1<int64_t>(x.group),
                  view1<int64_t>(x.act), view1<int64_t>(x.slot), view1<int64_t>(x.sel), view2<float>(x.raw_new),
                  view2<float>(x.local_new)};
  launch_mh_memo_store(a, current_stream());
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) {
  m.impl("mh_memo_store_", &mhfast::memo_store_entry<mhfast::cuda::mh_memo_store_cuda>);
}
