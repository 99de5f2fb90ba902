// Per-op metadata checks (dtype, rank, size, device, scalar ranges): the only copy (see checks.h).
//
// TypeError for a dtype, ValueError for everything else, so that the raw ops, mhfast.ops and
// mhfast.reference (which calls these through torch.ops.mhfast.<op>_check) fail alike.
#include "checks.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

namespace mhfast {
namespace {

constexpr auto kLong = at::ScalarType::Long;
constexpr auto kFloat = at::ScalarType::Float;

// The kernels divide in fp32: a temperature beyond FLT_MAX would be cast out of float's range (undefined), and one
// below fp32's least positive number would be 0 there (the logits divided by zero, blamed on the logits).
void check_fp32_temperature(const char* op, double temperature) {
  TORCH_CHECK_VALUE(std::isfinite(temperature) && temperature >= FLT_TRUE_MIN && temperature <= FLT_MAX, "mhfast.",
                    op, ": temperature must be a finite number in [", FLT_TRUE_MIN, ", ", FLT_MAX,
                    "] (positive in fp32), got ", temperature);
}

void check_float_logits(const char* op, const at::Tensor& logits) {
  check_dtype(op, "logits", logits, {kFloat, at::ScalarType::Half, at::ScalarType::BFloat16});
}

void check_vocab_nonempty(const char* op, const at::Tensor& logits) {
  TORCH_CHECK_VALUE(!(logits.size(0) > 0 && logits.size(1) == 0), "mhfast.", op,
                    ": logits must have at least one column (vocabulary size 0)");
}

}  // namespace

void check_masked_copies_args(const at::Tensor& tokens, const at::Tensor& seq_index,
                              const at::Tensor& pos_index) {
  const char* op = "masked_copies";
  check_dtype(op, "tokens", tokens, {kLong});
  check_dtype(op, "seq_index", seq_index, {kLong});
  check_dtype(op, "pos_index", pos_index, {kLong});
  check_dim(op, "tokens", tokens, 2);
  check_dim(op, "seq_index", seq_index, 1);
  check_dim(op, "pos_index", pos_index, 1);
  check_size(op, "pos_index", pos_index, 0, seq_index.size(0), "len(seq_index)");
  check_same_device(op, "tokens", tokens, "seq_index", seq_index);
  check_same_device(op, "tokens", tokens, "pos_index", pos_index);
}

void check_gather_energies_args(const at::Tensor& logits, const at::Tensor& targets,
                                const at::Tensor& seq_index, int64_t num_seqs) {
  const char* op = "gather_energies";
  check_float_logits(op, logits);
  check_dtype(op, "targets", targets, {kLong});
  check_dtype(op, "seq_index", seq_index, {kLong});
  check_dim(op, "logits", logits, 2);
  check_dim(op, "targets", targets, 1);
  check_dim(op, "seq_index", seq_index, 1);
  check_size(op, "targets", targets, 0, logits.size(0), "rows of logits");
  check_size(op, "seq_index", seq_index, 0, logits.size(0), "rows of logits");
  check_same_device(op, "logits", logits, "targets", targets);
  check_same_device(op, "logits", logits, "seq_index", seq_index);
  TORCH_CHECK_VALUE(num_seqs >= 0, "mhfast.", op, ": num_seqs must be an int >= 0, got ", num_seqs);
  check_vocab_nonempty(op, logits);
}

void check_propose_args(const at::Tensor& logits, const at::Tensor& current, double temperature,
                        double top_p, const at::Tensor& uniforms, double uniform_mix) {
  const char* op = "propose";
  check_float_logits(op, logits);
  check_dtype(op, "current", current, {kLong});
  check_dtype(op, "uniforms", uniforms, {kFloat});
  check_dim(op, "logits", logits, 2);
  check_dim(op, "current", current, 1);
  check_dim(op, "uniforms", uniforms, 1);
  check_size(op, "current", current, 0, logits.size(0), "rows of logits");
  check_size(op, "uniforms", uniforms, 0, logits.size(0), "rows of logits");
  check_same_device(op, "logits", logits, "current", current);
  check_same_device(op, "logits", logits, "uniforms", uniforms);
  check_fp32_temperature(op, temperature);
  // Written so that NaN fails too.
  TORCH_CHECK_VALUE(top_p > 0 && top_p <= 1, "mhfast.", op, ": top_p must be in (0, 1], got ", top_p);
  // 1 would leave no nucleus at all (log(1 - uniform_mix) = -inf); NaN fails too.
  TORCH_CHECK_VALUE(uniform_mix >= 0 && uniform_mix < 1, "mhfast.", op,
                    ": uniform_mix must be in [0, 1), got ", uniform_mix);
  check_vocab_nonempty(op, logits);
}

void check_mh_accept_args(const at::Tensor& tokens, const at::Tensor& positions,
                          const at::Tensor& proposed, const at::Tensor& energy,
                          const at::Tensor& energy_proposed, const at::Tensor& logq_forward,
                          const at::Tensor& logq_reverse, const at::Tensor& beta,
                          const at::Tensor& uniforms) {
  const char* op = "mh_accept_";
  check_dtype(op, "tokens", tokens, {kLong});
  check_dtype(op, "positions", positions, {kLong});
  check_dtype(op, "proposed", proposed, {kLong});
  const std::pair<const char*, const at::Tensor*> per_chain[] = {
      {"energy", &energy},         {"energy_proposed", &energy_proposed},
      {"logq_forward", &logq_forward}, {"logq_reverse", &logq_reverse},
      {"beta", &beta},             {"uniforms", &uniforms}};
  for (const auto& [name, t] : per_chain) {
    check_dtype(op, name, *t, {kFloat});
    check_dim(op, name, *t, 1);
  }
  check_dim(op, "tokens", tokens, 2);
  TORCH_CHECK_VALUE(positions.dim() == 1 || positions.dim() == 2, "mhfast.", op,
                    ": positions must be 1-D or 2-D, got shape ", positions.sizes());
  TORCH_CHECK_VALUE(proposed.sizes() == positions.sizes(), "mhfast.", op, ": proposed has shape ",
                    proposed.sizes(), " but positions has shape ", positions.sizes(),
                    "; they must match");
  const int64_t B = tokens.size(0);
  check_size(op, "positions", positions, 0, B, "rows of tokens");
  for (const auto& [name, t] : per_chain) check_size(op, name, *t, 0, B, "rows of tokens");
  check_same_device(op, "tokens", tokens, "positions", positions);
  check_same_device(op, "tokens", tokens, "proposed", proposed);
  for (const auto& [name, t] : per_chain) check_same_device(op, "tokens", tokens, name, *t);
  check_no_overlap(op, "tokens", tokens, "positions", positions);
  check_no_overlap(op, "tokens", tokens, "proposed", proposed);
  for (const auto& [name, t] : per_chain) check_no_overlap(op, "tokens", tokens, name, *t);
}

void check_counter_uniforms_args(const at::Tensor& keys, int64_t epoch, int64_t step, int64_t stream,
                                 const c10::optional<at::Tensor>& lanes) {
  const char* op = "counter_uniforms";
  check_dtype(op, "keys", keys, {kLong});
  TORCH_CHECK_VALUE(epoch >= 0 && step >= 0 && stream >= 0, "mhfast.", op,
                    ": epoch, step and stream must be >= 0, got ", epoch, ", ", step, ", ", stream);
  if (lanes.has_value()) {
    check_dtype(op, "lanes", *lanes, {kLong});
    TORCH_CHECK_VALUE(lanes->sizes() == keys.sizes(), "mhfast.", op, ": lanes has shape ", lanes->sizes(),
                      " but keys has shape ", keys.sizes(), "; they must match");
    check_same_device(op, "keys", keys, "lanes", *lanes);
  }
}

void check_mh_propose_site_args(const at::Tensor& cache, const at::Tensor& tokens, const at::Tensor& keys,
                                const at::Tensor& act, const at::Tensor& pos, const at::Tensor& blocked,
                                int64_t epoch, int64_t step, int64_t stream, double temperature,
                                double top_p) {
  const char* op = "mh_propose_site";
  check_dtype(op, "cache", cache, {kFloat, at::ScalarType::Half, at::ScalarType::BFloat16});
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"tokens", &tokens},
                                {"keys", &keys}, {"act", &act}, {"pos", &pos}}) {
    check_dtype(op, name, *t, {kLong});
  }
  check_dtype(op, "blocked", blocked, {at::ScalarType::Bool});
  check_dim(op, "cache", cache, 3);
  check_dim(op, "tokens", tokens, 2);
  check_dim(op, "keys", keys, 1);
  check_dim(op, "act", act, 1);
  check_dim(op, "pos", pos, 1);
  check_dim(op, "blocked", blocked, 1);
  check_size(op, "tokens", tokens, 0, cache.size(0), "chains: dim 0 of cache");
  check_size(op, "tokens", tokens, 1, cache.size(1), "positions: dim 1 of cache");
  check_size(op, "keys", keys, 0, cache.size(0), "chains: dim 0 of cache");
  check_size(op, "pos", pos, 0, act.size(0), "len(act)");
  check_size(op, "blocked", blocked, 0, cache.size(2), "vocabulary: dim 2 of cache");
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"tokens", &tokens},
                                {"keys", &keys}, {"act", &act}, {"pos", &pos}, {"blocked", &blocked}}) {
    check_same_device(op, "cache", cache, name, *t);
  }
  TORCH_CHECK_VALUE(epoch >= 0 && step >= 0 && stream >= 0, "mhfast.", op,
                    ": epoch, step and stream must be >= 0, got ", epoch, ", ", step, ", ", stream);
  check_fp32_temperature(op, temperature);
  TORCH_CHECK_VALUE(top_p > 0 && top_p <= 1, "mhfast.", op, ": top_p must be in (0, 1], got ", top_p);
  TORCH_CHECK_VALUE(!(act.size(0) > 0 && cache.size(2) == 0), "mhfast.", op,
                    ": cache must have at least one entry in dim 2 (vocabulary size 0)");
}

