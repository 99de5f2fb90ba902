"""What the sampler and the scorers share, and neither owns: the machinery between the ops and the algorithms.

* :mod:`.runner`: :class:`~.runner.ModelRunner`, every model call (sub-batches sized from the model's width and,
  on CPU, the L2 cache; one precision per run; the model's output checks), and ``sum_terms`` (energies as
  float64 sums of per-position terms);
* :mod:`.backend`: the ops a run uses, compiled (:mod:`mhfast.ops`) or pure PyTorch (:mod:`mhfast.reference`);
* :mod:`.rng`: counter-based random numbers (a chain's key, streams, the counters folded into keys), on the
  counter hash of :mod:`mhfast.counter_hash`;
* :mod:`.cpu_info` (the CPU facts read at run time) and :mod:`.precision` (the ``dtype`` option's names, whether
  bf16 is native).

It imports the ops, their bundles (:mod:`mhfast.op_types`), the counter hash and the models' protocols
(:mod:`mhfast.models.base`), and nothing that uses it (tests/guards/test_architecture.py).
"""
