// propose on CUDA: one block per row, no sort.
//
// 1. x = logits / temperature (kept in the row buffer), online max / sum-exp (CUB reduce), then
//    p = exp((x - max) - log sum): torch's log_softmax arithmetic, in fp32.
// 2. Nucleus (top_p < 1). The reference keeps token j iff the mass of the tokens ahead of it in
//    (p desc, id asc) order is < top_p (plus the top token, minus p == 0). With
//    G(t) = sum of p_k > t, that is: every token with p > tau, where tau is the smallest row
//    value with G(tau) < top_p, plus the tokens with p == tau whose rank r among those ties (by
//    id) gives G(tau) + r * tau < top_p. tau is found by bisection on the bit pattern of t
//    (non-negative floats order like their bits), one block sum per step (<= 30 steps): G is
//    monotone even in floating point (fixed summation order, non-negative terms), so the search
//    is exact and lands on a row value. top_p == 1 (or total mass < top_p): p > 0 is the nucleus.
// 3. Inverse CDF in increasing id order: thread t owns the contiguous ids
//    [t*L, (t+1)*L); a block exclusive scan of the threads' q-mass gives each segment's start,
//    and the proposal is the smallest id whose cdf = start + running sum exceeds u (CUB min);
//    none (u ~ 1, rounding): the last kept id, as in the reference. The tie ranks come from a
//    block scan over the same segments.
// The row buffer is in shared memory when V floats fit (V <= ~56k on H100, ~40k on A100),
// otherwise in a global scratch buffer the caller allocates (propose_needs_scratch).
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <climits>
#include <limits>

#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kSmallBlock = 128;
constexpr int kLargeBlock = 512;
constexpr int64_t kSmallBlockMaxV = 2048;
constexpr int kStaticSmemMargin = 4096;  // bytes kept free for the kernel's static shared memory

// (cub::Max / cub::Min are gone from CCCL 3.)
struct MaxOp {
  __device__ __forceinline__ int64_t operator()(int64_t a, int64_t b) const { return a > b ? a : b; }
};
struct MinOp {
  __device__ __forceinline__ int64_t operator()(int64_t a, int64_t b) const { return a < b ? a : b; }
};

struct ProposeParams {
  int64_t V, row_stride;
  Strided1<const int64_t> current;
  float temperature;
  float top_p;  // fp32: the reference compares fp32 masses with top_p
  bool full;    // top_p >= 1: the nucleus is every token with p > 0
  Strided1<const float> uniforms;
  float* scratch;  // B * V floats, or nullptr: the row lives in shared memory
  int64_t* proposed;
  float* logq_proposed;
  float* logq_current;
};