namespace {

using Named = std::pair<const char*, const at::Tensor*>;
constexpr const char* kCommit = "mh_commit_site_";

void check_commit_dtypes(const CommitSiteTensors& a) {
  const char* op = kCommit;
  check_dtype(op, "chains.cache", a.cache, {kFloat, at::ScalarType::Half, at::ScalarType::BFloat16});
  for (const Named& x : {Named{"chains.tokens", &a.tokens}, {"chains.keys", &a.keys}, {"proposal.ch", &a.ch},
                         {"proposal.pos", &a.pos}, {"proposal.proposed", &a.proposed}, {"rows.seq", &a.seq},
                         {"rows.q", &a.q}}) {
    check_dtype(op, x.first, *x.second, {kLong});
  }
  for (const Named& x : {Named{"chains.raw_terms", &a.raw_terms}, {"chains.local_terms", &a.local_terms},
                         {"terms.raw", &a.raw_new}, {"terms.local", &a.local_new}, {"chains.e_raw", &a.e_raw},
                         {"chains.e_local", &a.e_local}, {"chains.target", &a.target},
                         {"proposal.logq_forward", &a.logq_forward}, {"proposal.logq_reverse", &a.logq_reverse},
                         {"terms.e_raw", &a.e_raw_new}, {"terms.e_local", &a.e_local_new},
                         {"terms.target", &a.target_new}}) {
    check_dtype(op, x.first, *x.second, {kFloat});
  }
}

// Ranks and sizes: the state's [M, T] / [M], the moves' [n, T] / [n], the rows' [R].
void check_commit_shapes(const CommitSiteTensors& a) {
  const char* op = kCommit;
  check_dim(op, "chains.tokens", a.tokens, 2);
  check_dim(op, "chains.cache", a.cache, 3);
  check_dim(op, "proposal.ch", a.ch, 1);
  check_dim(op, "rows.seq", a.seq, 1);
  const int64_t M = a.tokens.size(0), T = a.tokens.size(1), n = a.ch.size(0);
  const char* chains = "chains: rows of chains.tokens";
  const char* moves = "len(proposal.ch)";
  for (const auto& [name, t, rows, what] : {std::tuple<const char*, const at::Tensor*, int64_t, const char*>{
                                                "chains.raw_terms", &a.raw_terms, M, chains},
                                            {"chains.local_terms", &a.local_terms, M, chains},
                                            {"terms.raw", &a.raw_new, n, moves},
                                            {"terms.local", &a.local_new, n, moves}}) {
    check_dim(op, name, *t, 2);
    check_size(op, name, *t, 0, rows, what);
    check_size(op, name, *t, 1, T, "positions: dim 1 of chains.tokens");
  }
  check_size(op, "chains.cache", a.cache, 0, M, chains);
  check_size(op, "chains.cache", a.cache, 1, T, "positions: dim 1 of chains.tokens");
  for (const Named& x : {Named{"chains.keys", &a.keys}, {"chains.e_raw", &a.e_raw}, {"chains.e_local", &a.e_local},
                         {"chains.target", &a.target}}) {
    check_dim(op, x.first, *x.second, 1);
    check_size(op, x.first, *x.second, 0, M, chains);
  }
  for (const Named& x : {Named{"proposal.pos", &a.pos}, {"proposal.proposed", &a.proposed},
                         {"proposal.logq_forward", &a.logq_forward}, {"proposal.logq_reverse", &a.logq_reverse},
                         {"terms.e_raw", &a.e_raw_new}, {"terms.e_local", &a.e_local_new},
                         {"terms.target", &a.target_new}}) {
    check_dim(op, x.first, *x.second, 1);
    check_size(op, x.first, *x.second, 0, n, moves);
  }
  check_dim(op, "rows.q", a.q, 1);
  check_size(op, "rows.q", a.q, 0, a.seq.size(0), "len(rows.seq)");
}

void check_commit_outputs(const CommitSiteTensors& a) {
  const char* op = kCommit;
  int64_t rows = 0;
  for (const at::Tensor& o : a.outputs) {
    check_dtype(op, "rows.outputs", o, {kFloat, at::ScalarType::Half, at::ScalarType::BFloat16});
    check_dim(op, "rows.outputs", o, 2);
    check_size(op, "rows.outputs", o, 1, a.cache.size(2), "dim 2 of chains.cache");
    check_same_device(op, "chains.tokens", a.tokens, "rows.outputs", o);
    rows += o.size(0);
  }
  TORCH_CHECK_VALUE(rows == a.seq.size(0), "mhfast.", op, ": rows.outputs hold ", rows, " rows in all, expected ",
                    a.seq.size(0), " (len(rows.seq))");
}

void check_commit_devices(const CommitSiteTensors& a) {
  for (const Named& x : {Named{"chains.raw_terms", &a.raw_terms}, {"chains.local_terms", &a.local_terms},
                         {"chains.e_raw", &a.e_raw}, {"chains.e_local", &a.e_local}, {"chains.target", &a.target},
                         {"chains.cache", &a.cache}, {"chains.keys", &a.keys}, {"proposal.ch", &a.ch},
                         {"proposal.pos", &a.pos}, {"proposal.proposed", &a.proposed},
                         {"proposal.logq_forward", &a.logq_forward}, {"proposal.logq_reverse", &a.logq_reverse},
                         {"terms.raw", &a.raw_new}, {"terms.local", &a.local_new}, {"terms.e_raw", &a.e_raw_new},
                         {"terms.e_local", &a.e_local_new}, {"terms.target", &a.target_new}, {"rows.seq", &a.seq},
                         {"rows.q", &a.q}}) {
    check_same_device(kCommit, "chains.tokens", a.tokens, x.first, *x.second);
    if (x.second != &a.cache) check_no_overlap(kCommit, "chains.cache", a.cache, x.first, *x.second);
  }
  for (const at::Tensor& o : a.outputs) check_no_overlap(kCommit, "chains.cache", a.cache, "rows.outputs", o);
  if (a.beta_rows.has_value()) check_no_overlap(kCommit, "chains.cache", a.cache, "beta_rows", *a.beta_rows);
}

void check_commit_scalars(const CommitSiteTensors& a) {
  const char* op = kCommit;
  // Within float32's range too: beta is rounded to float32 (static_cast of a larger double is undefined).
  TORCH_CHECK_VALUE(!a.beta.has_value() || (std::isfinite(*a.beta) && std::fabs(*a.beta) <= FLT_MAX), "mhfast.",
                    op, ": beta must be a finite number within float32's range or None, got ", a.beta.value_or(0.0));
  if (a.beta_rows.has_value()) {
    const at::Tensor& b = *a.beta_rows;
    TORCH_CHECK_VALUE(!a.beta.has_value(), "mhfast.", op,
                      ": beta is given twice (a number and a tensor, beta_rows); give one of them");
    check_dtype(op, "beta", b, {at::ScalarType::Double});
    check_dim(op, "beta", b, 1);
    check_size(op, "beta", b, 0, a.tokens.size(0), "chains: rows of chains.tokens");
    check_same_device(op, "chains.tokens", a.tokens, "beta", b);
  }
  TORCH_CHECK_VALUE(a.epoch >= 0 && a.step >= 0 && a.stream >= 0, "mhfast.", op,
                    ": epoch, step and stream must be >= 0, got ", a.epoch, ", ", a.step, ", ", a.stream);
}

}  // namespace

