// The proposal memo's table (mhfast/sampler/memo.py), one C++ definition for the CPU and CUDA
// kernels; mhfast/reference.py has the Python twin and tests/ops/test_mh_memo_ops.py holds them equal.
//
// One table per group of chains (the chains of one input: same context, same energy positions),
// S entries in S / ways buckets of `ways` entries. Entry s holds the sequence X' (stored[s], L
// tokens), its hash (hashes[s]) and a stamp: -1 empty; >= 0 ready, last used at that step; -(k + 2)
// reserved at step k by a miss, whose terms mh_memo_store_ writes later in the same step (a
// reservation older than the current step was never filled, so it counts as empty). The hash is
// FNV-1a over the L tokens with the splitmix64 finalizer: it only picks the bucket and skips
// token comparisons, a match is always confirmed on the stored tokens, so a collision cannot
// change a decision.
#pragma once

#include <cstdint>

#include "counter_hash.h"

namespace mhfast {

// Hash of X' = row with row[pos] replaced by token (row: L contiguous tokens).
MHFAST_HASH_FN uint64_t memo_hash(const int64_t* row, int64_t L, int64_t pos, int64_t token) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (int64_t t = 0; t < L; ++t) {
    h ^= static_cast<uint64_t>(t == pos ? token : row[t]);
    h *= 0x100000001B3ULL;
  }
  return mix64(h);
}

// An entry whose terms are (or, reserved in this step, will be) valid.
MHFAST_HASH_FN bool memo_live(int64_t stamp, int64_t step) { return stamp >= 0 || stamp == -(step + 2); }

// One group's table: stamp/hashes Long[S], stored Long[S, L] (contiguous rows of the group).
struct MemoGroup {
  int64_t* stamp;
  int64_t* hashes;
  int64_t* stored;
  int64_t S, L, ways;
};

// Looks X' (row with row[pos] = token, hash h) up in one group's table at step `step`. A hit
// returns its entry and marks it used in this step (LRU, and safe from eviction until the step
// ends). A miss reserves an entry of X''s bucket (an empty one first, else the least recently
// used one not used in this step) and returns it, or -1 when every entry of the bucket is in use
// in this step; the misses of one step therefore never share an entry.
MHFAST_HASH_FN int64_t memo_lookup_one(const MemoGroup& g, const int64_t* row, int64_t pos, int64_t token,
                                       uint64_t h, int64_t step, bool* hit) {
  const int64_t hs = static_cast<int64_t>(h);
  const int64_t base = static_cast<int64_t>(h % static_cast<uint64_t>(g.S / g.ways)) * g.ways;
  int64_t empty = -1, oldest = -1;
  for (int64_t s = base; s < base + g.ways; ++s) {
    const int64_t st = g.stamp[s];
    if (!memo_live(st, step)) {
      if (empty < 0) empty = s;
      continue;
    }
    if (g.hashes[s] == hs) {
      bool same = true;
      for (int64_t t = 0; t < g.L && same; ++t) same = g.stored[s * g.L + t] == (t == pos ? token : row[t]);
      if (same) {
        if (st >= 0) g.stamp[s] = step;
        *hit = true;
        return s;
      }
    }
    if (st >= 0 && st != step && (oldest < 0 || st < g.stamp[oldest])) oldest = s;
  }
  *hit = false;
  const int64_t v = empty >= 0 ? empty : oldest;
  if (v < 0) return -1;
  g.hashes[v] = hs;
  for (int64_t t = 0; t < g.L; ++t) g.stored[v * g.L + t] = t == pos ? token : row[t];
  g.stamp[v] = -(step + 2);
  return v;
}

}  // namespace mhfast
