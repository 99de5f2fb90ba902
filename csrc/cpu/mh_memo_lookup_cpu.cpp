// mh_memo_lookup_ on CPU: the step's proposals, in order, against their group's table (see
// csrc/mhfast.cpp for the contract, csrc/memo_table.h for the table, mhfast/reference.py for the
// specification, mhfast/sampler/memo.py for why).
//
// Why one op: the lookup hashes and compares whole sequences (A x L tokens) and reserves entries
// in order; as torch ops that would be dozens of dispatched calls per step, here it is one pass.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include "../checks.h"
#include "../memo_table.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {

std::tuple<at::Tensor, at::Tensor> mh_memo_lookup_cpu(at::Tensor& stamp, at::Tensor& hashes, at::Tensor& stored,
                                                      const at::Tensor& tokens, const at::Tensor& group,
                                                      const at::Tensor& act, const at::Tensor& pos,
                                                      const at::Tensor& proposed, const at::Tensor& changed,
                                                      int64_t ways, int64_t step) {
  const char* op = "mh_memo_lookup_";
  check_mh_memo_lookup_args(stamp, hashes, stored, tokens, group, act, pos, proposed, changed, ways, step);
  check_device_type(op, "stamp", stamp, c10::DeviceType::CPU);
  const int64_t A = act.size(0), G = stamp.size(0), S = stamp.size(1), L = tokens.size(1);
  const at::Tensor act_c = act.contiguous(), group_c = group.contiguous(), tokens_c = tokens.contiguous();
  // Every index is checked before any write, so bad input leaves the tables untouched.
  check_in_range(op, "act", act_c, 0, tokens.size(0));
  check_in_range(op, "group", group_c, 0, G);
  check_in_range(op, "pos", pos, 0, L);
  const auto p = pos.accessor<int64_t, 1>();
  const auto w = proposed.accessor<int64_t, 1>();
  const auto c = changed.accessor<bool, 1>();
  const int64_t* ap = act_c.const_data_ptr<int64_t>();
  const int64_t* gp = group_c.const_data_ptr<int64_t>();
  const int64_t* tp = tokens_c.const_data_ptr<int64_t>();
  int64_t* st = stamp.mutable_data_ptr<int64_t>();
  int64_t* hs = hashes.mutable_data_ptr<int64_t>();
  int64_t* sd = stored.mutable_data_ptr<int64_t>();
  at::Tensor order = at::empty({2 * A}, changed.options().memory_format(c10::MemoryFormat::Contiguous));
  at::Tensor slot = at::empty({A}, act.options().memory_format(c10::MemoryFormat::Contiguous));
  bool* o = order.mutable_data_ptr<bool>();
  int64_t* sl = slot.mutable_data_ptr<int64_t>();
  for (int64_t a = 0; a < A; ++a) {
    bool hit = false;
    sl[a] = -1;
    if (c[a]) {
      const int64_t g = gp[ap[a]];
      const MemoGroup table{st + g * S, hs + g * S, sd + g * S * L, S, L, ways};
      const int64_t* row = tp + ap[a] * L;
      sl[a] = memo_lookup_one(table, row, p[a], w[a], memo_hash(row, L, p[a], w[a]), step, &hit);
    }
    o[a] = c[a] && !hit;
    o[A + a] = c[a] && hit;
  }
  return {order, slot};
}

}  // namespace cpu
}  // namespace mhfast
