"""Prepare Multi30k De->En for fairseq's ``translation_lev`` task (CMLM training).

Steps (all deterministic):

1. read the raw gzip splits from ``--data`` (one untokenized sentence per line);
2. learn ONE joint De+En SentencePiece unigram model on the TRAIN split only
   (fixed seed, vocabulary ``--vocab-size``); no Moses tokenization is needed
   because SentencePiece works on raw text and ``sp.decode`` is an exact
   detokenizer, so sacreBLEU can score against the raw references;
3. write subword files ``{train,valid,test}.{de,en}`` (valid = val, test = test_2016_flickr);
4. run ``fairseq-preprocess --joined-dictionary`` into ``<work>/data-bin``.

Example::

    python3 training/prepare_multi30k.py --data /work/shared/data/multi30k --work /work/train_run
"""
from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
from pathlib import Path

import sentencepiece as spm

SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
LANGS = ("de", "en")


def read_lines(path: Path) -> list[str]:
    """Read a gzip text file, one sentence per line (trailing newline stripped)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def train_sentencepiece(train_text: Path, prefix: Path, vocab_size: int, seed: int) -> None:
    """Learn the joint unigram model; fixed seed and single thread for reproducibility."""
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        input=str(train_text),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        # fairseq builds its own dictionary with <s>,<pad>,</s>,<unk>; SentencePiece's
        # control symbols would only add unused entries, so keep just <unk>.
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        unk_id=0,
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/multi30k"))
    parser.add_argument("--work", type=Path, default=Path("/work/train_run"))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)

    work: Path = args.work
    sub_dir = work / "spm_text"
    sub_dir.mkdir(parents=True, exist_ok=True)

    raw = {(split, lang): read_lines(args.data / f"{name}.{lang}.gz") for split, name in SPLITS.items() for lang in LANGS}
    for split in SPLITS:
        n_de, n_en = len(raw[split, "de"]), len(raw[split, "en"])
        if n_de != n_en:
            raise ValueError(f"split {split!r}: {n_de} German vs {n_en} English lines")

    joint_train = work / "train.joint.txt"
    joint_train.write_text("\n".join(raw["train", "de"] + raw["train", "en"]) + "\n", encoding="utf-8")
    prefix = work / "spm"
    train_sentencepiece(joint_train, prefix, args.vocab_size, args.seed)
    sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")

    for (split, lang), lines in raw.items():
        pieces = sp.encode(lines, out_type=str)
        (sub_dir / f"{split}.{lang}").write_text("\n".join(" ".join(p) for p in pieces) + "\n", encoding="utf-8")

    cmd = [
        "fairseq-preprocess", "--source-lang", "de", "--target-lang", "en",
        "--trainpref", str(sub_dir / "train"), "--validpref", str(sub_dir / "valid"),
        "--testpref", str(sub_dir / "test"), "--destdir", str(work / "data-bin"),
        "--joined-dictionary", "--workers", str(args.workers),
    ]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
