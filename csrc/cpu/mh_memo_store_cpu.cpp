// mh_memo_store_ on CPU: the terms of the step's misses into the entries their lookup reserved (see
// csrc/mhfast.cpp for the contract, csrc/op_args.h for the arguments, mhfast/reference.py for the specification).
//
// It runs in every step with misses, so it allocates nothing and dispatches no op: the index checks
// read the few entries in place (the step's own cost is ~0.25 ms, bench/bench_floor.py --compare memo).
#include <ATen/core/Tensor.h>

#include <torch/library.h>

#include "../checks.h"
#include "../op_args.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {
namespace {

constexpr const char* kOp = "mh_memo_store_";

// Every index is checked before any write, so bad input leaves the tables untouched (same messages, in the same
// order, as mhfast/_validate.py).
void check_values(const MemoStoreTensors& x) {
  const int64_t G = x.stamp.size(0), S = x.stamp.size(1), A = x.act.size(0), M = x.group.size(0);
  const auto a = x.act.accessor<int64_t, 1>();
  const auto s = x.slot.accessor<int64_t, 1>();
  const auto q = x.sel.accessor<int64_t, 1>();
  const auto g = x.group.accessor<int64_t, 1>();
  for (int64_t j = 0; j < x.num_misses; ++j) check_value_in_range(kOp, "sel", q[j], 0, A);
  for (int64_t j = 0; j < x.num_misses; ++j) check_value_in_range(kOp, "act", a[q[j]], 0, M);
  for (int64_t j = 0; j < x.num_misses; ++j) {
    check_value_in_range(kOp, "slot", s[q[j]], 0, S, /*allow_minus_one=*/true);
  }
  for (int64_t j = 0; j < x.num_misses; ++j) check_value_in_range(kOp, "table.group", g[a[q[j]]], 0, G);
}

void mh_memo_store_cpu(const MemoStoreTensors& x) {
  check_device_type(kOp, "table.stamp", x.stamp, c10::DeviceType::CPU);
  check_values(x);
  const int64_t S = x.stamp.size(1), L = x.raw.size(2);
  const auto a = x.act.accessor<int64_t, 1>();
  const auto s = x.slot.accessor<int64_t, 1>();
  const auto q = x.sel.accessor<int64_t, 1>();
  const auto g = x.group.accessor<int64_t, 1>();
  const auto rn = x.raw_new.accessor<float, 2>();
  const auto ln = x.local_new.accessor<float, 2>();
  int64_t* st = x.stamp.mutable_data_ptr<int64_t>();
  float* r = x.raw.mutable_data_ptr<float>();
  float* l = x.local.mutable_data_ptr<float>();
  for (int64_t j = 0; j < x.num_misses; ++j) {
    const int64_t e_slot = s[q[j]];
    if (e_slot < 0) continue;  // no entry was free for this miss
    const int64_t e = g[a[q[j]]] * S + e_slot;
    if (st[e] != -(x.step + 2)) continue;  // not reserved in this step: nothing to fill
    for (int64_t t = 0; t < L; ++t) {
      r[e * L + t] = rn[j][t];
      l[e * L + t] = ln[j][t];
    }
    st[e] = x.step;
  }
}

}  // namespace
}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) {
  m.impl("mh_memo_store_", &mhfast::memo_store_entry<mhfast::cpu::mh_memo_store_cpu>);
}
