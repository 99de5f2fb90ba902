// Value-range checks of index tensors, run serially before a CPU kernel writes anything.
#include "ops_cpu.h"

#include <c10/util/Exception.h>

#include <cfloat>
#include <cmath>
#include <vector>

namespace mhfast {
namespace cpu {

void check_value_in_range(const char* op, const char* name, int64_t v, int64_t low, int64_t high,
                          bool allow_minus_one) {
  if ((v < low || v >= high) && !(allow_minus_one && v == -1)) {
    TORCH_CHECK_VALUE(false, "mhfast.", op, ": ", name, " contains ", v, ", outside [", low, ", ", high, ")",
                      allow_minus_one ? " (or -1)" : "");
  }
}

void check_in_range(const char* op, const char* name, const at::Tensor& t, int64_t low,
                    int64_t high, bool allow_minus_one) {
  if (t.numel() == 0) return;
  // Index tensors are small (one entry per row or chain): a contiguous copy is cheap.
  const at::Tensor c = t.contiguous();
  const int64_t* p = c.const_data_ptr<int64_t>();
  const int64_t n = c.numel();
  for (int64_t i = 0; i < n; ++i) check_value_in_range(op, name, p[i], low, high, allow_minus_one);
}

void check_distinct(const char* op, const char* name, const at::Tensor& t, int64_t high) {
  if (t.numel() == 0) return;
  const at::Tensor c = t.contiguous();
  const int64_t* p = c.const_data_ptr<int64_t>();
  std::vector<char> seen(static_cast<size_t>(high), 0);
  for (int64_t i = 0; i < c.numel(); ++i) {
    TORCH_CHECK_VALUE(!seen[p[i]], "mhfast.", op, ": ", name, " contains ", p[i], " twice (chains must be distinct)");
    seen[p[i]] = 1;
  }
}

void check_finite(const char* op, const char* name, const at::Tensor& t) {
  const int64_t n = t.numel(), s = n > 0 ? t.stride(0) : 0;
  const double* p = n > 0 ? t.const_data_ptr<double>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    // within float32's range too: the kernels round it to float32 (a larger double's cast is undefined)
    TORCH_CHECK_VALUE(std::isfinite(p[i * s]) && std::fabs(p[i * s]) <= FLT_MAX, "mhfast.", op, ": ", name,
                      " must be finite (within float32's range), got ", p[i * s], " in row ", i);
  }
}

}  // namespace cpu
}  // namespace mhfast
