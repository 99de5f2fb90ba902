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

#include <torch/library.h>

namespace mhfast {
namespace cpu {

namespace {

using SiteRowsOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The moves, read in place after their range checks.
struct Moves {
  const int64_t *ch, *pos, *proposed;
  int64_t n;
};

// The energy positions of X' other than pos (a wrong num_rows raises before any output is written).
int64_t count_rows(const at::TensorAccessor<bool, 2>& mask, const Moves& mv, int64_t T) {
  int64_t count = 0;
  for (int64_t j = 0; j < mv.n; ++j) {
    for (int64_t t = 0; t < T; ++t) count += (mask[mv.ch[j]][t] && t != mv.pos[j]) ? 1 : 0;
  }
  return count;
}

// X' rows and term copies, and the (seq, q, targets) of its rows to forward, in row-major order.
void fill_moves(const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
                const at::Tensor& local_terms, const Moves& mv, SiteRowsOut& out) {
  const int64_t T = tokens.size(1);
  const auto tok = tokens.accessor<int64_t, 2>();
  const auto mask = energy_mask.accessor<bool, 2>();
  const auto raw = raw_terms.accessor<float, 2>();
  const auto loc = local_terms.accessor<float, 2>();
  int64_t* x = std::get<0>(out).mutable_data_ptr<int64_t>();
  float* rn = std::get<1>(out).mutable_data_ptr<float>();
  float* ln = std::get<2>(out).mutable_data_ptr<float>();
  int64_t* seqp = std::get<3>(out).mutable_data_ptr<int64_t>();
  int64_t* qp = std::get<4>(out).mutable_data_ptr<int64_t>();
  int64_t* tg = std::get<6>(out).mutable_data_ptr<int64_t>();
  int64_t r = 0;
  for (int64_t j = 0; j < mv.n; ++j) {
    const int64_t c = mv.ch[j], p = mv.pos[j];
    int64_t* xj = x + j * T;
    for (int64_t t = 0; t < T; ++t) {
      xj[t] = tok[c][t];
      rn[j * T + t] = raw[c][t];
      ln[j * T + t] = loc[c][t];
    }
    xj[p] = mv.proposed[j];
    for (int64_t t = 0; t < T; ++t) {
      if (mask[c][t] && t != p) {
        seqp[r] = j;
        qp[r] = t;
        tg[r] = xj[t];
        ++r;
      }
    }
  }
}

// rows = masked_copies(X', seq, q, mask_id).
void masked_rows(SiteRowsOut& out, int64_t T, int64_t mask_id) {
  const int64_t num_rows = std::get<3>(out).size(0);
  const int64_t* x = std::get<0>(out).const_data_ptr<int64_t>();
  const int64_t* seqp = std::get<3>(out).const_data_ptr<int64_t>();
  const int64_t* qp = std::get<4>(out).const_data_ptr<int64_t>();
  int64_t* rows = std::get<5>(out).mutable_data_ptr<int64_t>();
  // Chunks of >= ~16K tokens (as masked_copies): below that, waking threads costs more than the copy.
  const int64_t grain = std::max<int64_t>(1, 16384 / T);
  at::parallel_for(0, num_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      int64_t* o = rows + k * T;
      std::memcpy(o, x + seqp[k] * T, sizeof(int64_t) * T);
      o[qp[k]] = mask_id;
    }
  });
}

}  // namespace

SiteRowsOut mh_site_rows_cpu(const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
                             const at::Tensor& local_terms, const at::Tensor& ch, const at::Tensor& pos,
                             const at::Tensor& proposed, int64_t num_rows, int64_t mask_id) {
  const char* op = "mh_site_rows";
  check_mh_site_rows_args(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows);
  check_device_type(op, "tokens", tokens, c10::DeviceType::CPU);
  const int64_t M = tokens.size(0), T = tokens.size(1), n = ch.size(0);
  const at::Tensor ch_c = ch.contiguous(), pos_c = pos.contiguous(), prop_c = proposed.contiguous();
  check_in_range(op, "ch", ch_c, 0, M);
  check_in_range(op, "pos", pos_c, 0, T);
  const Moves mv{ch_c.const_data_ptr<int64_t>(), pos_c.const_data_ptr<int64_t>(), prop_c.const_data_ptr<int64_t>(),
                 n};
  const int64_t count = count_rows(energy_mask.accessor<bool, 2>(), mv, T);
  TORCH_CHECK_VALUE(count == num_rows, "mhfast.", op, ": num_rows is ", num_rows, " but the chains ch have ",
                    count, " energy positions other than pos");
  const auto long_opts = tokens.options().memory_format(c10::MemoryFormat::Contiguous);
  const auto float_opts = raw_terms.options().memory_format(c10::MemoryFormat::Contiguous);
  SiteRowsOut out{at::empty({n, T}, long_opts),        at::empty({n, T}, float_opts),
                  at::empty({n, T}, float_opts),       at::empty({num_rows}, long_opts),
                  at::empty({num_rows}, long_opts),    at::empty({num_rows, T}, long_opts),
                  at::empty({num_rows}, long_opts)};
  fill_moves(tokens, energy_mask, raw_terms, local_terms, mv, out);
  if (num_rows > 0 && T > 0) masked_rows(out, T, mask_id);
  return out;
}

}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) { m.impl("mh_site_rows", &mhfast::cpu::mh_site_rows_cpu); }
