"""Signals held while a child process starts.

A Python signal handler that raises (Ctrl-C's KeyboardInterrupt, a tool's unwinding SIGTERM) raises
where the main thread is. Inside `subprocess.Popen`, that is the wait for the child's exec, after the
fork: Popen then raises with the child running and no handle to it, so nothing stops it (vmsim-calibrate
left a `vmrun` so after its SIGTERM, in CI, 2026-12-04). Python's subprocess has no guard of its own, and
blocking the signals with pthread_sigmask would pass the mask on to the child, hence this.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

HELD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def held_signals(sigs: tuple[int, ...] = HELD) -> Iterator[None]:
    """For the block, the signals of `sigs` that have Python handlers are only noted; each one that came
    reaches its handler when the block ends, in order, so that a handler that raises raises there, where
    the caller holds what the block made. Signals ignored or left to the system are not touched."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python runs its handlers in the main thread alone: they never raise in this one
        return
    came: list[int] = []
    old = {s: h for s in sigs if callable(h := signal.getsignal(s))}
    for s in old:
        signal.signal(s, lambda signum, _frame: came.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for s in came:
            old[s](s, None)


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C (SystemExit 143), so that every `with Manager()`, `finally` and
    end_job runs: the private CPU manager, the jobs and the state directories go with the tool. By
    default a SIGTERM ends the process at once and its CPU manager outlives it (vmsim-calibrate did,
    2026-11-28; vmdemo left both its daemons so, 2026-12-04). For the tools' main(): the benchmarks',
    vmsim-calibrate's, vmdemo's; their jobs start with `testing.started_job`."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
