"""EP: embarrassingly parallel Gaussian pairs (after NAS EP), almost no communication.

Candidate pair k uses the counter-based uniforms of indices 2k and 2k+1, so every pair is the same
whatever rank draws it. Accepted pairs (0 < t = x*x + y*y <= 1) give Gaussian deviates by the polar
(Marsaglia) method; we count them in square annuli l = floor(max(|X|, |Y|)) and sum X and Y.

Checksum: exact. Counts are integers; the sums are accumulated as exact integer digits relative to 2**4
(|X| <= sqrt(-2 ln t) < 13 since t >= 2**-104), so totals are identical for any decomposition.
Verification: against the analytic distribution: acceptance pi/4, P(annulus l) from erf, zero means,
each within 6 standard deviations.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from vmsched.apps import classes, harness
from vmsched.apps.counterrng import uniform
from vmsched.apps.exactsum import checksum_of, digit_sums, digits_value

STREAM = 271828
CHUNK = 1 << 16  # pairs per vectorized chunk
ANNULI = 10
SUM_EXP = 4  # |X|, |Y| < 2**4


def _chunk(c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Annulus counts and exact digit sums of X and Y for chunk c."""
    idx = np.arange(2 * c * CHUNK, 2 * (c + 1) * CHUNK, dtype=np.uint64)
    u = uniform(STREAM, idx).reshape(CHUNK, 2)
    x = 2.0 * u[:, 0] - 1.0
    y = 2.0 * u[:, 1] - 1.0
    t = x * x + y * y
    keep = (t > 0.0) & (t <= 1.0)
    x, y, t = x[keep], y[keep], t[keep]
    f = np.sqrt(-2.0 * np.log(t) / t)
    gx, gy = x * f, y * f
    annulus = np.minimum(np.maximum(np.abs(gx), np.abs(gy)).astype(np.int64), ANNULI - 1)
    counts = np.bincount(annulus, minlength=ANNULI)
    return counts, digit_sums(gx, SUM_EXP), digit_sums(gy, SUM_EXP)


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("ep", ctx.cls)
    assert isinstance(p, classes.Ep)
    pairs = p.chunks * CHUNK
    lo, hi = harness.split_range(p.chunks, ctx.size, ctx.rank)
    counts = np.zeros(ANNULI, dtype=np.int64)
    sx = [0] * 3
    sy = [0] * 3
    for c in range(lo, hi):
        q, dx, dy = _chunk(c)
        counts += q
        sx = [a + int(b) for a, b in zip(sx, dx, strict=True)]  # Python ints: no overflow
        sy = [a + int(b) for a, b in zip(sy, dy, strict=True)]
    ctx.comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    parts = ctx.comm.allgather((sx, sy))
    gsx = [sum(s[0][k] for s in parts) for k in range(3)]
    gsy = [sum(s[1][k] for s in parts) for k in range(3)]
    ctx.stop()

    sum_x, sum_y = digits_value(gsx, SUM_EXP), digits_value(gsy, SUM_EXP)
    accepted = int(counts.sum())
    problems = _check(pairs, counts, accepted, sum_x, sum_y)
    info = {"pairs": pairs, "accepted": accepted, "counts": counts.tolist(), "sx": sum_x, "sy": sum_y}
    if problems:
        info["problems"] = problems
    return harness.Outcome(not problems, checksum_of([*counts.tolist(), *gsx, *gsy]), info)


def _check(pairs: int, counts: np.ndarray, accepted: int, sx: float, sy: float) -> list[str]:
    problems = []
    pa = math.pi / 4
    if abs(accepted - pairs * pa) > 6 * math.sqrt(pairs * pa * (1 - pa)):
        problems.append(f"acceptance {accepted / pairs:.6f} far from pi/4")
    cdf = [math.erf(l / math.sqrt(2)) ** 2 for l in range(ANNULI)] + [1.0]  # noqa: E741
    for l in range(ANNULI):  # noqa: E741
        pl = cdf[l + 1] - cdf[l]
        expect = accepted * pl
        if abs(counts[l] - expect) > 6 * math.sqrt(expect * (1 - pl)) + 2:
            problems.append(f"annulus {l}: {counts[l]} pairs, expected {expect:.1f}")
    for name, s in (("X", sx), ("Y", sy)):
        if abs(s) > 6 * math.sqrt(accepted):
            problems.append(f"sum of {name} = {s:.3f}, not compatible with mean 0")
    return problems


def main() -> None:
    harness.main("ep", kernel)


if __name__ == "__main__":
    main()
