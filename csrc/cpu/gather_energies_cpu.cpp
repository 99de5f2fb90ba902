// gather_energies on CPU: per-row log-softmax of the target, summed per sequence in fp32.
//
// Each row is read once: it is walked in L1-sized blocks, each block converted to fp32, its max
// taken and its exp-sum added to a running (max, sum) pair rescaled when the max grows (online
// logsumexp). Rows are independent and run in parallel; the per-sequence sums are then done
// serially in row order, so the result is bit-identical for any number of threads.
// Small vocabularies (V <= kSmallV, e.g. AntiBERTy's 25) take a path that handles a whole range
// of rows per call with each row in registers, and checks the targets as it goes (the serial
// check_in_range only runs to word the error when a bad one was seen).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "../checks.h"
#include "ops_cpu.h"
#include "row_math.h"

#include <torch/library.h>

namespace mhfast {
namespace cpu {
namespace {

constexpr int64_t kBlock = 2048;

// logsumexp of one contiguous row, with torch.logsumexp's special values: NaN if any NaN,
// +inf if any +inf, -inf if every entry is -inf.
template <typename scalar_t>
float row_logsumexp(const scalar_t* row, int64_t V, float* buf) {
  float m = -kInf, s = 0.0f;
  for (int64_t start = 0; start < V; start += kBlock) {
    const int64_t len = std::min(kBlock, V - start);
    const float* x;
    if constexpr (std::is_same_v<scalar_t, float>) {
      x = row + start;
    } else {
      to_float_block(row + start, len, buf);
      x = buf;
    }
    bool has_nan = false;
    const float bm = max_with_nan(x, len, &has_nan);
    if (has_nan) return std::numeric_limits<float>::quiet_NaN();
    if (bm == kInf) m = kInf;
    if (m == kInf || bm == -kInf) continue;  // sum no longer matters / block adds nothing
    const float new_m = std::max(m, bm);
    s = s * exp_nonpos(m - new_m) + sum_exp_shifted(x, len, new_m);
    m = new_m;
  }
  if (m == kInf || m == -kInf) return m;
  return m + std::log(s);
}

template <typename scalar_t>
void rows_kernel(const at::Tensor& logits, const int64_t* targets, float* target_logit,
                 float* token_logp) {
  const int64_t N = logits.size(0), V = logits.size(1), s0 = logits.stride(0);
  const scalar_t* base = logits.const_data_ptr<scalar_t>();
  // A row is ~V elements of work; small vocabularies are grouped so a chunk is >= ~32K.
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(V, 1));
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(std::is_same_v<scalar_t, float> ? 0 : kBlock);
    for (int64_t n = begin; n < end; ++n) {
      const scalar_t* row = base + n * s0;
      const float lse = row_logsumexp(row, V, buf.data());
      const float t = to_float(row[targets[n]]);
      target_logit[n] = t;
      token_logp[n] = t - lse;
    }
  });
}

// The small-V path over all rows; returns whether some target was outside [0, V).
template <typename scalar_t>
bool small_rows_kernel(const at::Tensor& logits, const int64_t* targets, float* target_logit,
                       float* token_logp) {
  const int64_t N = logits.size(0), V = logits.size(1), s0 = logits.stride(0);
  const scalar_t* base = logits.const_data_ptr<scalar_t>();
  const scalar_t* data_end = base + (N - 1) * s0 + V;
  const int64_t grain = std::max<int64_t>(1, 32768 / V);
  std::atomic<bool> any_bad{false};
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
    bool bad = false;
    small_rows_log_softmax_target(base, data_end, s0, V, targets, begin, end, target_logit,
                                  token_logp, &bad);
    if (bad) any_bad.store(true, std::memory_order_relaxed);
  });
  return any_bad.load();
}

// The per-sequence sums, serial and in row order: they do not depend on how rows were split among threads. A run
// of rows of one sequence is summed in registers (the same additions in the same order).
void sum_per_sequence(const at::Tensor& seq, const float* tl, const float* lp, int64_t num_seqs, float* er,
                      float* el) {
  std::fill(er, er + num_seqs, 0.0f);
  std::fill(el, el + num_seqs, 0.0f);
  const int64_t N = seq.size(0);
  const int64_t* seq_p = seq.const_data_ptr<int64_t>();
  for (int64_t n = 0; n < N;) {
    const int64_t s = seq_p[n];
    if (static_cast<uint64_t>(s) >= static_cast<uint64_t>(num_seqs)) {
      check_in_range("gather_energies", "seq_index", seq, 0, num_seqs);  // throws, naming the first bad entry
    }
    float raw = er[s], local = el[s];
    for (; n < N && seq_p[n] == s; ++n) {
      raw += -tl[n];
      local += -lp[n];
    }
    er[s] = raw;
    el[s] = local;
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> gather_energies_cpu(const at::Tensor& logits_in,
                                                                   const at::Tensor& targets,
                                                                   const at::Tensor& seq_index,
                                                                   int64_t num_seqs) {
  const char* op = "gather_energies";
  check_gather_energies_args(logits_in, targets, seq_index, num_seqs);
  check_device_type(op, "logits", logits_in, c10::DeviceType::CPU);
  const int64_t N = logits_in.size(0), V = logits_in.size(1);
  const at::Tensor tgt = targets.contiguous(), seq = seq_index.contiguous();
  const bool small = V >= 1 && V <= kSmallV && has_small_rows_path();
  if (!small) check_in_range(op, "targets", tgt, 0, V);

  const auto f32 = logits_in.options().dtype(at::kFloat);
  at::Tensor e_raw = at::empty({num_seqs}, f32), e_local = at::empty({num_seqs}, f32);
  at::Tensor token_logp = at::empty({N}, f32), target_logit = at::empty({N}, f32);
  // Rows must be unit-stride for the block loops; any row stride is fine.
  const at::Tensor logits = logits_in.stride(1) == 1 ? logits_in : logits_in.contiguous();
  float* tl = target_logit.mutable_data_ptr<float>();
  float* lp = token_logp.mutable_data_ptr<float>();
  if (N > 0) {
    MHFAST_DISPATCH_LOGITS(logits.scalar_type(), "mhfast_gather_energies_cpu", [&] {
      const int64_t* t = tgt.const_data_ptr<int64_t>();
      if (!small) {
        rows_kernel<scalar_t>(logits, t, tl, lp);
      } else if (small_rows_kernel<scalar_t>(logits, t, tl, lp)) {
        check_in_range(op, "targets", tgt, 0, V);  // throws, naming the first bad target
      }
    });
  }
  sum_per_sequence(seq, tl, lp, num_seqs, e_raw.mutable_data_ptr<float>(), e_local.mutable_data_ptr<float>());
  return {e_raw, e_local, token_logp};
}

}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) { m.impl("gather_energies", &mhfast::cpu::gather_energies_cpu); }
