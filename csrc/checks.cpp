// Per-op metadata checks (dtype, rank, size, device, scalar ranges): the only copy (see checks.h).
//
// TypeError for a dtype, ValueError for everything else, so that the raw ops, mhfast.ops and
// mhfast.reference (which calls these through torch.ops.mhfast.<op>_check) fail alike.
#include "checks.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace mhfast {
namespace {

constexpr auto kLong = at::ScalarType::Long;
constexpr auto kFloat = at::ScalarType::Float;

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
  TORCH_CHECK_VALUE(std::isfinite(temperature) && temperature > 0, "mhfast.", op,
                    ": temperature must be a finite number > 0, got ", temperature);
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
  TORCH_CHECK_VALUE(std::isfinite(temperature) && temperature > 0, "mhfast.", op,
                    ": temperature must be a finite number > 0, got ", temperature);
  TORCH_CHECK_VALUE(top_p > 0 && top_p <= 1, "mhfast.", op, ": top_p must be in (0, 1], got ", top_p);
  TORCH_CHECK_VALUE(!(act.size(0) > 0 && cache.size(2) == 0), "mhfast.", op,
                    ": cache must have at least one entry in dim 2 (vocabulary size 0)");
}

void check_mh_commit_site_args(const CommitSiteArgs& a, const c10::optional<double>& beta,
                               const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step,
                               int64_t stream) {
  const char* op = "mh_commit_site_";
  using Named = std::pair<const char*, const at::Tensor*>;
  const auto half_or_float = {kFloat, at::ScalarType::Half, at::ScalarType::BFloat16};
  const bool two_d = a.tokens.dim() == 2;
  const int64_t M = two_d ? a.tokens.size(0) : 0, T = two_d ? a.tokens.size(1) : 0;
  const int64_t n = a.ch.dim() == 1 ? a.ch.size(0) : 0, R = a.seq.dim() == 1 ? a.seq.size(0) : 0;
  check_dtype(op, "cache", a.cache, half_or_float);
  for (const Named& x : {Named{"tokens", &a.tokens}, {"keys", &a.keys}, {"ch", &a.ch}, {"pos", &a.pos},
                         {"proposed", &a.proposed}, {"seq", &a.seq}, {"q", &a.q}}) {
    check_dtype(op, x.first, *x.second, {kLong});
  }
  const Named per_position[] = {{"raw_terms", &a.raw_terms}, {"local_terms", &a.local_terms},
                                {"raw_new", &a.raw_new}, {"local_new", &a.local_new}};
  const Named per_chain[] = {{"e_raw", &a.e_raw}, {"e_local", &a.e_local}, {"target", &a.target}};
  const Named per_move[] = {{"logq_forward", &a.logq_forward}, {"logq_reverse", &a.logq_reverse},
                            {"e_raw_new", &a.e_raw_new}, {"e_local_new", &a.e_local_new},
                            {"target_new", &a.target_new}};
  for (const auto& x : per_position) check_dtype(op, x.first, *x.second, {kFloat});
  for (const auto& x : per_chain) check_dtype(op, x.first, *x.second, {kFloat});
  for (const auto& x : per_move) check_dtype(op, x.first, *x.second, {kFloat});
  check_dim(op, "tokens", a.tokens, 2);
  check_dim(op, "cache", a.cache, 3);
  for (const auto& x : per_position) {
    check_dim(op, x.first, *x.second, 2);
    check_size(op, x.first, *x.second, 1, T, "positions: dim 1 of tokens");
  }
  check_size(op, "raw_terms", a.raw_terms, 0, M, "chains: rows of tokens");
  check_size(op, "local_terms", a.local_terms, 0, M, "chains: rows of tokens");
  check_size(op, "raw_new", a.raw_new, 0, n, "len(ch)");
  check_size(op, "local_new", a.local_new, 0, n, "len(ch)");
  check_size(op, "cache", a.cache, 0, M, "chains: rows of tokens");
  check_size(op, "cache", a.cache, 1, T, "positions: dim 1 of tokens");
  for (const Named& x : {Named{"keys", &a.keys}, per_chain[0], per_chain[1], per_chain[2]}) {
    check_dim(op, x.first, *x.second, 1);
    check_size(op, x.first, *x.second, 0, M, "chains: rows of tokens");
  }
  for (const Named& x : {Named{"ch", &a.ch}, {"pos", &a.pos}, {"proposed", &a.proposed}, per_move[0],
                         per_move[1], per_move[2], per_move[3], per_move[4]}) {
    check_dim(op, x.first, *x.second, 1);
    check_size(op, x.first, *x.second, 0, n, "len(ch)");
  }
  check_dim(op, "seq", a.seq, 1);
  check_dim(op, "q", a.q, 1);
  check_size(op, "q", a.q, 0, R, "len(seq)");
  int64_t rows = 0;
  for (const at::Tensor& o : a.outputs) {
    check_dtype(op, "outputs", o, half_or_float);
    check_dim(op, "outputs", o, 2);
    check_size(op, "outputs", o, 1, a.cache.size(2), "dim 2 of cache");
    check_same_device(op, "tokens", a.tokens, "outputs", o);
    rows += o.size(0);
  }
  TORCH_CHECK_VALUE(rows == R, "mhfast.", op, ": outputs hold ", rows, " rows in all, expected ", R,
                    " (len(seq))");
  for (const Named& x : {Named{"raw_terms", &a.raw_terms}, {"local_terms", &a.local_terms},
                         {"e_raw", &a.e_raw}, {"e_local", &a.e_local}, {"target", &a.target},
                         {"cache", &a.cache}, {"keys", &a.keys}, {"ch", &a.ch}, {"pos", &a.pos},
                         {"proposed", &a.proposed},
                         {"logq_forward", &a.logq_forward}, {"logq_reverse", &a.logq_reverse},
                         {"raw_new", &a.raw_new}, {"local_new", &a.local_new}, {"e_raw_new", &a.e_raw_new},
                         {"e_local_new", &a.e_local_new}, {"target_new", &a.target_new}, {"seq", &a.seq},
                         {"q", &a.q}}) {
    check_same_device(op, "tokens", a.tokens, x.first, *x.second);
  }
  TORCH_CHECK_VALUE(!beta.has_value() || std::isfinite(*beta), "mhfast.", op,
                    ": beta must be a finite number or None, got ", beta.value_or(0.0));
  if (beta_rows.has_value()) {
    TORCH_CHECK_VALUE(!beta.has_value(), "mhfast.", op,
                      ": beta is given twice (a number and a tensor, beta_rows); give one of them");
    check_dtype(op, "beta", *beta_rows, {at::ScalarType::Double});
    check_dim(op, "beta", *beta_rows, 1);
    check_size(op, "beta", *beta_rows, 0, M, "chains: rows of tokens");
    check_same_device(op, "tokens", a.tokens, "beta", *beta_rows);
  }
  TORCH_CHECK_VALUE(epoch >= 0 && step >= 0 && stream >= 0, "mhfast.", op,
                    ": epoch, step and stream must be >= 0, got ", epoch, ", ", step, ", ", stream);
}

