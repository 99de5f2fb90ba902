// mh_commit_site_ on CPU: the accept + commit phase of a single-site MH step in one call (arguments: op_args.h).
//
// Chain i of the n moving ones (m = ch[i], distinct): u = counter_uniform(keys[m], epoch, step, stream, 0);
// log_alpha = beta * (target[m] - target_new[i]) + logq_reverse[i] - logq_forward[i] in fp32, left to right
// (mh_accept_'s arithmetic), beta a number or beta_rows[m] (both rounded to fp32); neither (forced accept)
// evaluates 0 * (target[m] - target[m]) + logq_forward[i] - logq_forward[i], as the sampler did with mh_accept_.
// Accepted: tokens[m, pos[i]] = proposed[i], rows raw/local_terms[m] = raw/local_new[i], e_raw/e_local[m] =
// e_raw/e_local_new[i] (in copies of the state tensors, returned), and every model row r of that chain
// (seq[r] = i) goes to cache[m, q[r]] (in place, converted to the cache dtype as Tensor.to does). The rows come
// in chunks (outputs: the model's sub-batches, row r of the concatenation), so that no caller has to concatenate
// them first. Indices are checked serially before anything is written.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include <torch/library.h>

#include "../checks.h"
#include "../op_args.h"
#include "../counter_hash.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {
namespace {

constexpr const char* kOp = "mh_commit_site_";

// Row i of a 2-D float tensor into row m of a contiguous [*, T] copy.
void copy_row(const at::Tensor& src, int64_t i, float* dst, int64_t T) {
  const float* s = src.const_data_ptr<float>() + i * src.stride(0);
  const int64_t s1 = src.stride(1);
  for (int64_t t = 0; t < T; ++t) dst[t] = s[t * s1];
}

// The serial value pre-pass: every index read below is in bounds, the chains distinct, beta_rows finite.
void check_values(const CommitSiteTensors& a, const at::Tensor& ch, const at::Tensor& pos, const at::Tensor& seq,
                  const at::Tensor& q) {
  const int64_t M = a.tokens.size(0), T = a.tokens.size(1);
  check_in_range(kOp, "proposal.ch", ch, 0, M);
  check_distinct(kOp, "proposal.ch", ch, M);  // two writers of one state row would race
  check_in_range(kOp, "proposal.pos", pos, 0, T);
  check_in_range(kOp, "rows.seq", seq, 0, ch.size(0));
  check_in_range(kOp, "rows.q", q, 0, T);
  if (a.beta_rows.has_value()) check_finite(kOp, "beta", *a.beta_rows);
}

// The new state: contiguous copies of the old one, changed where a chain accepts.
struct NewState {
  at::Tensor tokens, raw, local, e_raw, e_local, accepted;
};

// Chain i's MH test (mh_accept_'s fp32 arithmetic, left to right): u from the counter hash of its key.
bool accepts(const CommitSiteTensors& a, int64_t i, int64_t m) {
  const bool forced = !a.beta.has_value() && !a.beta_rows.has_value();
  // A chain row's own beta: the same float64 -> float32 rounding as a number's (torch.full in fp32).
  const float b = a.beta_rows.has_value()
                      ? static_cast<float>(a.beta_rows->const_data_ptr<double>()[m * a.beta_rows->stride(0)])
                      : static_cast<float>(a.beta.value_or(0.0));
  const float e = a.target.const_data_ptr<float>()[m * a.target.stride(0)];
  const float e_new = forced ? e : a.target_new.const_data_ptr<float>()[i * a.target_new.stride(0)];
  const float l_f = a.logq_forward.const_data_ptr<float>()[i * a.logq_forward.stride(0)];
  const float l_r = forced ? l_f : a.logq_reverse.const_data_ptr<float>()[i * a.logq_reverse.stride(0)];
  const float log_alpha = b * (e - e_new) + l_r - l_f;
  const float u = counter_uniform(static_cast<uint64_t>(a.keys.const_data_ptr<int64_t>()[m * a.keys.stride(0)]),
                                  static_cast<uint64_t>(a.epoch), static_cast<uint64_t>(a.step),
                                  static_cast<uint64_t>(a.stream), 0);
  return std::log(u) < log_alpha;  // NaN rejects
}

// The MH test of every moving chain; an accepted chain's token, term rows and energies into the new state.
void accept_and_commit(const CommitSiteTensors& a, const int64_t* cp, const int64_t* pp, NewState& out) {
  const int64_t T = a.tokens.size(1);
  bool* acc = out.accepted.mutable_data_ptr<bool>();
  for (int64_t i = 0; i < a.ch.size(0); ++i) {
    const int64_t m = cp[i];
    acc[i] = accepts(a, i, m);
    if (!acc[i]) continue;
    out.tokens.mutable_data_ptr<int64_t>()[m * T + pp[i]] =
        a.proposed.const_data_ptr<int64_t>()[i * a.proposed.stride(0)];
    copy_row(a.raw_new, i, out.raw.mutable_data_ptr<float>() + m * T, T);
    copy_row(a.local_new, i, out.local.mutable_data_ptr<float>() + m * T, T);
    out.e_raw.mutable_data_ptr<float>()[m] = a.e_raw_new.const_data_ptr<float>()[i * a.e_raw_new.stride(0)];
    out.e_local.mutable_data_ptr<float>()[m] = a.e_local_new.const_data_ptr<float>()[i * a.e_local_new.stride(0)];
  }
}

// The accepted chains' model rows of X' into the cache, in place (Tensor.to's rounding to the cache dtype), chunk
// by chunk (row r of the concatenation of a.outputs).
void write_cache_rows(const CommitSiteTensors& a, const int64_t* cp, const int64_t* sp, const int64_t* qp,
                      const bool* acc) {
  const at::Tensor& cache = a.cache;
  const int64_t D = cache.size(2), es = cache.element_size(), row_bytes = D * es;
  char* dst = static_cast<char*>(cache.mutable_data_ptr());
  const int64_t s0 = cache.stride(0) * es, s1 = cache.stride(1) * es, s2 = cache.stride(2) * es;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
  int64_t r0 = 0;  // row of the concatenation where this chunk starts
  for (const at::Tensor& chunk : a.outputs) {
    const at::Tensor rows = chunk.to(cache.scalar_type()).contiguous();
    const char* src = static_cast<const char*>(rows.const_data_ptr());
    at::parallel_for(0, rows.size(0), grain, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        const int64_t r = r0 + j;
        if (!acc[sp[r]]) continue;
        char* d = dst + cp[sp[r]] * s0 + qp[r] * s1;
        if (s2 == es) {
          std::memcpy(d, src + j * row_bytes, row_bytes);
        } else {
          for (int64_t k = 0; k < D; ++k) std::memcpy(d + k * s2, src + j * row_bytes + k * es, es);
        }
      }
    });
    r0 += rows.size(0);
  }
}

