"""Scheduling metrics over finished jobs: per job, per class, overall, and relative performance of two runs.

Pure functions over :class:`JobRecord` (plain numbers: seconds and processor counts). The definitions,
for a job with wait time ``w``, execution time ``r``, ``p`` processors and threshold ``tau``:

* wait ``w = start - submit``, execution ``r = end - start``, response (turnaround) ``w + r``;
* slowdown ``(w + r) / r`` (undefined, ``None``, when ``r == 0``);
* bounded slowdown **with the floor** ``max(1, (w + r) / max(r, tau))`` - the usual definition
  (Feitelson et al.), named ``bounded_slowdown``; **without the floor** ``(w + r) / max(r, tau)``, named
  ``bounded_slowdown_nofloor`` (below 1 for jobs shorter than tau that waited little);
* per-processor bounded slowdown ``max(1, (w + r) / (p * max(r, tau)))`` (with the floor);
* late: ``end > deadline``; tardiness ``max(0, end - deadline)``;
* CPU-seconds: what the job held, ``cpu_seconds`` when the record has it (a folded job holds fewer CPUs
  than it has ranks), else ``procs_used * r``.

Overall: makespan ``last end - first submit``; utilization ``sum of CPU-seconds / (cpus * makespan)``;
throughput ``jobs / makespan``; mean, geometric mean (over jobs with response > 0) and population
standard deviation of response times.

Relative performance of run ``b`` against run ``a`` of the same workload: per job (matched by id) the
ratio ``response_b / response_a``; ``b`` is better for a job when the ratio is below ``1 - tolerance``,
worse above ``1 + tolerance``, equal otherwise; the same split by thirds of the jobs sorted by size,
requested time, requested area, run time and run area (all taken from run ``a``, the reference).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.swf import UNKNOWN, SwfJob, SwfLog, make_log

DEFAULT_TAUS: tuple[float, ...] = (10.0, 100.0)
DEFAULT_TOLERANCE = 0.05
#: SWF queue number -> job class (the thesis's job types: 1 long, 2 short)
CLASS_OF_QUEUE = {1: "long", 2: "short"}
ALL = "all"
UNCLASSIFIED = "unclassified"


@dataclass(frozen=True)
class JobRecord:
    """One finished job. Times are seconds on one clock; ``deadline`` is an absolute time."""

    id: int
    submit: float
    start: float
    end: float
    procs_requested: int
    procs_used: int
    requested_time: float | None = None
    job_class: str | None = None
    deadline: float | None = None
    cpu_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("submit", "start", "end"):
            if not math.isfinite(getattr(self, name)):
                raise WorkloadError(f"job {self.id}: {name} time is not a finite number")
        if self.start < self.submit:
            raise WorkloadError(f"job {self.id}: starts ({self.start}) before it is submitted ({self.submit})")
        if self.end < self.start:
            raise WorkloadError(f"job {self.id}: ends ({self.end}) before it starts ({self.start})")
        if self.procs_used < 1 or self.procs_requested < 1:
            raise WorkloadError(f"job {self.id}: processor counts must be >= 1")
        if self.cpu_seconds is not None and self.cpu_seconds < 0:
            raise WorkloadError(f"job {self.id}: negative CPU-seconds")

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def execution(self) -> float:
        return self.end - self.start

    @property
    def response(self) -> float:
        return self.end - self.submit

    @property
    def cpu_time(self) -> float:
        """CPU-seconds held: ``cpu_seconds`` when known, else ``procs_used * execution``."""
        return self.cpu_seconds if self.cpu_seconds is not None else self.procs_used * self.execution


def record_from_swf(job: SwfJob, source: str = "<swf>", line: int | None = None) -> JobRecord:
    """A record from an SWF result line. Needs submit, wait and run time; processors from field 5 (else 8);
    class from field 15 (1 long, 2 short); CPU-seconds from field 6 times field 5 when known."""
    for name in ("submit_time", "wait_time", "run_time"):
        if getattr(job, name) == UNKNOWN:
            raise WorkloadError(
                f"job {job.job_number}: {name.replace('_', ' ')} unknown (-1); metrics need finished jobs "
                "with submit, wait and run times",
                source,
                line,
            )
    used = job.allocated_processors if job.allocated_processors != UNKNOWN else job.requested_processors
    if used == UNKNOWN:
        raise WorkloadError(f"job {job.job_number}: number of processors unknown (fields 5 and 8)", source, line)
    requested = job.requested_processors if job.requested_processors != UNKNOWN else used
    start = job.submit_time + job.wait_time
    cpu = None if job.average_cpu_time_used == UNKNOWN else job.average_cpu_time_used * used
    try:
        return JobRecord(
            id=int(job.job_number),
            submit=float(job.submit_time),
            start=float(start),
            end=float(start + job.run_time),
            procs_requested=int(requested),
            procs_used=int(used),
            requested_time=None if job.requested_time == UNKNOWN else float(job.requested_time),
            job_class=CLASS_OF_QUEUE.get(int(job.queue_number)),
            cpu_seconds=cpu,
        )
    except WorkloadError as err:
        raise WorkloadError(err.message, source, line) from None


def records_from_swf(log: SwfLog) -> list[JobRecord]:
    """Records of every job of an SWF result log; duplicate job numbers are an error."""
    records: list[JobRecord] = []
    seen: dict[int, int] = {}
    for entry in log.job_lines:
        record = record_from_swf(entry.job, log.source, entry.line)
        if record.id in seen:
            raise WorkloadError(
                f"job {record.id} appears twice (first on line {seen[record.id]})", log.source, entry.line
            )
        seen[record.id] = entry.line
        records.append(record)
    return records


def swf_from_record(record: JobRecord, status: int = 1) -> SwfJob:
    """The SWF result line of a record (the inverse of :func:`record_from_swf`): field 6 holds CPU-seconds
    per allocated processor, field 15 the class (1 long, 2 short, -1 none)."""
    queue = {v: k for k, v in CLASS_OF_QUEUE.items()}.get(record.job_class or "", UNKNOWN)
    return SwfJob(
        job_number=record.id,
        submit_time=record.submit,
        wait_time=record.wait,
        run_time=record.execution,
        allocated_processors=record.procs_used,
        average_cpu_time_used=UNKNOWN if record.cpu_seconds is None else record.cpu_seconds / record.procs_used,
        requested_processors=record.procs_requested,
        requested_time=UNKNOWN if record.requested_time is None else record.requested_time,
        status=status,
        queue_number=queue,
    )


def result_log(records: Iterable[JobRecord], cpus: int | None = None, notes: Sequence[str] = (),
               status: Mapping[int, int] | None = None) -> SwfLog:  # fmt: skip
    """An SWF result log of finished jobs, in submission order, that :func:`records_from_swf` reads back;
    `status`: SWF status per job id (default 1, completed)."""
    header: dict[str, object] = {"Version": 2.2}
    if cpus is not None:
        header["MaxProcs"] = cpus
    if notes:
        header["Note"] = "\n".join(notes)
    ordered = sorted(records, key=lambda r: (r.submit, r.id))
    return make_log([swf_from_record(r, (status or {}).get(r.id, 1)) for r in ordered], header)


# ---------------------------------------------------------------- per job


def slowdown(wait: float, run: float) -> float | None:
    """``(wait + run) / run``; ``None`` when ``run == 0``."""
    return (wait + run) / run if run > 0 else None


def bounded_slowdown(wait: float, run: float, tau: float, floor: bool = True) -> float:
    """``max(1, (wait + run) / max(run, tau))`` with the floor, ``(wait + run) / max(run, tau)`` without."""
    if tau <= 0:
        raise ValueError("tau must be > 0")
    value = (wait + run) / max(run, tau)
    return max(1.0, value) if floor else value


def per_processor_bounded_slowdown(wait: float, run: float, procs: int, tau: float, floor: bool = True) -> float:
    """``max(1, (wait + run) / (procs * max(run, tau)))`` with the floor."""
    if tau <= 0:
        raise ValueError("tau must be > 0")
    value = (wait + run) / (procs * max(run, tau))
    return max(1.0, value) if floor else value


@dataclass(frozen=True)
class JobMetrics:
    id: int
    job_class: str | None
    wait: float
    execution: float
    response: float
    slowdown: float | None
    #: tau -> bounded slowdown with the max(1, .) floor
    bounded_slowdown: Mapping[float, float]
    #: tau -> bounded slowdown without the floor
    bounded_slowdown_nofloor: Mapping[float, float]
    #: tau -> per-processor bounded slowdown (with the floor)
    pp_bounded_slowdown: Mapping[float, float]
    late: bool | None
    tardiness: float | None
    cpu_seconds: float


def job_metrics(record: JobRecord, taus: Sequence[float] = DEFAULT_TAUS) -> JobMetrics:
    w, r = record.wait, record.execution
    late = None if record.deadline is None else record.end > record.deadline
    tardiness = None if record.deadline is None else max(0.0, record.end - record.deadline)
    return JobMetrics(
        id=record.id,
        job_class=record.job_class,
        wait=w,
        execution=r,
        response=record.response,
        slowdown=slowdown(w, r),
        bounded_slowdown={t: bounded_slowdown(w, r, t) for t in taus},
        bounded_slowdown_nofloor={t: bounded_slowdown(w, r, t, floor=False) for t in taus},
        pp_bounded_slowdown={t: per_processor_bounded_slowdown(w, r, record.procs_used, t) for t in taus},
        late=late,
        tardiness=tardiness,
        cpu_seconds=record.cpu_time,
    )


# ---------------------------------------------------------------- summaries


def mean(values: Iterable[float]) -> float | None:
    v = list(values)
    return sum(v) / len(v) if v else None


def geometric_mean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive values (zeros have none); ``None`` when there is none."""
    v = [x for x in values if x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def std(values: Iterable[float]) -> float | None:
    """Population standard deviation."""
    v = list(values)
    if not v:
        return None
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / len(v))


