"""What both daemons share: stop signals and the serve-and-tick loop, which also tells systemd it is alive."""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from vmsched.notify import Notifier
from vmsched.protocol import bind_rep, serve_one

# Test-only hook (tests/test_notify.py): with this variable set to a path, the loop hangs while that
# file exists, as a daemon stuck in a quantum would, so that a test can see the watchdog pings stop.
# Ignored under systemd ($INVOCATION_ID is set for every unit), so a unit file cannot switch it on.
TEST_HANG_ENV = "VMSCHED_TEST_HANG_LOOP_WHILE_EXISTS"
STATUS_EVERY_S = 1.0  # how often the STATUS= line is refreshed


def hang_hook_file(env: Mapping[str, str], log: logging.Logger) -> Path | None:
    path = env.get(TEST_HANG_ENV)
    if not path:
        return None
    if env.get("INVOCATION_ID"):
        log.warning("%s is a test hook and is ignored under systemd", TEST_HANG_ENV)
        return None
    log.warning("test hook %s=%s: the loop hangs while that file exists", TEST_HANG_ENV, path)
    return Path(path)


@contextmanager
def request_socket(path: Path) -> Iterator[zmq.Socket]:
    """The daemon's ROUTER socket on `path`; closed and removed on the way out."""
    ctx = zmq.Context()
    sock = bind_rep(ctx, path)
    try:
        yield sock
    finally:
        sock.close(0)
        ctx.term()
        path.unlink(missing_ok=True)


def poll_timeout_ms(wait_s: float) -> int | None:
    """zmq's poll timeout for a wait of `wait_s` seconds: whole milliseconds, rounded *up*. pyzmq
    truncates a float timeout to int, so a wait under 1 ms became a poll that returns at once, and the
    loop spun through the last fraction of a millisecond of every quantum: 0.9 ms of CPU per 10 ms on
    whatever CPU the manager woke on, which slowed a yielding MPI job there by 74 % (a 4-rank
    all-to-all on one CPU: 0.50 s alone, 0.87 s beside a task busy 0.9 ms every 10 ms)."""
    return None if wait_s == float("inf") else max(0, math.ceil(wait_s * 1000))


def serve_forever(sock: zmq.Socket, handlers: dict[str, Any], tick: Callable[[], float], log: logging.Logger,
                  notifier: Notifier | None = None, status: Callable[[], str] | None = None) -> None:  # fmt: skip
    """Serve requests and call `tick` (which returns the seconds until it wants to run again) until
    SIGTERM or SIGINT. Requests never starve the ticks: tick runs after every request too.

    The watchdog pings come from here, after each tick, so a loop stuck in a tick (a hung quantum)
    stops them and systemd restarts the daemon; `status()` is sent as STATUS= when it changes."""
    stop = False
    notifier = notifier or Notifier({})
    hang = hang_hook_file(os.environ, log)
    ping = notifier.ping_interval() or float("inf")
    next_status = 0.0

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    wait = 0.0
    while not stop:
        if poller.poll(poll_timeout_ms(min(wait, ping))):
            serve_one(sock, handlers, lambda err: log.warning("bad request: %s", err))
        while hang is not None and hang.exists() and not stop:
            time.sleep(0.01)
        wait = tick()
        now = time.monotonic()
        notifier.watchdog(now)
        if status is not None and now >= next_status:
            notifier.status(status())
            next_status = now + STATUS_EVERY_S
    notifier.stopping("stopping")
