// Operator schemas of mhfast: the single TORCH_LIBRARY block.
//
// Kernels are registered per backend in csrc/cpu/register_cpu.cpp and
// csrc/cuda/register_cuda.cu; fake (meta) kernels are registered from Python
// in mhfast/ops.py. The pure-PyTorch twin of every op is in mhfast/reference.py.
//
// Validate once: the tensor-metadata checks of each op (csrc/checks.cpp) are written once, run
// by every backend's kernel at the op boundary, and exposed as `<op>_check` ops (one kernel for
// every device, fake tensors included) for the callers that need them without running the op:
// the references and the validate=True wrappers (mhfast/_validate.py), and the fake kernels.
#include <torch/library.h>

#include "checks.h"

// MHFAST_NO_PYTHON: plain C++ shared library (CMakeLists.txt), no Python module entry point.
#ifndef MHFAST_NO_PYTHON
#include <Python.h>

extern "C" {
// `import mhfast._C` loads this shared library, which runs the static
// registrations below. The module itself is empty (pattern of
// pytorch/extension-cpp): the ops live in torch.ops.mhfast.
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr,
  };
  return PyModule_Create(&module_def);
}
}
#endif  // MHFAST_NO_PYTHON

TORCH_LIBRARY(mhfast, m) {
  // Row n = tokens[seq_index[n]] with column pos_index[n] set to mask_id.
  m.def("masked_copies(Tensor tokens, Tensor seq_index, Tensor pos_index, int mask_id) -> Tensor");
  // (e_raw[num_seqs], e_local[num_seqs], token_logp[N]), fp32 accumulation.
  m.def(
      "gather_energies(Tensor logits, Tensor targets, Tensor seq_index, int num_seqs)"
      " -> (Tensor, Tensor, Tensor)");
  // Nucleus/temperature proposal, mixed with uniform_mix of the uniform distribution over the
  // tokens of finite logit, by inverse CDF: (proposed, logq_proposed, logq_current).
  m.def(
      "propose(Tensor logits, Tensor current, float temperature, float top_p, Tensor uniforms,"
      " float uniform_mix=0.0) -> (Tensor, Tensor, Tensor)");
  // Vectorized Metropolis-Hastings accept/reject; updates tokens in place (energy is read only:
  // the caller keeps the accepted chains' energies itself).
  m.def(
      "mh_accept_(Tensor(a!) tokens, Tensor positions, Tensor proposed, Tensor energy,"
      " Tensor energy_proposed, Tensor logq_forward, Tensor logq_reverse, Tensor beta,"
      " Tensor uniforms) -> Tensor");
  // Counter-based uniforms (csrc/counter_hash.h): keys absorbed with (epoch, step, stream, lane).
  m.def("counter_uniforms(Tensor keys, int epoch, int step, int stream, Tensor? lanes=None) -> Tensor");
  // The accept + commit phase of a single-site MH step in one call: MH test of the chains ch
  // (uniforms from the counter hash of keys[ch]; beta a number, or beta_rows Double[M]: chain row m tests at
  // beta_rows[m]; neither: forced accept), then for the accepted
  // ones the new token, per-position terms and energies (returned as new state tensors) and the
  // model rows (seq, q) of X' written into the cache in place. Returns (tokens, raw_terms,
  // local_terms, e_raw, e_local, accepted).
  m.def(
      "mh_commit_site_(Tensor tokens, Tensor raw_terms, Tensor local_terms, Tensor e_raw, Tensor e_local,"
      " Tensor target, Tensor(a!) cache, Tensor keys, Tensor ch, Tensor pos, Tensor proposed,"
      " Tensor logq_forward, Tensor logq_reverse, Tensor raw_new, Tensor local_new, Tensor e_raw_new,"
      " Tensor e_local_new, Tensor target_new, Tensor seq, Tensor q, Tensor[] outputs, float? beta, Tensor? beta_rows,"
      " int epoch, int step, int stream)"
      " -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // The propose phase of a single-site MH step in one call: row a is cache[act[a], pos[a]] with
  // the blocked ids at -inf, current = tokens[act[a], pos[a]], u = counter_uniforms(keys[act[a]],
  // epoch, step, stream); then propose. (proposed, logq_forward, logq_reverse, changed).
  m.def(
      "mh_propose_site(Tensor cache, Tensor tokens, Tensor keys, Tensor act, Tensor pos,"
      " Tensor blocked, int epoch, int step, int stream, float temperature, float top_p)"
      " -> (Tensor, Tensor, Tensor, Tensor)");
  // The rows phase of a single-site MH step in one call: X' = tokens[ch] with X'[j, pos[j]] =
  // proposed[j]; its terms start as copies of the chains' (raw_terms[ch], local_terms[ch]); the
  // energy positions of X' other than pos[j], in row-major order, are the (seq, q) of the model
  // rows to forward (num_rows of them: the caller's host count, so no shape depends on data),
  // rows = masked_copies(X', seq, q, mask_id) and targets = X'[seq, q]. Returns (x_new, raw_new,
  // local_new, seq, q, rows, targets).
  m.def(
      "mh_site_rows(Tensor tokens, Tensor energy_mask, Tensor raw_terms, Tensor local_terms, Tensor ch,"
      " Tensor pos, Tensor proposed, int num_rows, int mask_id)"
      " -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");

  // The proposal memo's lookup (mhfast/sampler/memo.py, csrc/memo_table.h), in place: for each changed
  // proposal a in order, X' = tokens[act[a]] with X'[pos[a]] = proposed[a] is looked up in the table of
  // group[act[a]]; a hit returns its entry, a miss reserves one for mh_memo_store_ (or -1: none free).
  // Returns (order Bool[2A]: changed & !hit, then changed & hit, so that one nonzero lists the misses
  // before the hits; slot Long[A]: the entry, -1 where unchanged or not reserved).
  m.def(
      "mh_memo_lookup_(Tensor(a!) stamp, Tensor(b!) hashes, Tensor(c!) stored, Tensor tokens, Tensor group,"
      " Tensor act, Tensor pos, Tensor proposed, Tensor changed, int ways, int step) -> (Tensor, Tensor)");
  // The terms of the step's misses into the entries their lookup reserved: act and slot are the lookup's
  // proposals and result, sel[j] the proposal whose terms are raw_new/local_new[j]. For j < num_misses with
  // e = slot[sel[j]] reserved in this step in the table g of group[act[sel[j]]], raw/local[g, e] =
  // raw_new/local_new[j] and the entry is ready (stamp = step); other j change nothing.
  m.def(
      "mh_memo_store_(Tensor(a!) stamp, Tensor(b!) raw, Tensor(c!) local, Tensor group, Tensor act, Tensor slot,"
      " Tensor sel, Tensor raw_new, Tensor local_new, int num_misses, int step) -> ()");

  // The ops' metadata checks alone: raise ValueError/TypeError naming the argument, else return.
  m.def("masked_copies_check(Tensor tokens, Tensor seq_index, Tensor pos_index) -> ()",
        &mhfast::check_masked_copies_args);
  m.def("gather_energies_check(Tensor logits, Tensor targets, Tensor seq_index, int num_seqs) -> ()",
        &mhfast::check_gather_energies_args);
  m.def(
      "propose_check(Tensor logits, Tensor current, float temperature, float top_p, Tensor uniforms,"
      " float uniform_mix=0.0) -> ()",
      &mhfast::check_propose_args);
  m.def(
      "mh_accept__check(Tensor tokens, Tensor positions, Tensor proposed, Tensor energy,"
      " Tensor energy_proposed, Tensor logq_forward, Tensor logq_reverse, Tensor beta,"
      " Tensor uniforms) -> ()",
      &mhfast::check_mh_accept_args);
  m.def(
      "mh_propose_site_check(Tensor cache, Tensor tokens, Tensor keys, Tensor act, Tensor pos,"
      " Tensor blocked, int epoch, int step, int stream, float temperature, float top_p) -> ()",
      &mhfast::check_mh_propose_site_args);
  m.def(
      "mh_commit_site__check(Tensor tokens, Tensor raw_terms, Tensor local_terms, Tensor e_raw, Tensor e_local,"
      " Tensor target, Tensor cache, Tensor keys, Tensor ch, Tensor pos, Tensor proposed,"
      " Tensor logq_forward, Tensor logq_reverse, Tensor raw_new, Tensor local_new, Tensor e_raw_new,"
      " Tensor e_local_new, Tensor target_new, Tensor seq, Tensor q, Tensor[] outputs, float? beta, Tensor? beta_rows,"
      " int epoch, int step, int stream) -> ()",
      &mhfast::check_mh_commit_site_op);
  m.def(
      "mh_site_rows_check(Tensor tokens, Tensor energy_mask, Tensor raw_terms, Tensor local_terms, Tensor ch,"
      " Tensor pos, Tensor proposed, int num_rows) -> ()",
      &mhfast::check_mh_site_rows_args);
  m.def(
      "mh_memo_lookup__check(Tensor stamp, Tensor hashes, Tensor stored, Tensor tokens, Tensor group, Tensor act,"
      " Tensor pos, Tensor proposed, Tensor changed, int ways, int step) -> ()",
      &mhfast::check_mh_memo_lookup_args);
  m.def(
      "mh_memo_store__check(Tensor stamp, Tensor raw, Tensor local, Tensor group, Tensor act, Tensor slot,"
      " Tensor sel, Tensor raw_new, Tensor local_new, int num_misses, int step) -> ()",
      &mhfast::check_mh_memo_store_args);
  m.def(
      "counter_uniforms_check(Tensor keys, int epoch, int step, int stream, Tensor? lanes=None) -> ()",
      &mhfast::check_counter_uniforms_args);
}
