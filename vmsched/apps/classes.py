"""Problem sizes per app and class, and a relative work figure used to extrapolate run times.

Sizes are chosen so that on the 2-CPU development machine with 4 ranks class S takes about 1 s,
W about 10 s and A about 60 s (see README.md for the measured table). Pure data: no MPI import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Ep:
    chunks: int  # candidate pairs = chunks * 2**16


@dataclass(frozen=True)
class Cg:
    log2_n: int  # matrix order 2**log2_n
    offsets: int  # couplings at +-offset: 2*offsets off-diagonals per row
    solves: int  # right-hand sides solved one after another
    shift: float = 1.0  # smallest eigenvalue of the matrix


@dataclass(frozen=True)
class Mg:
    n: int  # grid n**3, power of two
    cycles: int  # V-cycles


@dataclass(frozen=True)
class Ft:
    n0: int
    n1: int
    n2: int
    iters: int


@dataclass(frozen=True)
class Sweep:
    nx: int
    ny: int
    groups: int  # independent lines per cell (energy groups)
    group_block: int  # groups per pipelined message block
    angles: int  # angles per quadrant
    iters: int  # source iterations


@dataclass(frozen=True)
class Btmz:
    zones_x: int
    zones_y: int
    nx: int  # cells along x, all zones (zone widths grow geometrically)
    ny: int  # cells along y
    nz: int
    steps: int


@dataclass(frozen=True)
class Send:
    elems: int  # global work vector
    steps: int  # logistic-map steps per element per iteration (light ranks)
    iters: int
    msg: int  # doubles exchanged between a rank pair per iteration


@dataclass(frozen=True)
class Ring:
    iters: int  # laps (ring) or round trips (pingpong)


SIZES: dict[str, dict[str, object]] = {
    "ep": {"S": Ep(256), "W": Ep(2560), "A": Ep(15360), "B": Ep(61440)},
    "cg": {"S": Cg(15, 6, 4), "W": Cg(18, 6, 8), "A": Cg(20, 6, 12), "B": Cg(22, 6, 16)},
    "mg": {"S": Mg(128, 6), "W": Mg(256, 5), "A": Mg(256, 30)},
    "ft": {
        "S": Ft(128, 128, 128, 20),
        "W": Ft(256, 256, 128, 30),
        "A": Ft(256, 256, 256, 80),
        "B": Ft(512, 256, 256, 160),
    },
    "sweep": {
        "S": Sweep(64, 64, 64, 8, 4, 8),
        "W": Sweep(128, 128, 64, 8, 4, 24),
        "A": Sweep(256, 256, 64, 8, 6, 24),
    },
    "btmz": {
        "S": Btmz(8, 8, 128, 64, 24, 200),
        "W": Btmz(8, 8, 512, 256, 48, 350),
        "A": Btmz(8, 8, 1024, 512, 48, 525),
        "B": Btmz(8, 8, 1024, 512, 96, 1050),
    },
    "send": {
        "S": Send(1 << 18, 50, 75, 4096),
        "W": Send(1 << 20, 50, 120, 16384),
        "A": Send(1 << 21, 50, 360, 65536),
    },
    "ring": {"S": Ring(10000), "W": Ring(150000), "A": Ring(900000)},
}


def params(app: str, cls: str) -> object:
    return SIZES[app][cls]


def work(app: str, cls: str) -> float:
    """Relative amount of computation (arbitrary units, comparable across classes of one app only)."""
    p = SIZES[app][cls]
    if isinstance(p, Ep):
        return float(p.chunks)
    if isinstance(p, Cg):
        return 2.0**p.log2_n * p.offsets * p.solves
    if isinstance(p, Mg):
        return p.n**3 * p.cycles
    if isinstance(p, Ft):
        total = p.n0 * p.n1 * p.n2
        return total * math.log2(total) * (p.iters + 2)
    if isinstance(p, Sweep):
        return p.nx * p.ny * p.groups * p.angles * p.iters
    if isinstance(p, Btmz):
        return p.nx * p.ny * p.nz * p.steps
    if isinstance(p, Send):
        return p.elems * p.steps * p.iters
    if isinstance(p, Ring):
        return float(p.iters)
    raise TypeError(f"no work model for {type(p).__name__}")
