"""The app catalogue: one entry per app, the single place that says which rank counts an app allows.

Importing this module does not import NumPy or MPI, so the launcher can use it cheaply.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from vmsched.apps.variants import parse_variant

CommDegree = Literal["low", "medium", "high"]


def _any(n: int) -> bool:
    return True


def _pow2(n: int) -> bool:
    return n & (n - 1) == 0


def _square(n: int) -> bool:
    return math.isqrt(n) ** 2 == n


# rule name -> (predicate, words for error messages)
RULES: dict[str, tuple[Callable[[int], bool], str]] = {
    "any": (_any, "any number of ranks"),
    "pow2": (_pow2, "a power-of-two number of ranks"),
    "square": (_square, "a perfect-square number of ranks"),
}


@dataclass(frozen=True)
class AppSpec:
    name: str
    module: str
    classes: tuple[str, ...]
    rule: str  # key of RULES
    max_ranks: int
    comm_degree: CommDegree
    balanced: bool  # for send: of the family (see is_balanced for a given variant)
    description: str
    options: tuple[str, ...] = ()  # extra command-line options (without dashes, '_' for '-')

    def allowed(self, n: int) -> bool:
        return 1 <= n <= self.max_ranks and RULES[self.rule][0](n)

    def allowed_text(self) -> str:
        return f"{RULES[self.rule][1]} from 1 to {self.max_ranks}"


_CLASSES = ("S", "W", "A", "B")

SPECS: dict[str, AppSpec] = {
    s.name: s
    for s in (
        AppSpec("ep", "vmsched.apps.ep", _CLASSES, "any", 64, "low", True,
                "Embarrassingly parallel Gaussian pairs (NAS EP-like): counts in square annuli, sums."),
        AppSpec("cg", "vmsched.apps.cg", _CLASSES, "pow2", 64, "high", True,
                "Conjugate gradient on a random sparse SPD matrix with long-distance couplings "
                "(shifted-block point-to-point exchanges)."),
        AppSpec("mg", "vmsched.apps.mg", ("S", "W", "A"), "pow2", 64, "medium", True,
                "3-D periodic Poisson multigrid V-cycles with slab halo exchange and coarse-grid agglomeration."),
        AppSpec("ft", "vmsched.apps.ft", _CLASSES, "pow2", 64, "medium", True,
                "3-D FFT heat-equation solver (NAS FT-like) with all-to-all slab transposes."),
        AppSpec("sweep", "vmsched.apps.sweep", ("S", "W", "A"), "any", 64, "high", True,
                "Sweep3D/LU-like wavefront: upwind transport sweeps pipelined over a 2-D rank grid."),
        AppSpec("btmz", "vmsched.apps.btmz", _CLASSES, "square", 64, "medium", False,
                "BT-MZ-like: zones of geometrically growing size, static block mapping (imbalanced)."),
        AppSpec("send", "vmsched.apps.send", ("S", "W", "A"), "any", 64, "medium", False,
                "Thesis synthetic 'send': compute, even/odd pair exchange, barrier; --variant PCTxK "
                "makes PCT % of the ranks compute K times longer (0x1 = balanced).",
                ("variant", "iters", "seconds", "heavy_iters", "heavy_s")),
        AppSpec("ring", "vmsched.apps.ring", ("S", "W", "A"), "any", 64, "high", True,
                "Latency app: token ring or pairwise ping-pong of small messages.", ("mode", "iters", "size")),
    )
}  # fmt: skip


def get_spec(app: str) -> AppSpec:
    try:
        return SPECS[app]
    except KeyError:
        raise ValueError(f"unknown app {app!r}; known apps: {', '.join(SPECS)}") from None


def is_allowed(app: str, n: int) -> bool:
    """True when `app` may run with `n` ranks."""
    return get_spec(app).allowed(n)


def allowed_counts(app: str, max_ranks: int) -> list[int]:
    """Rank counts `app` allows, ascending, up to `max_ranks` (for moldable jobs)."""
    spec = get_spec(app)
    return [n for n in range(1, min(max_ranks, spec.max_ranks) + 1) if spec.allowed(n)]


def split_name(name: str) -> tuple[str, dict[str, str]]:
    """Split a thesis-style name such as 'send.50x2' into ('send', {'variant': '50x2'})."""
    app, dot, variant = name.partition(".")
    get_spec(app)
    if not dot:
        return app, {}
    if app != "send":
        raise ValueError(f"only the send app takes a variant suffix, not {name!r}")
    return app, {"variant": variant}


def is_balanced(name: str) -> bool:
    """Balance of an app name such as 'cg' or 'send.50x2': send is balanced exactly in its 0x1 variant."""
    app, opts = split_name(name)
    if app == "send":
        return parse_variant(opts.get("variant", "0x1"))[0] == 0
    return get_spec(app).balanced


def command(app: str, cls: str, **opts: object) -> list[str]:
    """The argv to run after ``mpiexec -n N``: ``[python, -m, vmsched.apps.x, --class, cls, --opt, value...]``."""
    spec = get_spec(app)
    if cls not in spec.classes:
        raise ValueError(f"app {app!r} has no class {cls!r}; classes: {', '.join(spec.classes)}")
    argv = [sys.executable, "-m", spec.module, "--class", cls]
    for key, value in opts.items():
        if key not in spec.options:
            raise ValueError(f"app {app!r} has no option {key!r}; options: {', '.join(spec.options) or 'none'}")
        if key == "variant":
            parse_variant(str(value))  # a bad variant fails here, before any job is started
        argv += ["--" + key.replace("_", "-"), str(value)]
    return argv