@dataclass(frozen=True)
class ClassSummary:
    job_class: str
    jobs: int
    mean_wait: float | None
    mean_execution: float | None
    mean_response: float | None
    geomean_response: float | None
    std_response: float | None
    max_response: float | None
    mean_slowdown: float | None
    mean_bounded_slowdown: Mapping[float, float | None]
    mean_bounded_slowdown_nofloor: Mapping[float, float | None]
    mean_pp_bounded_slowdown: Mapping[float, float | None]
    jobs_with_deadline: int
    late_jobs: int
    total_tardiness: float
    cpu_seconds: float


def class_summary(job_class: str, metrics: Sequence[JobMetrics], taus: Sequence[float] = DEFAULT_TAUS) -> ClassSummary:
    responses = [m.response for m in metrics]
    deadlines = [m for m in metrics if m.late is not None]
    return ClassSummary(
        job_class=job_class,
        jobs=len(metrics),
        mean_wait=mean(m.wait for m in metrics),
        mean_execution=mean(m.execution for m in metrics),
        mean_response=mean(responses),
        geomean_response=geometric_mean(responses),
        std_response=std(responses),
        max_response=max(responses) if responses else None,
        mean_slowdown=mean(m.slowdown for m in metrics if m.slowdown is not None),
        mean_bounded_slowdown={t: mean(m.bounded_slowdown[t] for m in metrics) for t in taus},
        mean_bounded_slowdown_nofloor={t: mean(m.bounded_slowdown_nofloor[t] for m in metrics) for t in taus},
        mean_pp_bounded_slowdown={t: mean(m.pp_bounded_slowdown[t] for m in metrics) for t in taus},
        jobs_with_deadline=len(deadlines),
        late_jobs=sum(1 for m in deadlines if m.late),
        total_tardiness=sum(m.tardiness or 0.0 for m in deadlines),
        cpu_seconds=sum(m.cpu_seconds for m in metrics),
    )


