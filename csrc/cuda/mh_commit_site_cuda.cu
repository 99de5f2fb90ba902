// mh_commit_site_ on CUDA: the accept + commit phase of a single-site MH step in one launch.
//
// One launch per chunk of model rows (the first launch also runs the chain blocks).
// Blocks [0, chain_blocks): chain i's MH test (counter-hash uniform, mh_accept_'s explicitly rounded fp32
// arithmetic: no FMA contraction), then, if accepted, its token, term rows and energies written
// into the output copies of the state (made by the caller). Then one block per row of the chunk
// (row r = row0 + j of seq / q, row j of the chunk); the
// block recomputes the accept decision of chain seq[r] (a pure function of the inputs, so no
// second launch is needed to order the two) and, if accepted, copies outputs[r] into
// cache[ch[seq[r]], q[r]] (same dtype: the caller converted it). Invalid indices are skipped.
#include <c10/cuda/CUDAException.h>

#include "../counter_hash.h"
#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ bool accepts(const CommitSiteArgs& a, int64_t i) {
  const int64_t m = a.ch[i];
  if (m < 0 || m >= a.M) return false;
  const float e = a.target[m];
  const float e_new = a.forced ? e : a.target_new[i];
  const float l_f = a.logq_forward[i];
  const float l_r = a.forced ? l_f : a.logq_reverse[i];
  const float b = a.beta_rows.data != nullptr ? __double2float_rn(a.beta_rows[m]) : a.beta;
  const float log_alpha = __fsub_rn(__fadd_rn(__fmul_rn(b, __fsub_rn(e, e_new)), l_r), l_f);
  const float u = counter_uniform(static_cast<uint64_t>(a.keys[m]), static_cast<uint64_t>(a.epoch),
                                  static_cast<uint64_t>(a.step), static_cast<uint64_t>(a.stream), 0);
  return logf(u) < log_alpha;  // NaN rejects
}

__device__ void commit_chain(const CommitSiteArgs& a, int64_t i, bool ok) {
  const int64_t m = a.ch[i], p = a.pos[i];
  if (threadIdx.x == 0) {
    a.accepted[i] = ok;
    if (ok) {
      if (p >= 0 && p < a.T) a.tokens[m * a.T + p] = a.proposed[i];
      a.e_raw[m] = a.e_raw_new[i];
      a.e_local[m] = a.e_local_new[i];
    }
  }
  if (!ok) return;
  for (int64_t t = threadIdx.x; t < a.T; t += blockDim.x) {
    a.raw_terms[m * a.T + t] = a.raw_new(i, t);
    a.local_terms[m * a.T + t] = a.local_new(i, t);
  }
}

__device__ void commit_row(const CommitSiteArgs& a, int64_t j, bool ok) {
  const int64_t r = a.row0 + j;
  const int64_t i = a.seq[r], t = a.q[r];
  if (!ok || t < 0 || t >= a.T) return;
  const int64_t m = a.ch[i];
  const int64_t es = a.elem_size;
  char* dst = static_cast<char*>(a.cache) + (m * a.cache_stride0 + t * a.cache_stride1) * es;
  const char* src = static_cast<const char*>(a.outputs) + j * a.D * es;
  if (a.cache_stride2 == 1) {  // contiguous row: bytes
    for (int64_t j = threadIdx.x; j < a.D * es; j += blockDim.x) dst[j] = src[j];
  } else {
    for (int64_t j = threadIdx.x; j < a.D * es; j += blockDim.x) {
      dst[(j / es) * a.cache_stride2 * es + j % es] = src[j];
    }
  }
}

__global__ void __launch_bounds__(kThreads) mh_commit_site_kernel(CommitSiteArgs a) {
  const int64_t b = blockIdx.x;
  __shared__ bool ok;
  const int64_t i = b < a.chain_blocks ? b : a.seq[a.row0 + b - a.chain_blocks];
  const bool valid = i >= 0 && i < a.n;
  if (threadIdx.x == 0) ok = valid && accepts(a, i);
  __syncthreads();
  if (b < a.chain_blocks) {
    if (a.ch[i] >= 0 && a.ch[i] < a.M) {
      commit_chain(a, i, ok);
    } else if (threadIdx.x == 0) {
      a.accepted[i] = false;  // invalid chain index: rejected, nothing written
    }
  } else {
    commit_row(a, b - a.chain_blocks, ok);
  }
}

}  // namespace

void launch_mh_commit_site(const CommitSiteArgs& args, cudaStream_t stream) {
  const int64_t blocks = args.chain_blocks + args.rows;
  if (blocks == 0) return;
  TORCH_CHECK(blocks <= INT32_MAX, "mhfast.mh_commit_site_: too many chains and rows for one grid");
  mh_commit_site_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace mhfast
