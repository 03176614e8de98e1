"""What a policy may ask the launcher to do. The driver applies decisions in the order given.

Every decision carries a human-readable `reason`, shown in the logs and by `vmq`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, unsafe_hash=True)  # never modified once made; not frozen for speed (snapshot.RunningJob)
class Start:
    """Start a queued job with `nranks` ranks; the CPU manager may fold it down to ceil(nranks/max_mpl)."""

    job_id: int
    nranks: int
    max_mpl: int
    backfilled: bool = False
    window_end: float | None = None  # a backfilled job's window; acted on when it expires
    reason: str = ""
    # Estimated run time at this size (the queued estimate scaled to nranks); the driver stores it as
    # RunningJob.estimate so that later reservations see the same figure.
    estimate: float = 0.0


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
