// propose on CUDA: one block per row, the row read from global memory once.
//
// Steps of propose_kernel (each a named device function below):
//  1. load_row: logits -> x = logits / temperature into the row buffer (16-byte loads, conflict-free
//     shared stores) with the max of x (and whether a NaN was seen) in the same pass. A row with
//     NaN / +inf or no finite logit stops here (see write_bad_row). Then sum_exp: s = sum exp(x - max)
//     over the buffer, thread t taking ids t, t + BLOCK, ... and the block's sums added in warp order.
//     Which thread loads which id depends on where the row starts in memory (the unaligned head), so
//     the sum is not taken in the load pass: its order, and so its rounding, must depend on V alone,
//     or mh_propose_site (rows inside the cache) and propose (the same rows gathered) would give
//     log q's that differ in the last bit (seen on an H200, 2026-11-26).
//  2. to_probs: p = exp((x - max) - log sum) in place (torch's log_softmax arithmetic, fp32).
//  3. find_nucleus (top_p < 1): the reference keeps token j iff the mass of the tokens ahead of it in
//     (p desc, id asc) order is < top_p. With G(t) = sum of p_k > t that is: every p > tau, where
//     tau is the smallest row value with G(tau) < top_p, plus the ties p == tau whose rank r by id
//     gives G(tau) + r * tau < top_p. tau is found by a k-way search on the bit pattern of t
//     (non-negative floats order like their bits): each pass over the buffer evaluates G at
//     kWays - 1 thresholds, so ~31 / log2(kWays) passes instead of bisection's 31. G is monotone in
//     floating point too (each threshold's sum has a fixed order over non-negative terms), so the
//     search is exact and lands on a row value. Once the bracket holds <= kCandidates values
//     (typically after 2-4 passes), they are copied aside and the remaining passes read only them.
//  4. nucleus_mass + find_crossing: thread t owns the contiguous ids [t*R, (t+1)*R), R = ceil(V / BLOCK)
//     made odd (a warp's 32 reads of one step land on 32 banks), and walks them alone; tie ranks
//     start from an exclusive scan of the threads' tie counts. Pass A: nucleus mass K, last kept id,
//     whether `current` is kept. Pass B: each thread's q = p / K mass; lanes' and warps' masses
//     added one after the other in thread order give each run's CDF start, so that a run ends
//     exactly where the next begins; the one thread whose run holds u re-walks it with the same
//     additions and picks the first id whose CDF exceeds u (none: the last kept id, as in the
//     reference).
// uniform_mix = eps > 0 (a.mix): q = (1 - eps) * q_nucleus + eps / n over the n tokens of finite x.
// to_probs then stores -0 for x = -inf (p = 0 either way, and no nucleus test sees the sign), so
// the later passes tell "finite x, p underflowed" from "-inf logit" without re-reading the logits;
// nucleus_mass also counts n, and the walk adds eps / n per finite token to the scaled q. eps = 0
// runs the exact arithmetic of the pure nucleus proposal (same chains as before the option).
// Global memory: each logit read once (+ two scalars per row); every other pass reads the buffer.
// The buffer is shared memory when static + V * 4 bytes fit the device's opt-in limit (V up to
// ~56k on H100), otherwise a global scratch row the caller allocates (propose_needs_scratch).
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "../counter_hash.h"
#include "common.cuh"

