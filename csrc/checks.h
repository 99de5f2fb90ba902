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

// mh_commit_site_: the state (tokens Long[M, T], raw/local_terms f32[M, T], e_raw/e_local/target
// f32[M], cache [M, T, D] float/half/bf16, keys Long[M]), the n moving chains' proposals (ch, pos,
// proposed Long[n], logq_forward/reverse f32[n]) and X' terms (raw/local_new f32[n, T],
// e_raw/e_local/target_new f32[n]), the R model rows (seq, q Long[R], outputs: chunks [R_k, D] of
// float/half/bf16 with sum R_k = R).
struct CommitSiteArgs {
  const at::Tensor &tokens, &raw_terms, &local_terms, &e_raw, &e_local, &target, &cache, &keys;
  const at::Tensor &ch, &pos, &proposed, &logq_forward, &logq_reverse;
  const at::Tensor &raw_new, &local_new, &e_raw_new, &e_local_new, &target_new;
  const at::Tensor &seq, &q;
  at::TensorList outputs;  // the R rows in consecutive chunks (the model's sub-batches: no concatenation)
};
// beta: a finite number, or beta_rows Double[M] (one per chain row; its values are checked by the CPU kernel and
// mhfast/_validate.py), or neither (forced accept); not both.
void check_mh_commit_site_args(const CommitSiteArgs& a, const c10::optional<double>& beta,
                               const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step,
                               int64_t stream);
// The same with the op's flat argument list (torch.ops.mhfast.mh_commit_site__check).
void check_mh_commit_site_op(const at::Tensor& tokens, const at::Tensor& raw_terms, const at::Tensor& local_terms,
                             const at::Tensor& e_raw, const at::Tensor& e_local, const at::Tensor& target,
                             const at::Tensor& cache, const at::Tensor& keys, const at::Tensor& ch,
                             const at::Tensor& pos, const at::Tensor& proposed, const at::Tensor& logq_forward,
                             const at::Tensor& logq_reverse, const at::Tensor& raw_new, const at::Tensor& local_new,
                             const at::Tensor& e_raw_new, const at::Tensor& e_local_new,
                             const at::Tensor& target_new, const at::Tensor& seq, const at::Tensor& q,
                             at::TensorList outputs, c10::optional<double> beta,
                             const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step,
                             int64_t stream);

// mh_memo_lookup_: the memo's tables (stamp/hashes Long[G, S], stored Long[G, S, L], contiguous: written
// in place; S a positive multiple of ways), the chains' tokens Long[M, L] and group Long[M], the step's
// proposals act/pos/proposed Long[A], changed Bool[A]; ways >= 1, step >= 0 (csrc/memo_table.h).
void check_mh_memo_lookup_args(const at::Tensor& stamp, const at::Tensor& hashes, const at::Tensor& stored,
                               const at::Tensor& tokens, const at::Tensor& group, const at::Tensor& act,
                               const at::Tensor& pos, const at::Tensor& proposed, const at::Tensor& changed,
                               int64_t ways, int64_t step);

// mh_memo_store_: stamp Long[G, S] and the terms raw/local f32[G, S, L] (contiguous: written in place), the
// chains' group Long[M], the lookup's proposals act and entries slot Long[A], the n proposals sel Long[n] whose
// terms are raw_new/local_new f32[n, L], num_misses in [0, n], step >= 0.
void check_mh_memo_store_args(const at::Tensor& stamp, const at::Tensor& raw, const at::Tensor& local,
                              const at::Tensor& group, const at::Tensor& act, const at::Tensor& slot,
                              const at::Tensor& sel, const at::Tensor& raw_new, const at::Tensor& local_new,
                              int64_t num_misses, int64_t step);

void check_counter_uniforms_args(const at::Tensor& keys, int64_t epoch, int64_t step, int64_t stream,
                                 const c10::optional<at::Tensor>& lanes);

}  // namespace mhfast
