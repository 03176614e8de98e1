"""Queue orders: a sort key per order name, applied to the queue before every decision (SPEC §5).

Ties fall back to submission time and then to the position in the queue (arrival order), so an order is
total and a decision never depends on how a sort treats equal keys.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import attrgetter

from .snapshot import QueuedJob

OrderKey = Callable[[QueuedJob, int], tuple[float, ...]]


def _fifo(job: QueuedJob, pos: int) -> tuple[float, ...]:
    # Submit time first: a job aborted and requeued keeps its place from its original submission.
    return (job.submit_time, pos)


def _sjf(job: QueuedJob, pos: int) -> tuple[float, ...]:
    return (job.estimate, job.submit_time, pos)


def _ljf(job: QueuedJob, pos: int) -> tuple[float, ...]:
    return (-job.estimate, job.submit_time, pos)


def _edf(job: QueuedJob, pos: int) -> tuple[float, ...]:
    # Jobs without a deadline go after all jobs with one, in FIFO order.
    deadline = job.deadline if job.deadline is not None else math.inf
    return (deadline, job.submit_time, pos)


ORDER_KEYS: dict[str, OrderKey] = {"fifo": _fifo, "sjf": _sjf, "ljf": _ljf, "edf": _edf}

_SUBMIT = attrgetter("submit_time")
_ESTIMATE = attrgetter("estimate")


def ordered_queue(queue: Sequence[QueuedJob], order: str) -> list[QueuedJob]:
    """The queue in priority order; the first job is the head.

    The order is that of ORDER_KEYS. It is computed with stable sorts on C-level keys instead of
    building the key tuples: the position tie-break is what stability gives, and this runs on every
    scheduling pass over queues of thousands of jobs in the simulator.
    """
    if order == "fifo":
        return sorted(queue, key=_SUBMIT)
    if order == "sjf":
        return sorted(sorted(queue, key=_SUBMIT), key=_ESTIMATE)
    if order == "ljf":
        return sorted(sorted(queue, key=_SUBMIT), key=_ESTIMATE, reverse=True)  # reverse keeps stability
    key = ORDER_KEYS[order]
    return [job for _, job in sorted(((key(job, pos), job) for pos, job in enumerate(queue)), key=lambda kj: kj[0])]


_last: tuple[tuple[QueuedJob, ...], str, tuple[QueuedJob, ...]] | None = None


def ordered_tuple(queue: tuple[QueuedJob, ...], order: str) -> tuple[QueuedJob, ...]:
    """ordered_queue as a tuple; for the same queue tuple as the last call, the last result again.

    A driver may hand the same queue to several calls (the simulator does at every finish that started
    nothing). The order is a function of the immutable tuple alone, so reuse changes how fast, never what.
    """
    global _last
    last = _last  # read once: another thread may replace it meanwhile
    if last is not None and last[0] is queue and last[1] == order:
        return last[2]
    out = tuple(ordered_queue(queue, order))
    _last = (queue, order, out)
    return out