@dataclass(frozen=True)
class TurnaroundStep:
    """A block of ``step`` consecutive jobs in submission order (positions ``first``..``last``, from 1)."""

    first: int
    last: int
    mean_response: float
    #: mean response of all jobs up to ``last``
    cumulative_mean_response: float
    #: seconds from the first submission until every job up to ``last`` has finished
    completed_after: float


def turnaround_steps(records: Sequence[JobRecord], step: int = 10) -> tuple[TurnaroundStep, ...]:
    """Mean response every ``step`` jobs in submission order (ties by id); the last block may be short."""
    if step < 1:
        raise ValueError("step must be >= 1")
    ordered = sorted(records, key=lambda r: (r.submit, r.id))
    if not ordered:
        return ()
    origin = ordered[0].submit
    steps: list[TurnaroundStep] = []
    total = 0.0
    latest_end = -math.inf
    for first in range(0, len(ordered), step):
        block = ordered[first : first + step]
        total += sum(r.response for r in block)
        latest_end = max(latest_end, max(r.end for r in block))
        last = first + len(block)
        steps.append(
            TurnaroundStep(
                first=first + 1,
                last=last,
                mean_response=sum(r.response for r in block) / len(block),
                cumulative_mean_response=total / last,
                completed_after=float(latest_end - origin),
            )
        )
    return tuple(steps)