namespace mhfast {
namespace cuda {
namespace {

constexpr int kSmallBlock = 128;
constexpr int kLargeBlock = 512;
constexpr int64_t kSmallBlockMaxV = 2048;
constexpr int kWays = 8;  // k-way search: kWays - 1 thresholds per pass, 3 bits of tau per pass
constexpr int kCandidates = 1024;  // values kept aside once the search bracket holds this few
constexpr int kMaxWarps = kLargeBlock / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr size_t kDefaultSmemLimit = 48u * 1024u;  // above this (static + dynamic) a kernel opts in

struct ProposeParams {
  int64_t V, row_stride, scratch_stride;
  ProposeSiteArgs site;  // site.on: mh_propose_site (rows, current and uniforms from the chains)
  Strided1<const int64_t> current;
  float temperature;
  float top_p;  // fp32: the reference compares fp32 masses with top_p
  bool full;    // top_p >= 1: the nucleus is every token with p > 0
  bool mix;     // uniform_mix > 0
  float mix_a, mix_eps, log_a, log_eps;  // 1 - eps, eps, log(1 - eps), log(eps) (host, float64 then fp32)
  Strided1<const float> uniforms;
  float* scratch;  // B rows of scratch_stride floats, or nullptr: the row lives in shared memory
  int64_t* proposed;
  float* logq_proposed;
  float* logq_current;
};

// Block-wide scratch for reductions (static shared memory, counted by the launcher's opt-in).
struct BlockShared {
  float cand[kCandidates];  // nucleus-boundary candidates (find_nucleus)
  float part[kWays - 1][kMaxWarps];
  float wsum[kMaxWarps];
  float wmax[kMaxWarps];
  int wnan[kMaxWarps];
  int64_t last[kMaxWarps];
  int ties[kMaxWarps];
  float result[kWays - 1];
  int cur_kept;
  int pick_kept;  // whether the id find_crossing returns is in the nucleus (mixtures only)
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;  // xor butterfly: every lane gets the same, order-fixed sum
}

// Inclusive prefix sum of counts over the lanes (integers: exact in any order).
__device__ __forceinline__ int warp_inclusive_count(int v, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(kFull, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

// Sums NV per-thread values over the block; every thread gets the NV sums (fixed order).
template <int NV, int BLOCK>
__device__ __forceinline__ void block_sums(float (&v)[NV], BlockShared& sh) {
  constexpr int kWarps = BLOCK / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const float s = warp_sum(v[j]);
    if (lane == 0) sh.part[j][warp] = s;
  }
  __syncthreads();
  if (threadIdx.x < NV) {
    float s = 0.0f;
    for (int w = 0; w < kWarps; ++w) s += sh.part[threadIdx.x][w];
    sh.result[threadIdx.x] = s;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < NV; ++j) v[j] = sh.result[j];
  __syncthreads();  // sh reusable
}

// Stores n floats at dst (16-byte stores when aligned: consecutive lanes, consecutive vectors).
__device__ __forceinline__ void store_floats(float* dst, const float* a, int n) {
  if ((reinterpret_cast<uintptr_t>(dst) & 15u) == 0 && n % 4 == 0) {
    for (int k = 0; k < n; k += 4) {
      *reinterpret_cast<float4*>(dst + k) = make_float4(a[k], a[k + 1], a[k + 2], a[k + 3]);
    }
  } else {
    for (int k = 0; k < n; ++k) dst[k] = a[k];
  }
}

// A thread's running max of x and whether it saw a NaN (fmaxf ignores NaN). A max is exact in any order.
struct RowMax {
  float m = -kInf;
  bool nan = false;
  __device__ __forceinline__ void add(const float* x, int n) {
    for (int k = 0; k < n; ++k) {
      m = fmaxf(m, x[k]);
      nan |= x[k] != x[k];
    }
  }
};

// x = row[i] / temperature (-inf where blocked) into p[i] for this thread's i of [begin, end), one at a time.
template <typename T, int BLOCK>
__device__ __forceinline__ void scale_scalars(const T* row, int64_t begin, int64_t end, float temperature,
                                              const bool* blocked, float* p, RowMax& acc) {
  for (int64_t i = begin + threadIdx.x; i < end; i += BLOCK) {
    const float x = blocked != nullptr && blocked[i] ? -kInf : to_float(row[i]) / temperature;
    p[i] = x;
    acc.add(&x, 1);
  }
}

// The row's max, NaN if any thread saw a NaN (every thread gets it; the buffer is complete after it).
template <int BLOCK>
__device__ __forceinline__ float block_max(RowMax acc, BlockShared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float m = acc.m;
  int nan = acc.nan;
  for (int o = 16; o > 0; o >>= 1) {
    m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
    nan |= __shfl_xor_sync(kFull, nan, o);
  }
  if (lane == 0) {
    sh.wmax[warp] = m;
    sh.wnan[warp] = nan;
  }
  __syncthreads();
  for (int w = 0; w < BLOCK / 32; ++w) {
    m = fmaxf(m, sh.wmax[w]);
    nan |= sh.wnan[w];
  }
  __syncthreads();
  return nan ? kNaN : m;
}

// Step 1b: sum of exp(x - M) over p[0, V) (M finite), in an order fixed by V and BLOCK (see the file's doc).
template <int BLOCK>
__device__ __forceinline__ float sum_exp(const float* p, int64_t V, float M, BlockShared& sh) {
  float s[1] = {0.0f};
  for (int64_t i = threadIdx.x; i < V; i += BLOCK) s[0] += expf(p[i] - M);  // x = -inf: 0
  block_sums<1, BLOCK>(s, sh);
  return s[0];
}

// Step 1: x = row / temperature into p[0, V), and the row's max of x (NaN if it holds a NaN).
// blocked (contiguous Bool[V] or nullptr): those ids get x = -inf, as after a masked_fill.
// Unaligned head and tail one entry at a time, the 16-byte-aligned body in vector loads.
template <typename T, int BLOCK>
__device__ __forceinline__ float load_row(const T* row, int64_t V, float temperature, const bool* blocked, float* p,
                                          BlockShared& sh) {
  constexpr int W = VecWidth<T>::value;
  const int tid = threadIdx.x;
  RowMax acc;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(row);
  const int64_t head = std::min<int64_t>(V, ((16u - (addr & 15u)) & 15u) / sizeof(T));
  scale_scalars<T, BLOCK>(row, 0, head, temperature, blocked, p, acc);
  const int64_t nvec = (V - head) / W;
  const T* body = row + head;
  int64_t v = tid;
  for (; v + BLOCK < nvec; v += 2 * BLOCK) {  // two 16-byte loads in flight per thread
    float a[W], b[W];
    load16(body + v * W, a);
    load16(body + (v + BLOCK) * W, b);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      a[k] = a[k] / temperature;
      b[k] = b[k] / temperature;
    }
    if (blocked != nullptr) {
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (blocked[head + v * W + k]) a[k] = -kInf;
        if (blocked[head + (v + BLOCK) * W + k]) b[k] = -kInf;
      }
    }
    store_floats(p + head + v * W, a, W);
    store_floats(p + head + (v + BLOCK) * W, b, W);
    acc.add(a, W);
    acc.add(b, W);
  }
  if (v < nvec) {
    float a[W];
    load16(body + v * W, a);
#pragma unroll
    for (int k = 0; k < W; ++k) a[k] = blocked != nullptr && blocked[head + v * W + k] ? -kInf : a[k] / temperature;
    store_floats(p + head + v * W, a, W);
    acc.add(a, W);
  }
  scale_scalars<T, BLOCK>(row, head + nvec * W, V, temperature, blocked, p, acc);
  return block_max<BLOCK>(acc, sh);
}

// Step 2: p = exp((x - M) - log_sum) in place; returns this thread's part of the total mass.
// mark_neg_inf (mixtures): x = -inf stores -0, every later `p > 0` / `p == tau` test reads it as 0.
template <int BLOCK>
__device__ float to_probs(float* p, int64_t V, float M, float log_sum, bool mark_neg_inf) {
  float mass = 0.0f;
  for (int64_t i = threadIdx.x; i < V; i += BLOCK) {
    const float xi = p[i];
    const float pi = mark_neg_inf && xi == -kInf ? -0.0f : expf((xi - M) - log_sum);
    p[i] = pi;
    mass += pi;
  }
  __syncthreads();  // p complete before any other thread's reads
  return mass;
}

struct Nucleus {
  float tau;    // kept: p > tau, or p == tau with tie rank r: g_tau + r * tau < top_p
  float g_tau;  // G(tau)
  bool ties;    // false: kept iff p > tau (tau = 0: every p > 0)
};

// g[j] = block sum of (t[j] < bits(x) <= cap ? x : 0) over the n values of `src` (fixed order).
template <int BLOCK>
__device__ __forceinline__ void threshold_sums(const float* src, int64_t n, const uint32_t (&t)[kWays - 1],
                                               uint32_t cap, float (&g)[kWays - 1], BlockShared& sh) {
#pragma unroll
  for (int j = 0; j < kWays - 1; ++j) g[j] = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += BLOCK) {
    const float x = src[i];
    const uint32_t bits = __float_as_uint(x) <= cap ? __float_as_uint(x) : 0u;  // above cap: counts nowhere
#pragma unroll
    for (int j = 0; j < kWays - 1; ++j) g[j] += (bits > t[j]) ? x : 0.0f;
  }
  block_sums<kWays - 1, BLOCK>(g, sh);
}

// Compacts the values of p with lo < bits <= hi into sh.cand (thread-strided order: deterministic).
template <int BLOCK>
__device__ int compact_candidates(const float* p, int64_t V, uint32_t lo, uint32_t hi, BlockShared& sh) {
  constexpr int kWarps = BLOCK / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int mine = 0;
  for (int64_t i = threadIdx.x; i < V; i += BLOCK) {
    const uint32_t bits = __float_as_uint(p[i]);
    mine += (bits > lo && bits <= hi) ? 1 : 0;
  }
  const int incl = warp_inclusive_count(mine, lane);  // exclusive offset of this thread = warp scan + warps before
  if (lane == 31) sh.ties[warp] = incl;
  __syncthreads();
  int offset = incl - mine, total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) offset += sh.ties[w];
    total += sh.ties[w];
  }
  for (int64_t i = threadIdx.x; i < V && total <= kCandidates; i += BLOCK) {
    const float x = p[i];
    const uint32_t bits = __float_as_uint(x);
    if (bits > lo && bits <= hi) sh.cand[offset++] = x;
  }
  __syncthreads();
  return total;
}

