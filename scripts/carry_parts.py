"""Split a folder too big for one device call into parts that travel in successive calls, and join them there.

The device tool carries at most 64 MiB per call (the working tree included: ~26 MB here), so the antiberty
package's 104 MB of weights never reached a GPU. Ignored paths a call leaves in the repository stay there for the
next call on the same warm machine, so the parts can travel one per call and be joined by the last one:

    python3 scripts/carry_parts.py split .venv/lib/python3.11/site-packages/antiberty --into .ab --parts 3
    # call k (k = 0, 1, 2), back to back so the machine stays warm: carry [".ab/manifest.json", ".ab/part<k>"]
    python3 scripts/carry_parts.py join .ab --to /tmp/site     # in the last call: /tmp/site/antiberty

``split`` writes ``part0 .. part<N-1>`` (a tar of the folder, cut into N pieces of about equal size) and
``manifest.json`` (the folder's name, each part's size and SHA-256, the whole tar's SHA-256). ``join`` checks every
part against the manifest before it extracts anything; a part that is missing (the machine went cold between calls,
so a fresh one lacks the earlier parts) or differs is an error naming it: one line, exit 2.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path


class PartsError(Exception):
    """A part is missing or differs from the manifest, or an argument is wrong (the message names which)."""


def split(folder: Path, into: Path, parts: int) -> dict:
    """Write ``into/part0 ..`` and ``into/manifest.json`` for ``folder``; returns the manifest.

    Example:
        >>> import tempfile; d = Path(tempfile.mkdtemp()); (d / "pkg").mkdir()
        >>> _ = (d / "pkg" / "w").write_bytes(b"x" * 9)
        >>> [p["size"] > 0 for p in split(d / "pkg", d / "out", 2)["parts"]]
        [True, True]
    """
    if not folder.is_dir():
        raise PartsError(f"folder: {folder} is not a directory")
    if parts < 1:
        raise PartsError(f"--parts: must be at least 1, got {parts}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=folder.name)
    blob = buf.getvalue()
    into.mkdir(parents=True, exist_ok=True)
    for old in into.glob("part*"):  # (a part left from an earlier split of other sizes would not be overwritten)
        old.unlink()
    step = -(-len(blob) // parts)
    manifest = {"name": folder.name, "sha256": hashlib.sha256(blob).hexdigest(), "parts": []}
    for k in range(parts):
        piece = blob[k * step:(k + 1) * step]
        (into / f"part{k}").write_bytes(piece)
        manifest["parts"].append({"file": f"part{k}", "size": len(piece), "sha256": hashlib.sha256(piece).hexdigest()})
    (into / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def join(parts_dir: Path, to: Path) -> Path:
    """Check the parts in ``parts_dir`` against its manifest, then extract the folder under ``to``; returns it."""
    manifest_path = parts_dir / "manifest.json"
    if not manifest_path.is_file():
        raise PartsError(f"parts: {manifest_path} is missing (was it carried?)")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    missing = [p["file"] for p in manifest["parts"] if not (parts_dir / p["file"]).is_file()]
    if missing:
        raise PartsError(f"parts: {', '.join(missing)} missing from {parts_dir} (carried in an earlier call to a "
                         "machine that has since gone cold?)")
    pieces = []
    for p in manifest["parts"]:
        piece = (parts_dir / p["file"]).read_bytes()
        if len(piece) != p["size"] or hashlib.sha256(piece).hexdigest() != p["sha256"]:
            raise PartsError(f"parts: {parts_dir / p['file']} differs from the manifest (a part of another split?)")
        pieces.append(piece)
    blob = b"".join(pieces)
    if hashlib.sha256(blob).hexdigest() != manifest["sha256"]:
        raise PartsError(f"parts: the joined parts in {parts_dir} differ from the manifest's whole")
    to.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
        tar.extractall(to, filter="data")  # ("data": no absolute paths, links out of `to` or device files)
    return to / manifest["name"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split", help="folder -> parts and manifest")
    s.add_argument("folder", type=Path)
    s.add_argument("--into", type=Path, required=True)
    s.add_argument("--parts", type=int, required=True)
    j = sub.add_parser("join", help="parts -> folder, checked")
    j.add_argument("parts_dir", type=Path)
    j.add_argument("--to", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        if args.command == "split":
            manifest = split(args.folder, args.into, args.parts)
            print(f"{args.folder} -> {len(manifest['parts'])} parts in {args.into}: "
                  + ", ".join(f"{p['file']} {p['size'] / 1e6:.1f} MB" for p in manifest["parts"]))
        else:
            print(f"joined: {join(args.parts_dir, args.to)}")
    except PartsError as e:
        print(f"carry_parts.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
