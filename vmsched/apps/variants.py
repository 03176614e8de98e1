"""The send app's load-imbalance variants, PCTxK (pure: no MPI, so the registry can check them)."""

from __future__ import annotations

import re

_VARIANT = re.compile(r"^(\d{1,3})x(\d{1,2})$")


def parse_variant(text: str) -> tuple[int, int]:
    """'50x2' -> (50, 2): PCT % of the ranks compute K times longer. ValueError for anything else.

    PCT is 0..100 and K 1..99; PCT = 0 exactly when K = 1 ('0x1' is the balanced default).
    """
    m = _VARIANT.match(text)
    if not m:
        raise ValueError(f"bad variant {text!r}: expected PCTxK such as 50x2 (PCT % of ranks K times longer)")
    pct, k = int(m.group(1)), int(m.group(2))
    if pct > 100 or k < 1 or (pct == 0) != (k == 1):
        raise ValueError(f"bad variant {text!r}: need 0 <= PCT <= 100, K >= 1, and PCT = 0 exactly when K = 1")
    return pct, k


def is_heavy(rank: int, pct: int) -> bool:
    """Whether `rank` is one of the PCT % slow ranks, spread evenly (50 % = the odd ranks, as in the thesis)."""
    return (rank + 1) * pct // 100 > rank * pct // 100


def heavy_ranks(size: int, pct: int) -> list[int]:
    return [r for r in range(size) if is_heavy(r, pct)]