CommitSiteOut mh_commit_site_cpu(const CommitSiteTensors& a) {
  check_device_type(kOp, "chains.tokens", a.tokens, c10::DeviceType::CPU);
  const at::Tensor ch = a.ch.contiguous(), pos = a.pos.contiguous(), seq = a.seq.contiguous(), q = a.q.contiguous();
  check_values(a, ch, pos, seq, q);
  const auto contiguous = at::MemoryFormat::Contiguous;
  NewState out{a.tokens.clone(contiguous), a.raw_terms.clone(contiguous), a.local_terms.clone(contiguous),
               a.e_raw.clone(contiguous), a.e_local.clone(contiguous),
               at::empty({ch.size(0)}, a.tokens.options().dtype(at::kBool))};
  const int64_t* cp = ch.const_data_ptr<int64_t>();
  accept_and_commit(a, cp, pos.const_data_ptr<int64_t>(), out);
  if (seq.size(0) > 0 && a.cache.size(2) > 0) {
    write_cache_rows(a, cp, seq.const_data_ptr<int64_t>(), q.const_data_ptr<int64_t>(),
                     out.accepted.const_data_ptr<bool>());
  }
  return {out.tokens, out.raw, out.local, out.e_raw, out.e_local, out.accepted};
}

}  // namespace
}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) {
  m.impl("mh_commit_site_", &mhfast::commit_site_entry<mhfast::cpu::mh_commit_site_cpu>);
}