@dataclass(frozen=True)
class Summary:
    jobs: int
    cpus: int | None
    first_submit: float | None
    last_end: float | None
    makespan: float | None
    utilization: float | None
    throughput: float | None
    cpu_seconds: float
    taus: tuple[float, ...]
    #: "all" first, then "long", "short" and "unclassified" when present
    classes: Mapping[str, ClassSummary]
    turnaround: tuple[TurnaroundStep, ...]
    energy_j: float | None = None  # the node's energy over the run (the caller says how it was obtained)


def summarize(
    records: Sequence[JobRecord],
    cpus: int | None = None,
    taus: Sequence[float] = DEFAULT_TAUS,
    step: int = 10,
    energy_j: float | None = None,
) -> Summary:
    """Per-class and overall metrics of a run. ``cpus`` (machine size) is needed for utilization;
    ``energy_j`` is the node's energy over the run, if known."""
    if cpus is not None and cpus < 1:
        raise WorkloadError(f"cpus must be >= 1, got {cpus}")
    taus = tuple(float(t) for t in taus)
    if any(t <= 0 for t in taus):
        raise WorkloadError("tau must be > 0")
    metrics = [job_metrics(r, taus) for r in records]
    classes: dict[str, ClassSummary] = {ALL: class_summary(ALL, metrics, taus)}
    for name in ("long", "short"):
        group = [m for m in metrics if m.job_class == name]
        if group:
            classes[name] = class_summary(name, group, taus)
    other = [m for m in metrics if m.job_class not in ("long", "short")]
    if other and len(other) < len(metrics):
        classes[UNCLASSIFIED] = class_summary(UNCLASSIFIED, other, taus)
    first = min((float(r.submit) for r in records), default=None)
    last = max((float(r.end) for r in records), default=None)
    makespan = None if first is None or last is None else last - first
    cpu_seconds = sum(m.cpu_seconds for m in metrics)
    positive = makespan is not None and makespan > 0
    return Summary(
        jobs=len(records),
        cpus=cpus,
        first_submit=first,
        last_end=last,
        makespan=makespan,
        utilization=cpu_seconds / (cpus * makespan) if cpus is not None and positive else None,
        throughput=len(records) / makespan if positive else None,
        cpu_seconds=cpu_seconds,
        taus=taus,
        classes=classes,
        turnaround=turnaround_steps(records, step),
        energy_j=energy_j,
    )


# ---------------------------------------------------------------- occupancy over time


@dataclass(frozen=True)
class Segment:
    """A job holding ``cpus`` CPUs (``cpu_ids`` when known) from ``start`` to ``end``."""

    job_id: int
    start: float
    end: float
    cpus: float
    cpu_ids: tuple[int, ...] | None = None


def segments_from_records(records: Iterable[JobRecord]) -> list[Segment]:
    """One segment per job holding its average number of CPUs (CPU-seconds / execution time)."""
    out = []
    for r in records:
        if r.execution > 0:
            out.append(Segment(r.id, r.start, r.end, r.cpu_time / r.execution))
    return out


def busy_cpus(segments: Iterable[Segment]) -> tuple[list[float], list[float]]:
    """Step function of CPUs in use: ``busy[i]`` holds from ``times[i]`` to ``times[i + 1]``."""
    changes: dict[float, float] = {}
    for s in segments:
        if s.end > s.start:
            changes[s.start] = changes.get(s.start, 0.0) + s.cpus
            changes[s.end] = changes.get(s.end, 0.0) - s.cpus
    times = sorted(changes)
    busy: list[float] = []
    level = 0.0
    for t in times:
        level += changes[t]
        busy.append(0.0 if abs(level) < 1e-9 else level)
    return times, busy


# ---------------------------------------------------------------- relative performance

SPLIT_ATTRIBUTES = ("size", "requested_time", "requested_area", "run_time", "run_area")
THIRDS = ("lower", "middle", "upper")


def _attribute(record: JobRecord, name: str) -> float | None:
    if name == "size":
        return float(record.procs_requested)
    if name == "requested_time":
        return record.requested_time
    if name == "requested_area":
        return None if record.requested_time is None else record.procs_requested * record.requested_time
    if name == "run_time":
        return record.execution
    if name == "run_area":
        return record.procs_used * record.execution
    raise ValueError(f"unknown attribute {name!r}")


def response_ratio(response_a: float, response_b: float) -> float:
    """``response_b / response_a``: 1 when both are 0, infinity when only ``a`` is 0."""
    if response_a > 0:
        return response_b / response_a
    return 1.0 if response_b == 0 else math.inf


