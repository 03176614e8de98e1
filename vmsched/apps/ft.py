"""FT: 3-D FFT solver of the heat equation (after NAS FT), all-to-all transposes between slab layouts.

u0 (complex, counter RNG) is split in x-slabs (n0/p planes). Forward transform: FFT along z and y in
place, Alltoall transpose to y-slabs, FFT along x. Each iteration t multiplies the spectrum by
exp(-4 pi^2 alpha |k|^2 t), transforms back (the same steps in reverse) and takes the NAS-style
checksum: the sum of u at 1024 fixed points. Ranks: powers of two dividing n0 and n1.

Checksum: exact. Every 1-D FFT acts on one whole line whatever the decomposition, so the data are
bit-identical for any rank count; the 1024 values are gathered exactly (each slot is non-zero on one
rank only, and adding zeros is exact) and summed by math.fsum in a fixed order.
Verification: inverse(forward(u0)) == u0 to 1e-12; the k = 0 mode (the mean) is conserved through the
evolution; for class S, rank 0 recomputes the last checksum with numpy.fft.fftn/ifftn on the whole
grid (an independent serial path) and the two agree to 1e-10.
"""

from __future__ import annotations

import math

import numpy as np
from mpi4py import MPI

from vmsched.apps import classes, harness
from vmsched.apps.counterrng import block_index, uniform
from vmsched.apps.exactsum import checksum_of, repro_sums
from vmsched.apps.timedcomm import TimedComm

STREAM_RE, STREAM_IM = 5151, 5152
ALPHA = 1e-6
POINTS = 1024


def initial(shape: tuple[int, int, int], x0: int, x1: int) -> np.ndarray:
    """Planes [x0, x1) of u0."""
    idx = block_index(shape, (x0, 0, 0), (x1, shape[1], shape[2]))
    return (uniform(STREAM_RE, idx) - 0.5) + 1j * (uniform(STREAM_IM, idx) - 0.5)


def checkpoints(shape: tuple[int, int, int]) -> np.ndarray:
    """The 1024 (x, y, z) points of the checksum, as in NAS FT."""
    j = np.arange(1, POINTS + 1)
    return np.stack([j % shape[0], (3 * j) % shape[1], (5 * j) % shape[2]], axis=1)


