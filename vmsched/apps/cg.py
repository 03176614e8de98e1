"""CG: conjugate gradient on a random sparse SPD matrix with long-distance couplings (after NAS CG).

Matrix of order N = 2**k: row i couples to (i + o) mod N and (i - o) mod N for `offsets` random offsets
o in [1, N/2) with weight -w(i, j), w from the counter RNG keyed by the unordered pair (symmetric by
construction); diagonal = shift + sum of the row's weights. So A = L + shift*I with L a weighted graph
Laplacian: SPD with smallest eigenvalue exactly `shift`, condition number about 2*rowsum/shift.

Rows are split in equal contiguous blocks (ranks a power of two). The x values at i +- o live in at
most two other blocks, so a product y = A x is 4 * offsets Sendrecv exchanges of shifted block pieces:
many point-to-point messages to distant ranks.

Each solve takes x_true from the counter RNG, b = A x_true, and runs CG from 0 until the residual drops
below 1e-10 * |b|. Checksum: exact. Dot products are reproducible sums (vmsched.apps.exactsum) and the
product is element-wise in a fixed order, so every iterate is bit-identical for any rank count.
Verification: |x - x_true| / |x_true| < 1e-8 for every solve (a known answer, independent of CG's own
residual recurrence), and the true residual |b - A x| / |b| < 1e-9.
"""

from __future__ import annotations

import math

import numpy as np

from vmsched.apps import classes, harness
from vmsched.apps.counterrng import uniform
from vmsched.apps.exactsum import checksum_of, repro_sums
from vmsched.apps.timedcomm import TimedComm

STREAM_OFFSETS = 11
STREAM_WEIGHTS = 12
STREAM_X = 1000
TOL = 1e-10
MAX_ITERS = 500


def pick_offsets(n: int, count: int) -> list[int]:
    """`count` distinct offsets in [1, n/2), from the counter RNG (same on every rank)."""
    out: list[int] = []
    k = 0
    while len(out) < count:
        o = 1 + int(uniform(STREAM_OFFSETS, np.array([k]))[0] * (n // 2 - 1))
        k += 1
        if o not in out:
            out.append(o)
    return out


def edge_weight(n: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Weight of the edge {i, j}: depends on the unordered pair only, so the matrix is symmetric."""
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    return 0.5 + uniform(STREAM_WEIGHTS, lo.astype(np.uint64) * np.uint64(n) + hi.astype(np.uint64))


class DistMatrix:
    """This rank's rows [lo, lo + L) of A and the shifted-block exchange behind y = A x."""

    def __init__(self, comm: TimedComm, rank: int, size: int, n: int, offsets: list[int], shift: float):
        self.comm, self.rank, self.size, self.n = comm, rank, size, n
        self.local = n // size
        self.lo = rank * self.local
        rows = np.arange(self.lo, self.lo + self.local, dtype=np.int64)
        self.shifts: list[int] = []
        self.weights: list[np.ndarray] = []
        diag = np.full(self.local, shift)
        for o in offsets:
            for d in (o, n - o):  # +o and -o, as shifts modulo n
                w = edge_weight(n, rows, (rows + d) % n)
                self.shifts.append(d)
                self.weights.append(w)
                diag += w
        self.diag = diag

    def _shifted(self, x: np.ndarray, d: int) -> np.ndarray:
        """x at global rows (i + d) mod n for this rank's rows i (d in [0, n))."""
        size, rank, L = self.size, self.rank, self.local
        q, rem = divmod(d, L)
        out = np.empty(L)
        for part, (src_lo, src_hi, dst_lo, hops) in enumerate(((rem, L, 0, q), (0, rem, L - rem, q + 1))):
            if src_hi == src_lo:
                continue
            source, dest = (rank + hops) % size, (rank - hops) % size
            recv = out[dst_lo : dst_lo + src_hi - src_lo]
            if source == rank:
                recv[:] = x[src_lo:src_hi]
            else:
                self.comm.Sendrecv(x[src_lo:src_hi], dest, part, recv, source, part)
        return out

    def matvec(self, x: np.ndarray) -> np.ndarray:
        y = self.diag * x
        for d, w in zip(self.shifts, self.weights, strict=True):
            y -= w * self._shifted(x, d)
        return y


def solve(a: DistMatrix, b: np.ndarray, bnorm: float) -> tuple[np.ndarray, int]:
    """Plain CG from x = 0; all reductions reproducible, so the iteration count is rank-independent."""
    comm = a.comm
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    (rho,) = repro_sums(comm, [r * r])
    for it in range(1, MAX_ITERS + 1):
        q = a.matvec(p)
        (pq,) = repro_sums(comm, [p * q])
        alpha = rho / pq
        x += alpha * p
        r -= alpha * q
        (rho_new,) = repro_sums(comm, [r * r])
        if math.sqrt(rho_new) < TOL * bnorm:
            return x, it
        p = r + (rho_new / rho) * p
        rho = rho_new
    return x, MAX_ITERS


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("cg", ctx.cls)
    assert isinstance(p, classes.Cg)
    n = 1 << p.log2_n
    a = DistMatrix(ctx.comm, ctx.rank, ctx.size, n, pick_offsets(n, p.offsets), p.shift)
    rows = np.arange(a.lo, a.lo + a.local, dtype=np.uint64)
    values: list[object] = []
    worst_err = worst_res = 0.0
    iters = []
    for s in range(p.solves):
        x_true = 1.0 + uniform(STREAM_X + s, rows)
        b = a.matvec(x_true)
        bb, xx = repro_sums(ctx.comm, [b * b, x_true * x_true])
        x, it = solve(a, b, math.sqrt(bb))
        e = x - x_true
        res = b - a.matvec(x)
        ee, rr, sx = repro_sums(ctx.comm, [e * e, res * res, x])
        worst_err = max(worst_err, math.sqrt(ee / xx))
        worst_res = max(worst_res, math.sqrt(rr / bb))
        iters.append(it)
        values += [it, sx, ee]
    ctx.stop()
    verified = worst_err < 1e-8 and worst_res < 1e-9 and max(iters) < MAX_ITERS
    info = {"n": n, "solves": p.solves, "iterations": iters, "max_rel_error": worst_err,
            "max_rel_residual": worst_res}  # fmt: skip
    return harness.Outcome(verified, checksum_of(values), info)


def main() -> None:
    harness.main("cg", kernel)


if __name__ == "__main__":
    main()
