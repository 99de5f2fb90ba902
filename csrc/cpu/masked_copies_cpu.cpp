// masked_copies on CPU: out[n] = tokens[seq_index[n]] with out[n, pos_index[n]] = mask_id.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstring>

#include "../checks.h"
#include "ops_cpu.h"

#include <torch/library.h>

namespace mhfast {
namespace cpu {

at::Tensor masked_copies_cpu(const at::Tensor& tokens, const at::Tensor& seq_index,
                             const at::Tensor& pos_index, int64_t mask_id) {
  const char* op = "masked_copies";
  check_masked_copies_args(tokens, seq_index, pos_index);
  check_device_type(op, "tokens", tokens, c10::DeviceType::CPU);
  const int64_t B = tokens.size(0), T = tokens.size(1), N = seq_index.size(0);
  const at::Tensor seq = seq_index.contiguous(), pos = pos_index.contiguous();
  check_in_range(op, "seq_index", seq, 0, B);
  check_in_range(op, "pos_index", pos, 0, T);

  at::Tensor out = at::empty({N, T}, tokens.options().memory_format(c10::MemoryFormat::Contiguous));
  if (N == 0 || T == 0) return out;
  const int64_t* src = tokens.const_data_ptr<int64_t>();
  const int64_t s0 = tokens.stride(0), s1 = tokens.stride(1);
  const int64_t* seq_p = seq.const_data_ptr<int64_t>();
  const int64_t* pos_p = pos.const_data_ptr<int64_t>();
  int64_t* dst = out.mutable_data_ptr<int64_t>();
  // Chunks of >= ~16K tokens: below that, waking threads costs more than the copy.
  const int64_t grain = std::max<int64_t>(1, 16384 / T);
  at::parallel_for(0, N, grain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t* row = src + seq_p[n] * s0;
      int64_t* o = dst + n * T;
      if (s1 == 1) {
        std::memcpy(o, row, sizeof(int64_t) * T);
      } else {
        for (int64_t t = 0; t < T; ++t) o[t] = row[t * s1];
      }
      o[pos_p[n]] = mask_id;
    }
  });
  return out;
}

}  // namespace cpu
}  // namespace mhfast

TORCH_LIBRARY_IMPL(mhfast, CPU, m) { m.impl("masked_copies", &mhfast::cpu::masked_copies_cpu); }