def verdict(ratio: float, tolerance: float = DEFAULT_TOLERANCE) -> str:
    """``"better"`` (b faster), ``"equal"`` (within tolerance) or ``"worse"``."""
    if ratio < 1 - tolerance:
        return "better"
    if ratio > 1 + tolerance:
        return "worse"
    return "equal"


@dataclass(frozen=True)
class Share:
    """Fractions of a set of jobs for which b is better / equal / worse than a."""

    jobs: int
    better: float | None
    equal: float | None
    worse: float | None
    geomean_ratio: float | None


def _share(ratios: Sequence[float], tolerance: float) -> Share:
    n = len(ratios)
    if n == 0:
        return Share(0, None, None, None, None)
    verdicts = [verdict(r, tolerance) for r in ratios]
    finite = [r for r in ratios if math.isfinite(r)]
    return Share(
        jobs=n,
        better=verdicts.count("better") / n,
        equal=verdicts.count("equal") / n,
        worse=verdicts.count("worse") / n,
        geomean_ratio=geometric_mean(finite),
    )


@dataclass(frozen=True)
class Third:
    attribute: str
    part: str
    low: float | None
    high: float | None
    share: Share


@dataclass(frozen=True)
class RelativePerformance:
    label_a: str
    label_b: str
    tolerance: float
    #: job id -> response_b / response_a
    ratios: Mapping[int, float]
    overall: Share
    #: attribute -> its three thirds (lower, middle, upper); jobs without the attribute are left out
    thirds: Mapping[str, tuple[Third, ...]]
    #: job class -> share, for the classes present in run a
    by_class: Mapping[str, Share]

    def cdf(self) -> tuple[list[float], list[float]]:
        """Sorted ratios and the fraction of jobs with a ratio <= each of them."""
        values = sorted(self.ratios.values())
        n = len(values)
        return values, [(i + 1) / n for i in range(n)]


def relative_performance(
    a: Sequence[JobRecord],
    b: Sequence[JobRecord],
    tolerance: float = DEFAULT_TOLERANCE,
    label_a: str = "a",
    label_b: str = "b",
) -> RelativePerformance:
    """Compare two runs of the same workload job by job (matched by id)."""
    if not 0 <= tolerance < 1:
        raise WorkloadError(f"tolerance must be in [0, 1), got {tolerance}")
    by_id_a = _by_id(a, label_a)
    by_id_b = _by_id(b, label_b)
    missing_b = sorted(set(by_id_a) - set(by_id_b))
    missing_a = sorted(set(by_id_b) - set(by_id_a))
    if missing_a or missing_b:
        parts = []
        if missing_b:
            parts.append(f"{label_b} lacks job(s) {_ids(missing_b)}")
        if missing_a:
            parts.append(f"{label_a} lacks job(s) {_ids(missing_a)}")
        raise WorkloadError("the two runs are not of the same jobs: " + "; ".join(parts))
    ids = sorted(by_id_a)
    ratios = {i: response_ratio(by_id_a[i].response, by_id_b[i].response) for i in ids}
    thirds: dict[str, tuple[Third, ...]] = {}
    for attribute in SPLIT_ATTRIBUTES:
        keyed = [(_attribute(by_id_a[i], attribute), i) for i in ids]
        known = sorted((v, i) for v, i in keyed if v is not None)
        parts = np.array_split(np.arange(len(known)), 3)
        thirds[attribute] = tuple(
            Third(
                attribute,
                name,
                known[int(idx[0])][0] if len(idx) else None,
                known[int(idx[-1])][0] if len(idx) else None,
                _share([ratios[known[int(k)][1]] for k in idx], tolerance),
            )
            for name, idx in zip(THIRDS, parts, strict=True)
        )
    by_class: dict[str, Share] = {}
    for name in ("long", "short"):
        members = [ratios[i] for i in ids if by_id_a[i].job_class == name]
        if members:
            by_class[name] = _share(members, tolerance)
    return RelativePerformance(
        label_a, label_b, tolerance, ratios, _share(list(ratios.values()), tolerance), thirds, by_class
    )


def _by_id(records: Sequence[JobRecord], label: str) -> dict[int, JobRecord]:
    out: dict[int, JobRecord] = {}
    for r in records:
        if r.id in out:
            raise WorkloadError(f"run {label}: job {r.id} appears twice")
        out[r.id] = r
    return out


def _ids(ids: Sequence[int], limit: int = 10) -> str:
    shown = ", ".join(str(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