void check_mh_commit_site_args(const CommitSiteTensors& a) {
  check_commit_dtypes(a);
  check_commit_shapes(a);
  check_commit_outputs(a);
  check_commit_devices(a);
  check_commit_scalars(a);
}

void check_mh_site_rows_args(const at::Tensor& tokens, const at::Tensor& energy_mask, const at::Tensor& raw_terms,
                             const at::Tensor& local_terms, const at::Tensor& ch, const at::Tensor& pos,
                             const at::Tensor& proposed, int64_t num_rows) {
  const char* op = "mh_site_rows";
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"tokens", &tokens}, {"ch", &ch},
                                {"pos", &pos}, {"proposed", &proposed}}) {
    check_dtype(op, name, *t, {kLong});
  }
  check_dtype(op, "energy_mask", energy_mask, {at::ScalarType::Bool});
  check_dtype(op, "raw_terms", raw_terms, {kFloat});
  check_dtype(op, "local_terms", local_terms, {kFloat});
  check_dim(op, "tokens", tokens, 2);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"energy_mask", &energy_mask},
                                {"raw_terms", &raw_terms}, {"local_terms", &local_terms}}) {
    check_dim(op, name, *t, 2);
    check_size(op, name, *t, 0, tokens.size(0), "chains: dim 0 of tokens");
    check_size(op, name, *t, 1, tokens.size(1), "positions: dim 1 of tokens");
  }
  check_dim(op, "ch", ch, 1);
  check_dim(op, "pos", pos, 1);
  check_dim(op, "proposed", proposed, 1);
  check_size(op, "pos", pos, 0, ch.size(0), "len(ch)");
  check_size(op, "proposed", proposed, 0, ch.size(0), "len(ch)");
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"energy_mask", &energy_mask},
                                {"raw_terms", &raw_terms}, {"local_terms", &local_terms}, {"ch", &ch},
                                {"pos", &pos}, {"proposed", &proposed}}) {
    check_same_device(op, "tokens", tokens, name, *t);
  }
  const int64_t most = ch.size(0) * std::max<int64_t>(tokens.size(1) - 1, 0);
  TORCH_CHECK_VALUE(num_rows >= 0 && num_rows <= most, "mhfast.", op, ": num_rows must be in [0, ", most,
                    "] (len(ch) * (T - 1)), got ", num_rows);
}

