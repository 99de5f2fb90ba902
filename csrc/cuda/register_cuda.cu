// CUDA entry points of mhfast's ops: the op-boundary metadata checks (csrc/checks.h, once per
// call), outputs, device guard, current stream; the kernels are behind the raw-pointer
// launchers of ops_cuda.h and see plain structs. No host-device sync anywhere: value ranges
// (data) are checked in Python (mhfast/_validate.py, by mhfast.ops with validate=True) and the
// kernels stay in bounds on invalid values (see ops_cuda.h for what they produce then).
#include <ATen/core/Tensor.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "../checks.h"
#include "ops_cuda.h"

namespace mhfast {
namespace cuda {
namespace {

template <typename T>
Strided1<const T> view1(const at::Tensor& t) {
  return {t.const_data_ptr<T>(), t.stride(0)};
}

// A 1-D tensor is seen as [n, 1] (column stride 0).
template <typename T>
Strided2<const T> view2(const at::Tensor& t) {
  if (t.dim() == 1) return {t.const_data_ptr<T>(), t.size(0), 1, t.stride(0), 0};
  return {t.const_data_ptr<T>(), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

FloatKind float_kind(const at::Tensor& logits) {
  switch (logits.scalar_type()) {
    case at::ScalarType::Half:
      return FloatKind::kFloat16;
    case at::ScalarType::BFloat16:
      return FloatKind::kBFloat16;
    default:
      return FloatKind::kFloat32;  // the checks admitted only these three
  }
}

// The kernels read each row with unit column stride (vector loads); any row stride is fine.
at::Tensor unit_column_stride(const at::Tensor& logits) {
  return (logits.size(1) > 1 && logits.stride(1) != 1) ? logits.contiguous() : logits;
}

at::Tensor masked_copies_cuda(const at::Tensor& tokens, const at::Tensor& seq_index,
                              const at::Tensor& pos_index, int64_t mask_id) {
  check_masked_copies_args(tokens, seq_index, pos_index);
  check_device_type("masked_copies", "tokens", tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(tokens.device());
  const int64_t N = seq_index.size(0);
  at::Tensor out = at::empty({N, tokens.size(1)}, tokens.options());
  launch_masked_copies(view2<int64_t>(tokens), view1<int64_t>(seq_index), view1<int64_t>(pos_index), N,
                       mask_id, out.mutable_data_ptr<int64_t>(), c10::cuda::getCurrentCUDAStream().stream());
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gather_energies_cuda(const at::Tensor& logits_in,
                                                                    const at::Tensor& targets,
                                                                    const at::Tensor& seq_index,
                                                                    int64_t num_seqs) {
  check_gather_energies_args(logits_in, targets, seq_index, num_seqs);
  check_device_type("gather_energies", "logits", logits_in, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(logits_in.device());
  const at::Tensor logits = unit_column_stride(logits_in);
  const int64_t N = logits.size(0), V = logits.size(1);
  const auto f32 = logits.options().dtype(at::kFloat);
  at::Tensor e_raw = at::empty({num_seqs}, f32);
  at::Tensor e_local = at::empty({num_seqs}, f32);
  at::Tensor token_logp = at::empty({N}, f32);
  at::Tensor target_logit = at::empty({N}, f32);  // scratch between the two launches
  at::Tensor unsorted = at::empty({1}, logits.options().dtype(at::kInt));  // set by launch 1
  launch_gather_energies(logits.const_data_ptr(), float_kind(logits), N, V, logits.stride(0),
                         view1<int64_t>(targets), view1<int64_t>(seq_index), num_seqs,
                         e_raw.mutable_data_ptr<float>(), e_local.mutable_data_ptr<float>(),
                         token_logp.mutable_data_ptr<float>(), target_logit.mutable_data_ptr<float>(),
                         unsorted.mutable_data_ptr<int>(), c10::cuda::getCurrentCUDAStream().stream());
  return {e_raw, e_local, token_logp};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> propose_cuda(const at::Tensor& logits_in,
                                                            const at::Tensor& current,
                                                            double temperature, double top_p,
                                                            const at::Tensor& uniforms,
                                                            double uniform_mix) {
  check_propose_args(logits_in, current, temperature, top_p, uniforms, uniform_mix);
  check_device_type("propose", "logits", logits_in, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(logits_in.device());
  const at::Tensor logits = unit_column_stride(logits_in);
  const int64_t B = logits.size(0), V = logits.size(1);
  at::Tensor proposed = at::empty({B}, current.options());
  at::Tensor logq_proposed = at::empty({B}, uniforms.options());
  at::Tensor logq_current = at::empty({B}, uniforms.options());
  at::Tensor scratch;  // rows too long for shared memory live here
  const int64_t scratch_stride = B > 0 ? propose_scratch_stride(V, logits.get_device()) : 0;
  if (scratch_stride > 0) scratch = at::empty({B, scratch_stride}, logits.options().dtype(at::kFloat));
  launch_propose(logits.const_data_ptr(), float_kind(logits), B, V, logits.stride(0),
                 view1<int64_t>(current), static_cast<float>(temperature), top_p, uniform_mix,
                 view1<float>(uniforms),
                 scratch.defined() ? scratch.mutable_data_ptr<float>() : nullptr, scratch_stride,
                 proposed.mutable_data_ptr<int64_t>(), logq_proposed.mutable_data_ptr<float>(),
                 logq_current.mutable_data_ptr<float>(), c10::cuda::getCurrentCUDAStream().stream());
  return {proposed, logq_proposed, logq_current};
}

at::Tensor mh_accept_cuda(at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& proposed,
                          const at::Tensor& energy, const at::Tensor& energy_proposed,
                          const at::Tensor& logq_forward, const at::Tensor& logq_reverse,
                          const at::Tensor& beta, const at::Tensor& uniforms) {
  check_mh_accept_args(tokens, positions, proposed, energy, energy_proposed, logq_forward,
                       logq_reverse, beta, uniforms);
  check_device_type("mh_accept_", "tokens", tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(tokens.device());
  at::Tensor accepted = at::empty({tokens.size(0)}, tokens.options().dtype(at::kBool));
  const Strided2<const int64_t> pos = view2<int64_t>(positions);
  const MhAcceptArgs args{
      {tokens.mutable_data_ptr<int64_t>(), tokens.size(0), tokens.size(1), tokens.stride(0),
       tokens.stride(1)},
      pos,
      view2<int64_t>(proposed),
      view1<float>(energy),
      view1<float>(energy_proposed),
      view1<float>(logq_forward),
      view1<float>(logq_reverse),
      view1<float>(beta),
      view1<float>(uniforms),
      accepted.mutable_data_ptr<bool>(),
  };
  launch_mh_accept(args, c10::cuda::getCurrentCUDAStream().stream());
  return accepted;
}

at::Tensor counter_uniforms_cuda(const at::Tensor& keys, int64_t epoch, int64_t step, int64_t stream,
                                 const c10::optional<at::Tensor>& lanes) {
  check_counter_uniforms_args(keys, epoch, step, stream, lanes);
  check_device_type("counter_uniforms", "keys", keys, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(keys.device());
  const at::Tensor k = keys.contiguous();
  const at::Tensor l = lanes.has_value() ? lanes->contiguous() : at::Tensor();
  at::Tensor out = at::empty(keys.sizes(), keys.options().dtype(at::kFloat));
  C10_CUDA_CHECK(launch_counter_uniforms(k.const_data_ptr<int64_t>(), l.defined() ? l.const_data_ptr<int64_t>()
                                         : nullptr, k.numel(), epoch, step, stream, out.mutable_data_ptr<float>(),
                                         c10::cuda::getCurrentCUDAStream().stream()));
  return out;
}

// The propose phase of a single-site step: the propose kernel in its site mode (propose_cuda.cu),
// so the row code is shared and equal rows draw equal tokens.
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
                      logq_r.mutable_data_ptr<float>(), c10::cuda::getCurrentCUDAStream().stream());
  return {proposed, logq_f, logq_r, changed};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_commit_site_cuda(
    const at::Tensor& tokens, const at::Tensor& raw_terms, const at::Tensor& local_terms, const at::Tensor& e_raw,
    const at::Tensor& e_local, const at::Tensor& target, at::Tensor& cache, const at::Tensor& keys,
    const at::Tensor& ch, const at::Tensor& pos, const at::Tensor& proposed, const at::Tensor& logq_forward,
    const at::Tensor& logq_reverse, const at::Tensor& raw_new, const at::Tensor& local_new,
    const at::Tensor& e_raw_new, const at::Tensor& e_local_new, const at::Tensor& target_new,
    const at::Tensor& seq, const at::Tensor& q, at::TensorList outputs_in, c10::optional<double> beta,
    const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step, int64_t stream) {
  check_mh_commit_site_args({tokens, raw_terms, local_terms, e_raw, e_local, target, cache, keys, ch, pos,
                             proposed, logq_forward, logq_reverse, raw_new, local_new, e_raw_new, e_local_new,
                             target_new, seq, q, outputs_in},
                            beta, beta_rows, epoch, step, stream);
  check_device_type("mh_commit_site_", "tokens", tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(tokens.device());
  const auto contiguous = at::MemoryFormat::Contiguous;
  at::Tensor out_tokens = tokens.clone(contiguous), out_raw = raw_terms.clone(contiguous),
             out_local = local_terms.clone(contiguous), out_e_raw = e_raw.clone(contiguous),
             out_e_local = e_local.clone(contiguous);
  at::Tensor accepted = at::empty({ch.size(0)}, tokens.options().dtype(at::kBool));
  std::vector<at::Tensor> chunks;  // Tensor.to's rounding to the cache dtype, rows contiguous
  for (const at::Tensor& o : outputs_in) chunks.push_back(o.to(cache.scalar_type()).contiguous());
  CommitSiteArgs a{};
  a.M = tokens.size(0);
  a.T = tokens.size(1);
  a.n = ch.size(0);
  a.D = cache.size(2);
  a.tokens = out_tokens.mutable_data_ptr<int64_t>();
  a.raw_terms = out_raw.mutable_data_ptr<float>();
  a.local_terms = out_local.mutable_data_ptr<float>();
  a.e_raw = out_e_raw.mutable_data_ptr<float>();
  a.e_local = out_e_local.mutable_data_ptr<float>();
  a.target = view1<float>(target);
  a.cache = cache.mutable_data_ptr();
  a.cache_stride0 = cache.stride(0);
  a.cache_stride1 = cache.stride(1);
  a.cache_stride2 = cache.stride(2);
  a.elem_size = cache.element_size();
  a.keys = view1<int64_t>(keys);
  a.ch = view1<int64_t>(ch);
  a.pos = view1<int64_t>(pos);
  a.proposed = view1<int64_t>(proposed);
  a.logq_forward = view1<float>(logq_forward);
  a.logq_reverse = view1<float>(logq_reverse);
  a.raw_new = view2<float>(raw_new);
  a.local_new = view2<float>(local_new);
  a.e_raw_new = view1<float>(e_raw_new);
  a.e_local_new = view1<float>(e_local_new);
  a.target_new = view1<float>(target_new);
  a.seq = view1<int64_t>(seq);
  a.q = view1<int64_t>(q);
  a.beta = beta.has_value() ? static_cast<float>(*beta) : 0.0f;
  a.beta_rows = beta_rows.has_value() ? view1<double>(*beta_rows) : Strided1<const double>{nullptr, 0};
  a.forced = !beta.has_value() && !beta_rows.has_value();
  a.epoch = epoch;
  a.step = step;
  a.stream = stream;
  a.accepted = accepted.mutable_data_ptr<bool>();
  const cudaStream_t cuda_stream = c10::cuda::getCurrentCUDAStream().stream();
  a.chain_blocks = a.n;  // the chains in the first launch, then one launch per further chunk
  a.row0 = 0;
  a.rows = 0;
  a.outputs = nullptr;
  if (chunks.empty()) launch_mh_commit_site(a, cuda_stream);
  for (const at::Tensor& chunk : chunks) {
    a.rows = chunk.size(0);
    a.outputs = chunk.const_data_ptr();
    launch_mh_commit_site(a, cuda_stream);
    a.row0 += a.rows;
    a.chain_blocks = 0;
  }
  return {out_tokens, out_raw, out_local, out_e_raw, out_e_local, accepted};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_site_rows_cuda(
    const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
    const at::Tensor& local_terms, const at::Tensor& ch, const at::Tensor& pos, const at::Tensor& proposed,
    int64_t num_rows, int64_t mask_id) {
  check_mh_site_rows_args(tokens, energy_mask, raw_terms, local_terms, ch, pos, proposed, num_rows);
  check_device_type("mh_site_rows", "tokens", tokens, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(tokens.device());
  const int64_t n = ch.size(0), T = tokens.size(1);
  const auto long_opts = tokens.options().memory_format(c10::MemoryFormat::Contiguous);
  const auto float_opts = raw_terms.options().memory_format(c10::MemoryFormat::Contiguous);
  at::Tensor x_new = at::empty({n, T}, long_opts), raw_new = at::empty({n, T}, float_opts),
             local_new = at::empty({n, T}, float_opts), counts = at::empty({n}, long_opts);
  // Zero-filled: slots a wrong num_rows leaves unwritten still index row 0, position 0 (in bounds).
  at::Tensor seq = at::zeros({num_rows}, long_opts), q = at::zeros({num_rows}, long_opts),
             targets = at::zeros({num_rows}, long_opts), rows = at::empty({num_rows, T}, long_opts);
  SiteRowsArgs a{view2<int64_t>(tokens), view2<bool>(energy_mask), view2<float>(raw_terms),
                 view2<float>(local_terms), view1<int64_t>(ch), view1<int64_t>(pos), view1<int64_t>(proposed),
                 n, num_rows, x_new.mutable_data_ptr<int64_t>(), raw_new.mutable_data_ptr<float>(),
                 local_new.mutable_data_ptr<float>(), counts.mutable_data_ptr<int64_t>(), nullptr,
                 seq.mutable_data_ptr<int64_t>(), q.mutable_data_ptr<int64_t>(), targets.mutable_data_ptr<int64_t>()};
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  launch_site_rows_copy(a, stream);
  if (n > 0 && num_rows > 0) {
    const at::Tensor ends = at::cumsum(counts, 0);  // on the stream: no host sync
    a.ends = ends.const_data_ptr<int64_t>();
    launch_site_rows_index(a, stream);
    launch_masked_copies(view2<int64_t>(x_new), view1<int64_t>(seq), view1<int64_t>(q), num_rows, mask_id,
                         rows.mutable_data_ptr<int64_t>(), stream);
  }
  return {x_new, raw_new, local_new, seq, q, rows, targets};
}

std::tuple<at::Tensor, at::Tensor> mh_memo_lookup_cuda(at::Tensor& stamp, at::Tensor& hashes, at::Tensor& stored,
                                                       const at::Tensor& tokens_in, const at::Tensor& group_in,
                                                       const at::Tensor& act, const at::Tensor& pos,
                                                       const at::Tensor& proposed, const at::Tensor& changed,
                                                       int64_t ways, int64_t step) {
  check_mh_memo_lookup_args(stamp, hashes, stored, tokens_in, group_in, act, pos, proposed, changed, ways, step);
  check_device_type("mh_memo_lookup_", "stamp", stamp, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(stamp.device());
  const at::Tensor tokens = tokens_in.contiguous(), group = group_in.contiguous();
  const int64_t A = act.size(0);
  const auto long_opts = act.options().memory_format(c10::MemoryFormat::Contiguous);
  at::Tensor order = at::empty({2 * A}, changed.options().memory_format(c10::MemoryFormat::Contiguous));
  at::Tensor slot = at::empty({A}, long_opts);
  at::Tensor hash = at::empty({A}, long_opts);
  MemoLookupArgs a{stamp.mutable_data_ptr<int64_t>(), hashes.mutable_data_ptr<int64_t>(),
                   stored.mutable_data_ptr<int64_t>(), tokens.const_data_ptr<int64_t>(),
                   group.const_data_ptr<int64_t>(), stamp.size(0), stamp.size(1), tokens.size(1), tokens.size(0), A,
                   ways, step, view1<int64_t>(act), view1<int64_t>(pos), view1<int64_t>(proposed),
                   view1<bool>(changed), order.mutable_data_ptr<bool>(), slot.mutable_data_ptr<int64_t>(),
                   hash.mutable_data_ptr<int64_t>()};
  launch_mh_memo_lookup(a, c10::cuda::getCurrentCUDAStream().stream());
  return {order, slot};
}

void mh_memo_store_cuda(at::Tensor& stamp, at::Tensor& raw, at::Tensor& local, const at::Tensor& group,
                        const at::Tensor& act, const at::Tensor& slot, const at::Tensor& sel,
                        const at::Tensor& raw_new, const at::Tensor& local_new, int64_t num_misses, int64_t step) {
  check_mh_memo_store_args(stamp, raw, local, group, act, slot, sel, raw_new, local_new, num_misses, step);
  check_device_type("mh_memo_store_", "stamp", stamp, c10::DeviceType::CUDA);
  const c10::cuda::CUDAGuard guard(stamp.device());
  MemoStoreArgs a{stamp.mutable_data_ptr<int64_t>(), raw.mutable_data_ptr<float>(), local.mutable_data_ptr<float>(),
                  stamp.size(0), stamp.size(1), raw.size(2), group.size(0), act.size(0), num_misses, step,
                  view1<int64_t>(group), view1<int64_t>(act), view1<int64_t>(slot), view1<int64_t>(sel),
                  view2<float>(raw_new), view2<float>(local_new)};
  launch_mh_memo_store(a, c10::cuda::getCurrentCUDAStream().stream());
}

}  // namespace
}  // namespace cuda
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CUDA, m) {
  m.impl("masked_copies", &mhfast::cuda::masked_copies_cuda);
  m.impl("gather_energies", &mhfast::cuda::gather_energies_cuda);
  m.impl("propose", &mhfast::cuda::propose_cuda);
  m.impl("mh_accept_", &mhfast::cuda::mh_accept_cuda);
  m.impl("counter_uniforms", &mhfast::cuda::counter_uniforms_cuda);
  m.impl("mh_propose_site", &mhfast::cuda::mh_propose_site_cuda);
  m.impl("mh_commit_site_", &mhfast::cuda::mh_commit_site_cuda);
  m.impl("mh_site_rows", &mhfast::cuda::mh_site_rows_cuda);
  m.impl("mh_memo_lookup_", &mhfast::cuda::mh_memo_lookup_cuda);
  m.impl("mh_memo_store_", &mhfast::cuda::mh_memo_store_cuda);
}
