"""The moves the kernels are made of: propose from a conditional, score X', accept or reject, commit.

Single-site MH (the efficient inner loop; :mod:`mhfast.sampler.kernels.mh` runs its phases in order):

* :mod:`.site_propose`: each moving chain draws X'_i from its cached row i (no model call);
* :mod:`.changed`: which proposals change their chain (X' = X is accepted with probability 1: nothing to
  compute), the one host sync of a step; the proposal memo (:mod:`mhfast.sampler.memo`) says in the same read
  which of them it already knows;
* :mod:`.site_score`: the energy terms of each tested X': the cached row at the proposed token for
  position i, ``T_e - 1`` forwarded masked rows for the others (or the memo's terms), the extra energy terms;
* :mod:`.site_commit`: the MH test and the new state in one fused op; accepted chains copy X''s rows into the
  cache, so E(X) is never recomputed;
* :mod:`.site_types`: the named values handed between those phases.

The other moves: :mod:`.block` (block MH / block Gibbs, section 4.1: several positions from one row of X masked at
the whole block, all ``T_e`` rows of X'), :mod:`.gibbs` (degenerate Gibbs), :mod:`.accept` (the unfused MH test
they use). Every move returns a new :class:`~mhfast.sampler.state.ChainState` (the cache buffer is updated in
place and donated, see :mod:`mhfast.sampler.state`) and a :class:`~mhfast.sampler.step.StepInfo`.
"""