void check_mh_commit_site_op(const at::Tensor& tokens, const at::Tensor& raw_terms, const at::Tensor& local_terms,
                             const at::Tensor& e_raw, const at::Tensor& e_local, const at::Tensor& target,
                             const at::Tensor& cache, const at::Tensor& keys, const at::Tensor& ch,
                             const at::Tensor& pos, const at::Tensor& proposed, const at::Tensor& logq_forward,
                             const at::Tensor& logq_reverse, const at::Tensor& raw_new, const at::Tensor& local_new,
                             const at::Tensor& e_raw_new, const at::Tensor& e_local_new,
                             const at::Tensor& target_new, const at::Tensor& seq, const at::Tensor& q,
                             at::TensorList outputs, c10::optional<double> beta,
                             const c10::optional<at::Tensor>& beta_rows, int64_t epoch, int64_t step,
                             int64_t stream) {
  check_mh_commit_site_args({tokens, raw_terms, local_terms, e_raw, e_local, target, cache, keys, ch, pos, proposed,
                             logq_forward, logq_reverse, raw_new, local_new, e_raw_new, e_local_new, target_new,
                             seq, q, outputs},
                            beta, beta_rows, epoch, step, stream);
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

void check_mh_memo_lookup_args(const at::Tensor& stamp, const at::Tensor& hashes, const at::Tensor& stored,
                               const at::Tensor& tokens, const at::Tensor& group, const at::Tensor& act,
                               const at::Tensor& pos, const at::Tensor& proposed, const at::Tensor& changed,
                               int64_t ways, int64_t step) {
  const char* op = "mh_memo_lookup_";
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"stamp", &stamp}, {"hashes", &hashes},
                                {"stored", &stored}, {"tokens", &tokens}, {"group", &group}, {"act", &act},
                                {"pos", &pos}, {"proposed", &proposed}}) {
    check_dtype(op, name, *t, {kLong});
  }
  check_dtype(op, "changed", changed, {at::ScalarType::Bool});
  check_dim(op, "stamp", stamp, 2);
  check_dim(op, "tokens", tokens, 2);
  const int64_t G = stamp.size(0), S = stamp.size(1), L = tokens.size(1);
  check_dim(op, "hashes", hashes, 2);
  check_size(op, "hashes", hashes, 0, G, "groups: dim 0 of stamp");
  check_size(op, "hashes", hashes, 1, S, "entries: dim 1 of stamp");
  check_dim(op, "stored", stored, 3);
  check_size(op, "stored", stored, 0, G, "groups: dim 0 of stamp");
  check_size(op, "stored", stored, 1, S, "entries: dim 1 of stamp");
  check_size(op, "stored", stored, 2, L, "positions: dim 1 of tokens");
  check_dim(op, "group", group, 1);
  check_size(op, "group", group, 0, tokens.size(0), "chains: dim 0 of tokens");
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"act", &act}, {"pos", &pos},
                                {"proposed", &proposed}, {"changed", &changed}}) {
    check_dim(op, name, *t, 1);
    check_size(op, name, *t, 0, act.size(0), "len(act)");
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"stamp", &stamp}, {"hashes", &hashes},
                                {"stored", &stored}}) {
    check_contiguous_out(op, name, *t);
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"hashes", &hashes}, {"stored", &stored},
                                {"tokens", &tokens}, {"group", &group}, {"act", &act}, {"pos", &pos},
                                {"proposed", &proposed}, {"changed", &changed}}) {
    check_same_device(op, "stamp", stamp, name, *t);
  }
  TORCH_CHECK_VALUE(ways >= 1, "mhfast.", op, ": ways must be an int >= 1, got ", ways);
  TORCH_CHECK_VALUE(S >= ways && S % ways == 0, "mhfast.", op, ": stamp must have a positive multiple of ways (",
                    ways, ") entries per group (dim 1), got ", S);
  TORCH_CHECK_VALUE(step >= 0, "mhfast.", op, ": step must be an int >= 0, got ", step);
}

