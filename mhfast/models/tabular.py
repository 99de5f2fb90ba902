"""Masked LMs whose conditionals are given explicitly, for exact tests of the sampler.

A :class:`TabularMLM` stores, for every row length ``L`` it supports, a table
``logits[L]`` of shape ``[V**L, L, V]``: entry ``[code(row), t]`` holds the V logits of
position ``t`` given the whole row (with ``mask_id`` at any subset of positions), where
``code`` reads the row's first ``L`` tokens as a base-V number. Rows are padded at the end with
``pad_id``; a row's length is its number of non-pad tokens, so padding never changes the
conditionals. Because every masked context has its own entry, block proposals (several
masked positions) are well defined, and the target distribution ``exp(-E)`` can be computed
exactly by enumerating all sequences.

Example:
    >>> import torch
    >>> model = TabularMLM.random(num_tokens=3, length=2, seed=0)   # tokens 0,1,2; mask 3; pad 4
    >>> model.vocab_size, model.mask_id, model.pad_id
    (5, 3, 4)
    >>> model.masked_logits(torch.tensor([[3, 1]]), torch.tensor([0])).shape
    torch.Size([1, 5])
    >>> cx = counter_example()   # the inconsistent conditionals of the paper's appendix C
    >>> cx.masked_logits(torch.tensor([[cx.mask_id, 0]]), torch.tensor([0])).softmax(-1)[0, :2]
    tensor([0.9900, 0.0100])
"""
from __future__ import annotations

from typing import Mapping, Sequence

import torch


