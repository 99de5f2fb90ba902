// mh_memo_store_ on CPU: the terms of the step's misses into the entries their lookup reserved (see
// csrc/mhfast.cpp for the contract, mhfast/reference.py for the specification).
//
// It runs in every step with misses, so it allocates nothing and dispatches no op: the index checks
// read the few entries in place (the step's own cost is ~0.25 ms, bench/bench_floor.py --compare memo).
#include <ATen/core/Tensor.h>

#include "../checks.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {

void mh_memo_store_cpu(at::Tensor& stamp, at::Tensor& raw, at::Tensor& local, const at::Tensor& group,
                       const at::Tensor& act, const at::Tensor& slot, const at::Tensor& sel,
                       const at::Tensor& raw_new, const at::Tensor& local_new, int64_t num_misses, int64_t step) {
  const char* op = "mh_memo_store_";
  check_mh_memo_store_args(stamp, raw, local, group, act, slot, sel, raw_new, local_new, num_misses, step);
  check_device_type(op, "stamp", stamp, c10::DeviceType::CPU);
  const int64_t G = stamp.size(0), S = stamp.size(1), L = raw.size(2), A = act.size(0), M = group.size(0);
  const auto a = act.accessor<int64_t, 1>();
  const auto s = slot.accessor<int64_t, 1>();
  const auto q = sel.accessor<int64_t, 1>();
  const auto g = group.accessor<int64_t, 1>();
  // Every index is checked before any write, so bad input leaves the tables untouched (same messages,
  // in the same order, as mhfast/_validate.py).
  for (int64_t j = 0; j < num_misses; ++j) check_value_in_range(op, "sel", q[j], 0, A);
  for (int64_t j = 0; j < num_misses; ++j) check_value_in_range(op, "act", a[q[j]], 0, M);
  for (int64_t j = 0; j < num_misses; ++j) check_value_in_range(op, "slot", s[q[j]], 0, S, /*allow_minus_one=*/true);
  for (int64_t j = 0; j < num_misses; ++j) check_value_in_range(op, "group", g[a[q[j]]], 0, G);
  const auto rn = raw_new.accessor<float, 2>();
  const auto ln = local_new.accessor<float, 2>();
  int64_t* st = stamp.mutable_data_ptr<int64_t>();
  float* r = raw.mutable_data_ptr<float>();
  float* l = local.mutable_data_ptr<float>();
  for (int64_t j = 0; j < num_misses; ++j) {
    const int64_t e_slot = s[q[j]];
    if (e_slot < 0) continue;  // no entry was free for this miss
    const int64_t e = g[a[q[j]]] * S + e_slot;
    if (st[e] != -(step + 2)) continue;  // not reserved in this step: nothing to fill
    for (int64_t t = 0; t < L; ++t) {
      r[e * L + t] = rn[j][t];
      l[e * L + t] = ln[j][t];
    }
    st[e] = step;
  }
}

}  // namespace cpu
}  // namespace mhfast