namespace {

// The first `written` of `args` (the tables an op writes in place) share no memory with any other argument.
template <size_t N>
void check_written_apart(const char* op, const Named (&args)[N], size_t written) {
  for (size_t w = 0; w < written; ++w) {
    for (const Named& x : args) {
      if (x.second != args[w].second) check_no_overlap(op, args[w].first, *args[w].second, x.first, *x.second);
    }
  }
}

}  // namespace

void check_mh_memo_lookup_args(const MemoLookupTensors& a) {
  const char* op = "mh_memo_lookup_";
  for (const Named& x : {Named{"table.stamp", &a.stamp}, {"table.hashes", &a.hashes}, {"table.stored", &a.stored},
                         {"tokens", &a.tokens}, {"table.group", &a.group}, {"act", &a.act}, {"pos", &a.pos},
                         {"proposed", &a.proposed}}) {
    check_dtype(op, x.first, *x.second, {kLong});
  }
  check_dtype(op, "changed", a.changed, {at::ScalarType::Bool});
  check_dim(op, "table.stamp", a.stamp, 2);
  check_dim(op, "tokens", a.tokens, 2);
  const int64_t G = a.stamp.size(0), S = a.stamp.size(1), L = a.tokens.size(1);
  check_dim(op, "table.hashes", a.hashes, 2);
  check_size(op, "table.hashes", a.hashes, 0, G, "groups: dim 0 of table.stamp");
  check_size(op, "table.hashes", a.hashes, 1, S, "entries: dim 1 of table.stamp");
  check_dim(op, "table.stored", a.stored, 3);
  check_size(op, "table.stored", a.stored, 0, G, "groups: dim 0 of table.stamp");
  check_size(op, "table.stored", a.stored, 1, S, "entries: dim 1 of table.stamp");
  check_size(op, "table.stored", a.stored, 2, L, "positions: dim 1 of tokens");
  check_dim(op, "table.group", a.group, 1);
  check_size(op, "table.group", a.group, 0, a.tokens.size(0), "chains: dim 0 of tokens");
  for (const Named& x : {Named{"act", &a.act}, {"pos", &a.pos}, {"proposed", &a.proposed}, {"changed", &a.changed}}) {
    check_dim(op, x.first, *x.second, 1);
    check_size(op, x.first, *x.second, 0, a.act.size(0), "len(act)");
  }
  for (const Named& x : {Named{"table.stamp", &a.stamp}, {"table.hashes", &a.hashes}, {"table.stored", &a.stored}}) {
    check_contiguous_out(op, x.first, *x.second);
  }
  for (const Named& x : {Named{"table.hashes", &a.hashes}, {"table.stored", &a.stored}, {"tokens", &a.tokens},
                         {"table.group", &a.group}, {"act", &a.act}, {"pos", &a.pos}, {"proposed", &a.proposed},
                         {"changed", &a.changed}}) {
    check_same_device(op, "table.stamp", a.stamp, x.first, *x.second);
  }
  const Named args[] = {{"table.stamp", &a.stamp}, {"table.hashes", &a.hashes}, {"table.stored", &a.stored},
                        {"tokens", &a.tokens}, {"table.group", &a.group}, {"act", &a.act}, {"pos", &a.pos},
                        {"proposed", &a.proposed}, {"changed", &a.changed}};
  check_written_apart(op, args, 3);
  TORCH_CHECK_VALUE(a.ways >= 1, "mhfast.", op, ": ways must be an int >= 1, got ", a.ways);
  TORCH_CHECK_VALUE(S >= a.ways && S % a.ways == 0, "mhfast.", op,
                    ": table.stamp must have a positive multiple of ways (", a.ways,
                    ") entries per group (dim 1), got ", S);
  // A reservation is stamped -(step + 2): beyond INT64_MAX - 2 that overflows (undefined behaviour in C++).
  TORCH_CHECK_VALUE(a.step >= 0 && a.step <= INT64_MAX - 2, "mhfast.", op, ": step must be an int in [0, ",
                    INT64_MAX - 2, "], got ", a.step);
}

