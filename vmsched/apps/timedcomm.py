"""A communicator wrapper that adds up the wall time spent inside MPI calls (the app's own MPI time)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from mpi4py import MPI


class TimedComm:
    """Forwards every method to the wrapped communicator and accumulates the time spent in it.

    `mpi_seconds` is what the result line reports as mpi_time; `calls` counts the calls.
    """

    def __init__(self, comm: MPI.Comm) -> None:
        self.comm = comm
        self.mpi_seconds = 0.0
        self.calls = 0

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.mpi_seconds += time.perf_counter() - t
                self.calls += 1

        return call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.comm, name)
        return self._timed(attr) if callable(attr) else attr

    def Waitall(self, requests: Sequence[MPI.Request]) -> None:  # noqa: N802 (mirrors the MPI name)
        self._timed(MPI.Request.Waitall)(list(requests))
