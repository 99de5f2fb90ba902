"""Builds the tiny fairseq CMLM the fairseq tests use: data slice, fairseq-preprocess, fairseq-train.

A real (if small) ``cmlm_transformer`` trained exactly as fairseq's CMLM recipe does (task
``translation_lev``, ``--noise random_mask``, ``nat_loss``), only tiny: 2+2 layers, d=64, a few
hundred updates on ~2000 German->English Multi30k pairs whose words are all among the 800 most
frequent of each side (a small vocabulary trains fast and gives peaked conditionals). Tokenization
is lower-cased words and punctuation (``tokenize``), with a joint dictionary and no frequency
threshold, so training targets never contain ``<unk>`` (the CMLM's mask symbol).

Usable by hand too: ``python tests/fairseq_tiny_cmlm.py OUT_DIR`` trains into OUT_DIR.
"""
from __future__ import annotations

import collections
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

#: ``shared/`` lies beside the repository (CI clones the repo with shared/ next to it).
SHARED = Path(__file__).resolve().parents[1] / ".." / "shared"
MULTI30K = SHARED / "data" / "multi30k"

TOP_WORDS = 800
MAX_WORDS = 14
NUM_PAIRS = 2000
TRAIN_ARGS = [
    "--task", "translation_lev", "--noise", "random_mask", "--arch", "cmlm_transformer",
    "--criterion", "nat_loss", "--label-smoothing", "0.1", "--length-loss-factor", "0.1",
    "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
    "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
    "--share-all-embeddings", "--encoder-learned-pos", "--decoder-learned-pos", "--apply-bert-init",
    "--max-source-positions", "64", "--max-target-positions", "64", "--dropout", "0.1",
    "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "0.003", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "30", "--max-tokens", "1024", "--max-update", "250",
    "--cpu", "--disable-validation", "--no-epoch-checkpoints", "--seed", "1",
    "--log-format", "simple", "--log-interval", "50", "--num-workers", "0",
]


def tokenize(line: str) -> str:
    """Lower-cased words and punctuation marks separated by spaces: 'Ein Hund.' -> 'ein hund .'"""
    return " ".join(re.findall(r"\w+|[^\w\s]", line.lower()))


def require_multi30k() -> Path:
    """The Multi30k folder, or a FileNotFoundError that says where it was looked for and why it is needed: the one
    thing the suite needs from outside the checkout, so its absence fails loudly instead of skipping tests."""
    if not MULTI30K.is_dir():
        raise FileNotFoundError(f"the suite needs Multi30k (a tiny CMLM is trained on it; the bundled test files are "
                                f"checked against it), expected in {MULTI30K.resolve()}: clone the repository beside "
                                "the project's shared/ folder, as CI does")
    return MULTI30K


def _read(split: str, lang: str) -> list[str]:
    with gzip.open(require_multi30k() / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [tokenize(line) for line in f]


def select_pairs() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train pairs, held-out validation pairs) of short sentences made of frequent words."""
    de, en = _read("train", "de"), _read("train", "en")
    top = [{w for w, _ in collections.Counter(w for s in side for w in s.split()).most_common(TOP_WORDS)}
           for side in (de, en)]

    def fits(pair: tuple[str, str]) -> bool:
        return all(len(s.split()) <= MAX_WORDS and set(s.split()) <= vocab for s, vocab in zip(pair, top))

    train = [p for p in zip(de, en) if fits(p)][:NUM_PAIRS]
    valid = [p for p in zip(_read("val", "de"), _read("val", "en")) if fits(p)]
    return train, valid


def _config_key() -> str:
    blob = json.dumps([TOP_WORDS, MAX_WORDS, NUM_PAIRS, TRAIN_ARGS])
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def build(out_dir: str | os.PathLike) -> dict[str, Path]:
    """Train the tiny CMLM into ``out_dir`` (reused when already built with the same config).

    Returns paths: ``checkpoint``, ``data`` (fairseq-preprocess dir), ``valid_de``/``valid_en``
    (held-out tokenized sentences).
    """
    out = Path(out_dir) / f"cmlm-{_config_key()}"
    paths = {"checkpoint": out / "ckpt" / "checkpoint_last.pt", "data": out / "bin",
             "valid_de": out / "valid.de", "valid_en": out / "valid.en"}
    if paths["checkpoint"].is_file():
        return paths
    out.mkdir(parents=True, exist_ok=True)
    train, valid = select_pairs()
    for split, pairs in (("train", train), ("valid", valid)):
        for i, lang in enumerate(("de", "en")):
            (out / f"{split}.{lang}").write_text("".join(p[i] + "\n" for p in pairs), encoding="utf-8")
    # One thread: faster than two threads fighting other jobs on a shared 2-core machine.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    run = [sys.executable, "-m"]
    subprocess.run(run + ["fairseq_cli.preprocess", "--source-lang", "de", "--target-lang", "en",
                          "--trainpref", str(out / "train"), "--validpref", str(out / "valid"),
                          "--destdir", str(paths["data"]), "--joined-dictionary", "--workers", "1"],
                   check=True, env=env, capture_output=True)
    tmp_ckpt = out / "ckpt.partial"
    log = subprocess.run(run + ["fairseq_cli.train", str(paths["data"]), *TRAIN_ARGS, "--save-dir", str(tmp_ckpt)],
                         env=env, capture_output=True, text=True)
    (out / "train.log").write_text(log.stdout + log.stderr)
    if log.returncode != 0:
        raise RuntimeError(f"fairseq-train failed (exit {log.returncode}); see {out / 'train.log'}")
    tmp_ckpt.rename(out / "ckpt")  # only a finished training counts as cached
    return paths


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else "."))
