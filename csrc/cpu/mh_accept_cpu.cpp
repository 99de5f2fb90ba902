// mh_accept_ on CPU: Metropolis-Hastings accept/reject of B chains, in place.
//
// log_alpha = beta * (energy - energy_proposed) + logq_reverse - logq_forward, evaluated in
// fp32 in the reference's order; chain b accepts iff log(u) < log_alpha (NaN rejects). Positions
// are validated serially first, so bad input never leaves tokens half-updated. Only tokens is
// written; energy is an input.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>

#include "../checks.h"
#include "ops_cpu.h"

#include <torch/library.h>

namespace mhfast {
namespace cpu {

at::Tensor mh_accept_cpu(at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& proposed,
                         const at::Tensor& energy, const at::Tensor& energy_proposed,
                         const at::Tensor& logq_forward, const at::Tensor& logq_reverse,
                         const at::Tensor& beta, const at::Tensor& uniforms) {
  const char* op = "mh_accept_";
  check_mh_accept_args(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                       logq_reverse, beta, uniforms);
  check_device_type(op, "tokens", tokens, c10::DeviceType::CPU);
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const bool block = positions.dim() == 2;
  check_in_range(op, "positions", positions, 0, T, /*allow_minus_one=*/block);

  at::Tensor accepted = at::empty({B}, tokens.options().dtype(at::kBool));
  if (B == 0) return accepted;
  const int64_t K = block ? positions.size(1) : 1;
  // Strided views are read and written in place through their strides (no copies of the
  // in-place arguments, which would lose the writes).
  int64_t* tok = tokens.mutable_data_ptr<int64_t>();
  const int64_t ts0 = tokens.stride(0), ts1 = tokens.stride(1);
  const int64_t* pos = positions.const_data_ptr<int64_t>();
  const int64_t* prop = proposed.const_data_ptr<int64_t>();
  const int64_t ps0 = positions.stride(0), ps1 = block ? positions.stride(1) : 0;
  const int64_t qs0 = proposed.stride(0), qs1 = block ? proposed.stride(1) : 0;
  const float* e = energy.const_data_ptr<float>();
  const int64_t es = energy.stride(0);
  const float* ep = energy_proposed.const_data_ptr<float>();
  const float* lf = logq_forward.const_data_ptr<float>();
  const float* lr = logq_reverse.const_data_ptr<float>();
  const float* be = beta.const_data_ptr<float>();
  const float* un = uniforms.const_data_ptr<float>();
  const int64_t eps = energy_proposed.stride(0), lfs = logq_forward.stride(0),
                lrs = logq_reverse.stride(0), bes = beta.stride(0), uns = uniforms.stride(0);
  bool* acc = accepted.mutable_data_ptr<bool>();

  at::parallel_for(0, B, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float e_new = ep[b * eps];
      const float log_alpha = be[b * bes] * (e[b * es] - e_new) + lr[b * lrs] - lf[b * lfs];
      const bool ok = std::log(un[b * uns]) < log_alpha;  // false for NaN
      acc[b] = ok;
      if (!ok) continue;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t t = pos[b * ps0 + k * ps1];
        if (t >= 0) tok[b * ts0 + t * ts1] = prop[b * qs0 + k * qs1];
      }
    }
  });
  return accepted;
}

}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) { m.impl("mh_accept_", &mhfast::cpu::mh_accept_cpu); }
