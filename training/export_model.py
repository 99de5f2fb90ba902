"""Export the trained CMLM into the bundle ``mhfast/data/multi30k_de_en/``.

* averages the parameters of the last ``--num`` update checkpoints (``checkpoint_<epoch>_<update>.pt``,
  same arithmetic as fairseq's ``scripts/average_checkpoints.py``: a plain mean in fp32);
* drops the optimizer state (only ``cfg``, ``model``, a slim ``optimizer_history`` and
  ``extra_state`` stay, which is all ``fairseq.checkpoint_utils`` needs to load it);
* stores the weights in fp16 unless ``--fp32`` (check BLEU with evaluate_mask_predict.py: decoding
  upcasts to fp32, so the only loss is the fp16 rounding of the weights);
* copies the dictionaries, the SentencePiece model and the raw test_2016_flickr pair.

Example::

    python3 training/export_model.py --checkpoints /work/train_run/checkpoints --num 3
    python3 training/evaluate_mask_predict.py --bundle mhfast/data/multi30k_de_en
"""
from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
from pathlib import Path

import torch

BUNDLE = Path(__file__).resolve().parent.parent / "mhfast" / "data" / "multi30k_de_en"
RAW = Path("/work/shared/data/multi30k")
_UPDATE_CKPT = re.compile(r"checkpoint_\d+_(\d+)\.pt$")


def last_update_checkpoints(folder: Path, num: int) -> list[Path]:
    """The ``num`` checkpoints with the highest update counts, oldest first."""
    found = sorted(
        (int(m.group(1)), p) for p in folder.glob("checkpoint_*_*.pt") if (m := _UPDATE_CKPT.search(p.name))
    )
    if not found:
        raise FileNotFoundError(f"no checkpoint_<epoch>_<update>.pt in {folder}")
    return [p for _, p in found[-num:]]


def average_states(paths: list[Path]) -> dict:
    """Return the last checkpoint's state with its model replaced by the fp32 mean over ``paths``."""
    total: dict[str, torch.Tensor] = {}
    state = None
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=False)
        for name, tensor in state["model"].items():
            value = tensor.float()
            total[name] = total[name] + value if name in total else value.clone()
    assert state is not None
    averaged = {name: t / len(paths) for name, t in total.items()}
    # --share-all-embeddings ties encoder/decoder embeddings and the output projection to ONE tensor;
    # keep them aliased so torch.save writes the 8008x256 matrix once instead of three times.
    first_name_of_storage: dict[int, str] = {}
    for name, tensor in state["model"].items():
        owner = first_name_of_storage.setdefault(tensor.data_ptr(), name)
        if owner != name:
            averaged[name] = averaged[owner]
    state["model"] = averaged
    return state


def plain_cfg(cfg: dict) -> dict:
    """fairseq stores the legacy model args as an ``argparse.Namespace`` inside ``cfg``; torch>=2.6
    ``torch.load`` (weights_only=True, which fairseq's loader gets by default) refuses that class.
    A plain dict with the same keys (``_name`` included) loads safely and builds the same model."""
    cfg = dict(cfg)
    for key, value in cfg.items():
        if isinstance(value, argparse.Namespace):
            cfg[key] = dict(vars(value))
    return cfg


def slim_state(state: dict, half: bool) -> dict:
    """Keep only what loading needs; no optimizer moments (they would triple the size)."""
    history = [{k: v for k, v in h.items() if k != "optimizer"} for h in state.get("optimizer_history", [])[-1:]]
    train_iterator = state.get("extra_state", {}).get("train_iterator")
    converted: dict[int, torch.Tensor] = {}  # id(fp32 tensor) -> its fp16 copy, so aliases stay aliases
    model = {}
    for name, tensor in state["model"].items():
        if half and tensor.is_floating_point():
            tensor = converted.setdefault(id(tensor), tensor.half())
        model[name] = tensor
    return {
        "cfg": plain_cfg(state["cfg"]),
        "model": model,
        "optimizer_history": history,
        "extra_state": {"train_iterator": train_iterator},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoints", type=Path, default=Path("/work/train_run/checkpoints"))
    parser.add_argument("--inputs", type=Path, nargs="*", help="explicit checkpoint files (instead of --num)")
    parser.add_argument("--num", type=int, default=3, help="average the last NUM update checkpoints")
    parser.add_argument("--work", type=Path, default=Path("/work/train_run"), help="has data-bin/ and spm.model")
    parser.add_argument("--out", type=Path, default=BUNDLE)
    parser.add_argument("--fp32", action="store_true", help="keep fp32 weights")
    args = parser.parse_args(argv)

    paths = args.inputs or last_update_checkpoints(args.checkpoints, args.num)
    print("averaging:", *[p.name for p in paths])
    state = slim_state(average_states(paths), half=not args.fp32)

    args.out.mkdir(parents=True, exist_ok=True)
    torch.save(state, args.out / "model.pt")
    for lang in ("de", "en"):
        shutil.copyfile(args.work / "data-bin" / f"dict.{lang}.txt", args.out / f"dict.{lang}.txt")
        with gzip.open(RAW / f"test_2016_flickr.{lang}.gz", "rb") as src, open(
            args.out / f"test_2016_flickr.{lang}", "wb"
        ) as dst:
            shutil.copyfileobj(src, dst)
    shutil.copyfile(args.work / "spm.model", args.out / "spm.model")
    total = sum(p.stat().st_size for p in args.out.iterdir() if p.is_file())
    print(f"wrote {args.out} ({total / 2**20:.1f} MiB)")
    if total >= 40 * 2**20:
        print("WARNING: bundle is >= 40 MiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
