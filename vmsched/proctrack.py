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
        """Whether the process watched under `key` has not exited: while it has not, its pid cannot
        have been given to another process, so acting on the pid right after this reaches it."""
        old = self._fds.get(key)
        if old is None:
            return False
        p = select.poll()
        p.register(old[1], select.POLLIN)
        return not p.poll(0)

    def send_signal(self, key: Hashable, sig: int) -> bool:
        """Signal the watched process through its pidfd (never a process that reused its pid)."""
        old = self._fds.get(key)
        if old is None:
            return False
        try:
            signal.pidfd_send_signal(old[1], sig)
            return True
        except (ProcessLookupError, PermissionError, OSError):
            return False

    def watching(self, key: Hashable) -> int | None:
        old = self._fds.get(key)
        return old[0] if old else None

    def exited(self) -> list[Hashable]:
        return [self._keys[fd] for fd, _ in self._epoll.poll(0) if fd in self._keys]

    def close(self) -> None:
        for key in list(self._fds):
            self.unwatch(key)
        self._epoll.close()
