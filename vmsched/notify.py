"""Telling systemd how a daemon is doing (sd_notify(3)): READY=1, STATUS=, WATCHDOG=1, STOPPING=1.

The documented datagram protocol in a few lines rather than a library: a notification is one
`sendto()` of newline-separated KEY=VALUE lines to the AF_UNIX socket named by $NOTIFY_SOCKET (a
leading '@' names the abstract namespace), a protocol systemd keeps stable. The libraries add nothing
we need: systemd-python needs libsystemd's headers to build on every node, and `sdnotify` is this
same sendto() unmaintained since 2017. Outside systemd ($NOTIFY_SOCKET unset) every call does nothing.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, MutableMapping

# What systemd gives the main process only; jobs the launcher starts must not inherit it.
_SYSTEMD_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def socket_address(notify_socket: str) -> str:
    """$NOTIFY_SOCKET as an address for `sendto`: '@name' is the abstract socket '\\0name'."""
    return "\0" + notify_socket[1:] if notify_socket.startswith("@") else notify_socket


def watchdog_period(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds within which systemd wants WATCHDOG=1 (WatchdogSec=), or None when it wants none.
    WATCHDOG_PID, when set, names the process the watchdog is meant for (sd_watchdog_enabled(3))."""
    usec = env.get("WATCHDOG_USEC", "")
    owner = env.get("WATCHDOG_PID", "")
    if not usec.isdigit() or int(usec) == 0 or (owner and owner != str(pid)):
        return None
    return int(usec) / 1e6


class Notifier:
    """This process's line to systemd; takes the variables out of `env` so that children never see them."""

    def __init__(self, env: MutableMapping[str, str] = os.environ) -> None:
        path = env.get("NOTIFY_SOCKET", "")
        self.watchdog_s = watchdog_period(env, os.getpid()) if path else None
        for name in _SYSTEMD_VARS:
            env.pop(name, None)
        self._address = socket_address(path) if path else None
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) if path else None
        self._last_ping = 0.0
        self._status = ""

    @property
    def active(self) -> bool:
        return self._sock is not None

    def send(self, **fields: str) -> None:
        if self._sock is None:
            return
        text = "\n".join(f"{k}={v}" for k, v in fields.items())
        try:
            self._sock.sendto(text.encode(), self._address)
        except OSError:
            pass  # systemd gone or restarting: nothing a daemon can do about it, and no reason to stop

    def ready(self, status: str) -> None:
        self._status = status
        self.send(READY="1", STATUS=status)

    def status(self, status: str) -> None:
        """STATUS= only when it changed (systemctl status shows the latest)."""
        if status != self._status:
            self._status = status
            self.send(STATUS=status)

    def stopping(self, status: str) -> None:
        self._status = status
        self.send(STOPPING="1", STATUS=status)

    def ping_interval(self) -> float | None:
        """How often to ping: twice per watchdog period, as sd_watchdog_enabled(3) advises."""
        return None if self.watchdog_s is None else self.watchdog_s / 2

    def watchdog(self, now: float | None = None) -> None:
        """WATCHDOG=1 if half a period passed since the last one; call it from the loop that must not hang."""
        interval = self.ping_interval()
        if interval is None:
            return
        now = time.monotonic() if now is None else now
        if now - self._last_ping >= interval:
            self._last_ping = now
            self.send(WATCHDOG="1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