def wavenumbers2(n: int) -> np.ndarray:
    k = np.arange(n)
    return np.where(k < n // 2, k, k - n).astype(np.float64) ** 2


class SlabFFT:
    """Forward: x-slab (m0, n1, n2) -> y-slab (n0, m1, n2) spectrum; inverse the other way round."""

    def __init__(self, comm: TimedComm, size: int, shape: tuple[int, int, int]):
        self.comm, self.p = comm, size
        self.n0, self.n1, self.n2 = shape
        self.m0, self.m1 = self.n0 // size, self.n1 // size

    def _alltoall(self, send: np.ndarray, recv: np.ndarray) -> None:
        if self.p == 1:
            recv[...] = send
        else:
            self.comm.Alltoall(send, recv)

    def forward(self, u: np.ndarray) -> np.ndarray:
        a = np.fft.fft(np.fft.fft(u, axis=2), axis=1)
        send = np.ascontiguousarray(a.reshape(self.m0, self.p, self.m1, self.n2).transpose(1, 0, 2, 3))
        recv = np.empty_like(send)  # block q = planes of rank q, our y-columns
        self._alltoall(send, recv)
        return np.fft.fft(recv.reshape(self.n0, self.m1, self.n2), axis=0)

    def inverse(self, s: np.ndarray) -> np.ndarray:
        a = np.fft.ifft(s, axis=0)
        send = np.ascontiguousarray(a.reshape(self.p, self.m0, self.m1, self.n2))
        recv = np.empty_like(send)  # block q = y-columns of rank q, our x-planes
        self._alltoall(send, recv)
        u = recv.transpose(1, 0, 2, 3).reshape(self.m0, self.n1, self.n2)
        return np.fft.ifft(np.fft.ifft(u, axis=1), axis=2)


def point_values(u: np.ndarray, pts: np.ndarray, x0: int, x1: int, comm: TimedComm | None) -> np.ndarray:
    """u at the checksum points, every value gathered exactly on every rank."""
    vals = np.zeros(POINTS, dtype=np.complex128)
    mine = (pts[:, 0] >= x0) & (pts[:, 0] < x1)
    p = pts[mine]
    vals[mine] = u[p[:, 0] - x0, p[:, 1], p[:, 2]]
    if comm is not None:
        comm.Allreduce(MPI.IN_PLACE, vals, op=MPI.SUM)
    return vals


def point_sum(vals: np.ndarray) -> complex:
    return complex(math.fsum(vals.real.tolist()), math.fsum(vals.imag.tolist()))


def kernel(ctx: harness.AppContext) -> harness.Outcome:
    p = classes.params("ft", ctx.cls)
    assert isinstance(p, classes.Ft)
    shape = (p.n0, p.n1, p.n2)
    fft = SlabFFT(ctx.comm, ctx.size, shape)
    x0, x1 = ctx.rank * fft.m0, (ctx.rank + 1) * fft.m0
    pts = checkpoints(shape)
    # |k|^2 for the y-slab layout: all kx, our ky, all kz
    ky = wavenumbers2(p.n1)[ctx.rank * fft.m1 : (ctx.rank + 1) * fft.m1]
    k2 = wavenumbers2(p.n0)[:, None, None] + ky[None, :, None] + wavenumbers2(p.n2)[None, None, :]
    decay = -4.0 * ALPHA * math.pi**2 * k2

    u0 = initial(shape, x0, x1)
    spectrum = fft.forward(u0)
    sums = []
    for t in range(1, p.iters + 1):
        u = fft.inverse(spectrum * np.exp(decay * t))
        sums.append(point_sum(point_values(u, pts, x0, x1, ctx.comm)))
    ctx.stop()

    back = fft.inverse(spectrum)
    amax = np.array([np.max(np.abs(back - u0)), np.max(np.abs(u0))])
    ctx.comm.Allreduce(MPI.IN_PLACE, amax, op=MPI.MAX)
    err = amax[0] / amax[1]
    m0r, m0i, mtr, mti = repro_sums(ctx.comm, [u0.real, u0.imag, u.real, u.imag])
    mean_drift = abs(complex(mtr - m0r, mti - m0i)) / (p.n0 * p.n1 * p.n2)
    problems = []
    if not err < 1e-12:
        problems.append(f"round trip error {err:.3e}")
    if not mean_drift < 1e-12:
        problems.append(f"mean not conserved: drift {mean_drift:.3e}")
    serial = None
    if ctx.cls == "S":
        serial = _serial_checksum(shape, decay_t=p.iters, pts=pts) if ctx.rank == 0 else None
        serial = ctx.comm.bcast(serial, root=0)
        if not abs(serial - sums[-1]) <= 1e-10 * abs(serial):
            problems.append(f"serial reference {serial} != {sums[-1]}")
    info = {"shape": list(shape), "iters": p.iters, "checksum_last": [sums[-1].real, sums[-1].imag],
            "roundtrip_error": float(err)}  # fmt: skip
    if problems:
        info["problems"] = problems
    return harness.Outcome(not problems, checksum_of([v for s in sums for v in (s.real, s.imag)]), info)


def _serial_checksum(shape: tuple[int, int, int], decay_t: int, pts: np.ndarray) -> complex:
    """The last iteration's checksum by numpy.fft.fftn on the whole grid (independent of SlabFFT)."""
    k2 = (
        wavenumbers2(shape[0])[:, None, None]
        + wavenumbers2(shape[1])[None, :, None]
        + wavenumbers2(shape[2])[None, None, :]
    )
    u = np.fft.ifftn(np.fft.fftn(initial(shape, 0, shape[0])) * np.exp(-4.0 * ALPHA * math.pi**2 * k2 * decay_t))
    return point_sum(point_values(u, pts, 0, shape[0], None))


def main() -> None:
    harness.main("ft", kernel)


if __name__ == "__main__":
    main()
