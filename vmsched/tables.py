"""Tables for people (rich): readable at 80 columns, as wide as the terminal allows.

Short columns (ids, states, times) keep their width and never wrap; the free-text columns (names,
reasons, histories) fold onto more lines; when even that does not fit, the least important columns
are left out and named under the table (every column stays available with --format and --json).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

FLEX_MIN = 10  # the narrowest a folding column gets


@dataclass(frozen=True)
class Column:
    header: str
    flexible: bool = False  # free text: may fold onto several lines
    drop: int = 0  # > 0: may be left out when the table does not fit, the highest first


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, title: str | None = None,
                 hint: str = "see --format, --json") -> RenderableType:  # fmt: skip
    natural = [max([len(c.header), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]

    def need(keep: list[int]) -> int:
        return sum(min(natural[i], FLEX_MIN) if columns[i].flexible else natural[i] for i in keep) + len(keep)

    keep = list(range(len(columns)))
    for i in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop):
        if need(keep) <= width:
            break
        keep.remove(i)
    t = Table(box=None, padding=(0, 1, 0, 0), title=title, header_style="bold")  # one space between columns
    for i in keep:
        c = columns[i]
        t.add_column(c.header, no_wrap=not c.flexible, overflow="fold",
                     min_width=min(natural[i], FLEX_MIN) if c.flexible else natural[i])  # fmt: skip
    for r in rows:
        t.add_row(*(Text(r[i]) for i in keep))
    left_out = [columns[i].header for i in range(len(columns)) if i not in keep]
    if not left_out:
        return t
    return Group(t, Text(f"(left out at {width} columns: {', '.join(left_out)}; {hint})", style="dim"))


def console() -> Console:
    """The terminal's width; when piped, $COLUMNS if set, else wide enough for any of our tables."""
    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else 200)