// Step 3: the nucleus boundary by k-way search on the bit pattern of tau. Invariant:
// G(lo) >= top_p (lo = 0: G(0) = total mass), G(hi) < top_p (hi = p_max: G = 0). Once the values
// in (lo, hi] are few (<= kCandidates), they are copied aside and the remaining passes read only
// them: for t in [lo, hi), G(t) = G(hi) + sum of the candidates in (t, hi] (monotone in t).
template <int BLOCK>
__device__ Nucleus find_nucleus(const float* p, int64_t V, float top_p, float p_max, float mass_part,
                                BlockShared& sh) {
  float total[1] = {mass_part};
  block_sums<1, BLOCK>(total, sh);
  if (total[0] < top_p) return Nucleus{0.0f, 0.0f, false};  // the whole support
  uint32_t lo = 0u, hi = __float_as_uint(p_max);
  float g_hi = 0.0f;
  int n_cand = -1;  // -1: not compacted yet, the passes read the whole row
  while (hi - lo > 1u) {
    uint32_t t[kWays - 1];
    float g[kWays - 1];
    const uint32_t step = (hi - lo) / kWays;
#pragma unroll
    for (int j = 0; j < kWays - 1; ++j) {
      // Thresholds strictly inside (lo, hi), increasing; small ranges repeat some (harmless).
      t[j] = step > 0 ? lo + step * (j + 1) : min(lo + 1u + j, hi - 1u);
    }
    if (n_cand < 0) {
      threshold_sums<BLOCK>(p, V, t, 0xffffffffu, g, sh);
    } else {
      // Candidates above the current hi are already in g_hi: capped out.
      threshold_sums<BLOCK>(sh.cand, n_cand, t, hi, g, sh);
#pragma unroll
      for (int j = 0; j < kWays - 1; ++j) g[j] = g_hi + g[j];
    }
    // G decreases with t: the new hi is the first threshold with G < top_p, lo the one before.
    uint32_t new_lo = lo, new_hi = hi;
    float new_g_hi = g_hi;
#pragma unroll
    for (int j = kWays - 2; j >= 0; --j) {
      if (g[j] < top_p) {
        new_hi = t[j];
        new_g_hi = g[j];
      } else if (t[j] > new_lo) {
        new_lo = t[j];
      }
    }
    lo = new_lo;
    hi = new_hi;
    g_hi = new_g_hi;
    if (n_cand < 0 && hi - lo > 1u) {
      const int n = compact_candidates<BLOCK>(p, V, lo, hi, sh);
      if (n <= kCandidates) n_cand = n;
    }
  }
  return Nucleus{__uint_as_float(hi), g_hi, true};
}

