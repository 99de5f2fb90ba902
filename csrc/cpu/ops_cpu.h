// The helpers the CPU kernels of mhfast's ops share (each op is one file, csrc/cpu/<op>_cpu.cpp, that registers
// itself with TORCH_LIBRARY_IMPL(mhfast, CPU, m)).
//
// Every kernel first runs the shared metadata checks (csrc/checks.h), then the value-range
// checks below in a cheap serial pre-pass, so that bad input raises a Python ValueError naming
// the argument before any output (or in-place tensor) is written.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace mhfast {
namespace cpu {

// Raises ValueError "mhfast.<op>: <name> contains <v>, outside [low, high)" unless v lies in
// [low, high) (or is -1 with `allow_minus_one`): check_in_range's test of one value, for kernels
// that read their indices in place (no contiguous copy, no allocation).
void check_value_in_range(const char* op, const char* name, int64_t v, int64_t low, int64_t high,
                          bool allow_minus_one = false);

// Raises ValueError "mhfast.<op>: <name> contains <v>, outside [low, high)" for the first
// element (row-major order, as mhfast/_validate.py reports it) outside [low, high);
// `allow_minus_one` additionally permits -1 (unused slots of block positions).
void check_in_range(const char* op, const char* name, const at::Tensor& t, int64_t low,
                    int64_t high, bool allow_minus_one = false);

// Raises ValueError "mhfast.<op>: <name> contains <v> twice (chains must be distinct)" for the first
// repeated element of t (entries already checked to lie in [0, high)).
void check_distinct(const char* op, const char* name, const at::Tensor& t, int64_t high);

// Raises ValueError "mhfast.<op>: <name> must be finite, got <v> in row <i>" for the first entry of the 1-D
// Double tensor t that is NaN or infinite.
void check_finite(const char* op, const char* name, const at::Tensor& t);

}  // namespace cpu
}  // namespace mhfast