template <typename T, int BLOCK>
__global__ void __launch_bounds__(BLOCK) propose_kernel(const T* logits, ProposeParams a) {
  extern __shared__ float smem_row[];
  using ReduceLse = cub::BlockReduce<Lse, BLOCK>;
  using ReduceF = cub::BlockReduce<float, BLOCK>;
  using ReduceI = cub::BlockReduce<int64_t, BLOCK>;
  using ScanI = cub::BlockScan<int, BLOCK>;
  using ScanF = cub::BlockScan<float, BLOCK>;
  __shared__ union {
    typename ReduceLse::TempStorage lse;
    typename ReduceF::TempStorage f;
    typename ReduceI::TempStorage i;
    typename ScanI::TempStorage si;
    typename ScanF::TempStorage sf;
  } tmp;
  __shared__ Lse sh_lse;
  __shared__ float sh_f;
  __shared__ int64_t sh_i;
  __shared__ bool sh_cur_kept;

  // Block sum / max broadcast to every thread; the barriers make tmp and the slot reusable.
  auto block_sum = [&](float v) {
    const float s = ReduceF(tmp.f).Sum(v);
    if (threadIdx.x == 0) sh_f = s;
    __syncthreads();
    const float r = sh_f;
    __syncthreads();
    return r;
  };
  auto block_reduce_i = [&](int64_t v, bool take_max) {
    const int64_t s = take_max ? ReduceI(tmp.i).Reduce(v, MaxOp{}) : ReduceI(tmp.i).Reduce(v, MinOp{});
    if (threadIdx.x == 0) sh_i = s;
    __syncthreads();
    const int64_t r = sh_i;
    __syncthreads();
    return r;
  };

  const int tid = threadIdx.x;
  const int64_t b = blockIdx.x;
  const int64_t V = a.V;
  const T* row = logits + b * a.row_stride;
  float* p = a.scratch != nullptr ? a.scratch + b * V : smem_row;

  // 1. Tempered logits and their logsumexp.
  Lse acc = lse_empty();
  for (int64_t i = tid; i < V; i += BLOCK) {
    const float x = to_float(row[i]) / a.temperature;
    p[i] = x;
    lse_add(acc, &x, 1);
  }
  const Lse total = ReduceLse(tmp.lse).Reduce(acc, LseMerge{});
  if (tid == 0) sh_lse = total;
  __syncthreads();
  const float M = sh_lse.m;
  const float log_sum = logf(sh_lse.s);
  const int64_t cur = a.current[b];
  const bool cur_valid = cur >= 0 && cur < V;
  if (!(M > -kInf && M < kInf && log_sum == log_sum)) {
    // No finite logit, or a NaN / +inf one (rejected by validate=True): nothing to propose.
    if (tid == 0) {
      a.proposed[b] = -1;
      a.logq_proposed[b] = kNaN;
      a.logq_current[b] = kNaN;
    }
    return;  // uniform across the block: M and log_sum come from shared memory
  }
  for (int64_t i = tid; i < V; i += BLOCK) p[i] = expf((p[i] - M) - log_sum);
  const float p_max = expf((M - M) - log_sum);  // the same arithmetic as the max token's p
  __syncthreads();                             // p complete before segment-wise reads

  // 2. Nucleus boundary tau (tau = 0 and no tie rule: the nucleus is p > 0).
  const float top_p = a.top_p;
  float tau = 0.0f, g_tau = 0.0f;
  bool ties = false;
  if (!a.full) {
    float part = 0.0f;
    for (int64_t i = tid; i < V; i += BLOCK) part += p[i];
    if (!(block_sum(part) < top_p)) {
      // Invariant: G(lo) >= top_p, G(hi) < top_p (G(p_max) = 0).
      uint32_t lo = 0u, hi = __float_as_uint(p_max);
      float g_hi = 0.0f;
      while (hi - lo > 1u) {
        const uint32_t mid = lo + (hi - lo) / 2u;
        const float t = __uint_as_float(mid);
        float above = 0.0f;
        for (int64_t i = tid; i < V; i += BLOCK) {
          const float pi = p[i];
          above += (pi > t) ? pi : 0.0f;
        }
        const float g = block_sum(above);
        if (g < top_p) {
          hi = mid;
          g_hi = g;
        } else {
          lo = mid;
        }
      }
      tau = __uint_as_float(hi);
      g_tau = g_hi;
      ties = true;
    }
  }

  // 3. Segment walks in increasing id order.
  const int64_t L = ceil_div(V, BLOCK);
  const int64_t beg = min(V, static_cast<int64_t>(tid) * L);
  const int64_t end = min(V, beg + L);
  int rank0 = 0;  // number of ties (p == tau) with a smaller id than this segment's
  if (ties) {
    int count = 0;
    for (int64_t i = beg; i < end; ++i) count += (p[i] == tau) ? 1 : 0;
    ScanI(tmp.si).ExclusiveSum(count, rank0);
    __syncthreads();
  }
  auto kept = [&](float pi, int& rank) {
    if (pi > tau) return true;
    if (ties && pi == tau) {
      const bool k = g_tau + static_cast<float>(rank) * tau < top_p;
      ++rank;
      return k;
    }
    return false;
  };
  if (tid == 0) sh_cur_kept = false;
  __syncthreads();

  // Nucleus mass K, last kept id, and whether `current` is kept.
  float k_part = 0.0f;
  int64_t last_part = -1;
  int rank = rank0;
  for (int64_t i = beg; i < end; ++i) {
    const float pi = p[i];
    const bool k = kept(pi, rank);
    if (k) {
      k_part += pi;
      last_part = i;
    }
    if (i == cur) sh_cur_kept = k;  // one writer: the owner of cur's segment
  }
  const float K = block_sum(k_part);  // its barriers also publish sh_cur_kept
  const int64_t last = block_reduce_i(last_part, /*take_max=*/true);

  // Mass q = p / K of each segment, exclusive scan -> cdf at each segment's start.
  float q_part = 0.0f;
  rank = rank0;
  for (int64_t i = beg; i < end; ++i) {
    const float pi = p[i];
    if (kept(pi, rank)) q_part += pi / K;
  }
  float start = 0.0f;
  ScanF(tmp.sf).ExclusiveSum(q_part, start);
  __syncthreads();

  // Smallest id whose cdf exceeds u. The running sum repeats q_part's additions exactly, so a
  // segment contains a crossing iff start + q_part > u.
  const float u = a.uniforms[b];
  int64_t cand = LLONG_MAX;
  if (start + q_part > u) {
    float c = 0.0f;
    rank = rank0;
    for (int64_t i = beg; i < end; ++i) {
      const float pi = p[i];
      if (kept(pi, rank)) {
        c += pi / K;
        if (start + c > u) {
          cand = i;
          break;
        }
      }
    }
  }
  const int64_t first = block_reduce_i(cand, /*take_max=*/false);

  if (tid == 0) {
    const float log_k = logf(K);
    const int64_t pick = first != LLONG_MAX ? first : last;  // last >= 0: the top token is kept
    a.proposed[b] = pick;
    a.logq_proposed[b] =
        pick >= 0 ? ((to_float(row[pick]) / a.temperature - M) - log_sum) - log_k : kNaN;
    a.logq_current[b] = !cur_valid ? kNaN
                        : sh_cur_kept ? ((to_float(row[cur]) / a.temperature - M) - log_sum) - log_k
                                      : -kInf;
  }
}

