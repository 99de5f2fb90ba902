// mh_propose_site on CUDA: the propose kernel in its site mode (propose_kernel.cu), so the row code is
// shared and equal rows draw equal tokens.
// No host-device sync: value ranges are checked in Python (mhfast/_validate.py, validate=True) and the kernel
// stays in bounds on invalid values (ops_cuda.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "../checks.h"
#include "tensor_views.h"

namespace mhfast {
namespace cuda {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_propose_site_cuda(
    const at::Tensor& cache_in, const at::Tensor& tokens, const at::Tensor& keys, const at::Tensor& act,
    const at::Tensor& pos, const at::Tensor& blocked_in, int64_t epoch, int64_t step, int64_t stream,
    double temperature, double top_p) {
  check_mh_propose_site_args(cache_in, tokens, keys, act, pos, blocked_in, epoch, step, stream, temperature,
                             top_p);
  check_device_type("mh_propose_site", "cache", cache_in, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(cache_in.device());
  const at::Tensor cache = (cache_in.size(2) > 1 && cache_in.stride(2) != 1) ? cache_in.contiguous() : cache_in;
  const at::Tensor blocked = blocked_in.contiguous();
  const int64_t A = act.size(0), V = cache.size(2);
  at::Tensor proposed = at::empty({A}, act.options());
  const auto f32 = act.options().dtype(at::kFloat);
  at::Tensor logq_f = at::empty({A}, f32), logq_r = at::empty({A}, f32);
  at::Tensor changed = at::empty({A}, act.options().dtype(at::kBool));
  at::Tensor scratch;
  const int64_t scratch_stride = A > 0 ? propose_scratch_stride(V, cache.get_device()) : 0;
  if (scratch_stride > 0) scratch = at::empty({A, scratch_stride}, f32);
  ProposeSiteArgs site;
  site.on = true;
  site.act = view1<int64_t>(act);
  site.pos = view1<int64_t>(pos);
  site.cache_stride0 = cache.stride(0);
  site.cache_stride1 = cache.stride(1);
  site.tokens = view2<int64_t>(tokens);
  site.keys = view1<int64_t>(keys);
  site.epoch = epoch;
  site.step = step;
  site.stream = stream;
  site.blocked = blocked.const_data_ptr<bool>();
  site.changed = changed.mutable_data_ptr<bool>();
  launch_propose_site(cache.const_data_ptr(), float_kind(cache), A, V, site, static_cast<float>(temperature),
                      top_p, scratch.defined() ? scratch.mutable_data_ptr<float>() : nullptr, scratch_stride,
                      proposed.mutable_data_ptr<int64_t>(), logq_f.mutable_data_ptr<float>(),
                      logq_r.mutable_data_ptr<float>(), current_stream());
  return {proposed, logq_f, logq_r, changed};
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) { m.impl("mh_propose_site", &mhfast::cuda::mh_propose_site_cuda); }
