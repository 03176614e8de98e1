"""The discrete-event driver of the decision core: arrivals, finishes and window expiries on a clock.

It is the second driver of the policies (the launcher daemon is the first, STYLE.md 2) and does what
the daemon does, on a simulated clock: at every instant it takes in the finishes and arrivals, builds a
Snapshot, applies decide()'s decisions to its own bookkeeping, and sizes partitions with the CPU
manager's partition_sizes, letting running jobs expand into idle CPUs exactly when the daemon's shared
rule (core.hold_idle_cpus) lets them. Each job advances at the rate its runtime model gives for its
current shape.

Why it is written for speed (archive logs of 10^5 jobs): a job's end is recomputed only when its
partition changes (lazy progress, a heap of ends), the RunningJob views are kept and replaced only on a
change, and partition_sizes is called only over the jobs that can change size (a job whose minimum
partition is its rank count always holds exactly that many CPUs, so it only reduces the CPUs left).
At an instant when no queued job can fit the free CPUs (core.nothing_fits: about half of the instants of
a busy log) decide() is not called at all; on_decide still sees the instant, with no decisions.

The daemon's reaction time (Latency) can be modelled: a real launcher learns of a finish or an arrival a
little after it (the job's shim exits and is reaped, the pass waits sched_interval to coalesce events,
then decides). The simulated driver then takes an event in that many seconds late, and a finished job's
CPUs stay with it until then; its record keeps its real end. Zero by default: the ideal scheduler of the
archive studies and of the textbook comparison.
"""

from __future__ import annotations

import gc
import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from operator import attrgetter

from vmsched.cpumanager.partition import JobShape, partition_sizes
from vmsched.launcher.policy.config import PolicyConfig
from vmsched.launcher.policy.core import decide, decide_in_workspace, hold_idle_cpus, next_event_time, nothing_fits
from vmsched.launcher.policy.decisions import Abort, Decision, Mold, Resume, SetMaxMpl, Start, Suspend
from vmsched.launcher.policy.sizes import estimate_at
from vmsched.launcher.policy.snapshot import QueuedJob, RunningJob, Snapshot
from vmsched.launcher.policy.start_rules import RULES
from vmsched.launcher.policy.workspace import RunningSet, running_set, running_set_changed

_ARRIVAL = attrgetter("submit_time", "job_id")  # arrival order; ties by id

# Seconds the whole job would take if it ran with `nranks` ranks on `cpus` CPUs from start to end.
RuntimeModel = Callable[[QueuedJob, int, int], float]


@dataclass(frozen=True, slots=True)
class Latency:
    """Seconds from an event to the driver acting on it (measured on a node by experiments/hardware_vs_sim.py:
    a job arriving at an idle node starts `arrival` after its submission, a queued job `finish` after the
    end of the job before it)."""

    arrival: float = 0.0
    finish: float = 0.0

    def __post_init__(self) -> None:
        if not (self.arrival >= 0 and self.finish >= 0):  # also refuses NaN
            raise ValueError(f"latencies must be seconds >= 0 (got arrival {self.arrival}, finish {self.finish})")


NO_LATENCY = Latency()


def folding_runtime(job: QueuedJob, nranks: int, cpus: int) -> float:
    """The estimate, with perfect speedup to nranks, and ranks sharing CPUs slowed by nranks/cpus."""
    return estimate_at(job, nranks) * max(1.0, nranks / cpus)


@dataclass(slots=True)
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
    cpu_seconds: float = 0.0  # of its last run

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def response(self) -> float:
        return self.end - self.submit


@dataclass(slots=True)
class _Run:
    """A started job: its snapshot view, and how far it got (the fraction left at t_mark)."""

    job: QueuedJob
    view: RunningJob
    left: float = 1.0
    t_mark: float = 0.0
    duration: float = math.inf  # the whole job's run time at its current shape; inf while it holds no CPU
    end: float = math.inf
    version: int = 0
    cpu_seconds: float = 0.0
    history: list[tuple[float, int, int]] = field(default_factory=list)

    @property
    def elastic(self) -> bool:
        """Whether its partition can change size (its minimum is below its rank count)."""
        v = self.view
        return 0 < v.held < v.nranks  # held: its minimum partition, 0 while suspended