void check_mh_memo_store_args(const MemoStoreTensors& a) {
  const char* op = "mh_memo_store_";
  for (const Named& x : {Named{"table.stamp", &a.stamp}, {"table.group", &a.group}, {"act", &a.act},
                         {"slot", &a.slot}, {"sel", &a.sel}}) {
    check_dtype(op, x.first, *x.second, {kLong});
  }
  for (const Named& x : {Named{"table.raw", &a.raw}, {"table.local", &a.local}, {"raw_new", &a.raw_new},
                         {"local_new", &a.local_new}}) {
    check_dtype(op, x.first, *x.second, {kFloat});
  }
  check_dim(op, "table.stamp", a.stamp, 2);
  check_dim(op, "table.raw", a.raw, 3);
  const int64_t G = a.stamp.size(0), S = a.stamp.size(1), L = a.raw.size(2);
  for (const Named& x : {Named{"table.raw", &a.raw}, {"table.local", &a.local}}) {
    check_dim(op, x.first, *x.second, 3);
    check_size(op, x.first, *x.second, 0, G, "groups: dim 0 of table.stamp");
    check_size(op, x.first, *x.second, 1, S, "entries: dim 1 of table.stamp");
    check_size(op, x.first, *x.second, 2, L, "positions: dim 2 of table.raw");
  }
  check_dim(op, "table.group", a.group, 1);
  for (const Named& x : {Named{"act", &a.act}, {"slot", &a.slot}}) {
    check_dim(op, x.first, *x.second, 1);
    check_size(op, x.first, *x.second, 0, a.act.size(0), "len(act)");
  }
  check_dim(op, "sel", a.sel, 1);
  const int64_t n = a.sel.size(0);
  for (const Named& x : {Named{"raw_new", &a.raw_new}, {"local_new", &a.local_new}}) {
    check_dim(op, x.first, *x.second, 2);
    check_size(op, x.first, *x.second, 0, n, "len(sel)");
    check_size(op, x.first, *x.second, 1, L, "positions: dim 2 of table.raw");
  }
  for (const Named& x : {Named{"table.stamp", &a.stamp}, {"table.raw", &a.raw}, {"table.local", &a.local}}) {
    check_contiguous_out(op, x.first, *x.second);
  }
  for (const Named& x : {Named{"table.raw", &a.raw}, {"table.local", &a.local}, {"table.group", &a.group},
                         {"act", &a.act}, {"slot", &a.slot}, {"sel", &a.sel}, {"raw_new", &a.raw_new},
                         {"local_new", &a.local_new}}) {
    check_same_device(op, "table.stamp", a.stamp, x.first, *x.second);
  }
  const Named args[] = {{"table.stamp", &a.stamp}, {"table.raw", &a.raw}, {"table.local", &a.local},
                        {"table.group", &a.group}, {"act", &a.act}, {"slot", &a.slot}, {"sel", &a.sel},
                        {"raw_new", &a.raw_new}, {"local_new", &a.local_new}};
  check_written_apart(op, args, 3);
  TORCH_CHECK_VALUE(a.num_misses >= 0 && a.num_misses <= n, "mhfast.", op, ": num_misses must be in [0, ", n,
                    "] (len(sel)), got ", a.num_misses);
  // A reservation is stamped -(step + 2): beyond INT64_MAX - 2 that overflows (undefined behaviour in C++).
  TORCH_CHECK_VALUE(a.step >= 0 && a.step <= INT64_MAX - 2, "mhfast.", op, ": step must be an int in [0, ",
                    INT64_MAX - 2, "], got ", a.step);
}

}  // namespace mhfast
