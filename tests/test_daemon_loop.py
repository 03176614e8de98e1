"""The serve-and-tick loop both daemons run (vmsched/daemon.py): it sleeps until the next tick, never
spins through the last fraction of a millisecond (a real socket, the real loop)."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from vmsched.daemon import poll_timeout_ms, request_socket, serve_forever


def test_poll_timeouts_round_up_to_whole_milliseconds() -> None:
    assert poll_timeout_ms(0.0) == 0
    assert poll_timeout_ms(0.0004) == 1  # pyzmq would truncate 0.4 ms to a poll that returns at once
    assert poll_timeout_ms(0.0097) == 10
    assert poll_timeout_ms(0.002) == 2
    assert poll_timeout_ms(float("inf")) is None


def test_a_tick_due_in_under_a_millisecond_is_slept_for_not_spun(tmp_path: Path) -> None:
    """A tick that always wants to run again in 0.4 ms: a loop that sleeps calls it at most once per
    millisecond; one that polls with a truncated timeout of 0 calls it tens of times as often."""
    calls: list[float] = []
    run_s = 0.3

    def tick() -> float:
        calls.append(time.monotonic())
        if calls[-1] - calls[0] >= run_s:
            os.kill(os.getpid(), signal.SIGTERM)  # the loop's own stop signal
        return 0.0004

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with request_socket(tmp_path / "loop.sock") as sock:
            serve_forever(sock, {}, tick, logging.getLogger("test"))
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    elapsed = calls[-1] - calls[0]
    assert elapsed >= run_s
    assert len(calls) <= elapsed * 1000 + 2, f"{len(calls)} ticks in {elapsed:.3f} s"
