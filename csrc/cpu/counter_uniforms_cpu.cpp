// counter_uniforms on CPU: one uniform per key, from the counter hash of csrc/counter_hash.h.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>

#include "../checks.h"
#include "../counter_hash.h"
#include "ops_cpu.h"

#include <torch/library.h>

namespace mhfast {
namespace cpu {

at::Tensor counter_uniforms_cpu(const at::Tensor& keys, int64_t epoch, int64_t step, int64_t stream,
                                const c10::optional<at::Tensor>& lanes) {
  const char* op = "counter_uniforms";
  check_counter_uniforms_args(keys, epoch, step, stream, lanes);
  check_device_type(op, "keys", keys, c10::DeviceType::CPU);
  const at::Tensor k = keys.contiguous();
  const at::Tensor l = lanes.has_value() ? lanes->contiguous() : at::Tensor();
  at::Tensor out = at::empty(keys.sizes(), keys.options().dtype(at::kFloat));
  const int64_t n = keys.numel();
  if (n == 0) return out;
  const int64_t* kp = k.const_data_ptr<int64_t>();
  const int64_t* lp = l.defined() ? l.const_data_ptr<int64_t>() : nullptr;
  float* o = out.mutable_data_ptr<float>();
  // Per key: 4 absorbs = 8 multiplies; a thread wakes up only for thousands of keys.
  at::parallel_for(0, n, 8192, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      o[i] = counter_uniform(static_cast<uint64_t>(kp[i]), static_cast<uint64_t>(epoch),
                             static_cast<uint64_t>(step), static_cast<uint64_t>(stream),
                             lp ? static_cast<uint64_t>(lp[i]) : 0);
    }
  });
  return out;
}

}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) { m.impl("counter_uniforms", &mhfast::cpu::counter_uniforms_cpu); }
