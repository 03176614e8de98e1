"""Reproducible global sums: the same bits for any number of ranks and any reduction order.

Floating-point addition is not associative, so an MPI_SUM of partial sums changes in the last bits
when the decomposition changes. Here every value is cut, with exact float operations, into DIGITS
integer digits of WIDTH bits relative to a common power of two 2**e (e from the global max |x|, an
order-independent MAX reduction). Integer sums are exact and associative, so the digit sums, and the
float rebuilt from them, do not depend on who added what. Bits below 2**(e - WIDTH*DIGITS) are dropped
the same way on every rank (relative accuracy 2**-96 of the largest value with the defaults).

Limits: at most 2**31 values in one sum (so int64 digit sums cannot overflow).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

WIDTH = 32
DIGITS = 3


def digit_sums(x: np.ndarray, exp: int, ndigits: int = DIGITS) -> np.ndarray:
    """Exact integer sums of the WIDTH-bit digits of x / 2**exp (requires |x| < 2**exp)."""
    r = np.ldexp(np.asarray(x, dtype=np.float64).ravel(), -exp)
    out = np.zeros(ndigits, dtype=np.int64)
    for k in range(ndigits):
        r = r * float(1 << WIDTH)  # exact: power-of-two scaling
        d = np.trunc(r)
        r -= d  # exact: removes the integer part
        out[k] = d.astype(np.int64).sum()
    return out


def digits_value(sums: Sequence[int], exp: int) -> float:
    """The float (correctly rounded) of the exact value sum_k sums[k] * 2**(exp - WIDTH*(k+1))."""
    total = 0
    for s in sums:
        total = (total << WIDTH) + int(s)
    return math.ldexp(float(total), exp - WIDTH * len(sums))


def _abs_max(a: np.ndarray) -> float:
    if a.size == 0:
        return 0.0
    m = float(np.max(np.abs(a)))
    return m if math.isfinite(m) else math.inf  # MAX drops NaN in some orders; inf survives any order


def repro_sums(comm: Any, arrays: Sequence[np.ndarray], ndigits: int = DIGITS) -> list[float]:
    """Global sums of several distributed arrays (each rank passes its local parts); None = serial.

    Two small reductions for the whole batch: MAX of |x| and SUM of int64 digit sums.
    A non-finite value anywhere gives NaN.
    """
    maxes = np.array([_abs_max(a) for a in arrays], dtype=np.float64)
    if comm is not None:
        from mpi4py import MPI  # here, so that serial use (tests, reference checks) does not start MPI

        comm.Allreduce(MPI.IN_PLACE, maxes, op=MPI.MAX)
    exps = [math.frexp(m)[1] if 0.0 < m < math.inf else 0 for m in maxes]
    digits = np.zeros((len(arrays), ndigits), dtype=np.int64)
    for i, (a, m, e) in enumerate(zip(arrays, maxes, exps, strict=True)):
        if 0.0 < m < math.inf:
            digits[i] = digit_sums(a, e, ndigits)
    if comm is not None:
        comm.Allreduce(MPI.IN_PLACE, digits, op=MPI.SUM)
    out = []
    for m, e, d in zip(maxes, exps, digits, strict=True):
        out.append(math.nan if m == math.inf else 0.0 if m == 0.0 else digits_value(d.tolist(), e))
    return out


def repro_sum(comm: Any, array: np.ndarray) -> float:
    return repro_sums(comm, [array])[0]


def checksum_of(values: Iterable[object]) -> str:
    """A short hex digest of exact values (floats by their hex form, ints and strings as text)."""
    parts = [v.hex() if isinstance(v, float) else str(v) for v in values]
    return hashlib.sha256(";".join(parts).encode()).hexdigest()[:16]
