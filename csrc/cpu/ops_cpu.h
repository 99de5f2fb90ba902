// CPU kernels of mhfast's ops (registered in register_cpu.cpp) and the helpers they share.
//
// Every kernel first runs the shared metadata checks (csrc/checks.h), then the value-range
// checks below in a cheap serial pre-pass, so that bad input raises a Python ValueError naming
// the argument before any output (or in-place tensor) is written.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace mhfast {
namespace cpu {

at::Tensor masked_copies_cpu(const at::Tensor& tokens, const at::Tensor& seq_index,
                             const at::Tensor& pos_index, int64_t mask_id);

std::tuple<at::Tensor, at::Tensor, at::Tensor> gather_energies_cpu(const at::Tensor& logits,
                                                                   const at::Tensor& targets,
                                                                   const at::Tensor& seq_index,
                                                                   int64_t num_seqs);

std::tuple<at::Tensor, at::Tensor, at::Tensor> propose_cpu(const at::Tensor& logits,
                                                           const at::Tensor& current,
                                                           double temperature, double top_p,
                                                           const at::Tensor& uniforms,
                                                           double uniform_mix);

at::Tensor mh_accept_cpu(at::Tensor& tokens, const at::Tensor& positions, const at::Tensor& proposed,
                         const at::Tensor& energy, const at::Tensor& energy_proposed,
                         const at::Tensor& logq_forward, const at::Tensor& logq_reverse,
                         const at::Tensor& beta, const at::Tensor& uniforms);

at::Tensor counter_uniforms_cpu(const at::Tensor& keys, int64_t epoch, int64_t step, int64_t stream,
                                const c10::optional<at::Tensor>& lanes);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_propose_site_cpu(
    const at::Tensor& cache, const at::Tensor& tokens, const at::Tensor& keys, const at::Tensor& act,
    const at::Tensor& pos, const at::Tensor& blocked, int64_t epoch, int64_t step, int64_t stream,
    double temperature, double top_p);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_commit_site_cpu(
    const at::Tensor& tokens, const at::Tensor& raw_terms, const at::Tensor& local_terms, const at::Tensor& e_raw,
    const at::Tensor& e_local, const at::Tensor& target, at::Tensor& cache, const at::Tensor& keys,
    const at::Tensor& ch, const at::Tensor& pos, const at::Tensor& proposed, const at::Tensor& logq_forward,
    const at::Tensor& logq_reverse, const at::Tensor& raw_new, const at::Tensor& local_new,
    const at::Tensor& e_raw_new, const at::Tensor& e_local_new, const at::Tensor& target_new,
    const at::Tensor& seq, const at::Tensor& q, at::TensorList outputs, c10::optional<double> beta,
    const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step, int64_t stream);

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> mh_site_rows_cpu(
    const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
    const at::Tensor& local_terms, const at::Tensor& ch, const at::Tensor& pos, const at::Tensor& proposed,
    int64_t num_rows, int64_t mask_id);

std::tuple<at::Tensor, at::Tensor> mh_memo_lookup_cpu(at::Tensor& stamp, at::Tensor& hashes, at::Tensor& stored,
                                                      const at::Tensor& tokens, const at::Tensor& group,
                                                      const at::Tensor& act, const at::Tensor& pos,
                                                      const at::Tensor& proposed, const at::Tensor& changed,
                                                      int64_t ways, int64_t step);

void mh_memo_store_cpu(at::Tensor& stamp, at::Tensor& raw, at::Tensor& local, const at::Tensor& group,
                       const at::Tensor& act, const at::Tensor& slot, const at::Tensor& sel,
                       const at::Tensor& raw_new, const at::Tensor& local_new, int64_t num_misses, int64_t step);

// Raises ValueError "mhfast.<op>: <name> contains <v>, outside [low, high)" unless v lies in
// [low, high) (or is -1 with `allow_minus_one`): check_in_range's test of one value, for kernels
// that read their indices in place (no contiguous copy, no allocation).
void check_value_in_range(const char* op, const char* name, int64_t v, int64_t low, int64_t high,
                          bool allow_minus_one = false);

// Raises ValueError "mhfast.<op>: <name> contains <v>, outside [low, high)" for the first
// element (row-major order, as mhfast/_validate.py reports it) outside [low, high);
// `allow_minus_one` additionally permits -1 (unused slots of block positions).
void check_in_range(const char* op, const char* name, const at::Tensor& t, int64_t low,
                    int64_t high, bool allow_minus_one = false);

// Raises ValueError "mhfast.<op>: <name> contains <v> twice (chains must be distinct)" for the first
// repeated element of t (entries already checked to lie in [0, high)).
void check_distinct(const char* op, const char* name, const at::Tensor& t, int64_t high);

// Raises ValueError "mhfast.<op>: <name> must be finite, got <v> in row <i>" for the first entry of the 1-D
// Double tensor t that is NaN or infinite.
void check_finite(const char* op, const char* name, const at::Tensor& t);

}  // namespace cpu
}  // namespace mhfast
