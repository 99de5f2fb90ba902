// mh_memo_lookup on CPU: which of the step's proposals the proposal memo holds (see csrc/mhfast.cpp
// for the contract, mhfast/reference.py for the specification, mhfast/sampler/memo.py for why).
//
// Why one op: in Python the lookup and the misses-then-hits mask were ~12 dispatched calls on
// tensors of A x slots elements, several times the work itself; here it is one pass over A chains.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../checks.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {

std::tuple<at::Tensor, at::Tensor> mh_memo_lookup_cpu(const at::Tensor& keys, const at::Tensor& act,
                                                      const at::Tensor& pos, const at::Tensor& proposed,
                                                      const at::Tensor& changed, int64_t vocab_size) {
  const char* op = "mh_memo_lookup";
  check_mh_memo_lookup_args(keys, act, pos, proposed, changed, vocab_size);
  check_device_type(op, "keys", keys, c10::DeviceType::CPU);
  const int64_t A = act.size(0), S = keys.size(1);
  const at::Tensor act_c = act.contiguous();
  check_in_range(op, "act", act_c, 0, keys.size(0));
  const auto k = keys.accessor<int64_t, 2>();
  const auto p = pos.accessor<int64_t, 1>();
  const auto w = proposed.accessor<int64_t, 1>();
  const auto c = changed.accessor<bool, 1>();
  const int64_t* ap = act_c.const_data_ptr<int64_t>();
  at::Tensor order = at::empty({2 * A}, changed.options().memory_format(c10::MemoryFormat::Contiguous));
  at::Tensor slot = at::empty({A}, act.options().memory_format(c10::MemoryFormat::Contiguous));
  bool* o = order.mutable_data_ptr<bool>();
  int64_t* sl = slot.mutable_data_ptr<int64_t>();
  for (int64_t a = 0; a < A; ++a) {
    const int64_t key = p[a] * vocab_size + w[a];
    int64_t found = -1;
    for (int64_t s = 0; s < S && found < 0; ++s) found = k[ap[a]][s] == key ? s : -1;
    const bool hit = found >= 0;
    o[a] = c[a] && !hit;
    o[A + a] = c[a] && hit;
    sl[a] = hit ? found : 0;
  }
  return {order, slot};
}

}  // namespace cpu
}  // namespace mhfast