// Step 4 walks ids in order, thread by thread: thread t owns the contiguous run [t * R, (t + 1) * R) of
// ids, R = ceil(V / BLOCK) made odd, so the 32 lanes of a warp read words R apart, on 32 different
// banks. Each lane walks its run alone (no shuffle per id); warps and lanes are then combined in
// thread order. Replaces 32-wide stripes that took a ballot and a 5-shuffle scan per 32 ids and
// left one warp re-walking ~2,000 ids while the block waited (ncu on an H200: 0.49 instructions
// issued per cycle and scheduler, 25% occupancy, DRAM 5% busy). Measured there against the stripes:
// 1.4-1.7x faster at top_p = 1, 1.1-1.4x at top_p = 0.9 (bench/CUDA_NOTES.md, "Second run").
struct Run {
  int64_t beg, end;
};

template <int BLOCK>
__device__ __forceinline__ Run thread_run(int64_t V) {
  const int64_t R = ceil_div(V, static_cast<int64_t>(BLOCK)) | 1;
  const int64_t beg = std::min<int64_t>(V, static_cast<int64_t>(threadIdx.x) * R);
  return Run{beg, std::min<int64_t>(V, beg + R)};
}

// Nucleus membership of the ids of a run, taken in increasing order; `rank` counts the ties
// (p == tau) seen so far, from the number of ties before the run.
__device__ __forceinline__ bool kept_in_order(float pi, const Nucleus& nu, float top_p, int& rank) {
  if (!(pi > 0.0f)) return false;
  if (pi > nu.tau) return true;
  if (!nu.ties || pi != nu.tau) return false;
  const int r = rank++;
  return nu.g_tau + static_cast<float>(r) * nu.tau < top_p;
}

// Ties (p == tau) before this thread's run: its own count, exclusive-scanned over the block (integers: exact).
template <int BLOCK>
__device__ int ties_before(const float* p, const Run& run, const Nucleus& nu, BlockShared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int mine = 0;
  if (nu.ties) {
    for (int64_t i = run.beg; i < run.end; ++i) mine += (p[i] == nu.tau && nu.tau > 0.0f) ? 1 : 0;
  }
  const int incl = warp_inclusive_count(mine, lane);
  if (lane == 31) sh.ties[warp] = incl;
  __syncthreads();
  int before = incl - mine;
  for (int w = 0; w < warp; ++w) before += sh.ties[w];
  __syncthreads();
  return before;
}

