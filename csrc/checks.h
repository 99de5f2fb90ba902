// Tensor-metadata checks of mhfast's ops, written once: the CPU and CUDA kernels run them at the
// op boundary, and csrc/mhfast.cpp exposes them as torch.ops.mhfast.<op>_check for the Python
// references, the validate=True wrappers and the fake kernels (mhfast/_validate.py, ops.py).
//
// Errors start with "mhfast.<op>: " and name the argument. TORCH_CHECK_TYPE surfaces in Python
// as TypeError, TORCH_CHECK_VALUE as ValueError. Only metadata (and scalar arguments) is checked
// here, free on every device; data values (token ids, NaN logits) are checked by the CPU kernels
// themselves and, for references and CUDA, once in Python (mhfast/_validate.py).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <c10/util/Optional.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "op_args.h"

namespace mhfast {

inline void check_dtype(const char* op, const char* name, const at::Tensor& t,
                        std::initializer_list<at::ScalarType> allowed) {
  for (auto s : allowed) {
    if (t.scalar_type() == s) return;
  }
  std::string want;
  for (auto s : allowed) want += (want.empty() ? "" : " or ") + std::string(c10::toString(s));
  TORCH_CHECK_TYPE(false, "mhfast.", op, ": ", name, " must be ", want, ", got ", t.scalar_type());
}

inline void check_dim(const char* op, const char* name, const at::Tensor& t, int64_t dim) {
  TORCH_CHECK_VALUE(t.dim() == dim, "mhfast.", op, ": ", name, " must be ", dim, "-D, got shape ",
                    t.sizes());
}

inline void check_size(const char* op, const char* name, const at::Tensor& t, int64_t dim,
                       int64_t expected, const char* what) {
  TORCH_CHECK_VALUE(t.size(dim) == expected, "mhfast.", op, ": ", name, " has size ", t.size(dim),
                    " in dim ", dim, ", expected ", expected, " (", what, ")");
}

// Kernels that write a tensor in place through raw pointers (one layout for every backend) take no
// strided views of it.
inline void check_contiguous_out(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.is_contiguous(), "mhfast.", op, ": ", name, " must be contiguous (it is written in place)");
}

inline void check_same_device(const char* op, const char* ref_name, const at::Tensor& ref,
                              const char* name, const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device() == ref.device(), "mhfast.", op, ": ", name, " is on ", t.device(),
                    " but ", ref_name, " is on ", ref.device(),
                    "; all tensor arguments must be on one device");
}

inline void check_device_type(const char* op, const char* name, const at::Tensor& t,
                              c10::DeviceType type) {
  TORCH_CHECK_VALUE(t.device().type() == type, "mhfast.", op, ": ", name, " must be on ",
                    c10::DeviceTypeName(type, /*lower_case=*/true), ", got ", t.device());
}

// A tensor an op writes in place shares no memory with another argument: the kernels read their inputs while
// they write (an id already checked in range, then overwritten by the op itself, would index out of bounds; a
// memo entry read after this very call rewrote it would be wrong). Conservative: two views of one storage whose
// byte spans intersect are refused, even where their elements interleave without touching.
inline void check_no_overlap(const char* op, const char* out_name, const at::Tensor& out, const char* name,
                             const at::Tensor& t) {
  // (symbolic sizes: traced by torch.compile or opcheck's dynamic-shape tests, where no memory is real)
  for (const at::Tensor* x : {&out, &t}) {
    if (x->unsafeGetTensorImpl()->has_symbolic_sizes_strides() || !x->has_storage()) return;
  }
  if (out.numel() == 0 || t.numel() == 0) return;
  if (!out.storage().is_alias_of(t.storage())) return;
  auto span = [](const at::Tensor& x) {  // [first, end) bytes of x's elements in its storage (strides >= 0)
    int64_t last = x.storage_offset();
    for (int64_t d = 0; d < x.dim(); ++d) last += (x.size(d) - 1) * x.stride(d);
    const int64_t item = static_cast<int64_t>(x.element_size());
    return std::make_pair(x.storage_offset() * item, (last + 1) * item);
  };
  const auto [a0, a1] = span(out);
  const auto [b0, b1] = span(t);
  TORCH_CHECK_VALUE(a1 <= b0 || b1 <= a0, "mhfast.", op, ": ", name, " shares memory with ", out_name,
                    ", which the op writes in place; pass a copy (", name, ".clone())");
}

