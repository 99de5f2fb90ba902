// mh_propose_site on CPU: the propose phase of a single-site MH step in one call.
//
// Per moving chain a: row = cache[act[a], pos[a]] (V entries), x = row / temperature in fp32 with
// the blocked ids set to -inf (what propose sees after the sampler's masked_fill: -inf / T = -inf),
// current = tokens[act[a], pos[a]], u = counter_uniform(keys[act[a]], epoch, step, stream, 0);
// then propose_scaled_row, the row code of propose (propose_row.h), so the draw is bit-identical to
// the unfused sequence gather -> masked_fill -> counter_uniforms -> propose.
// Index and token ranges are checked serially first; NaN / +inf rows are reported after the
// parallel pass (only fresh outputs were written).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "../checks.h"
#include "../counter_hash.h"
#include "ops_cpu.h"
#include "propose_row.h"
#include "row_math.h"

#include <torch/library.h>

namespace mhfast {
namespace cpu {
namespace {

struct SiteRows {
  const int64_t* act;
  const int64_t* pos;
  const int64_t* current;  // tokens[act, pos], checked
  const float* uniforms;
  const bool* blocked;  // contiguous [V]
  int64_t V, s0, s1;    // cache strides of dims 0, 1 (dim 2 is contiguous)
};

template <typename scalar_t>
void propose_site_rows(const scalar_t* cache, const SiteRows& r, int64_t A, float temperature,
                       double top_p, int64_t* proposed, float* logq_f, float* logq_r, bool* changed,
                       int8_t* status) {
  const int64_t V = r.V;
  const int64_t grain = std::max<int64_t>(1, 16384 / V);
  at::parallel_for(0, A, grain, [&](int64_t begin, int64_t end) {
    Scratch s;
    s.resize(V, top_p);
    float* x = s.x.data();
    for (int64_t a = begin; a < end; ++a) {
      to_float_block(cache + r.act[a] * r.s0 + r.pos[a] * r.s1, V, x);
      for (int64_t i = 0; i < V; ++i) x[i] = r.blocked[i] ? -kInf : x[i] / temperature;
      const RowOut o = propose_scaled_row(V, top_p, /*eps=*/0.0, r.current[a], r.uniforms[a], s);
      proposed[a] = o.proposed;
      logq_f[a] = o.logq_proposed;
      logq_r[a] = o.logq_current;
      changed[a] = o.proposed != r.current[a];
      status[a] = o.status;
    }
  });
}

// Serial pre-pass: the current tokens tokens[act, pos] (into cur) and the uniforms of keys[act] (into u).
void current_and_uniforms(const at::Tensor& tokens, const at::Tensor& keys, const int64_t* ap, const int64_t* pp,
                          int64_t A, int64_t epoch, int64_t step, int64_t stream, int64_t* cur, float* u) {
  const int64_t* tok = tokens.const_data_ptr<int64_t>();
  const int64_t* kp = keys.const_data_ptr<int64_t>();
  for (int64_t a = 0; a < A; ++a) {
    cur[a] = tok[ap[a] * tokens.stride(0) + pp[a] * tokens.stride(1)];
    u[a] = counter_uniform(static_cast<uint64_t>(kp[ap[a] * keys.stride(0)]), static_cast<uint64_t>(epoch),
                           static_cast<uint64_t>(step), static_cast<uint64_t>(stream), 0);
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_propose_site_cpu(
    const at::Tensor& cache_in, const at::Tensor& tokens, const at::Tensor& keys, const at::Tensor& act_in,
    const at::Tensor& pos_in, const at::Tensor& blocked_in, int64_t epoch, int64_t step, int64_t stream,
    double temperature, double top_p) {
  const char* op = "mh_propose_site";
  check_mh_propose_site_args(cache_in, tokens, keys, act_in, pos_in, blocked_in, epoch, step, stream,
                             temperature, top_p);
  check_device_type(op, "cache", cache_in, c10::DeviceType::CPU);
  const int64_t M = cache_in.size(0), T = cache_in.size(1), V = cache_in.size(2), A = act_in.size(0);
  const at::Tensor act = act_in.contiguous(), pos = pos_in.contiguous();
  check_in_range(op, "act", act, 0, M);
  check_in_range(op, "pos", pos, 0, T);
  const int64_t* ap = act.const_data_ptr<int64_t>();
  const int64_t* pp = pos.const_data_ptr<int64_t>();
  at::Tensor current = at::empty({A}, act.options());
  at::Tensor uniforms = at::empty({A}, act.options().dtype(at::kFloat));
  int64_t* cur = current.mutable_data_ptr<int64_t>();
  float* u = uniforms.mutable_data_ptr<float>();
  current_and_uniforms(tokens, keys, ap, pp, A, epoch, step, stream, cur, u);
  check_in_range(op, "tokens[act, pos]", current, 0, V);  // checked like propose's `current`

  at::Tensor proposed = at::empty({A}, act.options());
  const auto f32 = act.options().dtype(at::kFloat);
  at::Tensor logq_f = at::empty({A}, f32), logq_r = at::empty({A}, f32);
  at::Tensor changed = at::empty({A}, act.options().dtype(at::kBool));
  if (A == 0) return {proposed, logq_f, logq_r, changed};
  // The rows are read with unit stride; a cache that is not is copied once (never in the sampler).
  const at::Tensor cache = cache_in.stride(2) == 1 ? cache_in : cache_in.contiguous();
  const at::Tensor blocked = blocked_in.contiguous();
  const SiteRows rows{ap, pp, cur, u, blocked.const_data_ptr<bool>(), V, cache.stride(0), cache.stride(1)};
  std::vector<int8_t> status(A, kOk);
  MHFAST_DISPATCH_LOGITS(cache.scalar_type(), "mhfast_mh_propose_site_cpu", [&] {
    propose_site_rows<scalar_t>(cache.const_data_ptr<scalar_t>(), rows, A, static_cast<float>(temperature),
                                top_p, proposed.mutable_data_ptr<int64_t>(), logq_f.mutable_data_ptr<float>(),
                                logq_r.mutable_data_ptr<float>(), changed.mutable_data_ptr<bool>(),
                                status.data());
  });
  TORCH_CHECK_VALUE(std::find(status.begin(), status.end(), kNanOrInf) == status.end(), "mhfast.", op,
                    ": cache contains NaN or +inf at a proposed site (or overflows fp32 when divided by "
                    "temperature)");
  TORCH_CHECK_VALUE(std::find(status.begin(), status.end(), kNoFinite) == status.end(), "mhfast.", op,
                    ": cache has a proposed site with no finite unblocked entry (nothing can be proposed)");
  return {proposed, logq_f, logq_r, changed};
}

}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) { m.impl("mh_propose_site", &mhfast::cpu::mh_propose_site_cpu); }
