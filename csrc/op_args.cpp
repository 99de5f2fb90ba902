// The unpacking of the fused ops' tensor lists (see op_args.h): the only place that reads them.
#include "op_args.h"

#include <c10/util/Exception.h>

#include "checks.h"

namespace mhfast {
namespace {

void check_count(const char* op, const char* name, at::TensorList list, size_t count, const char* fields) {
  TORCH_CHECK_VALUE(list.size() == count, "mhfast.", op, ": ", name, " must hold ", count, " tensors (", fields,
                    "), got ", list.size());
}

}  // namespace

CommitSiteTensors unpack_commit_site(at::TensorList chains, const at::Tensor& cache, at::TensorList proposal,
                                     at::TensorList terms, const at::Tensor& seq, const at::Tensor& q,
                                     at::TensorList outputs, c10::optional<double> beta,
                                     const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step,
                                     int64_t stream) {
  const char* op = "mh_commit_site_";
  check_count(op, "chains", chains, 7,
              "tokens, raw_terms, local_terms, e_raw, e_local, target, keys: mhfast.op_types.ChainRows without cache");
  check_count(op, "proposal", proposal, 5, "ch, pos, proposed, logq_forward, logq_reverse");
  check_count(op, "terms", terms, 5, "raw, local, e_raw, e_local, target");
  const CommitSiteTensors a{chains[0],   chains[1],   chains[2],   chains[3], chains[4], chains[5], chains[6],
                            cache,       proposal[0], proposal[1], proposal[2], proposal[3], proposal[4],
                            terms[0],    terms[1],    terms[2],    terms[3], terms[4], seq, q,
                            outputs,     beta,        beta_rows,   epoch,    step,      stream};
  check_mh_commit_site_args(a);
  return a;
}

MemoLookupTensors unpack_memo_lookup(at::TensorList table, const at::Tensor& group, const at::Tensor& tokens,
                                     const at::Tensor& act, const at::Tensor& pos, const at::Tensor& proposed,
                                     const at::Tensor& changed, int64_t ways, int64_t step) {
  check_count("mh_memo_lookup_", "table", table, 3, "stamp, hashes, stored: what the lookup writes");
  const MemoLookupTensors a{table[0], table[1], table[2], group, tokens, act, pos, proposed, changed, ways, step};
  check_mh_memo_lookup_args(a);
  return a;
}

MemoStoreTensors unpack_memo_store(at::TensorList table, const at::Tensor& group, const at::Tensor& act,
                                   const at::Tensor& slot, const at::Tensor& sel, const at::Tensor& raw_new,
                                   const at::Tensor& local_new, int64_t num_misses, int64_t step) {
  check_count("mh_memo_store_", "table", table, 3, "stamp, raw, local: what the store writes");
  const MemoStoreTensors a{table[0], table[1], table[2], group, act, slot, sel, raw_new, local_new, num_misses, step};
  check_mh_memo_store_args(a);
  return a;
}

void check_commit_site_op(at::TensorList chains, const at::Tensor& cache, at::TensorList proposal,
                          at::TensorList terms, const at::Tensor& seq, const at::Tensor& q, at::TensorList outputs,
                          c10::optional<double> beta, const c10::optional<at::Tensor>& beta_rows, int64_t epoch,
                          int64_t step, int64_t stream) {
  unpack_commit_site(chains, cache, proposal, terms, seq, q, outputs, beta, beta_rows, epoch, step, stream);
}

void check_memo_lookup_op(at::TensorList table, const at::Tensor& group, const at::Tensor& tokens,
                          const at::Tensor& act, const at::Tensor& pos, const at::Tensor& proposed,
                          const at::Tensor& changed, int64_t ways, int64_t step) {
  unpack_memo_lookup(table, group, tokens, act, pos, proposed, changed, ways, step);
}

void check_memo_store_op(at::TensorList table, const at::Tensor& group, const at::Tensor& act,
                         const at::Tensor& slot, const at::Tensor& sel, const at::Tensor& raw_new,
                         const at::Tensor& local_new, int64_t num_misses, int64_t step) {
  unpack_memo_store(table, group, act, slot, sel, raw_new, local_new, num_misses, step);
}

}  // namespace mhfast
