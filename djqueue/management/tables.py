"""Plain-text tables the commands print: columns padded to their widest cell."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from django.core.management.base import OutputWrapper


def write_table(out: TextIO | OutputWrapper, header: Sequence[str], lines: Sequence[Sequence[str]]) -> None:
    rows = [tuple(header), *(tuple(line) for line in lines)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        out.write("  ".join(text.ljust(w) for text, w in zip(row, widths, strict=True)).rstrip())


def seconds_text(value: float | None) -> str:
    """Seconds with one decimal, or '-' for none."""
    return "-" if value is None else f"{value:.1f} s"
