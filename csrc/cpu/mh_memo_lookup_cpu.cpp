// mh_memo_lookup_ on CPU: the step's proposals, in order, against their group's table (see csrc/mhfast.cpp for
// the contract, csrc/op_args.h for the arguments, csrc/memo_table.h for the table, mhfast/reference.py for the
// specification, mhfast/sampler/memo.py for why).
//
// Why one op: the lookup hashes and compares whole sequences (A x L tokens) and reserves entries
// in order; as torch ops that would be dozens of dispatched calls per step, here it is one pass.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <torch/library.h>

#include "../checks.h"
#include "../op_args.h"
#include "../memo_table.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {
namespace {

MemoLookupOut mh_memo_lookup_cpu(const MemoLookupTensors& x) {
  const char* op = "mh_memo_lookup_";
  check_device_type(op, "table.stamp", x.stamp, c10::DeviceType::CPU);
  const int64_t A = x.act.size(0), G = x.stamp.size(0), S = x.stamp.size(1), L = x.tokens.size(1);
  const at::Tensor act = x.act.contiguous(), group = x.group.contiguous(), tokens = x.tokens.contiguous();
  // Every index is checked before any write, so bad input leaves the tables untouched.
  check_in_range(op, "act", act, 0, x.tokens.size(0));
  check_in_range(op, "table.group", group, 0, G);
  check_in_range(op, "pos", x.pos, 0, L);
  const auto p = x.pos.accessor<int64_t, 1>();
  const auto w = x.proposed.accessor<int64_t, 1>();
  const auto c = x.changed.accessor<bool, 1>();
  const int64_t* ap = act.const_data_ptr<int64_t>();
  const int64_t* gp = group.const_data_ptr<int64_t>();
  const int64_t* tp = tokens.const_data_ptr<int64_t>();
  int64_t* st = x.stamp.mutable_data_ptr<int64_t>();
  int64_t* hs = x.hashes.mutable_data_ptr<int64_t>();
  int64_t* sd = x.stored.mutable_data_ptr<int64_t>();
  at::Tensor order = at::empty({2 * A}, x.changed.options().memory_format(c10::MemoryFormat::Contiguous));
  at::Tensor slot = at::empty({A}, x.act.options().memory_format(c10::MemoryFormat::Contiguous));
  bool* o = order.mutable_data_ptr<bool>();
  int64_t* sl = slot.mutable_data_ptr<int64_t>();
  for (int64_t a = 0; a < A; ++a) {
    bool hit = false;
    sl[a] = -1;
    if (c[a]) {
      const int64_t g = gp[ap[a]];
      const MemoGroup table{st + g * S, hs + g * S, sd + g * S * L, S, L, x.ways};
      const int64_t* row = tp + ap[a] * L;
      sl[a] = memo_lookup_one(table, row, p[a], w[a], memo_hash(row, L, p[a], w[a]), x.step, &hit);
    }
    o[a] = c[a] && !hit;
    o[A + a] = c[a] && hit;
  }
  return {order, slot};
}

}  // namespace
}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) {
  m.impl("mh_memo_lookup_", &mhfast::memo_lookup_entry<mhfast::cpu::mh_memo_lookup_cpu>);
}
