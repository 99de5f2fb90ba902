"""mh_accept_: compiled op == reference on accept/reject decisions and in-place token updates, incl.
NaN and infinite energies, block proposals with -1 slots, strided in-place tensors, B = 0; only
tokens is written (energy is read only); bad input is rejected before anything is written."""
from __future__ import annotations

import pytest
import torch

import mhfast.ops as ops
import mhfast.reference as reference
from op_checks import raises_aliased, raises_everywhere

EXACT = dict(rtol=0, atol=0, equal_nan=True)


def random_case(B: int, T: int, K: int | None, seed: int, special: bool = False):
    """Arguments of mh_accept_; K None = single-site positions Long[B], else a block Long[B, K]."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 50, (B, T), generator=g)
    if K is None:
        positions = torch.randint(0, T, (B,), generator=g)
        proposed = torch.randint(0, 50, (B,), generator=g)
    else:
        # Distinct positions per chain (a real block), some slots unused (-1).
        positions = torch.rand(B, T, generator=g).argsort(1)[:, :K].contiguous()
        positions[torch.rand(B, K, generator=g) < 0.3] = -1
        proposed = torch.randint(0, 50, (B, K), generator=g)
    floats = [torch.randn(B, generator=g) * 2 for _ in range(4)]  # energy, energy_proposed, logq_f, logq_r
    beta = torch.rand(B, generator=g) * 2
    uniforms = torch.rand(B, generator=g)
    if special and B >= 8:
        inf, nan = float("inf"), float("nan")
        floats[0][0], floats[1][1], floats[2][2], floats[3][3] = nan, nan, inf, -inf
        floats[0][4], floats[1][4] = inf, inf  # inf - inf: NaN -> reject
        floats[1][5] = -inf  # -(-inf): accept
        uniforms[6] = 0.0  # log(0) = -inf: accept unless log_alpha is NaN or -inf
        beta[7] = 0.0
    return (tokens, positions, proposed, floats[0], floats[1], floats[2], floats[3], beta, uniforms)


def check_matches(args, device, transposed_tokens: bool = False):
    args = tuple(a.to(device) for a in args)
    ref_args = tuple(a.clone() for a in args)
    expected = reference.mh_accept_(*ref_args)
    fns = [ops.mh_accept_] + ([torch.ops.mhfast.mh_accept_] if device == "cpu" else [])
    for fn in fns:
        mine = [a.clone() for a in args]
        if transposed_tokens:  # in-place writes must land in a column-major tokens tensor
            mine[0] = mine[0].t().contiguous().t()
        accepted = fn(*mine)
        assert accepted.dtype == torch.bool and accepted.device.type == device
        assert torch.equal(accepted, expected)
        assert torch.equal(mine[0], ref_args[0])
        for a, b in zip(mine[1:], args[1:]):  # nothing else is written, energy included
            torch.testing.assert_close(a, b, **EXACT)
    for a, b in zip(ref_args[1:], args[1:]):  # the reference writes only tokens too
        torch.testing.assert_close(a, b, **EXACT)
    return expected


@pytest.mark.parametrize("K", [None, 1, 3])
@pytest.mark.parametrize("B,T", [(1, 1), (8, 5), (300, 12), (5000, 20)])
def test_matches_reference(device, B, T, K):
    K = None if K is None else min(K, T)  # a block is at most the whole sequence
    expected = check_matches(random_case(B, T, K, seed=B + T), device, transposed_tokens=B % 2 == 0)
    if B >= 300:
        assert 0 < expected.float().mean() < 1  # both outcomes exercised


@pytest.mark.parametrize("K", [None, 4])
def test_special_values(device, K):
    expected = check_matches(random_case(16, 6, K, seed=7, special=True), device)
    assert not expected[0] and not expected[1] and not expected[4]  # NaN log_alpha rejects
    assert expected[5]


def test_empty_batch(device):
    check_matches(random_case(0, 4, None, seed=0), device)
    check_matches(random_case(0, 4, 2, seed=0), device)


def test_strided_per_chain_tensors(device):
    args = list(random_case(20, 6, 2, seed=3))
    args = [a.to(device) for a in args]
    wide = torch.randn(20, 3, device=device)
    wide[:, 1] = args[3]
    energy = wide[:, 1]  # stride 3, read only
    before = wide.clone()
    ref_tokens = args[0].clone()
    expected = reference.mh_accept_(ref_tokens, *args[1:3], energy.clone(), *args[4:])
    accepted = ops.mh_accept_(args[0], args[1][::1], args[2], energy, args[4][::1], *args[5:])
    assert torch.equal(accepted, expected) and torch.equal(args[0], ref_tokens)
    assert 0 < expected.float().mean() < 1  # the energies of both outcomes were read correctly
    torch.testing.assert_close(wide, before, **EXACT)


def test_bad_input_and_nothing_written(device):
    args = [a.to(device) for a in random_case(6, 5, 2, seed=1)]
    raw_values = device == "cpu"
    names = ["tokens", "positions", "proposed", "energy", "energy_proposed", "logq_forward", "logq_reverse",
             "beta", "uniforms"]

    def with_(i, value):
        out = list(args)
        out[i] = value
        return tuple(out)

    for i, name in enumerate(names):  # wrong dtype
        bad = args[i].float() if i < 3 else args[i].double()
        raises_everywhere("mh_accept_", with_(i, bad), name)
    for i, name in enumerate(names):  # wrong rank
        bad = args[i][None, None] if i < 3 else args[i][:, None]
        raises_everywhere("mh_accept_", with_(i, bad), name)
    for i, name in enumerate(names[1:], start=1):  # wrong batch size
        raises_everywhere("mh_accept_", with_(i, args[i][1:]), name)
    raises_everywhere("mh_accept_", with_(2, args[2][:, :1]), "proposed")  # block width mismatch
    for bad in (-2, 5):
        pos = args[1].clone()
        pos[3, 1] = bad
        raises_everywhere("mh_accept_", with_(1, pos), "positions", raw=raw_values)
    single = [a.to(device) for a in random_case(6, 5, None, seed=2)]
    pos = single[1].clone()
    pos[0] = -1  # -1 only marks unused block slots; a single-site position must be real
    raises_everywhere("mh_accept_", (single[0], pos, *single[2:]), "positions", raw=raw_values)
    # A rejected call writes nothing: CPU kernel checks positions before touching tokens.
    if device == "cpu":
        tokens, energy = args[0].clone(), args[3].clone()
        pos = args[1].clone()
        pos[5, 0] = 99
        args[7].fill_(0.0)
        args[8].fill_(0.0)  # every chain would accept
        with pytest.raises(ValueError, match="positions"):
            torch.ops.mhfast.mh_accept_(tokens, pos, args[2], energy, *args[4:])
        assert torch.equal(tokens, args[0]) and torch.equal(energy, args[3])
    other = "cpu" if device == "cuda" else "meta"
    raises_everywhere("mh_accept_", with_(4, args[4].to(other)), "energy_proposed", raw=device == "cuda")


def test_an_argument_sharing_memory_with_tokens_is_refused(device):
    """positions (or any argument) a view of tokens: the kernel checked the positions, then its own first write
    changed one (2**40 here) and the next write landed past tokens' end (a segfault before the overlap check)."""
    def aliased(name: str):
        def make():
            tokens = torch.tensor([[1, 2, 0, 0]], device=device)
            z = torch.zeros(1, device=device)
            args = [tokens, tokens[:, :2], torch.tensor([[2 ** 40, 0]], device=device), z, z, z, z,
                    torch.ones(1, device=device), torch.full((1,), .5, device=device)]
            if name == "proposed":  # the ids it writes, read from tokens itself
                args[1], args[2] = torch.tensor([[0, 1]], device=device), tokens[:, 2:]
            if name == "uniforms":  # a float view of the same bytes
                args[1], args[2] = torch.tensor([[0, 1]], device=device), torch.tensor([[3, 4]], device=device)
                args[8] = tokens.view(torch.float32)[0, :1]
            return tuple(args)
        return make

    for name in ("positions", "proposed", "uniforms"):
        raises_aliased("mh_accept_", aliased(name), f"{name} shares memory with tokens, which the op writes in "
                                                    f"place")
    # views of one storage that do not touch are fine: the tokens' first row, the positions from the second
    both = torch.tensor([[1, 2, 0, 0], [0, 1, 0, 0]], device=device)
    z = torch.zeros(1, device=device)
    ops.mh_accept_(both[:1], both[1, :1], torch.tensor([7], device=device), z, z, z, z,
                   torch.ones(1, device=device), torch.full((1,), .5, device=device))
    assert both[0].tolist() == [7, 2, 0, 0]  # accepted (log .5 < 0): position 0 <- 7; the second row unchanged
    assert both[1].tolist() == [0, 1, 0, 0]

