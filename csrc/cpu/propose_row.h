// The row code of propose on CPU, shared by propose_cpu.cpp and mh_propose_site_cpu.cpp.
//
// propose_scaled_row draws one token from a row already scaled to x = logits / temperature in
// fp32 (Scratch::x, V entries); -inf entries are never proposed. Both ops fill Scratch::x their
// own way (propose: from a logits row; mh_propose_site: from a cache row, blocked ids at -inf)
// and then run the same code, so equal rows give bit-identical draws.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace mhfast {
namespace cpu {

enum RowStatus : int8_t { kOk = 0, kNanOrInf = 1, kNoFinite = 2 };

struct RowOut {
  int64_t proposed = 0;
  float logq_proposed = std::numeric_limits<float>::quiet_NaN();
  float logq_current = std::numeric_limits<float>::quiet_NaN();
  RowStatus status = kOk;
};

// Per-thread buffers of propose_scaled_row (resize once per thread, reuse for every row).
struct Scratch {
  std::vector<float> x;  // logits / temperature, then reused
  std::vector<float> p;  // fp32 probabilities
  std::vector<double> bin_mass;
  std::vector<std::pair<float, int64_t>> cand;
  void resize(int64_t V, double top_p);
};

// One inverse-CDF draw with uniform u from the tempered nucleus distribution of s.x[0, V).
// status kNanOrInf / kNoFinite: nothing was drawn (the caller raises).
RowOut propose_scaled_row(int64_t V, double top_p, double eps, int64_t current, float u, Scratch& s);

}  // namespace cpu
}  // namespace mhfast
