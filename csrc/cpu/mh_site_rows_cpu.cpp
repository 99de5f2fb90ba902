// mh_site_rows on CPU: the rows phase of a single-site MH step (see csrc/mhfast.cpp for the
// contract and mhfast/reference.py for the specification).
//
// Why one op: in Python this phase was ~11 dispatched calls (selects, scatters, nonzero_static,
// masked_copies, an index) around tensors of a few hundred elements, i.e. dispatch overhead, not
// work. Here it is a serial pass over the n moving chains (n * T elements: copies, the count
// check, seq/q/targets) and a parallel pass over the num_rows masked rows (the only part that
// grows as n * T^2).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstring>

#include "../checks.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_site_rows_cpu(
    const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
    const at::Tensor& local_terms, const at::Tensor& ch, const at::Tensor& pos, const at::Tensor& proposed,
    int64_t num_rows, int64_t mask_id) {
  const char* op = "mh_site_rows";
  check_mh_site_rows_args(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows);
  check_device_type(op, "tokens", tokens, c10::DeviceType::CPU);
  const int64_t M = tokens.size(0), T = tokens.size(1), n = ch.size(0);
  const at::Tensor ch_c = ch.contiguous(), pos_c = pos.contiguous(), prop_c = proposed.contiguous();
  check_in_range(op, "ch", ch_c, 0, M);
  check_in_range(op, "pos", pos_c, 0, T);
  const int64_t* chp = ch_c.const_data_ptr<int64_t>();
  const int64_t* posp = pos_c.const_data_ptr<int64_t>();
  const int64_t* propp = prop_c.const_data_ptr<int64_t>();
  const auto tok = tokens.accessor<int64_t, 2>();
  const auto mask = energy_mask.accessor<bool, 2>();
  const auto raw = raw_terms.accessor<float, 2>();
  const auto loc = local_terms.accessor<float, 2>();

  // The count first: a wrong num_rows raises before any output is written.
  int64_t count = 0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t t = 0; t < T; ++t) count += (mask[chp[j]][t] && t != posp[j]) ? 1 : 0;
  }
  TORCH_CHECK_VALUE(count == num_rows, "mhfast.", op, ": num_rows is ", num_rows, " but the chains ch have ",
                    count, " energy positions other than pos");

  const auto long_opts = tokens.options().memory_format(c10::MemoryFormat::Contiguous);
  const auto float_opts = raw_terms.options().memory_format(c10::MemoryFormat::Contiguous);
  at::Tensor x_new = at::empty({n, T}, long_opts), raw_new = at::empty({n, T}, float_opts),
             local_new = at::empty({n, T}, float_opts), seq = at::empty({num_rows}, long_opts),
             q = at::empty({num_rows}, long_opts), rows = at::empty({num_rows, T}, long_opts),
             targets = at::empty({num_rows}, long_opts);
  int64_t* x = x_new.mutable_data_ptr<int64_t>();
  float* rn = raw_new.mutable_data_ptr<float>();
  float* ln = local_new.mutable_data_ptr<float>();
  int64_t* seqp = seq.mutable_data_ptr<int64_t>();
  int64_t* qp = q.mutable_data_ptr<int64_t>();
  int64_t* tg = targets.mutable_data_ptr<int64_t>();
  int64_t r = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t c = chp[j], p = posp[j];
    int64_t* xj = x + j * T;
    for (int64_t t = 0; t < T; ++t) {
      xj[t] = tok[c][t];
      rn[j * T + t] = raw[c][t];
      ln[j * T + t] = loc[c][t];
    }
    xj[p] = propp[j];
    for (int64_t t = 0; t < T; ++t) {
      if (mask[c][t] && t != p) {
        seqp[r] = j;
        qp[r] = t;
        tg[r] = xj[t];
        ++r;
      }
    }
  }
  if (num_rows == 0 || T == 0) return {x_new, raw_new, local_new, seq, q, rows, targets};
  int64_t* out = rows.mutable_data_ptr<int64_t>();
  // Chunks of >= ~16K tokens (as masked_copies): below that, waking threads costs more than the copy.
  const int64_t grain = std::max<int64_t>(1, 16384 / T);
  at::parallel_for(0, num_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t* o = out + k * T;
      std::memcpy(o, x + seqp[k] * T, sizeof(int64_t) * T);
      o[qp[k]] = mask_id;
    }
  });
  return {x_new, raw_new, local_new, seq, q, rows, targets};
}

}  // namespace cpu
}  // namespace mhfast
