"""One job supervisor for `vmrun` and the launcher's shim: start the job's top process (mpiexec), forward
signals to it, kill what has not ended one grace time ([jobs] kill_grace_s) after a terminating signal,
note the shared-memory segments the job maps and remove what is left of them at the end, and map the exit
status (a signal death reads as 128 + signal number, as in a shell).

It lives at level 3 because `vmrun` (level 3) must work without the launcher; the shim (level 1) imports
it, as it already imports the runtime's environment and command line.

Why escalate at all: a rank that takes a KeyboardInterrupt exits through MPI_Finalize while its peers
wait for it inside MPI, and hydra, seeing no rank exit, would wait forever (folded, only the token holder
runs Python code); and a rank may simply ignore SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

import psutil

from vmsched.vmruntime.shmclean import remove_leftovers, shm_segments

HYDRA_EXIT_S = 2.0  # after its ranks are killed, hydra exits by itself within this
# How often the job's /dev/shm mappings are noted: often at first (a job may be killed within a second of its
# start, and MPICH maps its segment in MPI_Init), then every second.
SCAN_FAST_S, SCAN_SLOW_S, SCAN_FAST_FOR_S = 0.1, 1.0, 5.0
TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class Outcome:
    exit_code: int  # the job's status, 128 + N for a death by signal N
    escalated: bool  # its processes were killed after the grace time
    removed_shm: list[str] = field(default_factory=list)  # left behind by the job, removed
    noted_shm: list[str] = field(default_factory=list)  # every segment its processes were seen to map


def exit_status(returncode: int) -> int:
    """Popen's returncode (-N for signal N) as a shell shows it."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(start: Callable[[], subprocess.Popen], grace_s: float,
              forwarded: tuple[signal.Signals, ...] = TERMINATING,
              ignored: tuple[signal.Signals, ...] = ()) -> Outcome:  # fmt: skip
    """Start the job with `start()` (its OSError propagates) and supervise it until it has ended.

    `forwarded` signals go to the job's top process; the terminating ones among them start the grace
    time (a second one ends it at once); `ignored` signals are ignored meanwhile. The handlers are
    installed before the start (a signal that arrives meanwhile is forwarded once the job exists) and
    restored at the end."""
    child: subprocess.Popen | None = None
    pending: list[int] = []
    signalled: list[float] = []  # when the first terminating signal arrived (0: kill now)

    def forward(signum: int, _frame: FrameType | None) -> None:
        if signum in TERMINATING:
            if signalled:
                signalled[0] = 0.0
            else:
                signalled.append(time.monotonic())
        if child is None:
            pending.append(signum)
        else:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in forwarded}
    old.update({s: signal.signal(s, signal.SIG_IGN) for s in ignored})
    try:
        child = start()
        for s in pending:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(s)
        return _wait(child, signalled, grace_s)
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _wait(child: subprocess.Popen, signalled: list[float], grace_s: float) -> Outcome:
    segments: set[str] = set()
    began = time.monotonic()
    escalated = False
    while True:
        now = time.monotonic()
        timeout = SCAN_FAST_S if now - began < SCAN_FAST_FOR_S else SCAN_SLOW_S
        if signalled and not escalated:
            timeout = max(0.05, min(timeout, signalled[0] + grace_s - now))
        try:
            rc = child.wait(timeout=timeout)
            break
        except subprocess.TimeoutExpired:
            segments |= shm_segments(child.pid)
            if signalled and not escalated and time.monotonic() >= signalled[0] + grace_s:
                escalated = True
                kill_tree(child)
    return Outcome(exit_status(rc), escalated, remove_leftovers(segments), sorted(segments))


def kill_tree(child: subprocess.Popen) -> None:
    """SIGKILL the ranks; hydra then sees them die, reaps them and exits by itself. Whatever of the tree
    (proxies, mpiexec) is still there a moment later is killed too. Only descendants of `child`."""
    try:
        procs = psutil.Process(child.pid).children(recursive=True)
    except psutil.Error:
        procs = []
    hydra = [p for p in procs if _is_hydra(p)]
    for p in procs:
        if p not in hydra:
            with contextlib.suppress(psutil.Error):
                p.kill()
    try:
        child.wait(HYDRA_EXIT_S)
        return
    except subprocess.TimeoutExpired:
        pass
    for p in hydra:
        with contextlib.suppress(psutil.Error):
            p.kill()
    with contextlib.suppress(ProcessLookupError):
        child.kill()


def _is_hydra(p: psutil.Process) -> bool:
    try:
        return p.name().startswith(("hydra_", "mpiexec"))
    except psutil.Error:
        return False