int max_shared_optin(int device) {
  int bytes = 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();  // clear it: the scratch path then serves
    return 0;
  }
  return bytes;
}

template <typename T, int BLOCK>
cudaError_t launch_typed(const T* logits, int64_t B, const ProposeParams& params, cudaStream_t stream) {
  size_t smem = 0;
  if (params.scratch == nullptr) {
    smem = static_cast<size_t>(params.V) * sizeof(float);
    if (smem > 48u * 1024u) {  // above the default limit a kernel must opt in
      const cudaError_t err = cudaFuncSetAttribute(propose_kernel<T, BLOCK>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(smem));
      if (err != cudaSuccess) return err;
    }
  }
  propose_kernel<T, BLOCK><<<static_cast<unsigned>(B), BLOCK, smem, stream>>>(logits, params);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_sized(const T* logits, int64_t B, const ProposeParams& params, cudaStream_t stream) {
  return params.V <= kSmallBlockMaxV ? launch_typed<T, kSmallBlock>(logits, B, params, stream)
                                     : launch_typed<T, kLargeBlock>(logits, B, params, stream);
}

}  // namespace

bool propose_needs_scratch(int64_t V, int device) {
  return V * static_cast<int64_t>(sizeof(float)) + kStaticSmemMargin > max_shared_optin(device);
}

cudaError_t launch_propose(const void* logits, FloatKind kind, int64_t B, int64_t V,
                           int64_t row_stride, Strided1<const int64_t> current, float temperature,
                           double top_p, Strided1<const float> uniforms, float* scratch,
                           int64_t* proposed, float* logq_proposed, float* logq_current,
                           cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  if (B > INT32_MAX || V > INT32_MAX) return cudaErrorInvalidConfiguration;
  if (scratch == nullptr) {
    int device = 0;
    const cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    if (propose_needs_scratch(V, device)) return cudaErrorInvalidValue;
  }
  // top_p below the smallest float would round to 0 and make even G(p_max) = 0 fail "< top_p";
  // the smallest positive float keeps exactly what the reference keeps then: the top token.
  const float top_p_f = std::max(static_cast<float>(top_p), std::numeric_limits<float>::denorm_min());
  const ProposeParams params{V,        row_stride,    current,       temperature,
                             top_p_f,  top_p >= 1.0,  uniforms,      scratch,
                             proposed, logq_proposed, logq_current};
  switch (kind) {
    case FloatKind::kFloat32:
      return launch_sized(static_cast<const float*>(logits), B, params, stream);
    case FloatKind::kFloat16:
      return launch_sized(static_cast<const __half*>(logits), B, params, stream);
    case FloatKind::kBFloat16:
      return launch_sized(static_cast<const __nv_bfloat16*>(logits), B, params, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace mhfast
