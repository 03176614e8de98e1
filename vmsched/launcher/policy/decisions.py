"""What a policy may ask the launcher to do. The driver applies decisions in the order given.

Every decision carries a human-readable `reason`, shown in the logs and by `vmq`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class Reason:
    """A reason's text, formatted when first read: `text(*args)`.

    The simulator starts every job of an archive log through decide() and reads no reason, and the
    formatting (f-strings, the reservation it protects) cost as much as the rest of a start's
    bookkeeping; the launcher daemon reads every reason and gets the same text.
    """

    __slots__ = ("_text", "_args", "_done")

    def __init__(self, text: Callable[..., str], *args: object) -> None:
        self._text, self._args, self._done = text, args, ""

    def __str__(self) -> str:
        if not self._done:
            self._done = self._text(*self._args)
        return self._done


@dataclass(slots=True, eq=False, repr=False)  # never modified once made; not frozen for speed (snapshot.RunningJob)
class Start:
    """Start a queued job with `nranks` ranks; the CPU manager may fold it down to ceil(nranks/max_mpl)."""

    job_id: int
    nranks: int
    max_mpl: int
    backfilled: bool = False
    window_end: float | None = None  # a backfilled job's window; acted on when it expires
    why: str | Reason = ""  # read it as `reason`
    # Estimated run time at this size (the queued estimate scaled to nranks); the driver stores it as
    # RunningJob.estimate so that later reservations see the same figure.
    estimate: float = 0.0

    @property
    def reason(self) -> str:
        return self.why if isinstance(self.why, str) else str(self.why)

    # Compared, hashed and shown by the reason's text, as when it was a plain field.
    def _key(self) -> tuple:
        return (self.job_id, self.nranks, self.max_mpl, self.backfilled, self.window_end, self.reason, self.estimate)

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Start) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"Start(job_id={self.job_id!r}, nranks={self.nranks!r}, max_mpl={self.max_mpl!r}, "
                f"backfilled={self.backfilled!r}, window_end={self.window_end!r}, reason={self.reason!r}, "
                f"estimate={self.estimate!r})")  # fmt: skip


@dataclass(frozen=True, slots=True)
class SetMaxMpl:
    """Change a running job's max MPL: the CPU manager then may shrink it to ceil(N/max_mpl) CPUs."""

    job_id: int
    max_mpl: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Abort:
    """Kill a running job; with `requeue` it goes back to the wait queue with its original submit time."""

    job_id: int
    requeue: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Suspend:
    """Stop a running job (SIGSTOP); it gives up its CPUs until resumed."""

    job_id: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Resume:
    """Continue a suspended job (SIGCONT); it gets a new backfill window."""

    job_id: int
    window_end: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Mold:
    """Fix a queued job's size for good: from now on it is a rigid job of `nranks` ranks."""

    job_id: int
    nranks: int
    reason: str = ""
    # Its estimate at that size (sizes.estimate_at of the job before): the estimate of a rigid job is for
    # its one count, and without this a job molded down would be expected to take its full-size time.
    estimate: float = 0.0


Decision = Start | SetMaxMpl | Abort | Suspend | Resume | Mold
