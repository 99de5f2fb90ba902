// mh_memo_lookup_ on CUDA: the op's tensors (unpacked and checked once, csrc/op_args.h), the outputs, one launch
// (mh_memo_lookup_kernel.cu). No host-device sync: an invalid act or group is a miss without an entry (ops_cuda.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../checks.h"
#include "../op_args.h"
#include "tensor_views.h"

namespace mhfast {
namespace cuda {
namespace {

MemoLookupOut mh_memo_lookup_cuda(const MemoLookupTensors& x) {
  check_device_type("mh_memo_lookup_", "table.stamp", x.stamp, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(x.stamp.device());
  const at::Tensor tokens = x.tokens.contiguous(), group = x.group.contiguous();
  const int64_t A = x.act.size(0);
  const auto long_opts = x.act.options().memory_format(c10::MemoryFormat::Contiguous);
  at::Tensor order = at::empty({2 * A}, x.changed.options().memory_format(c10::MemoryFormat::Contiguous));
  at::Tensor slot = at::empty({A}, long_opts);
  at::Tensor hash = at::empty({A}, long_opts);
  MemoLookupArgs a{x.stamp.mutable_data_ptr<int64_t>(), x.hashes.mutable_data_ptr<int64_t>(),
                   x.stored.mutable_data_ptr<int64_t>(), tokens.const_data_ptr<int64_t>(),
                   group.const_data_ptr<int64_t>(), x.stamp.size(0), x.stamp.size(1), tokens.size(1), tokens.size(0),
                   A, x.ways, x.step, view1<int64_t>(x.act), view1<int64_t>(x.pos), view1<int64_t>(x.proposed),
                   view1<bool>(x.changed), order.mutable_data_ptr<bool>(), slot.mutable_data_ptr<int64_t>(),
                   hash.mutable_data_ptr<int64_t>()};
  launch_mh_memo_lookup(a, current_stream());
  return {order, slot};
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) {
  m.impl("mh_memo_lookup_", &mhfast::memo_lookup_entry<mhfast::cuda::mh_memo_lookup_cuda>);
}
