"""The working state of one decide() call: a copy of the snapshot that decisions are applied to.

Each decision is recorded and applied here at once, so that the next step of the loop sees the machine
as it will be (a started job holds its minimum partition, an aborted one holds nothing, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from vmsched.cpumanager.partition import AdmissionError, JobShape, check_admission, minimum_partition

from .config import PolicyConfig
from .decisions import Abort, Decision, Resume, SetMaxMpl, Start, Suspend
from .orders import ordered_queue
from .profile import FreeProfile
from .sizes import Shape, estimate_at
from .snapshot import QueuedJob, RunningJob, Snapshot


def min_cpus(job: RunningJob) -> int:
    """CPUs a running job holds at least (none while suspended)."""
    return 0 if job.suspended else minimum_partition(job.nranks, job.max_mpl)


def expected_end(job: RunningJob) -> float:
    """When a running job is expected to end: start + estimate, or later if its window says so
    (a resumed job's new window runs from its resumption)."""
    end = job.start_time + job.estimate
    return max(end, job.window_end) if job.window_end is not None else end


@dataclass
class Workspace:
    now: float
    ncpus: int
    cfg: PolicyConfig
    running: dict[int, RunningJob]
    queue: list[QueuedJob]  # arrival order
    decisions: list[Decision] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)  # acted on for an expired window in this call
    long_queued: int = 0  # long jobs in the queue, kept up to date (FJT asks for every job)

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, cfg: PolicyConfig) -> Workspace:
        # Sorted by start so that the result never depends on the order the driver listed them in.
        running = sorted(snapshot.running, key=lambda r: (r.start_time, r.job_id))
        queue = list(snapshot.queue)
        longs = sum(1 for j in queue if j.job_class == "long")
        return cls(snapshot.now, snapshot.ncpus, cfg, {r.job_id: r for r in running}, queue, long_queued=longs)

    # --- what the machine looks like -------------------------------------------------------------

    def active(self) -> list[RunningJob]:
        """Running, not suspended, oldest start first."""
        return [r for r in self.running.values() if not r.suspended]

    def suspended(self) -> list[RunningJob]:
        return [r for r in self.running.values() if r.suspended]

    def ordered(self) -> list[QueuedJob]:
        return ordered_queue(self.queue, self.cfg.order)

    def free_now(self, mpl_changes: dict[int, int] | None = None) -> int:
        """CPUs left once every running job is shrunk to its minimum partition."""
        changes = mpl_changes or {}
        used = sum(minimum_partition(r.nranks, changes.get(r.job_id, r.max_mpl)) for r in self.active())
        return self.ncpus - used

    def fits(self, job_id: int, shape: Shape, mpl_changes: dict[int, int] | None = None) -> bool:
        """Whether the CPU manager would admit the job now (with some running jobs' max MPL changed)."""
        changes = mpl_changes or {}
        shapes = [JobShape(r.job_id, r.nranks, changes.get(r.job_id, r.max_mpl)) for r in self.active()]
        shapes.append(JobShape(job_id, shape.nranks, shape.max_mpl))
        try:
            check_admission(shapes, self.ncpus)
        except AdmissionError:
            return False
        return True

    def profile(self) -> FreeProfile:
        """Free CPUs from now on as running jobs reach their estimated ends."""
        releases = [(expected_end(r), min_cpus(r)) for r in self.active()]
        return FreeProfile(self.now, self.free_now(), releases)

    # --- decisions -------------------------------------------------------------------------------

    def start(
        self,
        job: QueuedJob,
        shape: Shape,
        reason: str,
        backfilled: bool = False,
        window: bool = False,
    ) -> None:
        estimate = estimate_at(job, shape.nranks)
        window_end = self.now + estimate if window else None
        self.queue.remove(job)
        self.long_queued -= job.job_class == "long"
        self.running[job.job_id] = RunningJob(
            job_id=job.job_id,
            nranks=shape.nranks,
            max_mpl=shape.max_mpl,
            cpus=shape.cpus,
            start_time=self.now,
            estimate=estimate,
            job_class=job.job_class,
            backfilled=backfilled,
            window_end=window_end,
            submit_time=job.submit_time,
            max_mpl_cap=job.max_mpl,
        )
        self.decisions.append(Start(job.job_id, shape.nranks, shape.max_mpl, backfilled, window_end, reason, estimate))

    def set_max_mpl(self, job_id: int, max_mpl: int, reason: str) -> None:
        self.running[job_id] = replace(self.running[job_id], max_mpl=max_mpl)
        # A job started in this same call is started with the new max MPL instead.
        for i, d in enumerate(self.decisions):
            if isinstance(d, Start) and d.job_id == job_id:
                self.decisions[i] = replace(d, max_mpl=max_mpl, reason=f"{d.reason}; then max MPL {max_mpl}: {reason}")
                return
        self.decisions.append(SetMaxMpl(job_id, max_mpl, reason))

    def abort(self, job_id: int, reason: str) -> None:
        # The requeued job is back in the next snapshot's queue, not in this one: restarting it in
        # the same call would only undo the abort.
        del self.running[job_id]
        self.touched.add(job_id)
        self.decisions.append(Abort(job_id, True, reason))

    def suspend(self, job_id: int, reason: str) -> None:
        self.running[job_id] = replace(self.running[job_id], suspended=True)
        self.touched.add(job_id)
        self.decisions.append(Suspend(job_id, reason))

    def resume(self, job_id: int, window_end: float | None, reason: str) -> None:
        self.running[job_id] = replace(self.running[job_id], suspended=False, window_end=window_end)
        self.decisions.append(Resume(job_id, window_end, reason))
