// CUDA launchers of mhfast's ops: raw pointers + strides in, one stream; errors are thrown.
//
// Why raw pointers and not at::Tensor: the kernel files (*_cuda.cu) then include only CUDA, CUB
// and c10's small CUDA error header, and compile in seconds instead of ~35 s with ATen's
// headers; only register_cuda.cu (tensor checks, allocation, device guard, stream,
// registration) pays for ATen. The launchers never synchronize with the host. Every launch is
// followed at once by C10_CUDA_KERNEL_LAUNCH_CHECK() (and every runtime call by
// C10_CUDA_CHECK), so an error is reported at the launch that caused it, as a c10::Error.
// Kernels see plain structs: the tensor checks were made once, at the op boundary.
//
// Example (what register_cuda.cu does for masked_copies):
//     mhfast::cuda::launch_masked_copies(tokens, seq, pos, N, mask_id, out, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#define MHFAST_HD __host__ __device__ __forceinline__

namespace mhfast {
namespace cuda {

// A strided 1-D view (any stride, including 0), so no input needs a .contiguous() copy.
template <typename T>
struct Strided1 {
  T* data;
  int64_t stride;
  MHFAST_HD T& operator[](int64_t i) const { return data[i * stride]; }
};

// A strided 2-D view.
template <typename T>
struct Strided2 {
  T* data;
  int64_t rows, cols, stride0, stride1;
  MHFAST_HD T& operator()(int64_t r, int64_t c) const { return data[r * stride0 + c * stride1]; }
};

// dtype of logits (fp32 accumulation for all three).
enum class FloatKind : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// out[n, t] = tokens[seq_index[n], t], except out[n, pos_index[n]] = mask_id.
// Invalid input (seq_index outside [0, B) or pos_index outside [0, T)): row n is all -1.
// out is contiguous [N, T].
void launch_masked_copies(Strided2<const int64_t> tokens, Strided1<const int64_t> seq_index,
                          Strided1<const int64_t> pos_index, int64_t N, int64_t mask_id, int64_t* out,
                          cudaStream_t stream);

// Row n: token_logp[n] = logits[n, targets[n]] - logsumexp(logits[n]); target_logit[n] (scratch,
// f32[N]) = logits[n, targets[n]]. Then e_raw[b] = -sum target_logit, e_local[b] = -sum token_logp
// over the rows with seq_index[n] == b, in a fixed order (deterministic, no float atomics).
// logits rows must have unit column stride; any row stride. Two launches (rows, then sequences):
// a deterministic per-sequence sum needs every row finished first. `unsorted` (one int of
// device scratch) records whether seq_index is non-decreasing: then the sums are O(N + S log N),
// otherwise O(N * S).
// Invalid input: targets[n] outside [0, V) -> NaN for that row; seq_index[n] outside
// [0, num_seqs) -> row n counts in no sequence.
void launch_gather_energies(const void* logits, FloatKind kind, int64_t N, int64_t V, int64_t row_stride,
                            Strided1<const int64_t> targets, Strided1<const int64_t> seq_index,
                            int64_t num_seqs, float* e_raw, float* e_local, float* token_logp,
                            float* target_logit, int* unsorted, cudaStream_t stream);

// 0 when a row of V fp32 probabilities fits in the shared memory of `device` next to the
// kernel's static shared memory; otherwise the row stride (floats) of the global scratch buffer
// of B rows that launch_propose then needs.
int64_t propose_scratch_stride(int64_t V, int device);

// One block per row: tempered nucleus distribution q (mixed with uniform_mix of the uniform
// distribution over the tokens of finite logit / temperature), inverse-CDF draw with uniforms[b];
// each logit is read from global memory once.
// Invalid input (a row with NaN/+inf or no finite logit): proposed = current (0 if current is
// out of range), logq_* = NaN, so that mh_accept_ rejects the move (never an out-of-range
// token); current[b] outside [0, V): logq_current = NaN.
void launch_propose(const void* logits, FloatKind kind, int64_t B, int64_t V, int64_t row_stride,
                    Strided1<const int64_t> current, float temperature, double top_p,
                    double uniform_mix, Strided1<const float> uniforms, float* scratch,
                    int64_t scratch_stride,
                    int64_t* proposed, float* logq_proposed, float* logq_current,
                    cudaStream_t stream);

// mh_propose_site: row b is cache[act[b], pos[b]] (cache_stride0/1: strides of dims 0/1 of the
// [M, T, V] cache, dim 2 contiguous), current = tokens(act[b], pos[b]) (tokens.rows = M,
// tokens.cols = T), u = counter_uniform(keys[act[b]], epoch, step, stream, 0); blocked (contiguous
// Bool[V]) ids get -inf before the draw; changed[b] = proposed[b] != current. on = false: plain propose.
// Invalid input: act[b] or pos[b] out of range -> a bad row (proposed 0, logq NaN, changed false),
// as for a NaN row; the kernel never reads out of bounds.
struct ProposeSiteArgs {
  bool on = false;
  Strided1<const int64_t> act{nullptr, 0}, pos{nullptr, 0};
  int64_t cache_stride0 = 0, cache_stride1 = 0;
  Strided2<const int64_t> tokens{nullptr, 0, 0, 0, 0};
  Strided1<const int64_t> keys{nullptr, 0};
  int64_t epoch = 0, step = 0, stream = 0;
  const bool* blocked = nullptr;
  bool* changed = nullptr;
};
void launch_propose_site(const void* cache, FloatKind kind, int64_t A, int64_t V, const ProposeSiteArgs& site,
                         float temperature, double top_p, float* scratch, int64_t scratch_stride,
                         int64_t* proposed, float* logq_proposed, float* logq_current, cudaStream_t stream);

// Inputs of mh_accept_ (one thread per chain). positions/proposed are [B, K] (K = 1 and
// stride1 = 0 for the 1-D form). Invalid input: a position outside [0, T) is skipped.
// Only tokens is written (energy is an input: the caller keeps the accepted energies itself).
struct MhAcceptArgs {
  Strided2<int64_t> tokens;
  Strided2<const int64_t> positions;
  Strided2<const int64_t> proposed;
  Strided1<const float> energy;
  Strided1<const float> energy_proposed, logq_forward, logq_reverse, beta, uniforms;
  bool* accepted;  // contiguous [B]
};
void launch_mh_accept(const MhAcceptArgs& args, cudaStream_t stream);

// mh_commit_site_ (see csrc/cuda/mh_commit_site_cuda.cu). tokens/raw_terms/local_terms are the
// contiguous [M, T] output copies, e_raw/e_local the contiguous [M] ones, written for accepted
// chains; cache rows (strides in elements) get the rows of one chunk of outputs (contiguous
// [rows, D], cache dtype, elem_size bytes each), which are rows [row0, row0 + rows) of seq / q.
// One launch per chunk: the first also runs the chain_blocks = n chain blocks, the others 0.
// forced: beta None (no number, no beta_rows). Chains must be distinct (the op checks it on CPU; on CUDA validate=True
// does). Invalid indices: the write is skipped.
struct CommitSiteArgs {
  int64_t M, T, n, D;
  int64_t chain_blocks, row0, rows;
  int64_t* tokens;
  float *raw_terms, *local_terms, *e_raw, *e_local;
  Strided1<const float> target;
  void* cache;
  int64_t cache_stride0, cache_stride1, cache_stride2, elem_size;
  Strided1<const int64_t> keys, ch, pos, proposed;
  Strided1<const float> logq_forward, logq_reverse;
  Strided2<const float> raw_new, local_new;
  Strided1<const float> e_raw_new, e_local_new, target_new;
  Strided1<const int64_t> seq, q;
  const void* outputs;
  float beta;                        // every chain's, unless beta_rows.data is set
  Strided1<const double> beta_rows;  // chain row m's beta (fp64, rounded to fp32 as beta is), or data == nullptr
  bool forced;
  int64_t epoch, step, stream;
  bool* accepted;
};
void launch_mh_commit_site(const CommitSiteArgs& args, cudaStream_t stream);

// counter_uniforms: out[i] = uniform of key i (and lane i, or lane 0 when lanes is null); contiguous.
cudaError_t launch_counter_uniforms(const int64_t* keys, const int64_t* lanes, int64_t n, int64_t epoch,
                                    int64_t step, int64_t stream, float* out, cudaStream_t cuda_stream);

// mh_site_rows (see csrc/cuda/mh_site_rows_cuda.cu): the n moving chains' X' rows and term copies
// (x_new, raw_new, local_new: contiguous [n, T]) and per-chain counts of the rows to forward
// (counts, contiguous [n]); then, from the inclusive prefix sums of counts (ends), the (seq, q,
// targets) of those rows in row-major order (contiguous [num_rows], zero-filled by the caller).
// Invalid input (ch[j] outside [0, M) or pos[j] outside [0, T)): chain j's x_new row is -1, its
// terms NaN, its count 0; a wrong num_rows: at most num_rows slots are written (never out of
// bounds; validate=True checks the count on the host).
struct SiteRowsArgs {
  Strided2<const int64_t> tokens;
  Strided2<const bool> energy_mask;
  Strided2<const float> raw_terms, local_terms;
  Strided1<const int64_t> ch, pos, proposed;
  int64_t n, num_rows;
  int64_t* x_new;
  float *raw_new, *local_new;
  int64_t* counts;
  const int64_t* ends;
  int64_t *seq, *q, *targets;
};
void launch_site_rows_copy(const SiteRowsArgs& args, cudaStream_t stream);
void launch_site_rows_index(const SiteRowsArgs& args, cudaStream_t stream);

// mh_memo_lookup_ (see csrc/cuda/mh_memo_lookup_cuda.cu): the A proposals against their group's table
// (stamp/hashes Long[G, S], stored Long[G, S, L], contiguous, written in place; csrc/memo_table.h), from
// the chains' contiguous tokens Long[M, L] and group Long[M]; order (contiguous Bool[2A]) and slot
// (contiguous Long[A]) as on CPU; hash is scratch Long[A]. Invalid input (act[a] outside [0, M),
// group[act[a]] outside [0, G)): a miss without an entry (slot -1), nothing written.
struct MemoLookupArgs {
  int64_t *stamp, *hashes, *stored;
  const int64_t *tokens, *group;
  int64_t G, S, L, M, A, ways, step;
  Strided1<const int64_t> act, pos, proposed;
  Strided1<const bool> changed;
  bool* order;
  int64_t *slot, *hash;
};
void launch_mh_memo_lookup(const MemoLookupArgs& args, cudaStream_t stream);

// mh_memo_store_ (see csrc/cuda/mh_memo_store_cuda.cu): the terms of the step's misses j < num_misses
// (proposal sel[j] of the lookup's act / slot) into their reserved entries (stamp Long[G, S], raw/local
// f32[G, S, L], contiguous). Invalid input (sel[j] outside [0, A), act outside [0, M), group outside
// [0, G), slot outside [0, S), an entry not reserved in this step): miss j changes nothing.
struct MemoStoreArgs {
  int64_t* stamp;
  float *raw, *local;
  int64_t G, S, L, M, A, num_misses, step;
  Strided1<const int64_t> group, act, slot, sel;
  Strided2<const float> raw_new, local_new;
};
void launch_mh_memo_store(const MemoStoreArgs& args, cudaStream_t stream);

}  // namespace cuda
}  // namespace mhfast
