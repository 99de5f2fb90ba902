// Registers the CPU kernels of the ops declared in csrc/mhfast.cpp.
#include <torch/library.h>

#include "ops_cpu.h"

TORCH_LIBRARY_IMPL(mhfast, CPU, m) {
  m.impl("masked_copies", &mhfast::cpu::masked_copies_cpu);
  m.impl("gather_energies", &mhfast::cpu::gather_energies_cpu);
  m.impl("propose", &mhfast::cpu::propose_cpu);
  m.impl("mh_accept_", &mhfast::cpu::mh_accept_cpu);
  m.impl("counter_uniforms", &mhfast::cpu::counter_uniforms_cpu);
  m.impl("mh_propose_site", &mhfast::cpu::mh_propose_site_cpu);
  m.impl("mh_commit_site_", &mhfast::cpu::mh_commit_site_cpu);
  m.impl("mh_site_rows", &mhfast::cpu::mh_site_rows_cpu);
  m.impl("mh_memo_lookup_", &mhfast::cpu::mh_memo_lookup_cpu);
  m.impl("mh_memo_store_", &mhfast::cpu::mh_memo_store_cpu);
}
