"""The working state of one decide() call: a copy of the snapshot that decisions are applied to.

Each decision is recorded and applied here at once, so that the next step of the loop sees the machine
as it will be (a started job holds its minimum partition, an aborted one holds nothing, ...).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from operator import attrgetter

from vmsched.cpumanager.partition import minimum_partition

from .config import PolicyConfig
from .decisions import Abort, Decision, Mold, Reason, Resume, SetMaxMpl, Start, Suspend
from .orders import ordered_tuple
from .profile import FreeProfile
from .sizes import Shape, estimate_at
from .snapshot import QueuedJob, RunningJob, Snapshot


def min_cpus(job: RunningJob) -> int:
    """CPUs a running job holds at least (none while suspended)."""
    return job.held


def expected_end(job: RunningJob) -> float:
    """When a running job is expected to end (RunningJob.expected_end says how)."""
    return job.expected_end


_START = attrgetter("start_time")
_ID = attrgetter("job_id")
_HELD = attrgetter("held")
_END = attrgetter("expected_end")
_SUSPENDED = attrgetter("suspended")


class RunningSet:
    """What a snapshot's running jobs amount to, worked out once per tuple of them.

    A driver may hand the same tuple to several calls (the simulator does at every arrival that changed
    nothing running, and hold_idle_cpus asks about the snapshot decide() just saw); the last tuple's
    results are then reused. They depend only on that immutable tuple, so reuse changes how fast, never
    what. Callers must not modify the lists it hands out.
    """

    __slots__ = ("jobs", "used", "any_suspended", "_by_id", "_split", "_by_end")

    def __init__(self, jobs: tuple[RunningJob, ...]) -> None:
        self.jobs = jobs
        # What every pass asks, in the driver's order (sums do not depend on it); the rest when asked.
        self.used = sum(map(_HELD, jobs))  # CPUs held at their minimum partitions
        self.any_suspended = any(map(_SUSPENDED, jobs))
        self._by_id: dict[int, RunningJob] | None = None
        self._split: tuple[list[RunningJob], list[RunningJob]] | None = None
        self._by_end: tuple[list[float], list[int]] | None = None

    @property
    def by_id(self) -> dict[int, RunningJob]:
        """{job id: job}, oldest start first (then lowest id)."""
        if self._by_id is None:
            # Sorted by start so that the result never depends on the order the driver listed them in.
            # Two stable sorts on C-level keys build no key tuples (drivers list them mostly in order already).
            ordered = sorted(sorted(self.jobs, key=_ID), key=_START)
            self._by_id = dict(zip(map(_ID, ordered), ordered, strict=True))
        return self._by_id

    def split(self) -> tuple[list[RunningJob], list[RunningJob]]:
        """(active, suspended), oldest start first."""
        if self._split is None:
            jobs = list(self.by_id.values())
            if self.any_suspended:
                self._split = [r for r in jobs if not r.suspended], [r for r in jobs if r.suspended]
            else:  # the common case, in C: nothing suspended
                self._split = jobs, []
        return self._split

    def releases(self) -> tuple[list[float], list[int]]:
        """The active jobs' expected ends, in order, and the CPUs each then releases."""
        if self._by_end is None:
            # From the driver's order, not the start order: jobs ending at the same time release their
            # CPUs at once, so the profiles built from these lists do not depend on their order.
            active = [r for r in self.jobs if not r.suspended] if self.any_suspended else self.jobs
            by_end = sorted(active, key=_END)
            self._by_end = list(map(_END, by_end)), list(map(_HELD, by_end))
        return self._by_end


_last_running: RunningSet | None = None


def running_set(jobs: tuple[RunningJob, ...]) -> RunningSet:
    """The RunningSet of a snapshot's running jobs (the last one's again for the same tuple)."""
    global _last_running
    last = _last_running  # read once: another thread may replace it meanwhile
    if last is None or last.jobs is not jobs:
        last = _last_running = RunningSet(jobs)
    return last


