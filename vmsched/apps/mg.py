"""MG: multigrid V-cycles for the 3-D periodic Poisson equation (after NAS MG), slab halo exchange.

Cell-centred n**3 grid on the unit cube, 7-point Laplacian. The right-hand side is f = A_h u* for a
counter-RNG field u*, so the discrete solution is known: u* up to a constant. V(2,2) cycles with
weighted Jacobi smoothing, 8-cell averaging restriction, trilinear prolongation, coarsest grid 4**3
smoothed many times. Levels are split in z-slabs while every rank keeps at least two planes (ranks a
power of two, at most n/2); coarser levels are gathered (Allgather) and solved redundantly on every
rank. Halo planes are exchanged with Sendrecv between z-neighbours (periodic).

Checksum: exact. Stencils are element-wise in a fixed order (the same bits whether a plane is computed
distributed or redundantly), and norms are reproducible sums, so every iterate is bit-identical for any
rank count. Verification: after c cycles, max |(u - mean u) - (u* - mean u*)| (max |u*| = 1) and the
residual norm relative to |f| are both below max(10 * 0.3**c, 1e-10): a V-cycle that does not cut the
error by 0.3 (it measures about 0.25) fails, whatever the class.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from vmsched.apps import classes, harness
from vmsched.apps.counterrng import block_index, uniform
from vmsched.apps.exactsum import checksum_of, repro_sums
from vmsched.apps.timedcomm import TimedComm

STREAM = 4242
COARSEST = 4
OMEGA = 6.0 / 7.0  # Jacobi weight that smooths best for the 3-D 7-point Laplacian
NU1 = NU2 = 2
COARSE_SWEEPS = 60
RATE = 0.3  # the verification's bound on the error reduction per V-cycle


class Level:
    """One grid level: n**3 cells, either split in z-slabs over the ranks or held whole by every rank."""

    def __init__(self, comm: TimedComm, rank: int, size: int, n: int):
        self.comm, self.n = comm, n
        self.dist = n // size >= 2
        self.parts = size if self.dist else 1
        self.index = rank if self.dist else 0
        self.m = n // self.parts  # planes held (without the two ghost planes)
        self.z0 = self.index * self.m
        self.inv_h2 = float(n * n)
        self.up = (rank + 1) % size
        self.down = (rank - 1) % size

    def zeros(self) -> np.ndarray:
        return np.zeros((self.m + 2, self.n, self.n))

    def exchange(self, u: np.ndarray) -> None:
        """Fill ghost planes 0 and m+1 (periodic in z)."""
        if self.parts == 1:
            u[0] = u[self.m]
            u[self.m + 1] = u[1]
            return
        self.comm.Sendrecv(u[self.m], self.up, 0, u[0], self.down, 0)
        self.comm.Sendrecv(u[1], self.down, 1, u[self.m + 1], self.up, 1)

    def apply(self, u: np.ndarray) -> np.ndarray:
        """A u on the held planes (ghosts must be current)."""
        c = u[1:-1]
        s = u[:-2] + u[2:]
        s += np.roll(c, 1, axis=1)
        s += np.roll(c, -1, axis=1)
        s += np.roll(c, 1, axis=2)
        s += np.roll(c, -1, axis=2)
        return (6.0 * c - s) * self.inv_h2

    def smooth(self, u: np.ndarray, f: np.ndarray, sweeps: int) -> None:
        step = OMEGA / (6.0 * self.inv_h2)
        for _ in range(sweeps):
            self.exchange(u)
            u[1:-1] += step * (f - self.apply(u))

    def residual(self, u: np.ndarray, f: np.ndarray) -> np.ndarray:
        self.exchange(u)
        return f - self.apply(u)


def restrict(r: np.ndarray) -> np.ndarray:
    """Average of the 8 children, added in a fixed order."""
    s = r[0::2, 0::2, 0::2] + r[1::2, 0::2, 0::2]
    for dz, dy, dx in ((0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1)):
        s += r[dz::2, dy::2, dx::2]
    return s * 0.125


def _interp(a: np.ndarray, axis: int, padded: bool) -> np.ndarray:
    """Double `a` along `axis` by cell-centred linear interpolation (weights 3/4, 1/4)."""
    if padded:  # ghost cells at both ends along axis 0
        mid, lo, hi = a[1:-1], a[:-2], a[2:]
    else:  # periodic
        mid, lo, hi = a, np.roll(a, 1, axis=axis), np.roll(a, -1, axis=axis)
    shape = list(mid.shape)
    shape[axis] *= 2
    out = np.empty(shape)
    even = [slice(None)] * 3
    odd = [slice(None)] * 3
    even[axis], odd[axis] = slice(0, None, 2), slice(1, None, 2)
    out[tuple(even)] = 0.75 * mid + 0.25 * lo
    out[tuple(odd)] = 0.75 * mid + 0.25 * hi
    return out


def prolong(e: np.ndarray) -> np.ndarray:
    """Trilinear prolongation of a coarse correction with z-ghosts to the fine held planes."""
    return _interp(_interp(_interp(e, 0, True), 1, False), 2, False)


class Multigrid:
    def __init__(self, comm: TimedComm, rank: int, size: int, n: int):
        self.comm, self.rank = comm, rank
        self.levels = []
        while n >= COARSEST:
            self.levels.append(Level(comm, rank, size, n))
            n //= 2

    def vcycle(self, k: int, u: np.ndarray, f: np.ndarray) -> None:
        lev = self.levels[k]
        if k == len(self.levels) - 1:
            lev.smooth(u, f, COARSE_SWEEPS)
            return
        lev.smooth(u, f, NU1)
        coarse = self.levels[k + 1]
        fc = restrict(lev.residual(u, f))
        if lev.dist and not coarse.dist:  # agglomerate: every rank gets the whole coarse grid
            whole = np.empty((coarse.n, coarse.n, coarse.n))
            self.comm.Allgather(np.ascontiguousarray(fc), whole)
            fc = whole
        uc = coarse.zeros()
        self.vcycle(k + 1, uc, fc)
        coarse.exchange(uc)
        if lev.dist and not coarse.dist:  # take this rank's coarse planes (+ ghosts) from the whole grid
            z0 = lev.z0 // 2
            planes = np.arange(z0 - 1, z0 + lev.m // 2 + 1) % coarse.n + 1
            uc = uc[planes]
        u[1:-1] += prolong(uc)
        lev.smooth(u, f, NU2)


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("mg", ctx.cls)
    assert isinstance(p, classes.Mg)
    n, comm = p.n, ctx.comm
    mg = Multigrid(comm, ctx.rank, ctx.size, n)
    fine = mg.levels[0]
    exact = fine.zeros()
    idx = block_index((n, n, n), (fine.z0, 0, 0), (fine.z0 + fine.m, n, n))
    exact[1:-1] = 2.0 * uniform(STREAM, idx) - 1.0
    fine.exchange(exact)
    f = fine.apply(exact)
    u = fine.zeros()
    norms = []
    for _ in range(p.cycles):
        mg.vcycle(0, u, f)
        r = fine.residual(u, f)
        norms.append(math.sqrt(repro_sums(comm, [r * r])[0] / n**3))
    ctx.stop()

    total = float(n**3)
    su, sx, suu = repro_sums(comm, [u[1:-1], exact[1:-1], u[1:-1] * u[1:-1]])
    err = np.array([np.max(np.abs((u[1:-1] - su / total) - (exact[1:-1] - sx / total)))])
    comm.Allreduce(MPI.IN_PLACE, err, op=MPI.MAX)
    (ff,) = repro_sums(comm, [f * f])
    r0 = math.sqrt(ff / total)
    # Multigrid must cut the error by RATE per cycle (it measures about 0.25), down to round-off.
    tol = max(10.0 * RATE**p.cycles, 1e-10)
    verified = bool(err[0] < tol) and norms[-1] < tol * r0
    info = {"n": n, "cycles": p.cycles, "levels": len(mg.levels), "residuals": norms, "max_error": float(err[0])}
    return harness.Outcome(verified, checksum_of([su, suu, *norms]), info)


def main() -> None:
    harness.main("mg", kernel)


if __name__ == "__main__":
    main()
