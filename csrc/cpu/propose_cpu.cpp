// propose on CPU: one draw per row from the tempered nucleus distribution q, by inverse CDF.
//
// Per row: x = logits / temperature, logp = log_softmax(x) (two passes: max, sum-exp).
// top_p == 1: the nucleus is every token with nonzero fp32 probability, no sort needed.
// top_p < 1: a histogram of probability mass over log-probability bins locates the bin where
// the mass of the tokens sorted by (p desc, id asc) crosses top_p; only that bin's tokens are
// sorted. Then an inverse-CDF scan in increasing token id picks the smallest kept id whose
// cumulative mass exceeds u * Z (Z = nucleus mass), as mhfast/reference.py specifies.
// uniform_mix = eps > 0: q = (1 - eps) * q_nucleus + eps / n on the n tokens of finite x (mixture_row):
// the same scan in increasing token id over the mixture's float64 CDF, one uniform per row.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "../checks.h"
#include "ops_cpu.h"
#include "propose_row.h"
#include "row_math.h"

#include <torch/library.h>

namespace mhfast {
namespace cpu {
namespace {

// Log-probability bins of the top_p histogram: width 104 / kBins nats, covering every nonzero
// fp32 probability (log p > kLogMinPositive).
constexpr int kBins = 1024;
constexpr float kBinScale = kBins / 104.0f;

// log((1 - eps) * exp(lq) + eps / n) as logaddexp in float64 (lq = -inf: log(eps / n)).
inline float log_mix(float lq, double log_a, double log_c) {
  const double l = static_cast<double>(lq) + log_a;
  const double hi = std::max(l, log_c), lo = std::min(l, log_c);
  return static_cast<float>(hi + std::log1p(std::exp(lo - hi)));
}

// The mixture draw (uniform_mix = eps > 0). `kept(i)`: token i is in the nucleus, with nucleus
// probability p[i] * inv_z and log probability logq_n(i). Every token of finite x gets eps / n more.
template <typename Kept, typename LogQ>
RowOut mixture_row(const float* x, const float* p, int64_t V, double inv_z, Kept kept, LogQ logq_n,
                   double eps, int64_t current, float u) {
  int64_t n = 0;
  for (int64_t i = 0; i < V; ++i) n += x[i] > -kInf ? 1 : 0;
  const double a = 1.0 - eps, c = eps / static_cast<double>(n);
  const double log_a = std::log1p(-eps), log_c = std::log(eps) - std::log(static_cast<double>(n));
  double cum = 0.0;
  int64_t last = -1, pick = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (!(x[i] > -kInf)) continue;
    last = i;
    cum += (kept(i) ? a * static_cast<double>(p[i]) * inv_z : 0.0) + c;
    if (cum > u) {
      pick = i;
      break;
    }
  }
  auto logq = [&](int64_t i) {
    if (!(x[i] > -kInf)) return -kInf;
    return log_mix(kept(i) ? logq_n(i) : -kInf, log_a, log_c);
  };
  RowOut out;
  out.proposed = pick >= 0 ? pick : last;  // n >= 1: the row has a finite entry
  out.logq_proposed = logq(out.proposed);
  out.logq_current = logq(current);
  return out;
}

inline int bin_of(float logp) {
  const int b = static_cast<int>(-logp * kBinScale);
  return b < kBins - 1 ? b : kBins - 1;
}

// log_softmax as torch computes it: (x - max) - log(sum exp(x - max)).
struct LogProbs {
  const float* x;
  float m, log_sum;
  float operator()(int64_t i) const { return (x[i] - m) - log_sum; }
};

// top_p == 1: the nucleus is every token of nonzero probability; its mass is 1 (up to rounding), so log q =
// log p and the inverse CDF compares the running mass with u directly.
RowOut full_support_row(const float* x, const float* p, int64_t V, const LogProbs& logp_of, double eps,
                        int64_t current, float u) {
  if (eps > 0.0) {
    return mixture_row(
        x, p, V, 1.0, [&](int64_t i) { return logp_of(i) > kLogMinPositive; }, logp_of, eps, current, u);
  }
  double cum = 0.0;
  int64_t last = -1, pick = -1;
  for (int64_t i = 0; i < V; ++i) {
    const float lp = logp_of(i);
    if (!(lp > kLogMinPositive)) continue;
    last = i;
    cum += p[i];
    if (cum > u) {
      pick = i;
      break;
    }
  }
  RowOut out;
  out.proposed = pick >= 0 ? pick : last;
  out.logq_proposed = logp_of(out.proposed);
  const float lc = logp_of(current);
  out.logq_current = lc > kLogMinPositive ? lc : -kInf;
  return out;
}

// The nucleus of top_p < 1: tokens of bins before `cross` are in, after it out; in bin `cross` those up to
// (p_thr, id_thr) in the order (p desc, id asc). z is the nucleus mass.
struct Nucleus {
  int cross = 0;
  float p_thr = kInf;
  int64_t id_thr = -1;
  double z = 0.0;
};

// The first bin after which the mass (tokens by decreasing p, binned by log p) reaches top_p: bins before it are
// wholly in the nucleus (their tokens have mass_before < top_p), bins after it wholly out.
Nucleus crossing_bin(const float* p, int64_t V, const LogProbs& logp_of, double top_p, double* mass) {
  std::fill(mass, mass + kBins, 0.0);
  for (int64_t i = 0; i < V; ++i) {
    const float lp = logp_of(i);
    if (lp > kLogMinPositive) mass[bin_of(lp)] += p[i];
  }
  Nucleus nu;
  double before = 0.0;
  for (; nu.cross < kBins; ++nu.cross) {
    if (before + mass[nu.cross] >= top_p) break;
    before += mass[nu.cross];
  }
  nu.z = before;
  return nu;
}

// The crossing bin's tokens in the reference's order (p desc, id asc), kept while the mass before them is
// < top_p; (p_thr, id_thr) is the last kept one.
void cut_crossing_bin(const float* p, int64_t V, const LogProbs& logp_of, double top_p, Scratch& s, Nucleus& nu) {
  if (nu.cross >= kBins) return;
  s.cand.clear();
  for (int64_t i = 0; i < V; ++i) {
    const float lp = logp_of(i);
    if (lp > kLogMinPositive && bin_of(lp) == nu.cross) s.cand.emplace_back(p[i], i);
  }
  std::sort(s.cand.begin(), s.cand.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  for (const auto& [pc, ic] : s.cand) {
    // The most probable token is always kept (mass_before = 0 < top_p).
    if (!(nu.z < top_p) && nu.id_thr >= 0) break;
    nu.z += pc;
    nu.p_thr = pc;
    nu.id_thr = ic;
  }
}

// top_p < 1: the inverse-CDF draw over the nucleus (or the mixture with eps / n).
RowOut nucleus_row(const float* x, const float* p, int64_t V, const LogProbs& logp_of, const Nucleus& nu,
                   double eps, int64_t current, float u) {
  auto kept = [&](int64_t i) {
    const float lp = logp_of(i);
    if (!(lp > kLogMinPositive)) return false;
    const int b = bin_of(lp);
    return b < nu.cross || (b == nu.cross && (p[i] > nu.p_thr || (p[i] == nu.p_thr && i <= nu.id_thr)));
  };
  const float log_z = static_cast<float>(std::log(nu.z));
  if (eps > 0.0) {
    return mixture_row(
        x, p, V, 1.0 / nu.z, kept, [&](int64_t i) { return logp_of(i) - log_z; }, eps, current, u);
  }
  const double target = static_cast<double>(u) * nu.z;
  double cum = 0.0;
  int64_t last = -1, pick = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (!kept(i)) continue;
    last = i;
    cum += p[i];
    if (cum > target) {
      pick = i;
      break;
    }
  }
  RowOut out;
  out.proposed = pick >= 0 ? pick : last;
  out.logq_proposed = logp_of(out.proposed) - log_z;
  out.logq_current = kept(current) ? logp_of(current) - log_z : -kInf;
  return out;
}

}  // namespace

void Scratch::resize(int64_t V, double top_p) {
  x.resize(V);
  p.resize(V);
  if (top_p < 1.0) bin_mass.resize(kBins);
}

RowOut propose_scaled_row(int64_t V, double top_p, double eps, int64_t current, float u, Scratch& s) {
  RowOut out;
  float* x = s.x.data();
  bool has_nan = false;
  const float m = max_with_nan(x, V, &has_nan);
  if (has_nan || m == kInf) {
    out.status = kNanOrInf;
    return out;
  }
  if (m == -kInf) {
    out.status = kNoFinite;
    return out;
  }
  const LogProbs logp_of{x, m, std::log(sum_exp_shifted(x, V, m))};
  // fp32 probabilities, p[i] = exp(logp_of(i)) (vectorized; same argument rounding).
  float* p = s.p.data();
  exp_shifted_store(x, V, m, logp_of.log_sum, p);
  if (top_p >= 1.0) return full_support_row(x, p, V, logp_of, eps, current, u);
  Nucleus nu = crossing_bin(p, V, logp_of, top_p, s.bin_mass.data());
  cut_crossing_bin(p, V, logp_of, top_p, s, nu);
  return nucleus_row(x, p, V, logp_of, nu, eps, current, u);
}

namespace {

template <typename scalar_t>
RowOut propose_row(const scalar_t* row, int64_t V, float temperature, double top_p, double eps,
                   int64_t current, float u, Scratch& s) {
  float* x = s.x.data();
  // Same arithmetic as the reference: logits.float() / temperature (fp32 division).
  to_float_block(row, V, x);
  for (int64_t i = 0; i < V; ++i) x[i] = x[i] / temperature;
  return propose_scaled_row(V, top_p, eps, current, u, s);
}

template <typename scalar_t>
void propose_rows(const at::Tensor& logits, const int64_t* current, const float* uniforms,
                  float temperature, double top_p, double eps, int64_t* proposed, float* logq_p,
                  float* logq_c, int8_t* status) {
  const int64_t B = logits.size(0), V = logits.size(1), s0 = logits.stride(0);
  const scalar_t* base = logits.const_data_ptr<scalar_t>();
  const int64_t grain = std::max<int64_t>(1, 16384 / V);
  at::parallel_for(0, B, grain, [&](int64_t begin, int64_t end) {
    Scratch s;
    s.resize(V, top_p);
    for (int64_t b = begin; b < end; ++b) {
      const RowOut r = propose_row(base + b * s0, V, temperature, top_p, eps, current[b], uniforms[b], s);
      proposed[b] = r.proposed;
      logq_p[b] = r.logq_proposed;
      logq_c[b] = r.logq_current;
      status[b] = r.status;
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> propose_cpu(const at::Tensor& logits_in,
                                                           const at::Tensor& current,
                                                           double temperature, double top_p,
                                                           const at::Tensor& uniforms,
                                                           double uniform_mix) {
  const char* op = "propose";
  check_propose_args(logits_in, current, temperature, top_p, uniforms, uniform_mix);
  check_device_type(op, "logits", logits_in, c10::DeviceType::CPU);
  const int64_t B = logits_in.size(0), V = logits_in.size(1);
  const at::Tensor cur = current.contiguous(), uni = uniforms.contiguous();
  check_in_range(op, "current", cur, 0, V);
  const float* u = uni.const_data_ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK_VALUE(u[b] >= 0.0f && u[b] <= 1.0f, "mhfast.", op, ": uniforms must lie in [0, 1]");
  }

  at::Tensor proposed = at::empty({B}, cur.options());
  const auto f32 = logits_in.options().dtype(at::kFloat);
  at::Tensor logq_p = at::empty({B}, f32), logq_c = at::empty({B}, f32);
  if (B == 0) return {proposed, logq_p, logq_c};
  const at::Tensor logits = logits_in.stride(1) == 1 ? logits_in : logits_in.contiguous();
  std::vector<int8_t> status(B, kOk);
  MHFAST_DISPATCH_LOGITS(logits.scalar_type(), "mhfast_propose_cpu", [&] {
    propose_rows<scalar_t>(logits, cur.const_data_ptr<int64_t>(), u, static_cast<float>(temperature),
                           top_p, uniform_mix, proposed.mutable_data_ptr<int64_t>(),
                           logq_p.mutable_data_ptr<float>(), logq_c.mutable_data_ptr<float>(),
                           status.data());
  });
  // Reported after the parallel pass (outputs are fresh tensors, nothing of the caller's was
  // written), in the order of mhfast/_validate.py.
  TORCH_CHECK_VALUE(std::find(status.begin(), status.end(), kNanOrInf) == status.end(), "mhfast.",
                    op, ": logits contains NaN or +inf (or overflows fp32 when divided by temperature)");
  TORCH_CHECK_VALUE(std::find(status.begin(), status.end(), kNoFinite) == status.end(), "mhfast.",
                    op, ": logits has a row with no finite entry (nothing can be proposed)");
  return {proposed, logq_p, logq_c};
}

}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) { m.impl("propose", &mhfast::cpu::propose_cpu); }