// A proposable token of a mixture: finite x (to_probs marked x = -inf as -0).
__device__ __forceinline__ bool finite_x(float pi) { return !signbit(pi); }

struct Support {
  int64_t last;    // last id with q > 0: kept, or (mixtures) of finite x
  bool last_kept;  // whether `last` is in the nucleus
  float n;         // mixtures: the number of tokens of finite x (exact in fp32 below 2^24)
};

// Step 4a: nucleus mass K, the support's last id, and whether `current` is kept (sh.cur_kept).
template <int BLOCK>
__device__ float nucleus_mass(const float* p, const Run& run, const Nucleus& nu, float top_p, bool mix,
                              int rank0, int64_t cur, Support& sup, BlockShared& sh) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) sh.cur_kept = 0;
  __syncthreads();
  float k_part = 0.0f, n_part = 0.0f;
  int64_t last_part = -1;  // 2 * id + kept: the max is still the last id
  int rank = rank0;
  for (int64_t i = run.beg; i < run.end; ++i) {
    const float pi = p[i];
    const bool k = kept_in_order(pi, nu, top_p, rank);
    const bool fin = mix && finite_x(pi);
    if (k) k_part += pi;
    if (fin) n_part += 1.0f;
    if (k || fin) last_part = 2 * i + (k ? 1 : 0);
    if (i == cur) sh.cur_kept = k ? 1 : 0;  // one writer: the owner of cur
  }
  float v[2] = {k_part, n_part};
  for (int o = 16; o > 0; o >>= 1) last_part = max(last_part, __shfl_xor_sync(kFull, last_part, o));
  if (lane == 0) sh.last[warp] = last_part;
  block_sums<2, BLOCK>(v, sh);  // its barriers also publish sh.last and sh.cur_kept
  int64_t enc = -1;
  for (int w = 0; w < BLOCK / 32; ++w) enc = max(enc, sh.last[w]);
  sup = Support{enc >= 0 ? enc / 2 : -1, enc >= 0 && (enc & 1) != 0, v[1]};
  return v[0];
}

// The scaled proposal of a walk: q_i = a * p_i / K (kept) + c (finite x), or p_i / K without a mixture.
struct MixQ {
  bool on;
  float a, c;  // 1 - eps, eps / n
};

__device__ __forceinline__ float scaled_q(float pi, bool kept, float K, const MixQ& mx) {
  return !mx.on ? (kept ? pi / K : 0.0f) : (kept ? mx.a * (pi / K) : 0.0f) + (finite_x(pi) ? mx.c : 0.0f);
}

// This thread's q mass over its run, the ids in order (find_crossing's totals and its re-walk: the same additions).
__device__ __forceinline__ float run_mass(const float* p, const Run& run, const Nucleus& nu, float top_p, float K,
                                          const MixQ& mx, int rank0) {
  float mass = 0.0f;
  int rank = rank0;
  for (int64_t i = run.beg; i < run.end; ++i) {
    const float pi = p[i];
    mass += scaled_q(pi, kept_in_order(pi, nu, top_p, rank), K, mx);
  }
  return mass;
}

// The first id of the run whose CDF, start + (before + running mass), exceeds u, into sh.last[0] / sh.pick_kept.
__device__ __forceinline__ void pick_in_run(const float* p, const Run& run, const Nucleus& nu, float top_p, float K,
                                            const MixQ& mx, int rank0, float start, float before, float u,
                                            BlockShared& sh) {
  float r = 0.0f;
  int rank = rank0;
  for (int64_t i = run.beg; i < run.end; ++i) {
    const float pi = p[i];
    const bool k = kept_in_order(pi, nu, top_p, rank);
    r += scaled_q(pi, k, K, mx);
    if (start + (before + r) > u) {
      sh.last[0] = i;
      sh.pick_kept = k ? 1 : 0;
      return;
    }
  }
}

