"""Following processes we did not necessarily start: exit notification through pidfds.

Used by the CPU manager (ranks, job leaders) and the launcher (job shims it may have inherited
from a previous incarnation after a restart).
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Hashable

import psutil


def pid_alive_cmd(pid: int, needle: str) -> bool:
    """Whether `pid` runs and its command line mentions `needle` (a pid file's owner, not a reused pid)."""
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and needle in " ".join(p.cmdline())
    except psutil.Error:
        return False


def pidfd_signal(fd: int, sig: int) -> bool:
    """Signal the process of a pidfd (never a process that reused its pid); False if it is gone."""
    try:
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False


def pidfd_alive(fd: int) -> bool:
    """Signal 0 through a pidfd: its process is not yet reaped (so its pid is still its own)."""
    return pidfd_signal(fd, 0)


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

    def alive(self, key: Hashable) -> bool:
        """Whether the process watched under `key` is not yet reaped: until then its pid cannot have
        been given to another process, so acting on the pid right after this reaches it. (Signal 0
        through the pidfd: one system call, no allocation - it runs for every rank the manager pins.)"""
        fd = self.pidfd(key)
        return fd is not None and pidfd_alive(fd)

    def send_signal(self, key: Hashable, sig: int) -> bool:
        """Signal the watched process through its pidfd (never a process that reused its pid)."""
        fd = self.pidfd(key)
        return fd is not None and pidfd_signal(fd, sig)

    def pidfd(self, key: Hashable) -> int | None:
        """The pidfd watched under `key` (valid until `unwatch(key)`)."""
        old = self._fds.get(key)
        return old[1] if old else None

    def watching(self, key: Hashable) -> int | None:
        old = self._fds.get(key)
        return old[0] if old else None

    def exited(self) -> list[Hashable]:
        return [self._keys[fd] for fd, _ in self._epoll.poll(0) if fd in self._keys]

    def fileno(self) -> int:
        """A descriptor that is readable while a watched process has exited (to wait on with select)."""
        return self._epoll.fileno()

    def close(self) -> None:
        for key in list(self._fds):
            self.unwatch(key)
        self._epoll.close()
