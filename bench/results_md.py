"""bench/RESULTS.md is shared by several benchmark scripts: each owns one section between its markers.

The file opens with a hand-kept summary table (one row per headline figure) above the sections; a script that
re-measures a headline figure should have its row updated by hand. Older tables go to bench/HISTORY.md. Sections are
written with their prose wrapped at 120 characters (tables, headings and code stay as they are).
"""
from __future__ import annotations

import contextlib
import os
import platform
import re
import textwrap
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(start: str, end: str, text: str, path: Path = RESULTS) -> None:
    """Replace the text between ``start`` and ``end`` in ``path`` (append the section if absent).

    Example:
        >>> write_section("<!-- x:start -->", "<!-- x:end -->", "| a | b |")  # doctest: +SKIP
    """
    block = f"{start}\n{wrap_prose(text.rstrip())}\n{end}"
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    if start in old and end in old:
        new = re.sub(re.escape(start) + r".*?" + re.escape(end), lambda _: block, old, flags=re.S)
    else:
        new = old.rstrip() + "\n\n" + block + "\n"
    path.write_text(new)


_RISKY = re.compile(r"([-*+#|>]|\d+[.)])(\s|$)")


def wrap_prose(text: str, width: int = 120) -> str:
    """``text`` with every prose line longer than ``width`` wrapped; tables, headings, HTML and fenced code untouched.

    A wrapped line never starts with what Markdown would read as a list item, heading, quote or table row.

    >>> wrap_prose("a " * 70 + "- b", width=40).splitlines()[1]
    'a a a a a a a a a a a a a a a a a a a a'
    >>> wrap_prose("| " + "x " * 70 + "|") == "| " + "x " * 70 + "|"
    True
    """
    out, fenced = [], False
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("```"):
            fenced = not fenced
        if fenced or stripped.startswith("```") or len(line) <= width or stripped[:1] in ("|", "#", "<"):
            out.append(line)
            continue
        lead = re.match(r"\s*(?:[-*] |\d+\. )?", line).group(0)
        wrapped = textwrap.wrap(line[len(lead):], width, initial_indent=lead, subsequent_indent=" " * len(lead),
                                break_long_words=False, break_on_hyphens=False)
        for i in range(1, len(wrapped)):  # pull words up rather than start a line with a Markdown marker
            while wrapped[i] and _RISKY.match(wrapped[i].lstrip()):
                word, _, rest = wrapped[i].strip().partition(" ")
                wrapped[i - 1] += " " + word
                wrapped[i] = " " * len(lead) + rest if rest else ""
            if not wrapped[i]:  # all of it pulled up: the line before takes the next one's place
                wrapped[i], wrapped[i - 1] = wrapped[i - 1], ""
        out.extend(w for w in wrapped if w)
    return "\n".join(out)


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