class Simulation:
    """One run of a workload under one policy; `run()` returns the records sorted by job id."""

    # Start a job of fixed size in one step instead of through _add and _hold (the same state; False
    # for the test that compares the two).
    quick_fixed_starts = True

    def __init__(
        self,
        jobs: Iterable[QueuedJob],
        ncpus: int,
        cfg: PolicyConfig,
        runtime_model: RuntimeModel = folding_runtime,
        on_decide: Callable[[Snapshot, list[Decision]], None] | None = None,
        max_events: int = 10_000_000,
        progress: Callable[[int], None] | None = None,
        latency: Latency = NO_LATENCY,
    ) -> None:
        self.pending = sorted(jobs, key=_ARRIVAL)
        self.ncpus, self.cfg, self.model = ncpus, cfg, runtime_model
        self.on_decide, self.max_events, self.progress = on_decide, max_events, progress
        self.queue: dict[int, QueuedJob] = {}  # arrival order; a dict so that a start is O(1)
        self._queue_tuple: tuple[QueuedJob, ...] | None = None  # the snapshot's view of `queue`
        self._running_tuple: tuple[RunningJob, ...] | None = None  # ... and of `views`
        # The running set of the last running tuple, and the views added (True) and removed (False) since:
        # the next one is derived from them (running_set_changed) instead of worked out from scratch.
        self._running_set: RunningSet | None = None
        self._view_changes: list[tuple[bool, RunningJob]] = []
        self.running: dict[int, _Run] = {}
        self.views: dict[int, RunningJob] = {}  # job id -> its view, in start order
        self.ends: list[tuple[float, int, int]] = []  # heap of (end, job id, version)
        # Versions are unique across runs, not counted per run: an aborted and restarted job must not
        # match the heap entry of its earlier run (which may still come up, and then looked like its end).
        self._serial = 0
        self.records: dict[int, JobRecord] = {}
        self.aborts: dict[int, int] = {}
        self.fixed_cpus = 0  # CPUs held by running jobs that cannot change size
        self.elastic: set[int] = set()
        self.suspended: set[int] = set()
        # How many queued jobs have each floor_cpus: the least of them tells whether any queued job can
        # fit the free CPUs (a handful of distinct values, where the queue may hold thousands of jobs).
        self.floors: dict[int, int] = {}
        self._least_floor: float | None = math.inf  # min(self.floors); None once a removal may have raised it
        # Queued jobs listed after a job submitted later (a requeued job keeps its submit time): while there
        # are none, the queue is listed in FIFO order (Snapshot.fifo_listed) and decide() needs no sort.
        self._out_of_order: set[int] = set()
        self._latest_submit = -math.inf  # of the jobs enqueued so far
        self.now = self.pending[0].submit_time if self.pending else 0.0
        # Whether expiring windows can ever wake the policy (next_event_time is None otherwise).
        self.windows_act = cfg.backfill != "none" and cfg.expiry != "none"
        # core.nothing_fits's question about the policy, which the run does not change (asked at the
        # instants when no queued job fits, half of them).
        self._waits = nothing_fits(0, math.inf, False, cfg)
        self.arrival_lag, self.finish_lag = latency.arrival, latency.finish

    def snapshot(self) -> Snapshot:
        # Each rebuilt only after it changed: the queue not at every finish, the running jobs not at
        # every arrival.
        if self._queue_tuple is None:
            self._queue_tuple = tuple(self.queue.values())
        if self._running_tuple is None:
            self._running_tuple = jobs = tuple(self.views.values())
            if self._running_set is None:
                self._running_set = running_set(jobs)
            else:
                self._running_set = running_set_changed(self._running_set, jobs, self._view_changes)
            self._view_changes = []
        return Snapshot(self.now, self.ncpus, self._queue_tuple, self._running_tuple, not self._out_of_order)

    def run(self) -> list[JobRecord]:
        # A run builds no reference cycles (tests/test_policies_shortcuts.py checks): what it drops is freed
        # by reference counting. The cyclic collector, which a log's allocations would otherwise start over
        # and over across every object alive (3-4 % of an archive run), waits until the run ends.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if collecting:
                gc.enable()

    def _run(self) -> list[JobRecord]:
        # Locals for what every instant reads: archive logs have 10^5 instants, each a few microseconds.
        pending, nxt, npending, ends, running = self.pending, 0, len(self.pending), self.ends, self.running
        cfg, on_decide, lag, finish_lag = self.cfg, self.on_decide, self.arrival_lag, self.finish_lag
        rule = RULES[cfg.policy]
        for _ in range(self.max_events):
            while nxt < npending and pending[nxt].submit_time + lag <= self.now:
                self._enqueue(pending[nxt])
                nxt += 1
            if self.nothing_fits():
                # decide() would decide nothing (core.nothing_fits says why that is exact): neither it
                # nor its snapshot is needed, and no partition changes.
                after = self.snapshot
                if on_decide is not None:
                    on_decide(self.snapshot(), [])
            else:
                snap = self.snapshot()
                if self.elastic or self.suspended:
                    decisions = decide(snap, cfg)
                else:  # nothing_fits() above took decide()'s own shortcut (core.no_room) already
                    decisions = decide_in_workspace(snap, cfg, rule)
                for d in decisions:
                    self._apply(d)
                after = self.snapshot if decisions else (lambda s=snap: s)
                if self.elastic or self.fixed_cpus > self.ncpus:
                    self._repartition(after)
                if on_decide is not None:
                    on_decide(snap, decisions)
            if nxt == npending and not self.queue and not self.running:
                break
            # The earliest of the next arrival, window expiry and end (min() of the three, in steps).
            t_next = pending[nxt].submit_time + lag if nxt < npending else math.inf
            if self.windows_act and self.expiring():
                wake = next_event_time(after(), cfg)
                if wake is not None and wake < t_next:
                    t_next = wake
            while ends:  # the next end still current, at every instant
                end, jid, version = ends[0]
                run = running.get(jid)
                if run is not None and run.version == version:
                    if end + finish_lag < t_next:  # the driver acts on an end finish_lag late
                        t_next = end + finish_lag
                    break
                heapq.heappop(ends)  # stale: the job's shape changed or it is gone
            if t_next == math.inf:
                stuck = sorted(self.queue) or sorted(self.running)
                raise RuntimeError(f"simulation stuck at t={self.now:g}: jobs {stuck} can never start or finish")
            self.now = t_next
            if ends and ends[0][0] + finish_lag <= t_next:
                self._finish_due()
        else:
            raise RuntimeError(f"simulation did not end within {self.max_events} events")
        return [self.records[jid] for jid in sorted(self.records)]

    def _enqueue(self, job: QueuedJob) -> None:
        self.queue[job.job_id] = job
        self._queue_tuple = None
        floor = job.floor_cpus  # _count_floor(floor, +1), inline: once per job and per requeue
        self.floors[floor] = self.floors.get(floor, 0) + 1
        least = self._least_floor
        if least is not None and floor < least:
            self._least_floor = floor
        if job.submit_time < self._latest_submit:
            self._out_of_order.add(job.job_id)
        else:
            self._latest_submit = job.submit_time

    def _dequeue(self, job_id: int) -> QueuedJob:
        job = self.queue.pop(job_id)
        self._queue_tuple = None
        self._count_floor(job.floor_cpus, -1)
        if self._out_of_order:
            self._out_of_order.discard(job_id)
        return job

    def _count_floor(self, floor: int, delta: int) -> None:
        left = self.floors.get(floor, 0) + delta
        if left:
            self.floors[floor] = left
        else:
            del self.floors[floor]
        # The least floor is asked at every instant; it is worked out again only after its last job left.
        least = self._least_floor
        if least is not None and (floor < least if delta > 0 else not left and floor == least):
            self._least_floor = floor if delta > 0 else None

    def nothing_fits(self) -> bool:
        """core.nothing_fits from the simulator's own bookkeeping: with no job able to change size, the
        running jobs hold fixed_cpus at their minimum partitions."""
        if self.elastic or self.suspended:
            return False
        free = self.ncpus - self.fixed_cpus
        if free <= 0:
            return self._waits  # nothing_fits(free, inf, False, cfg)
        least = self._least_floor
        if least is None:
            least = self._least_floor = min(self.floors, default=math.inf)
        return least > free and self._waits  # nothing_fits(free, least, False, cfg): false whenever a floor fits

    # -- finishing ---------------------------------------------------------------------------------
    def _finish_due(self) -> None:
        # end + lag, as run() computed the instant: (end + lag) - lag may round below end.
        ends, running, lag = self.ends, self.running, self.finish_lag
        while ends and ends[0][0] + lag <= self.now:
            end, jid, version = heapq.heappop(ends)
            run = running.get(jid)
            if run is None or run.version != version:
                continue
            if self.elastic or self.suspended:
                self._remove(run)
            else:  # _remove, when every running job has a fixed size
                del running[jid], self.views[jid]
                self._running_tuple = None
                self._view_changes.append((False, run.view))
                self.fixed_cpus -= run.view.nranks
            self._record(run, end)

    def _record(self, run: _Run, end: float) -> None:
        """The finished job's record, with its real end (which the driver acts on finish_lag later)."""
        v = run.view
        cpu_seconds = run.cpu_seconds + v.cpus * (end - run.t_mark)
        self.records[v.job_id] = JobRecord(v.job_id, run.job.submit_time, v.start_time, end, v.nranks, v.backfilled,
                                           run.history, self.aborts.get(v.job_id, 0), cpu_seconds)  # fmt: skip
        if self.progress is not None:
            self.progress(len(self.records))

    # -- applying decisions ------------------------------------------------------------------------
    def _apply(self, d: Decision) -> None:
        self._queue_tuple = None  # every decision but a resize changes the queue; cheap to rebuild
        if isinstance(d, Start):
            job = self._dequeue(d.job_id)
            # A job that cannot change size holds its rank count from the start; the others get theirs
            # when partitions are sized, below. (-(-n // m): minimum_partition, for a Start's valid sizes.)
            now, cpus = self.now, d.nranks if -(-d.nranks // d.max_mpl) == d.nranks else 0
            view = RunningJob(d.job_id, d.nranks, d.max_mpl, cpus, now, d.estimate, job.job_class, d.backfilled,
                              d.window_end, False, job.submit_time, job.max_mpl)  # fmt: skip
            self.views[d.job_id] = view
            self._running_tuple = None
            self._view_changes.append((True, view))
            if cpus and self.quick_fixed_starts:
                # What _add and _hold do for a fresh job of fixed size (most jobs of an archive log), in one
                # step: nothing to account yet, one history entry, its end from the model.
                duration = self.model(job, d.nranks, cpus)
                end = now + duration
                self._serial += 1
                run = _Run(job, view, 1.0, now, duration, end, self._serial, 0.0, [(now, d.max_mpl, cpus)])
                self.running[d.job_id] = run
                self.fixed_cpus += cpus
                if end != math.inf:
                    heapq.heappush(self.ends, (now if now > end else end, d.job_id, run.version))  # max(end, now)
            else:
                self.running[d.job_id] = run = _Run(job, view, t_mark=now)
                self._add(run)
        elif isinstance(d, SetMaxMpl):
            self._change(self.running[d.job_id], max_mpl=d.max_mpl)
        elif isinstance(d, Abort):
            run = self.running[d.job_id]
            self._remove(run)
            if run.end <= self.now:
                # It had completed, its end not yet acted on (Latency.finish): as the daemon does
                # (lifecycle.ended_before_abort), it is done, not run again; its CPUs are free from now.
                self._record(run, run.end)
                return
            self.aborts[d.job_id] = self.aborts.get(d.job_id, 0) + 1
            if d.requeue:  # its work is lost: a requeued job starts from scratch
                self._enqueue(run.job)
        elif isinstance(d, Suspend):
            self._change(self.running[d.job_id], suspended=True)
        elif isinstance(d, Resume):
            self._change(self.running[d.job_id], suspended=False, window_end=d.window_end)
        elif isinstance(d, Mold):
            old = self.queue[d.job_id]
            # In place: arrival order kept.
            self.queue[d.job_id] = new = replace(old, procs=(d.nranks,), estimate=d.estimate)
            self._count_floor(old.floor_cpus, -1)
            self._count_floor(new.floor_cpus, +1)

    def _add(self, run: _Run) -> None:
        v = run.view
        if run.elastic:
            self.elastic.add(v.job_id)
        elif not v.suspended:
            # A job that cannot change size holds exactly its rank count from now on.
            self.fixed_cpus += v.nranks
            self._hold(run, v.nranks)

    def _remove(self, run: _Run, popped: bool = False) -> None:
        jid = run.view.job_id
        if not popped:
            del self.running[jid]
            del self.views[jid]
            self._running_tuple = None
            self._view_changes.append((False, run.view))
        self.suspended.discard(jid)
        if jid in self.elastic:
            self.elastic.discard(jid)
        elif not run.view.suspended:
            self.fixed_cpus -= run.view.nranks

    def _change(self, run: _Run, **changes: object) -> None:
        self._remove(run, popped=True)
        self._set_view(run, replace(run.view, **changes))
        if run.view.suspended:
            self.suspended.add(run.view.job_id)
            self._hold(run, 0)
        self._add(run)

    def _set_view(self, run: _Run, view: RunningJob) -> None:
        old = self.views.get(view.job_id)
        if old is not None:
            self._view_changes.append((False, old))
        run.view = view
        self.views[view.job_id] = view
        self._running_tuple = None
        self._view_changes.append((True, view))

    # -- partitions and progress -------------------------------------------------------------------
    def _account(self, run: _Run) -> None:
        """Bring the job's progress and CPU-seconds up to now."""
        dt = self.now - run.t_mark
        if dt > 0:
            if run.duration != math.inf:
                run.left -= dt / run.duration
            run.cpu_seconds += run.view.cpus * dt
        run.t_mark = self.now

    def _hold(self, run: _Run, cpus: int) -> None:
        """From now on the job holds `cpus` CPUs: new rate, new end."""
        if run.end <= self.now:
            return  # done, and its finish not yet acted on (Latency.finish): its CPUs and end stay as they are
        v = run.view
        if run.history and run.history[-1][1:] == (v.max_mpl, cpus) and v.cpus == cpus:
            return
        self._account(run)
        if v.cpus != cpus:
            self._set_view(run, replace(v, cpus=cpus))
        run.history.append((self.now, run.view.max_mpl, cpus))
        run.duration = self.model(run.job, v.nranks, cpus) if cpus > 0 else math.inf
        self._serial += 1
        run.version = self._serial
        run.end = self.now + run.left * run.duration if cpus > 0 else math.inf
        if run.end != math.inf:
            heapq.heappush(self.ends, (max(run.end, self.now), v.job_id, run.version))

    def expiring(self) -> bool:
        """Whether a window may expire (next_event_time's question is then worth asking)."""
        return any(v.window_end is not None for v in self.views.values())

    def _repartition(self, after: Callable[[], Snapshot]) -> None:
        """Partition sizes as the CPU manager computes them (oldest job first); raises if a policy
        over-admitted."""
        if not self.elastic:
            if self.fixed_cpus > self.ncpus:
                raise RuntimeError(f"t={self.now:g}: running jobs need {self.fixed_cpus} of {self.ncpus} CPUs")
            return
        runs = sorted((self.running[jid] for jid in self.elastic), key=lambda r: (r.view.start_time, r.view.job_id))
        shapes = [JobShape(r.view.job_id, r.view.nranks, r.view.max_mpl, r.view.cpus) for r in runs]
        expand = not hold_idle_cpus(after(), self.cfg)
        sizes = partition_sizes(shapes, self.ncpus - self.fixed_cpus, queue_empty=expand)
        for r in runs:
            self._hold(r, sizes[r.view.job_id])


def simulate(
    jobs: Iterable[QueuedJob],
    ncpus: int,
    cfg: PolicyConfig,
    runtime_model: RuntimeModel = folding_runtime,
    on_decide: Callable[[Snapshot, list[Decision]], None] | None = None,
    max_events: int = 10_000_000,
    progress: Callable[[int], None] | None = None,
    latency: Latency = NO_LATENCY,
) -> list[JobRecord]:
    """Run the jobs (submit_time = arrival) through the policy; records sorted by job id."""
    return Simulation(jobs, ncpus, cfg, runtime_model, on_decide, max_events, progress, latency).run()
