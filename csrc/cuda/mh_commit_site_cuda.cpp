// mh_commit_site_ on CUDA: the op's tensors (unpacked and checked once, csrc/op_args.h) become the kernel's
// plain struct here, the state copies and the accept flags are allocated, and the kernel runs once per chunk of
// model rows (mh_commit_site_kernel.cu). No host-device sync: value ranges are checked in Python
// (mhfast/_validate.py, validate=True) and the kernel skips invalid indices (ops_cuda.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <vector>

#include "../checks.h"
#include "../op_args.h"
#include "tensor_views.h"

namespace mhfast {
namespace cuda {
namespace {

// The kernel's view of the op's inputs; the outputs (copies of the state, accepted) are set by the caller.
CommitSiteArgs kernel_args(const CommitSiteTensors& t) {
  CommitSiteArgs a{};
  a.M = t.tokens.size(0);
  a.T = t.tokens.size(1);
  a.n = t.ch.size(0);
  a.D = t.cache.size(2);
  a.target = view1<float>(t.target);
  a.cache = t.cache.mutable_data_ptr();
  a.cache_stride0 = t.cache.stride(0);
  a.cache_stride1 = t.cache.stride(1);
  a.cache_stride2 = t.cache.stride(2);
  a.elem_size = t.cache.element_size();
  a.keys = view1<int64_t>(t.keys);
  a.ch = view1<int64_t>(t.ch);
  a.pos = view1<int64_t>(t.pos);
  a.proposed = view1<int64_t>(t.proposed);
  a.logq_forward = view1<float>(t.logq_forward);
  a.logq_reverse = view1<float>(t.logq_reverse);
  a.raw_new = view2<float>(t.raw_new);
  a.local_new = view2<float>(t.local_new);
  a.e_raw_new = view1<float>(t.e_raw_new);
  a.e_local_new = view1<float>(t.e_local_new);
  a.target_new = view1<float>(t.target_new);
  a.seq = view1<int64_t>(t.seq);
  a.q = view1<int64_t>(t.q);
  a.beta = t.beta.has_value() ? static_cast<float>(*t.beta) : 0.0f;
  a.beta_rows = t.beta_rows.has_value() ? view1<double>(*t.beta_rows) : Strided1<const double>{nullptr, 0};
  a.forced = !t.beta.has_value() && !t.beta_rows.has_value();
  a.epoch = t.epoch;
  a.step = t.step;
  a.stream = t.stream;
  return a;
}

// One launch per chunk of rows (the first also runs the chain blocks; no chunk: the chain blocks alone).
void launch_per_chunk(CommitSiteArgs a, at::TensorList outputs, at::ScalarType cache_dtype) {
  std::vector<at::Tensor> chunks;  // Tensor.to's rounding to the cache dtype, rows contiguous
  for (const at::Tensor& o : outputs) chunks.push_back(o.to(cache_dtype).contiguous());
  const cudaStream_t stream = current_stream();
  a.chain_blocks = a.n;
  a.row0 = a.rows = 0;
  a.outputs = nullptr;
  if (chunks.empty()) launch_mh_commit_site(a, stream);
  for (const at::Tensor& chunk : chunks) {
    a.rows = chunk.size(0);
    a.outputs = chunk.const_data_ptr();
    launch_mh_commit_site(a, stream);
    a.row0 += a.rows;
    a.chain_blocks = 0;
  }
}

CommitSiteOut mh_commit_site_cuda(const CommitSiteTensors& t) {
  check_device_type("mh_commit_site_", "chains.tokens", t.tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(t.tokens.device());
  const auto contiguous = at::MemoryFormat::Contiguous;
  at::Tensor tokens = t.tokens.clone(contiguous), raw = t.raw_terms.clone(contiguous),
             local = t.local_terms.clone(contiguous), e_raw = t.e_raw.clone(contiguous),
             e_local = t.e_local.clone(contiguous);
  at::Tensor accepted = at::empty({t.ch.size(0)}, t.tokens.options().dtype(at::kBool));
  CommitSiteArgs a = kernel_args(t);
  a.tokens = tokens.mutable_data_ptr<int64_t>();
  a.raw_terms = raw.mutable_data_ptr<float>();
  a.local_terms = local.mutable_data_ptr<float>();
  a.e_raw = e_raw.mutable_data_ptr<float>();
  a.e_local = e_local.mutable_data_ptr<float>();
  a.accepted = accepted.mutable_data_ptr<bool>();
  launch_per_chunk(a, t.outputs, t.cache.scalar_type());
  return {tokens, raw, local, e_raw, e_local, accepted};
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) {
  m.impl("mh_commit_site_", &mhfast::commit_site_entry<mhfast::cuda::mh_commit_site_cuda>);
}
