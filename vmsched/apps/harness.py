"""Common skeleton of every app: arguments, start-up checks, timing, the result line, the exit code.

Start-up checks (class, rank count against the registry, app options) run on every rank before any
computation or communication; rank 0 alone prints the error, and every rank exits with status 2.
Verification failure exits with status 1 after the result line is printed; an exception in any rank
aborts the whole job (MPI_Abort, status 3) so that no rank is left waiting forever.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from mpi4py import MPI

from vmsched.apps import registry
from vmsched.apps.result import emit_result
from vmsched.apps.timedcomm import TimedComm

EXIT_VERIFY_FAILED = 1
EXIT_USAGE = 2
EXIT_CRASHED = 3


class UsageError(Exception):
    """Bad command line or rank count: reported before any computation."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, and prints help on rank 0 only."""

    rank = 0

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def _print_message(self, message: str, file: Any = None) -> None:
        if self.rank == 0:
            super()._print_message(message, file)


@dataclass
class Outcome:
    """What a kernel hands back: a global verdict (same on every rank) and a rank-independent checksum."""

    verified: bool
    checksum: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class AppContext:
    comm: TimedComm
    rank: int
    size: int
    cls: str
    args: argparse.Namespace
    t0: float = 0.0
    elapsed: float | None = None
    mpi_elapsed: float | None = None

    def stop(self) -> None:
        """End of the timed section (verification that follows is not timed)."""
        if self.elapsed is None:
            self.elapsed = time.perf_counter() - self.t0
            self.mpi_elapsed = self.comm.mpi_seconds


Kernel = Callable[[AppContext], Outcome]
AddOptions = Callable[[argparse.ArgumentParser], None]
CheckOptions = Callable[[argparse.Namespace, int], None]


def _parse(app: str, argv: list[str], rank: int, size: int, add_options: AddOptions | None,
           check_options: CheckOptions | None) -> argparse.Namespace:  # fmt: skip
    spec = registry.get_spec(app)
    parser = _Parser(prog=f"python -m {spec.module}", description=spec.description)
    parser.rank = rank
    parser.add_argument("-c", "--class", dest="cls", default="S", metavar="CLASS",
                        help=f"problem class: {', '.join(spec.classes)} (default S)")  # fmt: skip
    if add_options:
        add_options(parser)
    args = parser.parse_args(argv)
    if args.cls not in spec.classes:
        raise UsageError(f"unknown class {args.cls!r} for {app}; choose one of {', '.join(spec.classes)}")
    if not spec.allowed(size):
        raise UsageError(f"{app} needs {spec.allowed_text()}; it was started with {size} rank(s)")
    if check_options:
        check_options(args, size)
    return args


# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_BYTES = 1 << 30  # mallopt takes an int: 1 GiB of free heap top is kept before any goes back


def keep_freed_memory() -> bool:
    """Have glibc keep freed memory for the next allocation instead of handing it back to the kernel.

    Why: numpy's temporaries are mostly above glibc's mmap threshold (128 KiB), so each one was mapped,
    faulted in page by page and unmapped again. The apps spent more time in the kernel than computing:
    ep class S on one rank took 4.4 s, 2.4 s of it system time, and 1.3 s with this setting; send 6.8 s
    against 1.7 s. Compiled HPC codes allocate their arrays once, so this is also what the apps stand for.
    No mmap at all, not just a higher threshold: glibc caps the threshold at 32 MiB, and mg's and ft's
    class W arrays of 64-128 MiB per rank cost 10-12 s of system time in runs of 9-13 s at 2 ranks
    (from the heap: 1.6-3.3 s, peak RSS within 5 %). The trim threshold is 1 GiB for the same reason: at
    128 MiB the freed top of mg's heap went back to the kernel and was faulted in again (4.4-6.6 s of
    system time, against 1.6-2.7 s). glibc still maps where the heap cannot grow. Returns False where
    the C library has no mallopt (not glibc): the apps then run as they are.
    """
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the C library the process already runs on
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))


def main(app: str, kernel: Kernel, add_options: AddOptions | None = None,
         check_options: CheckOptions | None = None, argv: list[str] | None = None) -> None:  # fmt: skip
    """Run `kernel` as app `app` on MPI.COMM_WORLD and exit with the app's status."""
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    try:
        args = _parse(app, sys.argv[1:] if argv is None else argv, rank, size, add_options, check_options)
    except UsageError as exc:
        if rank == 0:
            print(f"{app}: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(EXIT_USAGE)

    keep_freed_memory()
    comm = TimedComm(world.Dup())  # private communicator: no clash with anyone else's messages
    ctx = AppContext(comm, rank, size, args.cls, args)
    comm.comm.Barrier()  # untimed: start together
    ctx.t0 = time.perf_counter()
    try:
        outcome = kernel(ctx)
    except Exception:
        # The other ranks may be waiting for this one in MPI: abort the whole job rather than hang it.
        traceback.print_exc()
        sys.stderr.flush()
        time.sleep(0.5)  # diagnostics only: give mpiexec time to forward the traceback before the kill
        world.Abort(EXIT_CRASHED)
    ctx.stop()
    assert ctx.elapsed is not None and ctx.mpi_elapsed is not None
    verified = bool(world.allreduce(bool(outcome.verified), op=MPI.LAND))
    times = world.gather((ctx.elapsed, ctx.mpi_elapsed), root=0)
    if rank == 0:
        assert times is not None
        wall = max(t for t, _ in times)
        emit_result({
            "app": app,
            "class": args.cls,
            "ranks": size,
            "time": round(wall, 6),
            "mpi_time": round(sum(m for _, m in times) / size, 6),
            "mpi_pct": round(100.0 * sum(m / t if t > 0 else 0.0 for t, m in times) / size, 2),
            "verified": verified,
            "checksum": outcome.checksum,
            "info": outcome.info,
        })  # fmt: skip
    comm.comm.Free()
    if not verified:
        if rank == 0:
            print(f"{app}: error: verification FAILED", file=sys.stderr, flush=True)
        sys.exit(EXIT_VERIFY_FAILED)


def split_range(n: int, parts: int, index: int) -> tuple[int, int]:
    """[lo, hi) of `index`'s share when n items are split as evenly as possible into `parts` parts."""
    return n * index // parts, n * (index + 1) // parts
