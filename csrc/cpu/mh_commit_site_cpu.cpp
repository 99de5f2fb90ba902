// mh_commit_site_ on CPU: the accept + commit phase of a single-site MH step in one call.
//
// Chain i of the n moving ones (m = ch[i], distinct): u = counter_uniform(keys[m], epoch, step,
// stream, 0); log_alpha = beta * (target[m] - target_new[i]) + logq_reverse[i] - logq_forward[i] in
// fp32, left to right (mh_accept_'s arithmetic), beta a number or beta_rows[m] (both rounded to fp32); neither (forced accept) evaluates
// 0 * (target[m] - target[m]) + logq_forward[i] - logq_forward[i], as the sampler did with
// mh_accept_. Accepted: tokens[m, pos[i]] = proposed[i], rows raw/local_terms[m] = raw/local_new[i],
// e_raw/e_local[m] = e_raw/e_local_new[i] (in copies of the state tensors, returned), and every model
// row r of that chain (seq[r] = i) goes to cache[m, q[r]] (in place, converted to the cache dtype
// as Tensor.to does). The rows come in chunks (outputs: the model's sub-batches, row r of the
// concatenation), so that no caller has to concatenate them first. Indices are checked serially before anything is written.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>

#include "../checks.h"
#include "../counter_hash.h"
#include "ops_cpu.h"

namespace mhfast {
namespace cpu {
namespace {

// Row i of a 2-D float tensor into row m of a contiguous [*, T] copy.
void copy_row(const at::Tensor& src, int64_t i, float* dst, int64_t T) {
  const float* s = src.const_data_ptr<float>() + i * src.stride(0);
  const int64_t s1 = src.stride(1);
  for (int64_t t = 0; t < T; ++t) dst[t] = s[t * s1];
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_commit_site_cpu(
    const at::Tensor& tokens, const at::Tensor& raw_terms, const at::Tensor& local_terms, const at::Tensor& e_raw,
    const at::Tensor& e_local, const at::Tensor& target, at::Tensor& cache, const at::Tensor& keys,
    const at::Tensor& ch_in, const at::Tensor& pos_in, const at::Tensor& proposed, const at::Tensor& logq_forward,
    const at::Tensor& logq_reverse, const at::Tensor& raw_new, const at::Tensor& local_new,
    const at::Tensor& e_raw_new, const at::Tensor& e_local_new, const at::Tensor& target_new,
    const at::Tensor& seq_in, const at::Tensor& q_in, at::TensorList outputs, c10::optional<double> beta,
    const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step, int64_t stream) {
  const char* op = "mh_commit_site_";
  check_mh_commit_site_args({tokens, raw_terms, local_terms, e_raw, e_local, target, cache, keys, ch_in, pos_in,
                             proposed, logq_forward, logq_reverse, raw_new, local_new, e_raw_new, e_local_new,
                             target_new, seq_in, q_in, outputs},
                            beta, beta_rows, epoch, step, stream);
  check_device_type(op, "tokens", tokens, c10::DeviceType::CPU);
  const int64_t M = tokens.size(0), T = tokens.size(1), n = ch_in.size(0), R = seq_in.size(0);
  const at::Tensor ch = ch_in.contiguous(), pos = pos_in.contiguous(), seq = seq_in.contiguous(),
                   q = q_in.contiguous();
  check_in_range(op, "ch", ch, 0, M);
  check_distinct(op, "ch", ch, M);  // two writers of one state row would race
  check_in_range(op, "pos", pos, 0, T);
  check_in_range(op, "seq", seq, 0, n);
  check_in_range(op, "q", q, 0, T);
  if (beta_rows.has_value()) check_finite(op, "beta", *beta_rows);

  const auto contiguous = at::MemoryFormat::Contiguous;
  at::Tensor out_tokens = tokens.clone(contiguous), out_raw = raw_terms.clone(contiguous),
             out_local = local_terms.clone(contiguous), out_e_raw = e_raw.clone(contiguous),
             out_e_local = e_local.clone(contiguous);
  at::Tensor accepted = at::empty({n}, tokens.options().dtype(at::kBool));
  bool* acc = accepted.mutable_data_ptr<bool>();
  const int64_t* cp = ch.const_data_ptr<int64_t>();
  const int64_t* pp = pos.const_data_ptr<int64_t>();
  const float* tg = target.const_data_ptr<float>();
  const float* tn = target_new.const_data_ptr<float>();
  const float* lf = logq_forward.const_data_ptr<float>();
  const float* lr = logq_reverse.const_data_ptr<float>();
  const bool forced = !beta.has_value() && !beta_rows.has_value();
  const float b_all = beta.has_value() ? static_cast<float>(*beta) : 0.0f;  // fp32 beta, as torch.full
  for (int64_t i = 0; i < n; ++i) {
    const int64_t m = cp[i];
    // A chain row's own beta: the same float64 -> float32 rounding as a number's.
    const float b = beta_rows.has_value()
                        ? static_cast<float>(beta_rows->const_data_ptr<double>()[m * beta_rows->stride(0)])
                        : b_all;
    const float e = tg[m * target.stride(0)];
    const float e_new = !forced ? tn[i * target_new.stride(0)] : e;
    const float l_f = lf[i * logq_forward.stride(0)];
    const float l_r = !forced ? lr[i * logq_reverse.stride(0)] : l_f;
    const float log_alpha = b * (e - e_new) + l_r - l_f;
    const float u = counter_uniform(static_cast<uint64_t>(keys.const_data_ptr<int64_t>()[m * keys.stride(0)]),
                                    static_cast<uint64_t>(epoch), static_cast<uint64_t>(step),
                                    static_cast<uint64_t>(stream), 0);
    acc[i] = std::log(u) < log_alpha;  // NaN rejects
    if (!acc[i]) continue;
    out_tokens.mutable_data_ptr<int64_t>()[m * T + pp[i]] =
        proposed.const_data_ptr<int64_t>()[i * proposed.stride(0)];
    copy_row(raw_new, i, out_raw.mutable_data_ptr<float>() + m * T, T);
    copy_row(local_new, i, out_local.mutable_data_ptr<float>() + m * T, T);
    out_e_raw.mutable_data_ptr<float>()[m] = e_raw_new.const_data_ptr<float>()[i * e_raw_new.stride(0)];
    out_e_local.mutable_data_ptr<float>()[m] = e_local_new.const_data_ptr<float>()[i * e_local_new.stride(0)];
  }
  if (R > 0 && cache.size(2) > 0) {
    // The accepted rows of X' become the cache rows (Tensor.to's rounding to the cache dtype).
    const int64_t D = cache.size(2), es = cache.element_size(), row_bytes = D * es;
    char* dst = static_cast<char*>(cache.mutable_data_ptr());
    const int64_t s0 = cache.stride(0) * es, s1 = cache.stride(1) * es, s2 = cache.stride(2) * es;
    const int64_t* sp = seq.const_data_ptr<int64_t>();
    const int64_t* qp = q.const_data_ptr<int64_t>();
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1));
    int64_t r0 = 0;  // row of the concatenation where this chunk starts
    for (const at::Tensor& chunk : outputs) {
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
  return {out_tokens, out_raw, out_local, out_e_raw, out_e_local, accepted};
}

}  // namespace cpu
}  // namespace mhfast
