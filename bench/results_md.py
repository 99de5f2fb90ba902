"""bench/RESULTS.md is shared by several benchmark scripts: each owns one section between its markers."""
from __future__ import annotations

import contextlib
import os
import platform
import re
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(start: str, end: str, text: str, path: Path = RESULTS) -> None:
    """Replace the text between ``start`` and ``end`` in ``path`` (append the section if absent).

    Example:
        >>> write_section("<!-- x:start -->", "<!-- x:end -->", "| a | b |")  # doctest: +SKIP
    """
    block = f"{start}\n{text.rstrip()}\n{end}"
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    if start in old and end in old:
        new = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: block, old, flags=re.S)
    else:
        new = old.rstrip() + "\n\n" + block + "\n"
    path.write_text(new)


def read_section(start: str, end: str, path: Path = RESULTS) -> str:
    """The text between ``start`` and ``end`` in ``path`` ("" if the section is absent), for a script that
    re-measures part of its section and keeps the rest."""
    old = path.read_text() if path.exists() else ""
    if start not in old or end not in old:
        return ""
    return old[old.index(start) + len(start):old.index(end)].strip("\n") + "\n"


def machine_description(device: str = "cpu") -> str:
    """The machine a benchmark ran on: CPU model, cores, torch, threads, load (and the GPU on cuda)."""
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    text = (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, "
            f"{torch.get_num_threads()} intra-op threads, load average {os.getloadavg()[0]:.1f} "
            "at the end of the run (above ~0.5 the CPU numbers are noisy)")
    if device == "cuda":
        text += f"; GPU: {torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    return text