def running_set_changed(
    previous: RunningSet, jobs: tuple[RunningJob, ...], changes: list[tuple[bool, RunningJob]]
) -> RunningSet:
    """running_set(jobs), for a driver that knows how `jobs` came from `previous.jobs`: `changes` lists,
    in order, the jobs added (True) and removed (False). The releases are then updated by a few
    insertions and removals instead of sorted again: the simulator's running set changes at nearly every
    instant, by a start or a finish, and that sort was a tenth of an archive run. The same results as
    RunningSet(jobs) (ties in the releases may be listed in another order: they release together);
    tests/test_policies_shortcuts.py compares them."""
    global _last_running
    out = RunningSet.__new__(RunningSet)
    out.jobs, out._by_id, out._split, out._by_end = jobs, None, None, None
    used, suspended = previous.used, previous.any_suspended
    for added, job in changes:
        used += job.held if added else -job.held
        suspended = suspended or (added and job.suspended)
    out.used = used
    # A suspended job removed may have been the last: asked again then.
    out.any_suspended = any(map(_SUSPENDED, jobs)) if suspended else False
    if previous._by_end is not None and not out.any_suspended:
        # Taken over, not copied: `previous` works them out again if it is ever asked (a driver asks the
        # newest set only).
        ends, cpus = previous._by_end
        previous._by_end = None
        for added, job in changes:
            if job.suspended:
                continue  # a suspended job releases nothing
            end = job.expected_end
            if added:
                k = bisect_right(ends, end)
                ends.insert(k, end)
                cpus.insert(k, job.held)
            else:  # one entry of its (end, held): which of equal ones does not matter
                k = bisect_left(ends, end)
                while cpus[k] != job.held:
                    k += 1
                del ends[k], cpus[k]
        out._by_end = ends, cpus
    _last_running = out
    return out


