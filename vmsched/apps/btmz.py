"""BTMZ: multi-zone solver with zones of geometrically growing size (after NAS BT-MZ), imbalanced.

A periodic nx x ny x nz grid is cut into zones_x x zones_y zones; zone widths along x grow
geometrically (largest / smallest about 20, as in BT-MZ), heights along y are equal. Every step each
zone gets its x and y ghost faces from its four neighbour zones (Isend/Irecv between ranks, copies on
one rank) and then takes an explicit diffusion step. Ranks form a sqrt(n) x sqrt(n) grid and own
blocks of zones (ranks a perfect square); because the zones of high x are much larger, the rank
columns of high x have far more cells: the load is deliberately imbalanced, like BT-MZ without its
load balancer.

Checksum: exact. The zone update is element-wise in a fixed order, so the field is bit-identical for
any rank count; the sums are reproducible (vmsched.apps.exactsum).
Verification: total mass is conserved (periodic flux form) to 1e-12, the discrete maximum principle
holds (min and max stay within the initial range), and for class S rank 0 repeats the run on the whole
grid with numpy.roll (no zones, no messages) and must get the same sums.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from vmsched.apps import classes, harness
from vmsched.apps.counterrng import block_index, uniform
from vmsched.apps.exactsum import checksum_of, repro_sums
from vmsched.apps.timedcomm import TimedComm

STREAM = 777
NU = 0.1  # diffusion number; explicit 7-point step is stable and monotone for NU <= 1/6
RATIO = 20.0  # largest / smallest zone width
WEST, EAST, SOUTH, NORTH = range(4)
OPPOSITE = (EAST, WEST, NORTH, SOUTH)


def zone_widths(total: int, zones: int) -> list[int]:
    """Integer widths >= 2 growing geometrically (ratio about RATIO end to end), summing to total."""
    if total < 2 * zones:
        raise ValueError(f"{total} cells cannot hold {zones} zones of width >= 2")
    r = RATIO ** (1.0 / max(zones - 1, 1))
    exact = [total * r**k / sum(r**j for j in range(zones)) for k in range(zones)]
    w = [max(2, int(x)) for x in exact]
    by_remainder = sorted(range(zones), key=lambda k: exact[k] - w[k], reverse=True)
    k = 0
    while sum(w) != total:  # hand out (or take back) the rounding difference, largest remainder first
        i = by_remainder[k % zones]
        if sum(w) < total:
            w[i] += 1
        elif w[i] > 2:
            w[i] -= 1
        k += 1
    return w


class Layout:
    """Zone geometry and the static zone -> rank map."""

    def __init__(self, p: classes.Btmz, size: int):
        self.p = p
        self.widths = zone_widths(p.nx, p.zones_x)
        self.x0 = [sum(self.widths[:k]) for k in range(p.zones_x)]
        self.height = p.ny // p.zones_y
        self.side = math.isqrt(size)
        self.zones = [(zx, zy) for zy in range(p.zones_y) for zx in range(p.zones_x)]

    def owner(self, z: int) -> int:
        zx, zy = self.zones[z]
        rx = next(b for b in range(self.side) if zx < self.p.zones_x * (b + 1) // self.side)
        ry = next(b for b in range(self.side) if zy < self.p.zones_y * (b + 1) // self.side)
        return ry * self.side + rx

    def neighbour(self, z: int, side: int) -> int:
        zx, zy = self.zones[z]
        dx, dy = ((-1, 0), (1, 0), (0, -1), (0, 1))[side]
        return ((zy + dy) % self.p.zones_y) * self.p.zones_x + (zx + dx) % self.p.zones_x

    def box(self, z: int) -> tuple[int, int, int, int]:
        zx, zy = self.zones[z]
        return self.x0[zx], self.x0[zx] + self.widths[zx], zy * self.height, (zy + 1) * self.height


def face(u: np.ndarray, side: int) -> np.ndarray:
    """The interior layer of zone array u (with ghosts) on `side`, as a contiguous copy."""
    sel = {WEST: (1, slice(1, -1)), EAST: (-2, slice(1, -1)), SOUTH: (slice(1, -1), 1), NORTH: (slice(1, -1), -2)}
    return np.ascontiguousarray(u[sel[side]])


def ghost(u: np.ndarray, side: int) -> np.ndarray:
    """The ghost layer view of u on `side`."""
    sel = {WEST: (0, slice(1, -1)), EAST: (-1, slice(1, -1)), SOUTH: (slice(1, -1), 0), NORTH: (slice(1, -1), -1)}
    return u[sel[side]]


def diffuse(u: np.ndarray) -> None:
    """One explicit step on the interior of u (x, y ghosts current; z periodic)."""
    c = u[1:-1, 1:-1]
    s = u[:-2, 1:-1] + u[2:, 1:-1]
    s += u[1:-1, :-2]
    s += u[1:-1, 2:]
    s += np.roll(c, 1, axis=2)
    s += np.roll(c, -1, axis=2)
    c += NU * (s - 6.0 * c)


def exchange(comm: TimedComm, rank: int, lay: Layout, mine: dict[int, np.ndarray]) -> None:
    reqs, pending = [], []
    for z, u in mine.items():
        for side in range(4):
            src = lay.neighbour(z, side)
            if lay.owner(src) != rank:
                buf = np.empty_like(ghost(u, side))
                reqs.append(comm.Irecv(buf, lay.owner(src), 4 * z + side))
                pending.append((u, side, buf))
    for z, u in mine.items():
        for side in range(4):
            dst = lay.neighbour(z, side)  # dst's ghost on the opposite side is our face on `side`
            if lay.owner(dst) == rank:
                ghost(mine[dst], OPPOSITE[side])[...] = face(u, side)
            else:
                reqs.append(comm.Isend(face(u, side), lay.owner(dst), 4 * dst + OPPOSITE[side]))
    comm.Waitall(reqs)
    for u, side, buf in pending:
        ghost(u, side)[...] = buf


def initial(p: classes.Btmz, x0: int, x1: int, y0: int, y1: int) -> np.ndarray:
    return 1.0 + uniform(STREAM, block_index((p.nx, p.ny, p.nz), (x0, y0, 0), (x1, y1, p.nz)))


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("btmz", ctx.cls)
    assert isinstance(p, classes.Btmz)
    lay = Layout(p, ctx.size)
    mine: dict[int, np.ndarray] = {}
    for z in range(len(lay.zones)):
        if lay.owner(z) == ctx.rank:
            x0, x1, y0, y1 = lay.box(z)
            u = np.zeros((x1 - x0 + 2, y1 - y0 + 2, p.nz))
            u[1:-1, 1:-1] = initial(p, x0, x1, y0, y1)
            mine[z] = u
    interiors = [u[1:-1, 1:-1] for u in mine.values()]
    (mass0,) = repro_sums(ctx.comm, [np.concatenate([a.ravel() for a in interiors])])
    for _ in range(p.steps):
        exchange(ctx.comm, ctx.rank, lay, mine)
        for u in mine.values():
            diffuse(u)
    ctx.stop()

    flat = np.concatenate([a.ravel() for a in interiors])
    mass, mass2 = repro_sums(ctx.comm, [flat, flat * flat])
    bounds = np.array([-flat.min(), flat.max()])
    ctx.comm.Allreduce(MPI.IN_PLACE, bounds, op=MPI.MAX)
    problems = []
    if not abs(mass - mass0) <= 1e-12 * mass0:
        problems.append(f"mass not conserved: {mass0!r} -> {mass!r}")
    if not (-bounds[0] >= 1.0 and bounds[1] <= 2.0):
        problems.append(f"maximum principle violated: range [{-bounds[0]}, {bounds[1]}]")
    if ctx.cls == "S":
        ref = _serial_sums(p) if ctx.rank == 0 else None
        ref = ctx.comm.bcast(ref, root=0)
        if ref != (mass, mass2):
            problems.append(f"serial whole-grid run gives {ref}, zones give {(mass, mass2)}")
    cells = [int(u[1:-1, 1:-1].size) for u in mine.values()]
    load = ctx.comm.allgather(sum(cells))
    info = {"zones": len(lay.zones), "widths": lay.widths, "steps": p.steps, "mass": mass,
            "cells_per_rank": load, "load_imbalance": max(load) / (sum(load) / len(load))}  # fmt: skip
    if problems:
        info["problems"] = problems
    return harness.Outcome(not problems, checksum_of([mass, mass2]), info)


def _serial_sums(p: classes.Btmz) -> tuple[float, float]:
    """The same steps on the whole periodic grid, no zones: an independent check of the exchange."""
    u = initial(p, 0, p.nx, 0, p.ny)
    for _ in range(p.steps):
        s = np.roll(u, 1, axis=0) + np.roll(u, -1, axis=0)
        s += np.roll(u, 1, axis=1)
        s += np.roll(u, -1, axis=1)
        s += np.roll(u, 1, axis=2)
        s += np.roll(u, -1, axis=2)
        u += NU * (s - 6.0 * u)
    m, m2 = repro_sums(None, [u, u * u])
    return m, m2


def main() -> None:
    harness.main("btmz", kernel)


if __name__ == "__main__":
    main()