void check_mh_memo_store_args(const at::Tensor& stamp, const at::Tensor& raw, const at::Tensor& local,
                              const at::Tensor& group, const at::Tensor& act, const at::Tensor& slot,
                              const at::Tensor& sel, const at::Tensor& raw_new, const at::Tensor& local_new,
                              int64_t num_misses, int64_t step) {
  const char* op = "mh_memo_store_";
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"stamp", &stamp}, {"group", &group},
                                {"act", &act}, {"slot", &slot}, {"sel", &sel}}) {
    check_dtype(op, name, *t, {kLong});
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"raw", &raw}, {"local", &local},
                                {"raw_new", &raw_new}, {"local_new", &local_new}}) {
    check_dtype(op, name, *t, {kFloat});
  }
  check_dim(op, "stamp", stamp, 2);
  const int64_t G = stamp.size(0), S = stamp.size(1);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"raw", &raw}, {"local", &local}}) {
    check_dim(op, name, *t, 3);
    check_size(op, name, *t, 0, G, "groups: dim 0 of stamp");
    check_size(op, name, *t, 1, S, "entries: dim 1 of stamp");
    check_size(op, name, *t, 2, raw.size(2), "positions: dim 2 of raw");
  }
  check_dim(op, "group", group, 1);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"act", &act}, {"slot", &slot}}) {
    check_dim(op, name, *t, 1);
    check_size(op, name, *t, 0, act.size(0), "len(act)");
  }
  check_dim(op, "sel", sel, 1);
  const int64_t n = sel.size(0);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"raw_new", &raw_new},
                                {"local_new", &local_new}}) {
    check_dim(op, name, *t, 2);
    check_size(op, name, *t, 0, n, "len(sel)");
    check_size(op, name, *t, 1, raw.size(2), "positions: dim 2 of raw");
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"stamp", &stamp}, {"raw", &raw},
                                {"local", &local}}) {
    check_contiguous_out(op, name, *t);
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"raw", &raw}, {"local", &local},
                                {"group", &group}, {"act", &act}, {"slot", &slot}, {"sel", &sel},
                                {"raw_new", &raw_new}, {"local_new", &local_new}}) {
    check_same_device(op, "stamp", stamp, name, *t);
  }
  TORCH_CHECK_VALUE(num_misses >= 0 && num_misses <= n, "mhfast.", op, ": num_misses must be in [0, ", n,
                    "] (len(sel)), got ", num_misses);
  TORCH_CHECK_VALUE(step >= 0, "mhfast.", op, ": step must be an int >= 0, got ", step);
}

}  // namespace mhfast
