"""SWEEP: wavefront transport sweeps pipelined over a 2-D rank grid (after Sweep3D / NAS LU).

Discrete-ordinates transport on an nx x ny grid of unit cells, `groups` independent energy groups per
cell, `angles` directions per quadrant, step (upwind) differencing:
    cx (psi - psi_west) + cy (psi - psi_south) + sigma_t psi = q,   q = q_ext + sigma_s * phi
Each source iteration sweeps the four quadrants. Ranks form a px x py grid of tiles; a tile can only
be swept once its upstream faces are known, so the work travels across the rank grid as a wavefront.
Groups are sent in blocks, which pipelines the wavefront: many small Send/Recv messages per sweep.
Inside a tile the cells of one anti-diagonal are independent and are computed together (the tile is
stored skewed so that a diagonal is a contiguous slice).

Checksum: exact. Every cell value comes from the same upstream values by the same operations whatever
the tiling, so phi is bit-identical for any rank count; sums are reproducible (vmsched.apps.exactsum).
Verification: particle balance of the last sweep, source = absorption + leakage, to 1e-10 (it holds
exactly for step differencing, whatever the iteration has converged to), and phi >= 0.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from vmsched.apps import classes, harness
from vmsched.apps.counterrng import block_index, uniform
from vmsched.apps.exactsum import checksum_of, repro_sums

STREAM_SIGMA = 31
STREAM_SOURCE = 32
SCATTER_RATIO = 0.5
QUADRANTS = ((1, 1), (-1, 1), (-1, -1), (1, -1))


def rank_grid(n: int) -> tuple[int, int]:
    """(px, py) with px * py = n, as square as possible, px >= py."""
    py = max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)
    return n // py, py


class Tile:
    def __init__(self, rank: int, size: int, p: classes.Sweep):
        self.px, self.py = rank_grid(size)
        self.ix, self.iy = rank % self.px, rank // self.px
        self.i0, self.i1 = harness.split_range(p.nx, self.px, self.ix)
        self.j0, self.j1 = harness.split_range(p.ny, self.py, self.iy)
        self.nx, self.ny = self.i1 - self.i0, self.j1 - self.j0
        i, j = np.meshgrid(np.arange(self.nx), np.arange(self.ny), indexing="ij")
        self.dd, self.ii = i + j + 2, i + 1  # skewed position (diagonal, i) of cell (i, j), 1-padded
        self.diag_count = self.nx + self.ny + 1

    def neighbour(self, dx: int, dy: int) -> int | None:
        x, y = self.ix + dx, self.iy + dy
        return y * self.px + x if 0 <= x < self.px and 0 <= y < self.py else None

    def skew(self, cells: np.ndarray) -> np.ndarray:
        """(nx, ny, g) cell array -> (diagonals, nx+1, 1, g) skewed array (zeros off the tile)."""
        out = np.zeros((self.diag_count, self.nx + 1, 1, cells.shape[2]))
        out[self.dd, self.ii, 0] = cells
        return out


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("sweep", ctx.cls)
    assert isinstance(p, classes.Sweep)
    comm, t = ctx.comm, Tile(ctx.rank, ctx.size, p)
    theta = (np.arange(p.angles) + 0.5) / p.angles * (math.pi / 2)
    cx, cy = np.cos(theta)[:, None], np.sin(theta)[:, None]  # (A, 1): broadcast over a group block
    weight = 1.0 / (4 * p.angles)
    cells = block_index((p.nx, p.ny), (t.i0, t.j0), (t.i1, t.j1))
    groups = np.arange(p.groups) / p.groups
    sigma_t = (1.0 + uniform(STREAM_SIGMA, cells))[:, :, None] + 0.5 * groups
    sigma_s = SCATTER_RATIO * sigma_t
    q_ext = np.broadcast_to((0.5 + uniform(STREAM_SOURCE, cells))[:, :, None], sigma_t.shape)
    blocks = [(g, min(g + p.group_block, p.groups)) for g in range(0, p.groups, p.group_block)]

    phi = np.zeros_like(sigma_t)
    changes = []
    for it in range(p.iters):
        last = it == p.iters - 1
        q = q_ext + sigma_s * phi
        new = np.zeros_like(phi)
        leak: list[np.ndarray] = []
        for quad, (sx, sy) in enumerate(QUADRANTS):
            up_x, up_y = t.neighbour(-sx, 0), t.neighbour(0, -sy)
            down_x, down_y = t.neighbour(sx, 0), t.neighbour(0, sy)
            q_or, sig_or, new_or = q[::sx, ::sy], sigma_t[::sx, ::sy], new[::sx, ::sy]
            for g0, g1 in blocks:
                gb = g1 - g0
                qs = t.skew(q_or[:, :, g0:g1])
                inv = 1.0 / (t.skew(sig_or[:, :, g0:g1]) + (cx + cy))
                s = np.zeros((t.diag_count, t.nx + 1, p.angles, gb))
                x_in = np.zeros((t.ny, p.angles, gb))
                y_in = np.zeros((t.nx, p.angles, gb))
                if up_x is not None:
                    comm.Recv(x_in, up_x, 2 * quad)
                if up_y is not None:
                    comm.Recv(y_in, up_y, 2 * quad + 1)
                s[1 : t.ny + 1, 0] = x_in
                edge = np.arange(1, t.nx + 1)
                s[edge, edge] = y_in
                for d in range(2, t.diag_count):
                    lo, hi = max(1, d - t.ny), min(t.nx, d - 1) + 1
                    prev = s[d - 1]
                    s[d, lo:hi] = (qs[d, lo:hi] + cx * prev[lo - 1 : hi - 1] + cy * prev[lo:hi]) * inv[d, lo:hi]
                x_out = np.ascontiguousarray(s[t.nx + 1 : t.nx + t.ny + 1, t.nx])
                y_out = np.ascontiguousarray(s[edge + t.ny, edge])
                if down_x is not None:
                    comm.Send(x_out, down_x, 2 * quad)
                elif last:
                    leak.append((weight * cx) * x_out)
                if down_y is not None:
                    comm.Send(y_out, down_y, 2 * quad + 1)
                elif last:
                    leak.append((weight * cy) * y_out)
                psi = s[t.dd, t.ii]  # (nx, ny, A, gb)
                acc = psi[:, :, 0].copy()
                for a in range(1, p.angles):
                    acc += psi[:, :, a]
                new_or[:, :, g0:g1] += weight * acc
        diff = new - phi
        (change,) = repro_sums(comm, [diff * diff])
        changes.append(math.sqrt(change))
        phi = new
    ctx.stop()

    leak_all = np.concatenate([a.ravel() for a in leak]) if leak else np.zeros(0)
    source, absorbed, leaked, total, total2 = repro_sums(comm, [q, sigma_t * phi, leak_all, phi, phi * phi])
    imbalance = abs(source - absorbed - leaked) / source
    low = np.array([phi.min() if phi.size else math.inf])
    comm.Allreduce(MPI.IN_PLACE, low, op=MPI.MIN)
    verified = imbalance < 1e-10 and bool(low[0] >= 0.0)
    info = {"grid": [p.nx, p.ny], "ranks_xy": [t.px, t.py], "iters": p.iters, "balance_error": imbalance,
            "leakage": leaked, "changes": changes}  # fmt: skip
    return harness.Outcome(verified, checksum_of([total, total2, *changes]), info)


def main() -> None:
    harness.main("sweep", kernel)


if __name__ == "__main__":
    main()
