// mh_memo_update_ on CPU: the proposal memo after a single-site MH test (see csrc/mhfast.cpp for
// the contract, mhfast/reference.py for the specification, mhfast/sampler/memo.py for why).
//
// Why one op: in Python this was ~20 dispatched calls (masked selects, gathers, scatters and index
// copies, written so that no host sync was needed) on a few chains' rows; here it is one serial
// pass over the n tested chains, after a pre-pass that checks every index, so bad input raises
// before the memo is touched.
#include <ATen/core/Tensor.h>

#include "../checks.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {

void mh_memo_update_cpu(at::Tensor& keys, at::Tensor& raw, at::Tensor& local, at::Tensor& next, const at::Tensor& ch,
                        const at::Tensor& pos, const at::Tensor& proposed, const at::Tensor& raw_new,
                        const at::Tensor& local_new, const at::Tensor& accepted, int64_t num_misses,
                        int64_t vocab_size) {
  const char* op = "mh_memo_update_";
  check_mh_memo_update_args(keys, raw, local, next, ch, pos, proposed, raw_new, local_new, accepted, num_misses,
                            vocab_size);
  check_device_type(op, "keys", keys, c10::DeviceType::CPU);
  const int64_t C = keys.size(0), S = keys.size(1), T = raw.size(2), n = ch.size(0);
  const at::Tensor ch_c = ch.contiguous();
  check_in_range(op, "ch", ch_c, 0, C);
  const int64_t* chp = ch_c.const_data_ptr<int64_t>();
  check_distinct(op, "ch", ch_c, C);  // one writer per memo row
  int64_t* kp = keys.mutable_data_ptr<int64_t>();
  int64_t* np = next.mutable_data_ptr<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    TORCH_CHECK_VALUE(np[chp[j]] >= 0 && np[chp[j]] < S, "mhfast.", op, ": next contains ", np[chp[j]],
                      ", outside [0, ", S, ")");
  }
  const auto p = pos.accessor<int64_t, 1>();
  const auto w = proposed.accessor<int64_t, 1>();
  const auto acc = accepted.accessor<bool, 1>();
  const auto rn = raw_new.accessor<float, 2>();
  const auto ln = local_new.accessor<float, 2>();
  float* rp = raw.mutable_data_ptr<float>();
  float* lp = local.mutable_data_ptr<float>();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t c = chp[j];
    if (acc[j]) {  // the chain moved: its entries were proposals from a state it has left
      for (int64_t s = 0; s < S; ++s) kp[c * S + s] = -1;
      np[c] = 0;
    } else if (j < num_misses) {  // a new rejected proposal: into the oldest (or first free) slot
      const int64_t s = np[c];
      kp[c * S + s] = p[j] * vocab_size + w[j];
      float* r = rp + (c * S + s) * T;
      float* l = lp + (c * S + s) * T;
      for (int64_t t = 0; t < T; ++t) {
        r[t] = rn[j][t];
        l[t] = ln[j][t];
      }
      np[c] = (s + 1) % S;
    }
  }
}

}  // namespace cpu
}  // namespace mhfast
