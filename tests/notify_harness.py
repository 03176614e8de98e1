"""A stand-in for systemd's side of sd_notify: an AF_UNIX datagram socket bound where $NOTIFY_SOCKET points,
recording every message with its arrival time and the sender's pid (SCM_CREDENTIALS, as systemd uses to
apply NotifyAccess=main). systemd itself is the one thing not under test; the daemons are real."""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import wait_for


@dataclass(frozen=True)
class Notification:
    at: float  # time.monotonic() on arrival
    pid: int
    fields: dict[str, str]


class NotifySocket:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.settimeout(0.05)
        self.received: list[Notification] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        creds = struct.calcsize("3i")
        while not self._stop:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(4096, socket.CMSG_SPACE(creds))
            except TimeoutError:
                continue
            pid = next((struct.unpack("3i", d[:creds])[0] for lvl, typ, d in anc
                        if lvl == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS), 0)  # fmt: skip
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            with self._lock:
                self.received.append(Notification(time.monotonic(), pid, fields))

    def env(self, watchdog_s: float | None = None) -> dict[str, str]:
        env = {"NOTIFY_SOCKET": str(self.path)}
        if watchdog_s is not None:
            env["WATCHDOG_USEC"] = str(int(watchdog_s * 1e6))
        return env

    def messages(self, pid: int, key: str | None = None) -> list[Notification]:
        with self._lock:
            return [n for n in self.received if n.pid == pid and (key is None or key in n.fields)]

    def wait(self, pid: int, key: str, value: str | None = None, timeout: float = 30) -> Notification:
        def found() -> Notification | None:
            return next((n for n in self.messages(pid, key) if value is None or n.fields[key] == value), None)

        return wait_for(found, timeout=timeout, interval=0.01, what=f"{key}={value or '*'} from pid {pid}")

    def pings(self, pid: int, since: float, until: float) -> list[float]:
        return [n.at for n in self.messages(pid, "WATCHDOG") if since <= n.at <= until]

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()
        self.path.unlink(missing_ok=True)
