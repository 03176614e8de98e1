"""What both daemons share: logging, stop signals, and the serve-and-tick loop."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmq

from vmsched.protocol import bind_rep, serve_one


def setup_logging(level: str, path: Path) -> None:
    logging.basicConfig(
        level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s",
        handlers=[logging.StreamHandler(), logging.FileHandler(path)],
    )  # fmt: skip


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


def serve_forever(sock: zmq.Socket, handlers: dict[str, Any], tick: Callable[[], float], log: logging.Logger) -> None:
    """Serve requests and call `tick` (which returns the seconds until it wants to run again) until
    SIGTERM or SIGINT. Requests never starve the ticks: tick runs after every request too."""
    stop = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    wait = 0.0
    while not stop:
        if poller.poll(wait * 1000):
            serve_one(sock, handlers, lambda err: log.warning("bad request: %s", err))
        wait = tick()
