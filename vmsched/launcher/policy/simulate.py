"""A tiny discrete-event driver for the policies: arrivals, finishes and window expiries on a clock.

It is the second driver of the decision core (the launcher daemon is the first, STYLE.md 2): it builds a
snapshot at every event, applies decide()'s decisions to its own bookkeeping, sizes partitions with the
CPU manager's partition_sizes, and advances every job by the rate its runtime model gives for its
current shape. Policy-agnostic; grown later into `vmsim`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from vmsched.cpumanager.partition import JobShape, partition_sizes

from .config import PolicyConfig
from .core import decide, next_event_time
from .decisions import Abort, Decision, Resume, SetMaxMpl, Start, Suspend
from .sizes import estimate_at
from .snapshot import QueuedJob, RunningJob, Snapshot

# Seconds the whole job would take if it ran with `nranks` ranks on `cpus` CPUs from start to end.
RuntimeModel = Callable[[QueuedJob, int, int], float]
_EPS = 1e-9


def folding_runtime(job: QueuedJob, nranks: int, cpus: int) -> float:
    """The estimate, with perfect speedup to nranks, and ranks sharing CPUs slowed by nranks/cpus."""
    return estimate_at(job, nranks) * max(1.0, nranks / cpus)


@dataclass
class JobRecord:
    """One job's outcome; for an aborted and restarted job, its last run."""

    job_id: int
    submit: float
    start: float
    end: float
    nranks: int
    backfilled: bool
    history: list[tuple[float, int, int]] = field(default_factory=list)  # (time, max MPL, CPUs)
    aborts: int = 0


@dataclass
class _Run:
    job: QueuedJob
    start: Start
    start_time: float
    max_mpl: int
    cpus: int = 0
    suspended: bool = False
    window_end: float | None = None
    progress: float = 0.0  # fraction of the job done
    history: list[tuple[float, int, int]] = field(default_factory=list)

    def rate(self, model: RuntimeModel) -> float:
        if self.suspended or self.cpus == 0:
            return 0.0
        return 1.0 / max(model(self.job, self.start.nranks, self.cpus), _EPS)

    def as_running(self) -> RunningJob:
        return RunningJob(
            job_id=self.job.job_id,
            nranks=self.start.nranks,
            max_mpl=self.max_mpl,
            cpus=self.cpus,
            start_time=self.start_time,
            estimate=self.start.estimate,
            job_class=self.job.job_class,
            backfilled=self.start.backfilled,
            window_end=self.window_end,
            suspended=self.suspended,
            submit_time=self.job.submit_time,
            max_mpl_cap=self.job.max_mpl,
        )


def simulate(
    jobs: Iterable[QueuedJob],
    ncpus: int,
    cfg: PolicyConfig,
    runtime_model: RuntimeModel = folding_runtime,
    on_decide: Callable[[Snapshot, list[Decision]], None] | None = None,
    max_events: int = 1_000_000,
) -> list[JobRecord]:
    """Run the jobs (submit_time = arrival) through the policy; records sorted by job id."""
    pending = sorted(jobs, key=lambda j: (j.submit_time, j.job_id))
    queue: list[QueuedJob] = []
    running: dict[int, _Run] = {}
    records: dict[int, JobRecord] = {}
    aborts: dict[int, int] = {}
    now = pending[0].submit_time if pending else 0.0

    def snapshot() -> Snapshot:
        return Snapshot(now, ncpus, tuple(queue), tuple(r.as_running() for r in running.values()))

    for _ in range(max_events):
        while pending and pending[0].submit_time <= now:
            queue.append(pending.pop(0))
        snap = snapshot()
        decisions = decide(snap, cfg)
        for d in decisions:
            _apply(d, now, queue, running, aborts)
        _repartition(now, ncpus, running, not queue)
        if on_decide is not None:
            on_decide(snap, decisions)
        if not (pending or queue or running):
            break

        wake = next_event_time(snapshot(), cfg)
        t_next = min(
            pending[0].submit_time if pending else math.inf,
            math.inf if wake is None else wake,
            *(now + (1.0 - r.progress) / rate for r in running.values() if (rate := r.rate(runtime_model)) > 0),
        )
        if t_next == math.inf:
            stuck = sorted(j.job_id for j in queue) or sorted(running)
            raise RuntimeError(f"simulation stuck at t={now:g}: jobs {stuck} can never start or finish")
        for r in running.values():
            r.progress += (t_next - now) * r.rate(runtime_model)
        now = t_next
        for jid in [jid for jid, r in running.items() if r.progress >= 1.0 - _EPS]:
            r = running.pop(jid)
            records[jid] = JobRecord(
                jid,
                r.job.submit_time,
                r.start_time,
                now,
                r.start.nranks,
                r.start.backfilled,
                r.history,
                aborts.get(jid, 0),
            )
    else:
        raise RuntimeError(f"simulation did not end within {max_events} events")
    return [records[jid] for jid in sorted(records)]


def _apply(d: Decision, now: float, queue: list[QueuedJob], running: dict[int, _Run], aborts: dict[int, int]) -> None:
    if isinstance(d, Start):
        job = next(j for j in queue if j.job_id == d.job_id)
        queue.remove(job)
        running[d.job_id] = _Run(job, d, now, d.max_mpl, window_end=d.window_end)
    elif isinstance(d, SetMaxMpl):
        running[d.job_id].max_mpl = d.max_mpl
    elif isinstance(d, Abort):
        run = running.pop(d.job_id)
        aborts[d.job_id] = aborts.get(d.job_id, 0) + 1
        if d.requeue:
            queue.append(run.job)
    elif isinstance(d, Suspend):
        running[d.job_id].suspended = True
    elif isinstance(d, Resume):
        running[d.job_id].suspended = False
        running[d.job_id].window_end = d.window_end


def _repartition(now: float, ncpus: int, running: dict[int, _Run], queue_empty: bool) -> None:
    """Partition sizes as the CPU manager computes them (oldest job first); raises if a policy
    over-admitted."""
    active = sorted((r for r in running.values() if not r.suspended), key=lambda r: (r.start_time, r.job.job_id))
    shapes = [JobShape(r.job.job_id, r.start.nranks, r.max_mpl, r.cpus) for r in active]
    sizes = partition_sizes(shapes, ncpus, queue_empty)
    for r in running.values():
        cpus = 0 if r.suspended else sizes[r.job.job_id]
        if not r.history or r.history[-1][1:] != (r.max_mpl, cpus):
            r.history.append((now, r.max_mpl, cpus))
        r.cpus = cpus
