// The bundled arguments of the fused single-site ops, unpacked in one place for every backend.
//
// The schemas (csrc/mhfast.cpp) take the bundles of mhfast/op_types.py as tensor lists, with what an op writes in
// place apart and annotated (Tensor(a!)). The entry points below are the only code that reads those lists: they
// unpack them into a struct of named tensors, run the op's metadata checks on it (csrc/checks.h) and call the
// backend's kernel with the struct. A backend file registers
//     m.impl("mh_commit_site_", &commit_site_entry<mh_commit_site_cpu>);
// and its kernel is `CommitSiteOut mh_commit_site_cpu(const CommitSiteTensors& a)`; the `<op>_check` ops
// (csrc/mhfast.cpp) run the same unpacking and checks without a kernel.
//
// The structs hold references into the dispatcher's arguments: valid for the call, never to be kept.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <cstdint>
#include <tuple>

namespace mhfast {

// mh_commit_site_(Tensor[] chains, Tensor(a!) cache, Tensor[] proposal, Tensor[] terms, Tensor seq, Tensor q,
// Tensor[] outputs, float? beta, Tensor? beta_rows, int epoch, int step, int stream): chains is
// mhfast.op_types.ChainRows without its cache (tokens, raw_terms, local_terms, e_raw, e_local, target, keys),
// proposal SiteProposal, terms SiteTerms; (seq, q, outputs) SiteRows. Errors name the fields as Python spells
// them (chains.tokens, terms.raw, rows.seq).
struct CommitSiteTensors {
  const at::Tensor &tokens, &raw_terms, &local_terms, &e_raw, &e_local, &target, &keys;  // state [M, T] / [M]
  const at::Tensor& cache;  // [M, T, D], written in place (through mutable_data_ptr)
  const at::Tensor &ch, &pos, &proposed, &logq_forward, &logq_reverse;  // the n moves
  const at::Tensor &raw_new, &local_new, &e_raw_new, &e_local_new, &target_new;  // X''s terms [n, T] / [n]
  const at::Tensor &seq, &q;  // the R model rows of X'
  at::TensorList outputs;     // those rows in consecutive chunks [R_k, D] (the model's sub-batches)
  c10::optional<double> beta;                   // every chain's beta, or
  const c10::optional<at::Tensor>& beta_rows;  // Double[M], chain row m's; neither: accept every move
  int64_t epoch, step, stream;
};
using CommitSiteOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// Unpacks and checks (check_mh_commit_site_args); TORCH_CHECK_VALUE naming the list of the wrong length.
CommitSiteTensors unpack_commit_site(at::TensorList chains, const at::Tensor& cache, at::TensorList proposal,
                                     at::TensorList terms, const at::Tensor& seq, const at::Tensor& q,
                                     at::TensorList outputs, c10::optional<double> beta,
                                     const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step,
                                     int64_t stream);

template <CommitSiteOut (*Kernel)(const CommitSiteTensors&)>
CommitSiteOut commit_site_entry(at::TensorList chains, at::Tensor& cache, at::TensorList proposal,
                                at::TensorList terms, const at::Tensor& seq, const at::Tensor& q,
                                at::TensorList outputs, c10::optional<double> beta,
                                const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step,
                                int64_t stream) {
  return Kernel(unpack_commit_site(chains, cache, proposal, terms, seq, q, outputs, beta, beta_rows, epoch, step,
                                   stream));
}

// mh_memo_lookup_(Tensor(a!)[] table, Tensor group, Tensor tokens, Tensor act, Tensor pos, Tensor proposed,
// Tensor changed, int ways, int step): table is what the lookup writes of mhfast.op_types.MemoTable (stamp,
// hashes, stored).
struct MemoLookupTensors {
  const at::Tensor &stamp, &hashes, &stored;  // Long[G, S], Long[G, S], Long[G, S, L], written in place
  const at::Tensor &group, &tokens;            // the chains': Long[M], Long[M, L]
  const at::Tensor &act, &pos, &proposed, &changed;  // the step's A proposals
  int64_t ways, step;
};
using MemoLookupOut = std::tuple<at::Tensor, at::Tensor>;

MemoLookupTensors unpack_memo_lookup(at::TensorList table, const at::Tensor& group, const at::Tensor& tokens,
                                     const at::Tensor& act, const at::Tensor& pos, const at::Tensor& proposed,
                                     const at::Tensor& changed, int64_t ways, int64_t step);

template <MemoLookupOut (*Kernel)(const MemoLookupTensors&)>
MemoLookupOut memo_lookup_entry(at::TensorList table, const at::Tensor& group, const at::Tensor& tokens,
                                const at::Tensor& act, const at::Tensor& pos, const at::Tensor& proposed,
                                const at::Tensor& changed, int64_t ways, int64_t step) {
  return Kernel(unpack_memo_lookup(table, group, tokens, act, pos, proposed, changed, ways, step));
}

// mh_memo_store_(Tensor(a!)[] table, Tensor group, Tensor act, Tensor slot, Tensor sel, Tensor raw_new,
// Tensor local_new, int num_misses, int step): table is what the store writes of MemoTable (stamp, raw, local).
struct MemoStoreTensors {
  const at::Tensor &stamp, &raw, &local;  // Long[G, S], f32[G, S, L] x 2, written in place
  const at::Tensor& group;                // Long[M]
  const at::Tensor &act, &slot;           // the lookup's proposals and entries [A]
  const at::Tensor &sel, &raw_new, &local_new;  // the n proposals whose terms are given
  int64_t num_misses, step;
};

MemoStoreTensors unpack_memo_store(at::TensorList table, const at::Tensor& group, const at::Tensor& act,
                                   const at::Tensor& slot, const at::Tensor& sel, const at::Tensor& raw_new,
                                   const at::Tensor& local_new, int64_t num_misses, int64_t step);

template <void (*Kernel)(const MemoStoreTensors&)>
void memo_store_entry(at::TensorList table, const at::Tensor& group, const at::Tensor& act, const at::Tensor& slot,
                      const at::Tensor& sel, const at::Tensor& raw_new, const at::Tensor& local_new,
                      int64_t num_misses, int64_t step) {
  Kernel(unpack_memo_store(table, group, act, slot, sel, raw_new, local_new, num_misses, step));
}

// The `<op>_check` ops: the unpacking and checks alone.
void check_commit_site_op(at::TensorList chains, const at::Tensor& cache, at::TensorList proposal,
                          at::TensorList terms, const at::Tensor& seq, const at::Tensor& q, at::TensorList outputs,
                          c10::optional<double> beta, const c10::optional<at::Tensor>& beta_rows, int64_t epoch,
                          int64_t step, int64_t stream);
void check_memo_lookup_op(at::TensorList table, const at::Tensor& group, const at::Tensor& tokens,
                          const at::Tensor& act, const at::Tensor& pos, const at::Tensor& proposed,
                          const at::Tensor& changed, int64_t ways, int64_t step);
void check_memo_store_op(at::TensorList table, const at::Tensor& group, const at::Tensor& act,
                         const at::Tensor& slot, const at::Tensor& sel, const at::Tensor& raw_new,
                         const at::Tensor& local_new, int64_t num_misses, int64_t step);

}  // namespace mhfast
