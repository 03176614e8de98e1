"""What a policy sees: the wait queue, the running jobs and the time (SPEC §5).

Plain data, never modified once built (QueuedJob frozen; the others not, for speed: see RunningJob),
built by whoever drives the policy (the launcher daemon from its store, the simulator from its clock),
so that the decision core never knows which of them it runs under.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vmsched.cpumanager.partition import minimum_partition


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting in the queue."""

    job_id: int
    submit_time: float
    user: str
    procs: tuple[int, ...]  # allowed rank counts, descending; a rigid job has one value
    max_mpl: int | None  # the user's cap on folding (None: the policy decides)
    job_class: str  # "long" | "short"
    estimate: float  # requested/estimated run time in seconds at its full size procs[0]
    deadline: float | None = None  # absolute time
    # Derived once here, because backfilling asks for them for every queued job on every pass: the
    # smallest allowed count, and the fewest CPUs the user's cap lets that count fold to.
    min_procs: int = field(init=False, repr=False, compare=False)
    floor_cpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.procs or any(p < 1 for p in self.procs):
            raise ValueError(f"job {self.job_id}: procs must be positive rank counts (got {self.procs})")
        if list(self.procs) != sorted(set(self.procs), reverse=True):
            raise ValueError(f"job {self.job_id}: procs must be distinct and descending (got {self.procs})")
        if self.max_mpl is not None and self.max_mpl < 1:
            raise ValueError(f"job {self.job_id}: max_mpl must be >= 1 (got {self.max_mpl})")
        if self.job_class not in ("long", "short"):
            raise ValueError(f"job {self.job_id}: job_class must be 'long' or 'short' (got {self.job_class!r})")
        if self.estimate < 0:
            raise ValueError(f"job {self.job_id}: estimate must be >= 0 (got {self.estimate})")
        object.__setattr__(self, "min_procs", self.procs[-1])
        floor = 1 if self.max_mpl is None else minimum_partition(self.procs[-1], self.max_mpl)
        object.__setattr__(self, "floor_cpus", floor)


# RunningJob, Snapshot and the Start decision are built at every start and pass (several per job in the
# simulator) and never modified once built, but not declared frozen: a frozen dataclass's __init__ sets
# each field through object.__setattr__, and a RunningJob then took 3.1 us to build instead of 0.5 us
# (bench/vmsim_speed.py's EASY case builds two per job). unsafe_hash keeps them hashable, as frozen did.
@dataclass(slots=True, unsafe_hash=True)
class RunningJob:
    """A job that has been started (and may since have been folded or suspended)."""

    job_id: int
    nranks: int
    max_mpl: int
    cpus: int  # current partition size
    start_time: float
    # Estimated wall time from start_time: the daemon stores Start.estimate here (the estimate at the
    # size the job was started with).
    estimate: float
    job_class: str
    backfilled: bool = False
    window_end: float | None = None  # when its backfill window expires
    suspended: bool = False  # a suspended job holds no CPUs
    submit_time: float = 0.0
    max_mpl_cap: int | None = None  # the user's cap on folding, as for QueuedJob.max_mpl
    # Derived once here, as the policies ask for them at every pass: the CPUs it holds at least (its
    # minimum partition; none while suspended), and when it is expected to end: start + estimate, or
    # later if its window says so (a resumed job's new window runs from its resumption).
    held: int = field(init=False, repr=False, compare=False)
    expected_end: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n, m, window_end = self.nranks, self.max_mpl, self.window_end
        # minimum_partition's arithmetic and max() without the calls (one is built per simulated start);
        # minimum_partition is still called, to raise, on invalid sizes.
        self.held = 0 if self.suspended else -(-n // m) if n >= 1 and m >= 1 else minimum_partition(n, m)
        end = self.start_time + self.estimate
        self.expected_end = end if window_end is None or not window_end > end else window_end


@dataclass(slots=True, unsafe_hash=True)  # not frozen: see RunningJob
class Snapshot:
    """Everything a policy may base a decision on."""

    now: float
    ncpus: int
    queue: tuple[QueuedJob, ...]  # waiting jobs, in arrival order
    running: tuple[RunningJob, ...]
    # Whether the driver lists `queue` in FIFO order already (submit times never decreasing): the fifo
    # order is then the queue as listed, without a sort (Workspace.ordered). Says how fast, never
    # what: the sort would give the same. The simulator knows it without looking (engine._out_of_order).
    fifo_listed: bool = field(default=False, compare=False)