// Per-op metadata checks (identical on every backend).
void check_masked_copies_args(const at::Tensor& tokens, const at::Tensor& seq_index,
                              const at::Tensor& pos_index);
void check_gather_energies_args(const at::Tensor& logits, const at::Tensor& targets,
                                const at::Tensor& seq_index, int64_t num_seqs);
void check_propose_args(const at::Tensor& logits, const at::Tensor& current, double temperature,
                        double top_p, const at::Tensor& uniforms, double uniform_mix);
void check_mh_accept_args(const at::Tensor& tokens, const at::Tensor& positions,
                          const at::Tensor& proposed, const at::Tensor& energy,
                          const at::Tensor& energy_proposed, const at::Tensor& logq_forward,
                          const at::Tensor& logq_reverse, const at::Tensor& beta,
                          const at::Tensor& uniforms);

// mh_propose_site: cache [M, T, V] float/half/bf16, tokens Long[M, T], keys Long[M], act and pos
// Long[A], blocked Bool[V]; scalars as counter_uniforms (epoch, step, stream) and propose.
void check_mh_propose_site_args(const at::Tensor& cache, const at::Tensor& tokens, const at::Tensor& keys,
                                const at::Tensor& act, const at::Tensor& pos, const at::Tensor& blocked,
                                int64_t epoch, int64_t step, int64_t stream, double temperature,
                                double top_p);

// mh_site_rows: the state (tokens Long[M, T], energy_mask Bool[M, T], raw/local_terms f32[M, T]), the n
// moving chains' single-site proposals (ch, pos, proposed Long[n]) and num_rows in [0, n * (T - 1)].
void check_mh_site_rows_args(const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
                             const at::Tensor& local_terms, const at::Tensor& ch, const at::Tensor& pos,
                             const at::Tensor& proposed, int64_t num_rows);

// mh_commit_site_ (op_args.h): the state (chains.tokens Long[M, T], raw/local_terms f32[M, T], e_raw/e_local/target
// f32[M], cache [M, T, D] float/half/bf16, keys Long[M]), the n moving chains' proposals (proposal.ch, pos,
// proposed Long[n], logq_forward/reverse f32[n]) and X' terms (terms.raw/local f32[n, T], e_raw/e_local/target
// f32[n]), the R model rows (rows.seq, q Long[R], outputs: chunks [R_k, D] of float/half/bf16 with sum R_k = R);
// beta a finite number, or beta_rows Double[M] (one per chain row; its values are checked by the CPU kernel and
// mhfast/_validate.py), or neither (forced accept), not both.
void check_mh_commit_site_args(const CommitSiteTensors& a);

// mh_memo_lookup_: the memo's tables (table.stamp/hashes Long[G, S], stored Long[G, S, L], contiguous: written in
// place; S a positive multiple of ways), the chains' tokens Long[M, L] and group Long[M], the step's proposals
// act/pos/proposed Long[A], changed Bool[A]; ways >= 1, step >= 0 (csrc/memo_table.h).
void check_mh_memo_lookup_args(const MemoLookupTensors& a);

// mh_memo_store_: table.stamp Long[G, S] and the terms table.raw/local f32[G, S, L] (contiguous: written in place),
// the chains' group Long[M], the lookup's proposals act and entries slot Long[A], the n proposals sel Long[n] whose
// terms are raw_new/local_new f32[n, L], num_misses in [0, n], step >= 0.
void check_mh_memo_store_args(const MemoStoreTensors& a);

void check_counter_uniforms_args(const at::Tensor& keys, int64_t epoch, int64_t step, int64_t stream,
                                 const c10::optional<at::Tensor>& lanes);

}  // namespace mhfast