// Step 4b: smallest id of q > 0 whose CDF exceeds u, or -1 (then the caller takes the support's
// last id); sh.pick_kept: whether the returned id is in the nucleus.
// The CDF of id i in thread t's run is start_w + (before_t + r_i): start_w the masses of the warps
// before (added in warp order), before_t the masses of the lanes before t in its warp (added in lane
// order), r_i the running mass of the run up to i. Each of these sums is taken one term after the
// other, so a run's last CDF is exactly the next run's start (fl(before_t + mass_t) = before_{t+1},
// fl(start_w + warp mass) = start_{w+1}): the CDF is monotone over the ids, and the run that the
// totals say holds the crossing holds it (no ulp left between two sums of different order).
template <int BLOCK>
__device__ int64_t find_crossing(const float* p, const Run& run, const Nucleus& nu, float top_p,
                                 float K, const MixQ& mx, int rank0, float u, BlockShared& sh) {
  constexpr int kWarps = BLOCK / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float mine = run_mass(p, run, nu, top_p, K, mx, rank0);
  float before = 0.0f, total = 0.0f;  // lane order, one term at a time (every lane the same additions)
  for (int j = 0; j < 32; ++j) {
    const float t = __shfl_sync(kFull, mine, j);
    if (j == lane) before = total;
    total += t;
  }
  if (lane == 0) sh.wsum[warp] = total;
  __syncthreads();
  float start = 0.0f;
  int owner = -1;  // first warp whose CDF range contains a crossing
  for (int w = 0; w < kWarps; ++w) {
    if (owner < 0 && start + sh.wsum[w] > u) owner = w;
    if (owner < 0) start += sh.wsum[w];
  }
  if (threadIdx.x == 0) {
    sh.last[0] = -1;
    sh.pick_kept = 0;
  }
  __syncthreads();
  if (warp == owner) {
    // The first lane whose run ends above u (lane 31 does: its end is start + the warp's total).
    const unsigned hit = __ballot_sync(kFull, start + (before + mine) > u);
    if (hit != 0u && lane == __ffs(hit) - 1) pick_in_run(p, run, nu, top_p, K, mx, rank0, start, before, u, sh);
  }
  __syncthreads();
  return sh.last[0];
}

// A row with NaN / +inf, or no finite logit: nothing can be proposed. Deterministic fallback
// that keeps the sampler in bounds: propose `current` itself (0 if out of range) with
// logq_* = NaN, so mh_accept_ rejects (NaN log_alpha) and the chain stays where it is.
// mhfast.ops.propose(validate=True) raises on such rows before the launch.
__device__ void write_bad_row(const ProposeParams& a, int64_t b, int64_t cur, bool cur_valid) {
  a.proposed[b] = cur_valid ? cur : 0;
  a.logq_proposed[b] = kNaN;
  a.logq_current[b] = kNaN;
  if (a.site.on) a.site.changed[b] = false;
}

// log q of one token under the mixture: logaddexp(log(1 - eps) + log q_nucleus, log(eps / n)),
// -inf for x = -inf (never proposed).
__device__ __forceinline__ float mixture_logq(float x, bool kept, float M, float log_sum, float log_k,
                                              float log_a, float log_c) {
  if (!(x > -kInf)) return -kInf;
  if (!kept) return log_c;
  const float l = (((x - M) - log_sum) - log_k) + log_a;
  const float hi = fmaxf(l, log_c), lo = fminf(l, log_c);
  return hi + log1pf(expf(lo - hi));
}

// Row b's logits, current token and uniform: propose reads them from its arguments;
// mh_propose_site from cache[act[b], pos[b]], tokens[act[b], pos[b]] and the counter hash of
// keys[act[b]]. ok = false: act[b] or pos[b] out of range (no row is read then).
template <typename T>
struct RowSource {
  const T* row;
  int64_t cur;
  float u;
  bool ok;
};

template <typename T, bool SITE>
__device__ __forceinline__ RowSource<T> row_source(const T* logits, const ProposeParams& a, int64_t b) {
  if (!SITE) return RowSource<T>{logits + b * a.row_stride, a.current[b], a.uniforms[b], true};
  const ProposeSiteArgs& s = a.site;
  const int64_t m = s.act[b], t = s.pos[b];
  if (m < 0 || m >= s.tokens.rows || t < 0 || t >= s.tokens.cols) return RowSource<T>{logits, -1, 0.5f, false};
  const float u = counter_uniform(static_cast<uint64_t>(s.keys[m]), static_cast<uint64_t>(s.epoch),
                                  static_cast<uint64_t>(s.step), static_cast<uint64_t>(s.stream), 0);
  return RowSource<T>{logits + m * s.cache_stride0 + t * s.cache_stride1, s.tokens(m, t), u, true};
}

// The drawn token (the first crossing, else the last kept one: the top token is always kept) and, for mixtures,
// whether the nucleus keeps it.
struct RowPick {
  int64_t token;
  bool kept;
};

// Thread 0's outputs of row b: the pick and both log q (of the nucleus, or of the mixture with eps / n).
template <typename T, bool SITE>
__device__ __forceinline__ void write_row(const ProposeParams& a, int64_t b, const T* row, float M, float log_sum,
                                          float log_k, RowPick pk, float n, int64_t cur, bool cur_valid,
                                          bool cur_kept) {
  const int64_t pick = pk.token;
  a.proposed[b] = pick;
  if (!a.mix) {
    a.logq_proposed[b] = ((to_float(row[pick]) / a.temperature - M) - log_sum) - log_k;
    a.logq_current[b] = !cur_valid ? kNaN
                        : cur_kept ? ((to_float(row[cur]) / a.temperature - M) - log_sum) - log_k
                                   : -kInf;
  } else {
    const float log_c = a.log_eps - logf(n);
    a.logq_proposed[b] = mixture_logq(to_float(row[pick]) / a.temperature, pk.kept, M, log_sum, log_k,
                                      a.log_a, log_c);
    a.logq_current[b] = !cur_valid ? kNaN
                                   : mixture_logq(to_float(row[cur]) / a.temperature, cur_kept, M, log_sum,
                                                  log_k, a.log_a, log_c);
  }
  if (SITE) a.site.changed[b] = pick != cur;
}

