// C++ check of the CPU kernels through the dispatcher, as a libtorch user would call them.
// Built and run by CMakeLists.txt (`ctest`); exit code 0 = all checks passed.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

bool close(double a, double b, double tol = 1e-5) { return std::abs(a - b) <= tol; }

at::Tensor longs(std::initializer_list<int64_t> v) { return at::tensor(std::vector<int64_t>(v), at::kLong); }
at::Tensor floats(std::initializer_list<float> v) { return at::tensor(std::vector<float>(v), at::kFloat); }

template <typename F>
auto op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<F>();
}

using TensorTriple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

void test_masked_copies() {
  // masked_copies: the docstring example of mhfast.reference.masked_copies.
  auto masked_copies =
      op<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>("mhfast::masked_copies");
  at::Tensor tokens = longs({5, 6, 7}).view({1, 3});
  at::Tensor copies = masked_copies.call(tokens, longs({0, 0, 0}), longs({0, 1, 2}), 0);
  expect(at::equal(copies, longs({0, 6, 7, 5, 0, 7, 5, 6, 0}).view({3, 3})), "masked_copies example");
  bool threw = false;
  try {
    masked_copies.call(tokens, longs({1}), longs({0}), 0);
  } catch (const c10::ValueError& e) {
    threw = std::string(e.what()).find("seq_index") != std::string::npos;
  }
  expect(threw, "masked_copies: seq_index out of range raises ValueError naming it");
}

void test_gather_energies() {
  // gather_energies: e_raw = -logit of target, token_logp = 2 - log(1 + e + e^2).
  auto gather = op<TensorTriple(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>(
      "mhfast::gather_energies");
  auto [e_raw, e_local, token_logp] =
      gather.call(floats({0.f, 1.f, 2.f}).view({1, 3}), longs({2}), longs({0}), 1);
  const double lp = 2.0 - std::log(1.0 + std::exp(1.0) + std::exp(2.0));
  expect(close(e_raw.item<float>(), -2.0), "gather_energies e_raw");
  expect(close(token_logp.item<float>(), lp) && close(e_local.item<float>(), -lp),
         "gather_energies token_logp / e_local");
  bool threw = false;
  try {
    gather.call(floats({0.f, 1.f}).view({1, 2}), longs({2}), longs({0}), 1);
  } catch (const c10::ValueError& e) {
    threw = std::string(e.what()).find("targets") != std::string::npos;
  }
  expect(threw, "gather_energies: target outside the vocabulary raises ValueError naming it");
}

void test_propose() {
  const float inf = std::numeric_limits<float>::infinity();
  // propose: q uniform on {0, 1, 3} (id 2 has a -inf logit); u = 0.5 falls in id 1's interval.
  auto propose = op<TensorTriple(const at::Tensor&, const at::Tensor&, double, double, const at::Tensor&,
                                 double)>("mhfast::propose");
  auto [proposed, logq_p, logq_c] =
      propose.call(floats({0.f, 0.f, -inf, 0.f, 0.f, 0.f, -inf, 0.f}).view({2, 4}), longs({2, 3}), 1.0, 1.0,
                   floats({0.5f, 0.99f}), 0.0);
  expect(at::equal(proposed, longs({1, 3})), "propose inverse CDF");
  expect(close(logq_p[0].item<float>(), -std::log(3.0)) && close(logq_c[1].item<float>(), -std::log(3.0)),
         "propose log q");
  expect(std::isinf(logq_c[0].item<float>()), "propose: log q of a -inf logit is -inf");
}

void test_mh_accept() {
  // mh_accept_: chain 0 lowers its energy (accept), chain 1 raises it by 50 (reject).
  auto accept = op<at::Tensor(at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
      "mhfast::mh_accept_");
  at::Tensor chains = longs({1, 2, 3, 4, 5, 6}).view({2, 3});
  at::Tensor energy = floats({10.f, 10.f});
  at::Tensor accepted = accept.call(chains, longs({1, 2}), longs({9, 9}), energy, floats({5.f, 60.f}),
                                    floats({0.f, 0.f}), floats({0.f, 0.f}), floats({1.f, 1.f}),
                                    floats({0.5f, 0.5f}));
  expect(accepted[0].item<bool>() && !accepted[1].item<bool>(), "mh_accept_ decisions");
  expect(at::equal(chains, longs({1, 9, 3, 4, 5, 6}).view({2, 3})), "mh_accept_ writes accepted tokens");
  expect(at::equal(energy, floats({10.f, 10.f})), "mh_accept_ leaves energy alone (read only)");
}

// mh_commit_site_ through its bundled schema (csrc/op_args.h): one chain of two positions moves to token 2 at
// position 1 with beta None (accepted), its one model row goes to the cache in place.
void test_mh_commit_site() {
  using Out = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
  auto commit = op<Out(at::TensorList, at::Tensor&, at::TensorList, at::TensorList, const at::Tensor&,
                       const at::Tensor&, at::TensorList, c10::optional<double>, const c10::optional<at::Tensor>&,
                       int64_t, int64_t, int64_t)>("mhfast::mh_commit_site_");
  auto z = [](int64_t n) { return at::zeros({n}, at::kFloat); };
  at::Tensor cache = at::zeros({1, 2, 3}, at::kFloat);
  const std::vector<at::Tensor> chains{longs({0, 1}).view({1, 2}), at::zeros({1, 2}), at::zeros({1, 2}), z(1), z(1),
                                       z(1), longs({5})};
  const std::vector<at::Tensor> proposal{longs({0}), longs({1}), longs({2}), z(1), z(1)};
  const std::vector<at::Tensor> terms{at::ones({1, 2}), at::ones({1, 2}), floats({2.f}), floats({2.f}), floats({2.f})};
  const std::vector<at::Tensor> outputs{at::ones({1, 3})};
  const c10::optional<at::Tensor> no_beta_rows;
  Out out = commit.call(chains, cache, proposal, terms, longs({0}), longs({0}), outputs, c10::nullopt, no_beta_rows, 0,
                        0, 2);
  expect(at::equal(std::get<0>(out), longs({0, 2}).view({1, 2})) && std::get<5>(out)[0].item<bool>(),
         "mh_commit_site_ accepts (beta None) and moves the token");
  expect(at::equal(cache[0][0], at::ones({3})) && at::equal(cache[0][1], at::zeros({3})),
         "mh_commit_site_ writes the accepted row into the cache in place");
}

}  // namespace

int main() {
  test_masked_copies();
  test_gather_energies();
  test_propose();
  test_mh_accept();
  test_mh_commit_site();
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
