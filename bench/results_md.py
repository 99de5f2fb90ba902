"""bench/RESULTS.md is shared by several benchmark scripts: each owns one section between its markers."""
from __future__ import annotations

import re
from pathlib import Path

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