// SITE: mh_propose_site (a template argument, so that plain propose compiles without the site code).
template <typename T, int BLOCK, bool SITE>
__global__ void __launch_bounds__(BLOCK) propose_kernel(const T* logits, ProposeParams a) {
  extern __shared__ float4 smem_row[];  // float4: 16-byte aligned
  __shared__ BlockShared sh;
  const int64_t b = blockIdx.x;
  const int64_t V = a.V;
  const RowSource<T> src = row_source<T, SITE>(logits, a, b);
  const T* row = src.row;
  float* base = a.scratch != nullptr ? a.scratch + b * a.scratch_stride : reinterpret_cast<float*>(smem_row);
  // Offset the buffer so that the 16-byte loads' floats land on 16-byte aligned addresses.
  const uintptr_t addr = reinterpret_cast<uintptr_t>(row);
  const int64_t head = std::min<int64_t>(V, ((16u - (addr & 15u)) & 15u) / sizeof(T));
  float* p = base + (4 - head % 4) % 4;
  const int64_t cur = src.cur;
  const bool cur_valid = cur >= 0 && cur < V;
  if (!src.ok) {  // uniform across the block (one row per block)
    if (threadIdx.x == 0) write_bad_row(a, b, cur, cur_valid);
    return;
  }

  const float M = load_row<T, BLOCK>(row, V, a.temperature, SITE ? a.site.blocked : nullptr, p, sh);
  if (!(M > -kInf && M < kInf)) {  // NaN, +inf or no finite x; uniform across the block
    if (threadIdx.x == 0) write_bad_row(a, b, cur, cur_valid);
    return;
  }
  const float log_sum = logf(sum_exp<BLOCK>(p, V, M, sh));
  const float mass = to_probs<BLOCK>(p, V, M, log_sum, a.mix);
  const float p_max = expf((M - M) - log_sum);  // the same arithmetic as the max token's p
  const Nucleus nu = a.full ? Nucleus{0.0f, 0.0f, false}
                            : find_nucleus<BLOCK>(p, V, a.top_p, p_max, mass, sh);
  const Run run = thread_run<BLOCK>(V);
  const int rank0 = ties_before<BLOCK>(p, run, nu, sh);
  Support sup{};
  const float K = nucleus_mass<BLOCK>(p, run, nu, a.top_p, a.mix, rank0, cur, sup, sh);
  const bool cur_kept = sh.cur_kept != 0;
  const MixQ mx{a.mix, a.mix_a, a.mix ? a.mix_eps / sup.n : 0.0f};
  const int64_t first = find_crossing<BLOCK>(p, run, nu, a.top_p, K, mx, rank0, src.u, sh);
  if (threadIdx.x == 0) {
    // (sh.pick_kept is read for mixtures only: find_crossing sets it for them)
    const bool kept = a.mix && (first >= 0 ? sh.pick_kept != 0 : sup.last_kept);
    const RowPick pk{first >= 0 ? first : sup.last, kept};
    write_row<T, SITE>(a, b, row, M, log_sum, logf(K), pk, sup.n, cur, cur_valid, cur_kept);
  }
}

// Dynamic shared memory of one row: V floats plus up to 3 of alignment offset.
size_t row_smem_bytes(int64_t V) { return static_cast<size_t>(V + 3) * sizeof(float); }

struct SmemLimits {
  size_t static_bytes;  // the kernel's own __shared__ (BlockShared), not in the dynamic request
  size_t optin;         // the device's per-block limit after opting in
};

template <int BLOCK>
SmemLimits smem_limits(int device) {
  cudaFuncAttributes attr{};
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, propose_kernel<float, BLOCK, false>));
  int optin = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return SmemLimits{attr.sharedSizeBytes, static_cast<size_t>(optin)};
}

SmemLimits smem_limits_for(int64_t V, int device) {
  return V <= kSmallBlockMaxV ? smem_limits<kSmallBlock>(device) : smem_limits<kLargeBlock>(device);
}