@dataclass(slots=True)
class Workspace:
    now: float
    ncpus: int
    cfg: PolicyConfig
    # The running jobs by id once asked for (`running`): the snapshot's (RunningSet.by_id) with the
    # jobs started since (`_started`) and every other decision applied. A pass that only starts jobs
    # never asks: the snapshot's need not be ordered by start nor copied.
    _running: dict[int, RunningJob] | None
    waiting: tuple[QueuedJob, ...]  # the snapshot's queue, in arrival order; started jobs are in `gone`
    decisions: list[Decision] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)  # acted on for an expired window in this call
    # Kept up to date by the decisions instead of recomputed on every question: a decide() call asks
    # for them once per queued job, and the simulator's queues hold thousands.
    _used: int = -1  # CPUs held by active jobs at their minimum partitions
    gone: set[int] = field(default_factory=set)  # queued jobs started in this call
    _ordered: tuple[QueuedJob, ...] | None = None
    _ordered_gone: int = 0  # len(gone) when _ordered was last filtered
    _long_queued: int = -1
    _active: list[RunningJob] | None = None
    _suspended: list[RunningJob] | None = None
    _base: RunningSet | None = None  # the snapshot's running jobs, until a decision changes them
    _snapshot_set: RunningSet | None = None  # the snapshot's running jobs
    _fifo_listed: bool = False  # Snapshot.fifo_listed (molding a job keeps its place and submit time)
    # Jobs started while _running is None, as (job, shape, estimate, backfilled, window_end): their
    # RunningJobs are built only if `running` is asked for.
    _started: list[tuple[QueuedJob, Shape, float, bool, float | None]] = field(default_factory=list)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, cfg: PolicyConfig) -> Workspace:
        base = running_set(snapshot.running)
        ws = cls(snapshot.now, snapshot.ncpus, cfg, None, snapshot.queue)
        ws._used, ws._base, ws._snapshot_set, ws._fifo_listed = base.used, base, base, snapshot.fifo_listed
        return ws

    @property
    def running(self) -> dict[int, RunningJob]:
        """Running jobs by id, as the decisions so far leave them: the snapshot's in start order, then the
        jobs started in this call in the order they were."""
        if self._running is None:
            self._running = self._snapshot_set.by_id.copy() if self._snapshot_set is not None else {}
            for job, shape, estimate, backfilled, window_end in self._started:
                self._running[job.job_id] = self._running_job(job, shape, estimate, backfilled, window_end)
        return self._running

    def _running_job(
        self, job: QueuedJob, shape: Shape, estimate: float, backfilled: bool, window_end: float | None
    ) -> RunningJob:
        # Positional arguments (RunningJob's field order).
        return RunningJob(job.job_id, shape.nranks, shape.max_mpl, shape.cpus, self.now, estimate, job.job_class,
                          backfilled, window_end, False, job.submit_time, job.max_mpl)  # fmt: skip

    # --- what the machine looks like -------------------------------------------------------------

    @property
    def long_queued(self) -> int:
        """Long jobs in the queue (FJT asks for every job)."""
        if self._long_queued < 0:
            self._long_queued = sum(1 for j in self.ordered() if j.job_class == "long")
        return self._long_queued

    @property
    def queue_length(self) -> int:
        return len(self.waiting) - len(self.gone)

    def active(self) -> list[RunningJob]:
        """Running, not suspended, oldest start first."""
        if self._active is None:
            self._split_running()
        return self._active  # type: ignore[return-value]

    def suspended(self) -> list[RunningJob]:
        if self._suspended is None:
            self._split_running()
        return self._suspended  # type: ignore[return-value]

    def any_suspended(self) -> bool:
        """Whether a running job is suspended (asked at every pass: the snapshot's answer while it holds)."""
        if self._base is not None:
            return self._base.any_suspended
        if self._running is None:  # only starts since the snapshot, and a started job is not suspended
            return self._snapshot_set.any_suspended  # type: ignore[union-attr]
        return bool(self.suspended())

    def _split_running(self) -> None:
        # Asked several times per call (profile, expiry, backfill); kept until the running set changes.
        if self._base is not None:
            self._active, self._suspended = self._base.split()
            return
        self._active, self._suspended = [], []
        for r in self.running.values():
            (self._suspended if r.suspended else self._active).append(r)

    def ordered(self) -> tuple[QueuedJob, ...]:
        """The queue in priority order (immutable: callers may keep it while jobs start)."""
        # Started jobs are filtered out here, once per batch of starts, not removed one by one.
        if self._ordered is None:
            if self._fifo_listed and self.cfg.order == "fifo":
                # Submit times never decrease along the queue (Snapshot.fifo_listed): the fifo order, a
                # stable sort by submit time, is the queue itself.
                self._ordered = self.waiting
            else:
                self._ordered = ordered_tuple(self.waiting, self.cfg.order)
            self._ordered_gone = 0
        if self._ordered_gone != len(self.gone):
            gone, ordered = self.gone, self._ordered
            # Mostly the jobs that went are the first ones (heads started in turn): then a slice.
            k, n = 0, len(ordered)
            while k < n and ordered[k].job_id in gone:
                k += 1
            if k == len(gone) - self._ordered_gone:  # `ordered` held none of the jobs gone before
                self._ordered = ordered[k:]
            else:
                self._ordered = tuple([j for j in ordered if j.job_id not in gone])  # a list first: faster
            self._ordered_gone = len(gone)
        return self._ordered

    def free_now(self, mpl_changes: dict[int, int] | None = None) -> int:
        """CPUs left once every running job is shrunk to its minimum partition."""
        if not mpl_changes:  # asked several times per queued job: the common case first
            return self.ncpus - self._used
        used = self._used
        for jid, mpl in mpl_changes.items():
            r = self.running[jid]
            if not r.suspended:
                used += minimum_partition(r.nranks, mpl) - minimum_partition(r.nranks, r.max_mpl)
        return self.ncpus - used

    def fits(self, job_id: int, shape: Shape, mpl_changes: dict[int, int] | None = None) -> bool:
        """Whether the CPU manager would admit the job now (with some running jobs' max MPL changed):
        check_admission's rule, the minimum partitions of all of them fit in the machine."""
        return shape.cpus <= self.free_now(mpl_changes)

    def releases(self) -> tuple[list[float], list[int]]:
        """The active jobs' expected ends, in order, and the CPUs each then releases."""
        if self._base is not None:
            return self._base.releases()
        if self._running is None and self._snapshot_set is not None:
            # Only starts since the snapshot (a pass that started the head): its releases and theirs, each
            # started job's at now + its estimate with its minimum partition (RunningJob's expected_end and
            # held), without building the running jobs by id. Ties in any order: they release together.
            ends, cpus = (list(x) for x in self._snapshot_set.releases())
            for _, shape, estimate, _, _ in self._started:
                end = self.now + estimate
                k = bisect_right(ends, end)
                ends.insert(k, end)
                cpus.insert(k, shape.cpus)
            return ends, cpus
        by_end = sorted(self.active(), key=_END)
        return list(map(_END, by_end)), list(map(_HELD, by_end))

    def profile(self) -> FreeProfile:
        """Free CPUs from now on as running jobs reach their estimated ends."""
        return FreeProfile.of_sorted(self.now, self.free_now(), *self.releases())

    def _replace_running(self, job: RunningJob) -> None:
        old = self.running.get(job.job_id)
        self._used += job.held - (old.held if old is not None else 0)  # min_cpus, without the calls
        self.running[job.job_id] = job
        self._active = self._suspended = self._base = None

    # --- decisions -------------------------------------------------------------------------------

    def start(
        self,
        job: QueuedJob,
        shape: Shape,
        reason: str | Reason,
        backfilled: bool = False,
        window: bool = False,
        estimate: float | None = None,
    ) -> None:
        """`estimate`: estimate_at(job, shape.nranks), when the caller has it already."""
        if estimate is None:
            estimate = estimate_at(job, shape.nranks)
        window_end = self.now + estimate if window else None
        self.gone.add(job.job_id)
        if self._long_queued >= 0:
            self._long_queued -= job.job_class == "long"
        if self._running is None:  # a queued job is not running: nothing to replace (_replace_running)
            self._started.append((job, shape, estimate, backfilled, window_end))
            self._used += shape.cpus  # the RunningJob's `held`
            self._active = self._suspended = self._base = None
        else:
            self._replace_running(self._running_job(job, shape, estimate, backfilled, window_end))
        self.decisions.append(Start(job.job_id, shape.nranks, shape.max_mpl, backfilled, window_end, reason, estimate))

    def mold(self, job: QueuedJob, nranks: int, reason: str) -> QueuedJob:
        """The queued job becomes rigid at `nranks` ranks (for the rest of this call too), with its
        estimate scaled to that count as the policies scale it."""
        estimate = estimate_at(job, nranks)
        molded = replace(job, procs=(nranks,), estimate=estimate)
        self.waiting = tuple(molded if j is job else j for j in self.waiting)
        if self._ordered is not None:
            self._ordered = tuple(molded if j is job else j for j in self._ordered)
        self.decisions.append(Mold(job.job_id, nranks, reason, estimate))
        return molded

    def set_max_mpl(self, job_id: int, max_mpl: int, reason: str) -> None:
        self._replace_running(replace(self.running[job_id], max_mpl=max_mpl))
        # A job started in this same call is started with the new max MPL instead.
        for i, d in enumerate(self.decisions):
            if isinstance(d, Start) and d.job_id == job_id:
                self.decisions[i] = replace(d, max_mpl=max_mpl, why=f"{d.reason}; then max MPL {max_mpl}: {reason}")
                return
        self.decisions.append(SetMaxMpl(job_id, max_mpl, reason))

    def abort(self, job_id: int, reason: str) -> None:
        # The requeued job is back in the next snapshot's queue, not in this one: restarting it in
        # the same call would only undo the abort.
        self._used -= min_cpus(self.running.pop(job_id))
        self._active = self._suspended = self._base = None
        self.touched.add(job_id)
        self.decisions.append(Abort(job_id, True, reason))

    def suspend(self, job_id: int, reason: str) -> None:
        self._replace_running(replace(self.running[job_id], suspended=True))
        self.touched.add(job_id)
        self.decisions.append(Suspend(job_id, reason))

    def resume(self, job_id: int, window_end: float | None, reason: str) -> None:
        self._replace_running(replace(self.running[job_id], suspended=False, window_end=window_end))
        self.decisions.append(Resume(job_id, window_end, reason))
