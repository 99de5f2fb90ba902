"""``mhfast sample``: sample sequences from a masked LM with Metropolis-Hastings and print them.

The defaults run AntiBERTy, single-site MH on the raw energy, 10 residues, with the paper's chains and
epochs (5 chains, 33 epochs, 7 burn-in; the same sampler flags and defaults as ``mhfast translate``,
both made from mhfast.sampler.options).

Examples:
    $ python3 -m mhfast sample                                  # 10-residue AntiBERTy samples
    $ python3 -m mhfast sample --energy both --length 20 --anneal 0.04
    $ python3 -m mhfast sample --init EVQLVESGGGLVQPGGSLRLSCAASGFNIKDTYIH --free 25:33
    $ python3 -m mhfast sample --model path/to/bert_dir --init "the cat sat on the mat" --free 1:3
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..files import stdout_print
from ..sampler import options
from ..sampler.scalars import MAX_SIZE
from ..sampler.tempering import counters_line
from . import _diagnostics, _energy_terms

NAME = "sample"
HELP = "sample sequences from a masked LM (AntiBERTy, Sapiens, a fairseq checkpoint or a HuggingFace model) with MH"
DESCRIPTION = __doc__.split("\n\n")[0] + " " + __doc__.split("\n\n")[1].replace("\n", " ")


def _span(text: str) -> tuple[int, int]:
    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:END (0-based, END exclusive), got {text!r}") from None
    if not 0 <= start < end:
        raise argparse.ArgumentTypeError(f"expected 0 <= START < END, got {text!r}")
    return start, end


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="antiberty",
                   help="'antiberty' (the model of the antiberty package), 'sapiens-h' / 'sapiens-l' (the Sapiens "
                        "heavy/light-chain models), a fairseq masked_lm checkpoint (dict.txt beside it) or a local "
                        "HuggingFace *ForMaskedLM directory")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--length", type=int, help="unconditional sampling of this many tokens (default 10 when no "
                      "--init/--init-file)")
    what.add_argument("--init", nargs="+", metavar="SEQ", help="start sequence(s); for AntiBERTy one-letter residues "
                      "with '_' for a residue to fill in; for other models text for its tokenizer")
    what.add_argument("--init-file", metavar="FILE", help="start sequences, one per non-blank line, or FASTA "
                      "records ('>' header, then the sequence's lines); text outside a record is an error")
    p.add_argument("--free", type=_span, action="append", metavar="START:END",
                   help="infilling: only these token spans (0-based over the sequence's ordinary tokens, END "
                        "exclusive, repeatable) are resampled; the rest stays fixed but counts in the energy")
    options.add_arguments(p.add_argument_group("MH sampler (mhfast.sample; defaults = paper section 5)"),
                          extra_choices={"energy": ("both",)},
                          help_suffix={"energy": "; 'both' runs raw-MH then local-MH"})
    _diagnostics.add_arguments(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines: print only the final samples "
                   "and their summary")


@dataclass(frozen=True)
class Record:
    """One start sequence and where it came from: ``where`` names it in messages (``"--init 2"``,
    ``"--init-file 'heavy.fa': line 5"``); ``lines`` holds ``(where, text)`` of each line a FASTA record
    joins, so that an error in one of them names that line."""

    text: str
    where: str
    lines: tuple[tuple[str, str], ...] = ()


def read_sequences(path: str) -> list[Record]:
    """The start sequences of an --init-file: one per non-blank line, or FASTA records (a '>' header, then
    the lines of its sequence, joined) when any line starts with '>'.

    Blank lines hold no sequence and are skipped; nothing else is dropped: every other line is a sequence
    (a line starting with '#' too), and in FASTA text before the first header or a header without a
    sequence is a ValueError naming the file and the line.
    """
    from ..files import line_of, read_records

    # "\n"-separated records (a text-mode file would also split at a lone "\r"); bad UTF-8 names the line
    lines = [(n, line.strip()) for n, line in enumerate(read_records(path, "--init-file"), 1)]
    where = lambda n: line_of(path, "--init-file", n)  # noqa: E731
    if any(line.startswith(">") for _, line in lines):
        seqs = _fasta_records(lines, where)
    else:
        seqs = [Record(line, where(n)) for n, line in lines if line]
    if not seqs:
        raise ValueError(f"--init-file: no sequences in {path!r}")
    return seqs


def _fasta_records(lines: list[tuple[int, str]], where: Any) -> list[Record]:
    """FASTA records of numbered, stripped lines; ``where(n)`` names line n. Text outside a record and a record
    without a sequence are errors (never dropped)."""
    records: list[tuple[int, str, list[tuple[int, str]]]] = []  # (header line, header, sequence lines)
    for n, line in lines:
        if line.startswith(">"):
            records.append((n, line, []))
        elif line:
            if not records:
                raise ValueError(f"{where(n)}: sequence text before the first FASTA header ('>'); give it a header "
                                 "or remove it")
            records[-1][2].append((n, line))
    for n, header, parts in records:
        if not parts:
            raise ValueError(f"{where(n)}: FASTA record {header!r} has no sequence")
    return [Record("".join(text for _, text in parts), where(n), tuple((where(m), text) for m, text in parts))
            for n, _, parts in records]


def _records(args: argparse.Namespace) -> list[Record] | None:
    """The start sequences of --init or --init-file, each naming where it came from (None without them)."""
    if args.init is not None:
        return [Record(text, f"--init {k}" if len(args.init) > 1 else "--init") for k, text in enumerate(args.init, 1)]
    return read_sequences(args.init_file) if args.init_file is not None else None  # ("" is no file name)


def _encode(lm: Any, record: Record) -> torch.Tensor:
    """A record's token ids, checked (not empty, fits the model's positions); errors name the record, or for a
    FASTA record the line that holds what the tokenizer refuses (e.g. a character that is no residue)."""
    from ..models.base import check_length

    try:
        try:
            record.text.encode("utf-8")
        except UnicodeEncodeError:  # (bytes the command line could not decode: the tokenizer raised a TypeError)
            raise ValueError("not valid UTF-8 text") from None
        ids = lm.encode(record.text)
        special = set(lm.special_ids) - {lm.mask_id}
        # first: a text of unknown words only is all special ids too ("x y": [CLS] [UNK] [UNK] [SEP]), not empty
        inner = _inner_special(ids.tolist(), special, _frame(lm))
        if inner is None and all(int(i) in special for i in ids):  # ([CLS] [SEP] of "": the API would name init)
            raise ValueError("no token to sample (an empty sequence); give text, or --length N")
        if inner is not None:  # ([UNK] would stay fixed, and print as nothing: the energies of another text)
            tokenizer = getattr(lm, "tokenizer", None)
            shown = tokenizer.convert_ids_to_tokens(inner[1]) if hasattr(tokenizer, "convert_ids_to_tokens") else \
                lm.decode(torch.tensor([inner[1]]))
            raise ValueError(f"token {inner[0]} is {shown!r} (id {inner[1]}): a word the model does not know or a "
                             "special token, inside the text; it would stay fixed and print as nothing: remove or "
                             "replace it")
        check_length(lm, len(ids), "the sequence")
    except (ValueError, TypeError) as e:  # (TypeError: a tokenizer's, e.g. for bytes not UTF-8 on the command line)
        for where, text in record.lines:
            try:
                lm.encode(text)
            except (ValueError, TypeError) as line_error:
                raise ValueError(f"{where}: {line_error}") from None
        raise ValueError(f"{record.where}: {e}") from None
    return ids


def _inner_special(ids: list[int], special: set[int], frame: list[int] | None = None) -> tuple[int, int] | None:
    """(index, id) of the first special id (unknown word, [SEP], ...) in the text's own tokens, or None.

    ``frame``: the ids the tokenizer gives an empty text (its own framing, e.g. [CLS] [SEP]): the text's tokens are
    what lies between a first part of it at the start and the rest at the end (the middle split tried first: [CLS]
    before, [SEP] after), so a special or unknown word first or last in the text is found too (between the first
    and last ordinary token only, the rule without ``frame``, 'zzz a b' kept an [UNK] that stayed fixed and printed
    as nothing).

    Example:
        >>> _inner_special([2, 7, 1, 8, 3], {1, 2, 3}), _inner_special([2, 7, 8, 3], {1, 2, 3})
        ((2, 1), None)
        >>> [_inner_special(ids, {1, 2, 3}, frame=[2, 3]) for ids in ([2, 1, 7, 8, 3], [2, 7, 8, 2, 3], [2, 3, 7, 3])]
        [(1, 1), (3, 2), (1, 3)]
    """
    if frame is not None:
        for k in sorted(range(len(frame) + 1), key=lambda k: abs(k - (len(frame) + 1) // 2)):
            head, tail = frame[:k], frame[k:]
            if len(ids) >= len(frame) and ids[:k] == head and ids[len(ids) - len(tail):] == tail:
                return next(((j, ids[j]) for j in range(k, len(ids) - len(tail)) if ids[j] in special), None)
    ordinary = [k for k, i in enumerate(ids) if i not in special]
    if not ordinary:
        return None
    return next(((k, ids[k]) for k in range(ordinary[0], ordinary[-1]) if ids[k] in special), None)


def _frame(lm: Any) -> list[int] | None:
    """The ids of an empty text (the tokenizer's framing), or None where the model cannot encode one."""
    try:
        return [int(i) for i in lm.encode("")]
    except (ValueError, TypeError):
        return None


def _inputs(lm: Any, args: argparse.Namespace, records: list[Record] | None) -> dict:
    """The ``init``/``free_positions`` or ``length`` arguments of mhfast.sample from the options and the start
    sequences (:func:`_records`)."""
    if records is None:
        if args.free:
            raise ValueError("--free needs --init or --init-file (infilling keeps the rest of a given sequence)")
        return {"length": 10 if args.length is None else args.length}
    if not callable(getattr(lm, "encode", None)):
        raise ValueError("--init: this model has no tokenizer to encode text")
    encoded = [_encode(lm, r) for r in records]
    T = max(len(e) for e in encoded)
    init = torch.full((len(encoded), T), lm.pad_id, dtype=torch.long)
    for b, e in enumerate(encoded):
        init[b, :len(e)] = e
    out: dict = {"init": init}
    if args.free:
        special = torch.zeros(lm.vocab_size, dtype=torch.bool)
        special[[i for i in lm.special_ids if i != lm.mask_id]] = True
        free = torch.zeros_like(init, dtype=torch.bool)
        for b, e in enumerate(encoded):
            ordinary = (~special[e]).nonzero().flatten()  # token index of each ordinary token
            for start, end in args.free:
                if end > len(ordinary):
                    raise ValueError(f"--free {start}:{end}: {records[b].where} has only {len(ordinary)} tokens")
                free[b, ordinary[start:end]] = True
            # Masked tokens ('_') must be filled, so they are free whatever the spans say.
            free[b, :len(e)] |= e == lm.mask_id
        out["free_positions"] = free
    return out


def _check(args: argparse.Namespace) -> Any:
    """The validated sampler config (``--energy both`` checked as raw); errors name the flag."""
    if args.length is not None and not 1 <= args.length <= MAX_SIZE:
        raise ValueError(f"--length must be an int in [1, {MAX_SIZE}], got {args.length}")
    try:
        cfg = options.config_from_args(args, energy="raw" if args.energy == "both" else args.energy)
    except ValueError as e:  # (both is checked as its raw run: an error about the energy names what was given)
        if args.energy == "both" and str(e).endswith(", got raw"):
            raise ValueError(f"{str(e).removesuffix('raw')}both (its runs: raw, then local)") from None
        raise
    _diagnostics.check(args)
    if args.plot_traces is not None:  # (the images are written after the run: never over a file it reads)
        from ..files.lock import check_distinct

        energies = ["raw", "local"] if args.energy == "both" else [args.energy]
        check_distinct({"--plot-traces" + (f" ({e})" if len(energies) > 1 else ""):
                        _diagnostics.energy_path(args.plot_traces, e, energies) for e in energies},
                       {"--init-file": args.init_file, "--hamming-reference": args.hamming_reference,
                        "--model": args.model if args.model and os.path.isfile(args.model) else None,
                        "--classifier": args.classifier})
    return cfg


def _terms(lm: Any, args: argparse.Namespace, inputs: dict, lines: list[str] | None,
           rows: list[int] | None = None) -> list | None:
    """The extra energy terms of --hamming (reference: the --hamming-reference ``lines``, else the --init rows) and
    --classifier; ``rows``: the inputs this process samples (their references, in that order)."""
    count = inputs["init"].shape[0] if "init" in inputs else 1
    names = _energy_terms.reference_names(args, range(count))
    if lines is not None:  # encoded and checked like the start sequences; errors name the line
        references = _energy_terms.padded([_encode(lm, Record(t, w)) for t, w in zip(lines, names)], lm.pad_id)
    else:
        references = inputs.get("init")
    if rows is not None:
        references = None if references is None else references[rows]
        names = None if names is None else [names[r] for r in rows]
    decode = lm.decode if callable(getattr(lm, "decode", None)) else None
    return _energy_terms.extra_energy(_energy_terms.hamming_term(args, references, lm.pad_id, names),
                                      _energy_terms.classifier_term(args, lm.pad_id, decode))


def _shard(inputs: dict, world: Any, pad_id: int) -> tuple[dict, list[int]]:
    """This rank's inputs (cost-balanced: length squared) and their global indices (the RNG's input ids)."""
    from .. import distributed

    if "init" not in inputs:  # one unconditional input: rank 0 samples it
        return (inputs, [0]) if world.is_main else ({}, [])
    init = inputs["init"]
    mine = distributed.shard([float(int((r != pad_id).sum())) ** 2 for r in init], world.size)[world.rank]
    sub = {k: v[mine] for k, v in inputs.items()}
    return sub, mine


def _epoch_line(args: argparse.Namespace, epoch: int, s: dict) -> str:
    return (f"  epoch {epoch + 1:3d}/{args.epochs}  E_raw {s['e_raw_sum'] / s['chains']:10.3f}  "
            f"E_local {s['e_local_sum'] / s['chains']:9.3f}  accept {s['accepted'] / max(s['proposals'], 1):.3f}  "
            f"novel {s['novel'] / max(s['proposals'], 1):.3f}  tau {s['target_temperature']:.3f}")


@dataclasses.dataclass(frozen=True)
class _Job:
    """What every rank knows before sampling: the checked options, the model, all inputs, this rank's share."""

    cfg: Any
    lm: Any
    inputs: dict
    references: list[str] | None  #: the --hamming-reference lines
    terms: list | None
    mine_inputs: dict
    mine: list[int]
    load_seconds: float


def _read_texts(args: argparse.Namespace) -> tuple[list[Record] | None, list[str] | None]:
    """The start sequences (--init, --init-file) and the --hamming-reference lines, each file read once."""
    records = _records(args)
    return records, _energy_terms.reference_lines(args, len(records) if records else 1)


def _prepare(args: argparse.Namespace, world: Any) -> _Job:
    """Every check of options, model and inputs, before any output (the same on every rank; an error that every
    rank sees is reported by rank 0 alone)."""
    from .. import distributed

    with distributed.together(world):
        cfg = _check(args)
    # rank 0 reads the files and hands their text to every rank: a FIFO (``<(cmd)``) gives its lines once (the
    # --hamming-reference was read again for each energy, so ``<(cmd)`` had 0 lines the second time)
    _, (records, references) = distributed.on_main(lambda: _read_texts(args), world, lambda read: read)
    with distributed.together(world):
        return _load_and_check(args, world, cfg, records, references)


def _load_and_check(args: argparse.Namespace, world: Any, cfg: Any, records: list[Record] | None,
                    references: list[str] | None) -> _Job:
    """The model, the inputs and terms made from the read texts, and every model-dependent check."""
    from ..models.loading import load_masked_lm
    from ..sampler.problem import build_problem

    if args.model.startswith(("/", "./", "../", "~")) and not os.path.exists(os.path.expanduser(args.model)):
        raise FileNotFoundError(f"--model: no such model directory: {args.model!r} (give 'antiberty', 'sapiens-h', "
                                "'sapiens-l', a fairseq checkpoint, a local HuggingFace model directory or a hub id)")
    t0 = time.perf_counter()
    lm = load_masked_lm(args.model, device=args.device)
    inputs = _inputs(lm, args, records)
    terms = _terms(lm, args, inputs, references)
    # every model-dependent check (lengths against the model, token ids, sizes) before any output
    build_problem(lm, dataclasses.replace(cfg, extra_energy=terms), **inputs)
    mine_inputs, mine = _shard(inputs, world, int(lm.pad_id))
    return _Job(cfg, lm, inputs, references, terms, mine_inputs, mine, time.perf_counter() - t0)


def run(args: argparse.Namespace) -> int:
    from .. import distributed

    # The world first (torchrun: inputs shared over ranks, rank 0 prints): every error below then ends in an
    # agreement of the ranks (distributed.together), so that the job reports it once.
    world = distributed.world(device=args.device)
    if world.backend == "nccl":
        args.device = str(world.device)
    job = _prepare(args, world)
    lm, live = job.lm, world.size == 1
    say = (lambda *a: None) if args.quiet or not world.is_main else (lambda *a: stdout_print(*a, flush=True))
    say(f"# model {args.model} loaded in {job.load_seconds:.1f} s (vocab {lm.vocab_size})")
    for energy in ["raw", "local"] if args.energy == "both" else [args.energy]:
        say(f"# {args.sampler} on the {energy} energy{' + energy terms' if job.terms else ''}: {args.chains} "
            f"chains, {args.epochs} epochs ({args.burn_in} burn-in), seed {args.seed}")
        t0 = time.perf_counter()
        with distributed.together(world):  # an error in one rank's share: that rank reports it
            terms = _terms(lm, args, job.inputs, job.references, job.mine) if job.mine else None
            part = _sample_part(lm, job.mine_inputs, job.mine, dataclasses.replace(job.cfg, energy=energy,
                                                                                   extra_energy=terms),
                (lambda e, s: say(_epoch_line(args, e, s))) if live else None, _diagnostics.wanted(args))
        parts = distributed.gather({world.rank: part}, world.size, world, dst=0)
        with distributed.together(world):  # rank 0's printing (e.g. to a closed pipe) ends every rank alike
            if world.is_main:
                result = _combine([p for p in parts if p is not None], args, energy, say if not live else None)
                print_result(lm, result, energy, args, time.perf_counter() - t0)
                _report_diagnostics(args, result, energy)
    return 0


def _report_diagnostics(args: argparse.Namespace, result: Any, energy: str) -> None:
    """--diagnostics: the table and a line per input; --plot-traces: the energy traces (one file per energy)."""
    if result.diagnostics is None:
        return
    labels = [f"input {b + 1}" for b in range(len(result.diagnostics))]
    if args.diagnostics:
        print(f"[{energy}] diagnostics of the post-burn-in sweeps (ArviZ: rank-normalized split R-hat, bulk/tail ESS, "
              "MCSE of the mean):", flush=True)
        _diagnostics.print_report(result.diagnostics, labels, args.chains)
    if args.plot_traces:
        path = _diagnostics.energy_path(args.plot_traces, energy, ["raw", "local"] if args.energy == "both"
                                        else [energy])
        _diagnostics.plot_traces(path, [{**e["panel"], "label": label} for e, label in zip(result.diagnostics,
                                                                                           labels)])


def _sample_part(lm: Any, inputs: dict, ids: list[int], cfg: Any, say_epoch: Any, diagnostics: bool = False
                 ) -> dict | None:
    """This rank's share: its inputs' chains and the per-epoch sums and counts (None without inputs); with
    ``diagnostics`` each input's (mhfast.sampler.diagnostics_report.per_input_reports)."""
    import mhfast

    from .. import distributed

    if not ids:
        return None
    epochs: list[dict] = []

    def progress(epoch: int, s: dict) -> None:
        epochs.append(s)
        if say_epoch is not None:
            say_epoch(epoch, s)

    # checking_peers: a peer failed, so stop within an epoch, not after this rank's whole share
    r = mhfast.sample(lm, **inputs, input_ids=ids if "init" in inputs else None, config=cfg,
                      progress=distributed.checking_peers(progress))
    return {"ids": ids, "tokens": r.tokens.cpu(), "energy_raw": r.energy_raw.cpu(), "energy_local": r.energy_local.cpu(),
            "best_tokens": r.best_tokens.cpu(), "best_energy": r.best_energy.cpu(), "model_rows": r.model_rows,
            "compile_seconds": r.compile_seconds, "memo_hits": r.memo_hits, "epochs": epochs,
            **{k: getattr(r, k) for k in DELAYED_COUNTS},
            "with_terms": r.term_names is not None,
            "diagnostics": _reports(r, cfg.energy) if diagnostics else None, "epochs_run": r.epochs_run,
            "converged": r.converged, "ladder": r.ladder, "swap_rate": r.swap_rate, "round_trips": r.round_trips}


def _reports(result: Any, energy: str) -> list[dict]:
    from ..sampler.diagnostics_report import per_input_reports

    return per_input_reports(result, energy)


def _combine(parts: list[dict], args: argparse.Namespace, energy: str, say: Any) -> Any:
    """One result from the ranks' parts: inputs in order, per-epoch rates from the summed counts (the numbers
    one process computes), and the epoch lines (printed after the run under torchrun)."""
    import types

    import torch

    order = sorted((i, p, j) for p in parts for j, i in enumerate(p["ids"]))
    pick = lambda key: torch.stack([p[key][j] for _, p, j in order])  # noqa: E731
    rates = {"acceptance_rate": [], "novel_rate": []}
    for e in range(max(len(p["epochs"]) for p in parts)):  # until_rhat: a rank may stop before the others
        running = [p for p in parts if e < len(p["epochs"])]
        s = {k: sum(p["epochs"][e][k] for p in running) for k in ("chains", "e_raw_sum", "e_local_sum", "proposals",
                                                                   "accepted", "novel")}
        s["target_temperature"] = running[0]["epochs"][e]["target_temperature"]
        if say is not None:
            say(_epoch_line(args, e, s))
        rates["acceptance_rate"].append(float(s["accepted"]) / max(s["proposals"], 1))
        rates["novel_rate"].append(float(s["novel"]) / max(s["proposals"], 1))
    return types.SimpleNamespace(
        tokens=pick("tokens"), energy_raw=pick("energy_raw"), energy_local=pick("energy_local"),
        best_tokens=pick("best_tokens"), best_energy=pick("best_energy"),
        model_rows=sum(p["model_rows"] for p in parts),
        compile_seconds=max(p["compile_seconds"] for p in parts),  # the ranks compile at the same time
        memo_hits=sum(p["memo_hits"] for p in parts), with_terms=parts[0]["with_terms"],
        **{k: sum(p[k] for p in parts) for k in DELAYED_COUNTS},
        diagnostics=[p["diagnostics"][j] for _, p, j in order] if parts[0]["diagnostics"] is not None else None,
        epochs_run=pick("epochs_run"), converged=pick("converged") if parts[0]["converged"] is not None else None,
        **{k: pick(k) if parts[0][k] is not None else None for k in ("ladder", "swap_rate", "round_trips")},
        **{k: torch.tensor(v, dtype=torch.float32) for k, v in rates.items()})


#: SampleResult's delayed-acceptance counters (option delayed), summed over ranks
DELAYED_COUNTS = ("delayed_tested", "delayed_passed", "delayed_accepted", "delayed_rows_saved")


def delayed_stats(result: Any) -> str:
    """The stats line's delayed-acceptance part: each stage's acceptance and the rows saved ('' without it).

    Example:
        >>> import types
        >>> delayed_stats(types.SimpleNamespace(delayed_tested=10, delayed_passed=4, delayed_accepted=3,
        ...                                     delayed_rows_saved=90))
        '  delayed: stage 1 4/10 (0.400), stage 2 3/4 (0.750), rows saved 90'
    """
    tested, passed = getattr(result, "delayed_tested", 0), getattr(result, "delayed_passed", 0)
    if not tested:
        return ""
    accepted = result.delayed_accepted
    return (f"  delayed: stage 1 {passed}/{tested} ({passed / tested:.3f}), stage 2 {accepted}/{passed} "
            f"({accepted / max(passed, 1):.3f}), rows saved {result.delayed_rows_saved}")


def print_result(lm: Any, result: Any, energy: str, args: argparse.Namespace, seconds: float) -> None:
    """Samples with their energies, the best sample per input, and the run's rates."""
    from ..sampler.result import summary_epochs, target_label

    B, C, _ = result.tokens.shape
    first, which = summary_epochs(args.burn_in, args.epochs)
    acc = float(result.acceptance_rate[first:].mean())
    novel = float(result.novel_rate[first:].mean())
    best = target_label(energy, result.with_terms)  # the best energy includes the weighted terms
    for b in range(B):
        stdout_print(f"[{energy}] input {b + 1}")
        for c in range(C):
            stdout_print(f"  {lm.decode(result.tokens[b, c])}\tE_raw={float(result.energy_raw[b, c]):.3f}\t"
                         f"E_local={float(result.energy_local[b, c]):.3f}")
        stdout_print(f"  best: {lm.decode(result.best_tokens[b])}\t{best}={float(result.best_energy[b]):.3f}")
        if getattr(result, "converged", None) is not None:  # --until-rhat / --min-ess
            stdout_print(f"  {'converged' if bool(result.converged[b]) else 'not converged'} after "
                         f"{int(result.epochs_run[b])} epochs")
        if getattr(result, "ladder", None) is not None:  # --tempering
            stdout_print("  " + counters_line(result.ladder[b], result.swap_rate[b], result.round_trips[b]))
    stdout_print(f"[{energy}] acceptance {acc:.3f}  novel {novel:.3f} (mean over {which})  "
                 f"model rows {result.model_rows}"
                 + (f" (memo hits {result.memo_hits})" if result.memo_hits else "") + delayed_stats(result)
                 + f"  {seconds:.1f} s"
                 + (f" (compiling {result.compile_seconds:.1f} s)" if getattr(args, "compile", False) else ""),
                 flush=True)