template <typename T, int BLOCK, bool SITE>
void launch_typed(const T* logits, int64_t B, const ProposeParams& params, cudaStream_t stream) {
  size_t smem = 0;
  if (params.scratch == nullptr) {
    smem = row_smem_bytes(params.V);
    cudaFuncAttributes attr{};
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, propose_kernel<T, BLOCK, SITE>));
    // The 48 KB default covers static + dynamic shared memory together: opt in beyond it.
    if (attr.sharedSizeBytes + smem > kDefaultSmemLimit) {
      C10_CUDA_CHECK(cudaFuncSetAttribute(propose_kernel<T, BLOCK, SITE>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    }
  }
  propose_kernel<T, BLOCK, SITE><<<static_cast<unsigned>(B), BLOCK, smem, stream>>>(logits, params);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, bool SITE>
void launch_blocks(const T* logits, int64_t B, const ProposeParams& params, cudaStream_t stream) {
  if (params.V <= kSmallBlockMaxV) {
    launch_typed<T, kSmallBlock, SITE>(logits, B, params, stream);
  } else {
    launch_typed<T, kLargeBlock, SITE>(logits, B, params, stream);
  }
}

template <typename T>
void launch_sized(const T* logits, int64_t B, const ProposeParams& params, cudaStream_t stream) {
  if (params.site.on) {
    launch_blocks<T, true>(logits, B, params, stream);
  } else {
    launch_blocks<T, false>(logits, B, params, stream);
  }
}

}  // namespace

int64_t propose_scratch_stride(int64_t V, int device) {
  const SmemLimits lim = smem_limits_for(V, device);
  if (lim.static_bytes + row_smem_bytes(V) <= lim.optin) return 0;
  return ceil_div(V + 3, 4) * 4;  // rows start 16-byte aligned
}

namespace {

void launch_any(const void* logits, FloatKind kind, int64_t B, int64_t V, int64_t row_stride,
                const ProposeSiteArgs& site, Strided1<const int64_t> current, float temperature, double top_p,
                double uniform_mix, Strided1<const float> uniforms, float* scratch, int64_t scratch_stride,
                int64_t* proposed, float* logq_proposed, float* logq_current, cudaStream_t stream) {
  if (B == 0) return;
  TORCH_CHECK(B <= INT32_MAX && V <= INT32_MAX, "mhfast.propose: too many rows or columns for one grid");
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  TORCH_CHECK(scratch != nullptr || propose_scratch_stride(V, device) == 0,
              "mhfast.propose: internal error: a row of ", V, " floats needs the scratch buffer");
  // top_p below the smallest float would round to 0 and make even G(p_max) = 0 fail "< top_p";
  // the smallest positive float keeps exactly what the reference keeps then: the top token.
  const float top_p_f = std::max(static_cast<float>(top_p), std::numeric_limits<float>::denorm_min());
  const bool mix = uniform_mix > 0.0;
  const ProposeParams params{V,
                             row_stride,
                             scratch_stride,
                             site,
                             current,
                             temperature,
                             top_p_f,
                             top_p >= 1.0,
                             mix,
                             static_cast<float>(1.0 - uniform_mix),
                             static_cast<float>(uniform_mix),
                             static_cast<float>(std::log1p(-uniform_mix)),
                             mix ? static_cast<float>(std::log(uniform_mix)) : 0.0f,
                             uniforms,
                             scratch,
                             proposed,
                             logq_proposed,
                             logq_current};
  switch (kind) {
    case FloatKind::kFloat32:
      return launch_sized(static_cast<const float*>(logits), B, params, stream);
    case FloatKind::kFloat16:
      return launch_sized(static_cast<const __half*>(logits), B, params, stream);
    case FloatKind::kBFloat16:
      return launch_sized(static_cast<const __nv_bfloat16*>(logits), B, params, stream);
  }
  TORCH_CHECK(false, "mhfast.propose: unknown logits dtype");
}

}  // namespace

void launch_propose(const void* logits, FloatKind kind, int64_t B, int64_t V, int64_t row_stride,
                    Strided1<const int64_t> current, float temperature, double top_p,
                    double uniform_mix, Strided1<const float> uniforms, float* scratch,
                    int64_t scratch_stride,
                    int64_t* proposed, float* logq_proposed, float* logq_current,
                    cudaStream_t stream) {
  launch_any(logits, kind, B, V, row_stride, ProposeSiteArgs{}, current, temperature, top_p, uniform_mix, uniforms,
             scratch, scratch_stride, proposed, logq_proposed, logq_current, stream);
}

void launch_propose_site(const void* cache, FloatKind kind, int64_t A, int64_t V, const ProposeSiteArgs& site,
                         float temperature, double top_p, float* scratch, int64_t scratch_stride,
                         int64_t* proposed, float* logq_proposed, float* logq_current, cudaStream_t stream) {
  launch_any(cache, kind, A, V, 0, site, Strided1<const int64_t>{nullptr, 0}, temperature, top_p,
             /*uniform_mix=*/0.0, Strided1<const float>{nullptr, 0}, scratch, scratch_stride, proposed, logq_proposed, logq_current,
             stream);
}

}  // namespace cuda
}  // namespace mhfast
