"""Score a CMLM checkpoint with Mask-Predict on Multi30k test_2016_flickr (sacreBLEU).

Decoding is fairseq's own ``IterativeRefinementGenerator`` (no mhfast code involved), so this
script is the independent yardstick for the bundled model:

* ``--iterations 10`` = 10 decoder passes, as in Mask-Predict (Ghazvininejad et al. 2019, T=10).
  fairseq counts refinement steps AFTER the first pass, so it receives ``max_iter = iterations - 1``
  (this is what fairseq's CMLM README calls "--iter-decode-max-iter 9");
  ``adaptive=False`` forces all passes, as in the paper (fairseq-generate's default stops early on a loop).
* ``--length-beam 3`` = 3 length candidates per sentence, best mean token log-prob wins.
* Hypotheses are detokenized with ``sp.decode`` and scored against the RAW references.

Example::

    python3 training/evaluate_mask_predict.py --checkpoint /work/train_run/checkpoints/checkpoint_last.pt \\
        --dict-dir /work/train_run/data-bin --spm /work/train_run/spm.model
    python3 training/evaluate_mask_predict.py --bundle mhfast/data/multi30k_de_en
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path

import sacrebleu
import sentencepiece as spm
import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq.iterative_refinement_generator import IterativeRefinementGenerator

RAW = Path("/work/shared/data/multi30k")


def read_text(path: Path) -> list[str]:
    """Read plain or gzip text, one sentence per line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def load_cmlm(checkpoint: Path, dict_dir: Path):
    """Load (model, task) in fp32 eval mode; dictionaries are read from ``dict_dir``.

    fairseq calls ``torch.load`` without ``weights_only``; since torch 2.6 that means weights_only=True,
    which rejects raw fairseq TRAINING checkpoints (they pickle an argparse.Namespace and logging meters).
    These are our own files, so full unpickling is allowed for this one call; exported bundles
    (export_model.py) load either way.
    """
    previous = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(checkpoint)], arg_overrides={"data": str(dict_dir)}
        )
    finally:
        if previous is None:
            del os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = previous
    model = models[0].float().eval()  # a half-precision bundle is decoded in fp32 on CPU
    return model, task


def encode_sources(sentences: list[str], sp: spm.SentencePieceProcessor, src_dict) -> list[torch.Tensor]:
    """Raw text -> [bos] + pieces + [eos], exactly as translation_lev saw sources in training."""
    out = []
    for pieces in sp.encode(sentences, out_type=str):
        ids = src_dict.encode_line(" ".join(pieces), add_if_not_exist=False, append_eos=True).long()
        out.append(torch.cat([torch.tensor([src_dict.bos()]), ids]))
    return out


def translate(model, task, sp, sentences: list[str], iterations: int, length_beam: int, batch_size: int) -> list[str]:
    """Mask-Predict translate ``sentences`` (raw German) into detokenized English."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    generator = IterativeRefinementGenerator(
        tgt_dict, eos_penalty=0.0, max_iter=iterations - 1, beam_size=length_beam, adaptive=False
    )
    sources = encode_sources(sentences, sp, src_dict)
    special = {tgt_dict.bos(), tgt_dict.eos(), tgt_dict.pad()}
    hyps: list[str] = []
    for start in range(0, len(sources), batch_size):
        chunk = sources[start : start + batch_size]
        src_tokens = data_utils.collate_tokens(chunk, src_dict.pad(), src_dict.eos(), left_pad=True)
        sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": torch.tensor([len(s) for s in chunk])}}
        for best in generator.generate([model], sample):
            ids = [int(t) for t in best[0]["tokens"] if int(t) not in special]
            hyps.append(sp.decode([tgt_dict[i] for i in ids]))
    return hyps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, help="exported folder (model.pt, dict.*.txt, spm.model, test files)")
    parser.add_argument("--checkpoint", type=Path)
    parser.add_argument("--dict-dir", type=Path, help="folder with dict.de.txt / dict.en.txt")
    parser.add_argument("--spm", type=Path)
    parser.add_argument("--src", type=Path, default=RAW / "test_2016_flickr.de.gz")
    parser.add_argument("--ref", type=Path, default=RAW / "test_2016_flickr.en.gz")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--length-beam", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    parser.add_argument("--limit", type=int, default=0, help="score only the first N sentences (0 = all)")
    parser.add_argument("--hyp-out", type=Path, help="write detokenized hypotheses here")
    args = parser.parse_args(argv)
    if args.bundle is not None:
        args.checkpoint = args.checkpoint or args.bundle / "model.pt"
        args.dict_dir = args.dict_dir or args.bundle
        args.spm = args.spm or args.bundle / "spm.model"
    if args.checkpoint is None or args.dict_dir is None or args.spm is None:
        parser.error("give --bundle, or --checkpoint with --dict-dir and --spm")
    if args.iterations < 1 or args.length_beam < 1:
        parser.error("--iterations and --length-beam must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    model, task = load_cmlm(args.checkpoint, args.dict_dir)
    sp = spm.SentencePieceProcessor(model_file=str(args.spm))
    sources, refs = read_text(args.src), read_text(args.ref)
    if len(sources) != len(refs):
        raise ValueError(f"{args.src}: {len(sources)} lines but {args.ref}: {len(refs)} lines")
    if args.limit:
        sources, refs = sources[: args.limit], refs[: args.limit]

    start = time.perf_counter()
    hyps = translate(model, task, sp, sources, args.iterations, args.length_beam, args.batch_size)
    seconds = time.perf_counter() - start
    if args.hyp_out is not None:
        args.hyp_out.write_text("\n".join(hyps) + "\n", encoding="utf-8")

    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(hyps, [refs])
    print(f"checkpoint: {args.checkpoint}")
    print(f"mask-predict: iterations={args.iterations} length_beam={args.length_beam} sentences={len(hyps)} "
          f"decode_seconds={seconds:.1f}")
    for i in range(min(3, len(hyps))):
        print(f"  SRC: {sources[i]}\n  HYP: {hyps[i]}\n  REF: {refs[i]}")
    print(f"{score}")
    print(f"signature: {bleu.get_signature()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