class TabularMLM:
    """An MLM given by explicit logit tables (see the module docstring).

    Args:
        tables: ``{L: float[V**L, L, V]}`` (or one tensor for a single length).
        mask_id, pad_id: ids inside ``[0, V)``; ``special_ids`` are never proposed (mask and pad
            are added automatically).
        features: also offer ``masked_features``/``output_layer`` (features = logits / 2, LM head
            = 2 * features; exact in floating point) so the sampler's feature cache is exercised.
        row_hooks: also offer ``masked_logits_at``/``masked_features_at`` (several positions of
            one row in a single call).
    """

    def __init__(self, tables: Mapping[int, torch.Tensor] | torch.Tensor, mask_id: int, pad_id: int,
                 special_ids: Sequence[int] = (), *, features: bool = False, row_hooks: bool = False):
        if isinstance(tables, torch.Tensor):
            tables = {int(tables.shape[1]): tables}
        self.tables = {int(L): t.float() for L, t in tables.items()}
        V = next(iter(self.tables.values())).shape[-1]
        for L, t in self.tables.items():
            if tuple(t.shape) != (V ** L, L, V):
                raise ValueError(f"TabularMLM: tables[{L}] must have shape {(V ** L, L, V)}, got {tuple(t.shape)}")
        self.vocab_size = V
        self.mask_id = int(mask_id)
        self.pad_id = int(pad_id)
        self.special_ids = tuple(sorted({int(i) for i in special_ids} | {self.mask_id, self.pad_id}))
        self.calls: list[int] = []  # rows per masked_logits/masked_features call (tests count them)
        if features:
            self.masked_features = self._masked_features
            self.output_layer = self._output_layer
        if row_hooks:
            self.masked_logits_at = self._masked_logits_at
            if features:
                self.masked_features_at = self._masked_features_at

    @classmethod
    def random(cls, num_tokens: int, length: int | Sequence[int], seed: int = 0, scale: float = 1.0,
               **kwargs) -> "TabularMLM":
        """Random normal logits (times ``scale``) for ``num_tokens`` ordinary tokens plus mask and pad.

        Ordinary tokens are ``0..num_tokens-1``, ``mask_id = num_tokens``, ``pad_id = num_tokens + 1``;
        the special ids get finite random logits too (the sampler must still never propose them).
        """
        V = num_tokens + 2
        g = torch.Generator().manual_seed(seed)
        lengths = [length] if isinstance(length, int) else list(length)
        tables = {L: torch.randn(V ** L, L, V, generator=g) * scale for L in lengths}
        return cls(tables, mask_id=num_tokens, pad_id=num_tokens + 1, **kwargs)

    # ------------------------------------------------------------------ protocol
    def row_lengths(self, tokens: torch.Tensor) -> torch.Tensor:
        return (tokens != self.pad_id).sum(dim=1)

    def _lookup(self, tables: Mapping[int, torch.Tensor], tokens: torch.Tensor, positions: torch.Tensor
                ) -> torch.Tensor:
        V = self.vocab_size
        out = torch.empty(tokens.shape[0], V, device=tokens.device)
        lengths = self.row_lengths(tokens)
        for L in torch.unique(lengths).tolist():
            if L not in tables:
                raise ValueError(f"TabularMLM: no table for rows of length {L}")
            rows = (lengths == L).nonzero().squeeze(1)
            weights = V ** torch.arange(L - 1, -1, -1, device=tokens.device)
            code = (tokens[rows, :L] * weights).sum(dim=1)
            out[rows] = tables[L].to(tokens.device)[code, positions[rows]]
        return out

    def masked_logits(self, tokens: torch.Tensor, positions: torch.Tensor, context=None,
                      context_index: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of position ``positions[n]`` given row ``n``: Long[N,T], Long[N] -> f32[N,V]."""
        self.calls.append(int(tokens.shape[0]))
        return self._lookup(self._tables_for(context, context_index, tokens), tokens, positions)

    def _tables_for(self, context, context_index, tokens):
        return self.tables

    def _masked_features(self, tokens, positions, context=None, context_index=None) -> torch.Tensor:
        return self.masked_logits(tokens, positions, context, context_index) / 2

    def _output_layer(self, features: torch.Tensor) -> torch.Tensor:
        return features * 2

    def _masked_logits_at(self, tokens, row_index, positions, context=None, context_index=None) -> torch.Tensor:
        ci = context_index.index_select(0, row_index) if context_index is not None else None
        self.calls.append(int(tokens.shape[0]))  # one "forward" per distinct row
        return self._lookup(self._tables_for(context, ci, tokens.index_select(0, row_index)),
                            tokens.index_select(0, row_index), positions)

    def _masked_features_at(self, tokens, row_index, positions, context=None, context_index=None) -> torch.Tensor:
        return self._masked_logits_at(tokens, row_index, positions, context, context_index) / 2


class ConditionalTabularMLM(TabularMLM):
    """A conditional :class:`TabularMLM`: source ``s`` (an int id) selects its own tables.

    ``encode(sources Long[S])`` returns the ids (the "encoder output"); ``predict_lengths``
    returns the first k entries of ``length_ranking[s]``; ``masked_logits`` reads the tables of
    source ``context[context_index[n]]`` for row ``n``. ``encode_calls`` counts encodings.

    Example:
        >>> m = ConditionalTabularMLM.random(num_tokens=3, lengths=(2, 3), num_sources=2, seed=0)
        >>> ctx = m.encode(torch.tensor([1, 0]))
        >>> m.predict_lengths(ctx, 2).tolist()
        [[3, 2], [2, 3]]
    """

    def __init__(self, source_tables: Sequence[Mapping[int, torch.Tensor]], length_ranking: torch.Tensor,
                 mask_id: int, pad_id: int, special_ids: Sequence[int] = (), **kwargs):
        super().__init__(source_tables[0], mask_id, pad_id, special_ids, **kwargs)
        self.source_tables = [{int(L): t.float() for L, t in tabs.items()} for tabs in source_tables]
        self.length_ranking = torch.as_tensor(length_ranking, dtype=torch.long)
        self.encode_calls = 0

    @classmethod
    def random(cls, num_tokens: int, lengths: Sequence[int], num_sources: int, seed: int = 0,
               scale: float = 1.0, **kwargs) -> "ConditionalTabularMLM":
        V = num_tokens + 2
        g = torch.Generator().manual_seed(seed)
        source_tables = [{L: torch.randn(V ** L, L, V, generator=g) * scale for L in lengths}
                         for _ in range(num_sources)]
        # source s ranks the lengths in a rotated order, so sources disagree on the best length
        ranking = torch.tensor([[lengths[(s + i) % len(lengths)] for i in range(len(lengths))]
                                for s in range(num_sources)])
        return cls(source_tables, ranking, mask_id=num_tokens, pad_id=num_tokens + 1, **kwargs)

    def encode(self, sources: torch.Tensor) -> torch.Tensor:
        self.encode_calls += 1
        return torch.as_tensor(sources, dtype=torch.long)

    def predict_lengths(self, context: torch.Tensor, k: int) -> torch.Tensor:
        return self.length_ranking[context, :k]

    def _tables_for(self, context, context_index, tokens):
        if context is None or context_index is None:
            raise ValueError("ConditionalTabularMLM: masked_logits needs context and context_index")
        return None  # resolved per row in _lookup_conditional

    def masked_logits(self, tokens, positions, context=None, context_index=None) -> torch.Tensor:
        self.calls.append(int(tokens.shape[0]))
        self._tables_for(context, context_index, tokens)
        # the context may stay where encode put it (the CPU) while the rows run on a GPU
        src = context.to(tokens.device).index_select(0, context_index.to(tokens.device))
        out = torch.empty(tokens.shape[0], self.vocab_size, device=tokens.device)
        for s in torch.unique(src).tolist():
            rows = (src == s).nonzero().squeeze(1)
            out[rows] = self._lookup(self.source_tables[s], tokens[rows], positions[rows])
        return out

    def _masked_logits_at(self, tokens, row_index, positions, context=None, context_index=None):
        self.calls.append(int(tokens.shape[0]))
        ci = context_index.index_select(0, row_index)
        out = self.masked_logits(tokens.index_select(0, row_index), positions, context, ci)
        self.calls.pop()
        return out


def counter_example(**kwargs) -> TabularMLM:
    """The paper's inconsistent conditionals (appendix C) as a TabularMLM with T = 2.

    Tokens a = 0, b = 1, mask = 2, pad = 3. ``p(X1 | X2) = [[.99, .01], [.01, .99]]`` (row: X2),
    ``p(X2 | X1) = [.5, .5]`` whatever X1; logits are the log conditionals (mask/pad: -inf).
    With a masked neighbour both conditionals are uniform (only used by the warm start).
    The MH target (raw = local energy here) is ``pi(x1, x2) ~ p(x1 | x2)``: .495 on aa and bb,
    .005 on ab and ba; degenerate Gibbs does not sample it.
    """
    V, mask, pad = 4, 2, 3
    table = torch.full((V ** 2, 2, V), float("-inf"))
    p1 = torch.tensor([[0.99, 0.01], [0.01, 0.99]])
    for x1 in range(V):
        for x2 in range(V):
            code = x1 * V + x2
            table[code, 0, :2] = p1[x2].log() if x2 < 2 else torch.tensor([0.5, 0.5]).log()
            table[code, 1, :2] = torch.tensor([0.5, 0.5]).log()
    return TabularMLM({2: table}, mask_id=mask, pad_id=pad, **kwargs)
