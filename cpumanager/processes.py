"""What the CPU manager does to processes: liveness, affinity, CPU time, stop/continue, futex wake.

The thin, side-effecting edge of the daemon; everything here acts on one pid and reports failure
instead of raising, because ranks may exit at any moment.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
from collections.abc import Hashable

import psutil

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_FUTEX = 202 if os.uname().machine == "x86_64" else 98  # aarch64
_FUTEX_WAKE = 1
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an exited rank its parent has not reaped yet)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_time(pid: int) -> float | None:
    """Process creation time, to tell a rank from a later process that reuses its pid."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def user_time_us(pid: int) -> int | None:
    # Read /proc/<pid>/stat directly: psutil builds a Process object per call, too slow for
    # every rank every quantum.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[11]) * 1_000_000 // _CLK_TCK  # utime, field 14 of stat


def set_affinity(pid: int, cpus: tuple[int, ...]) -> bool:
    try:
        os.sched_setaffinity(pid, cpus)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


def send_signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def futex_wake(address: int, count: int = 1 << 30) -> None:
    """Wake waiters on a futex word in the shared table (a rank blocked at an MPI wait)."""
    _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, count, None, None, 0)


class ExitWatcher:
    """Learns of process exits through pidfds and epoll.

    Cost per quantum is O(exits), not O(processes); a zombie counts as exited; and a pidfd refers to
    one process, so a recycled pid can never be mistaken for the rank that had it.
    """

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._fds: dict[Hashable, tuple[int, int]] = {}  # key -> (pid, fd)
        self._keys: dict[int, Hashable] = {}  # fd -> key

    def watch(self, key: Hashable, pid: int) -> bool:
        """Watch `pid` under `key` (replacing what the key watched); False if it is already gone."""
        old = self._fds.get(key)
        if old and old[0] == pid:
            return True
        self.unwatch(key)
        try:
            fd = os.pidfd_open(pid)
        except (ProcessLookupError, OSError):
            return False
        self._epoll.register(fd, select.EPOLLIN)
        self._fds[key] = (pid, fd)
        self._keys[fd] = key
        return True

    def unwatch(self, key: Hashable) -> None:
        old = self._fds.pop(key, None)
        if old:
            self._keys.pop(old[1], None)
            self._epoll.unregister(old[1])
            os.close(old[1])

    def watching(self, key: Hashable) -> int | None:
        old = self._fds.get(key)
        return old[0] if old else None

    def exited(self) -> list[Hashable]:
        return [self._keys[fd] for fd, _ in self._epoll.poll(0) if fd in self._keys]

    def close(self) -> None:
        for key in list(self._fds):
            self.unwatch(key)
        self._epoll.close()
