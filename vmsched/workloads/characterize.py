"""Workload characterization by job class and time of week.

The technique of Santos & Góes (reference/workload-characterization.txt, in Portuguese):

1. Jobs with run time >= 1 s and size >= 1 processor are kept (the paper's selection).
2. The medians of size (allocated processors, else requested) and run time are the thresholds: a job is
   ``L`` (low) in a dimension when its value is <= the median, ``H`` otherwise. Classes: ``LL``, ``LH``,
   ``HL``, ``HH`` = size level then run-time level (``LH`` = few processors, long run).
3. Jobs are grouped by weekday (Sunday..Saturday) and hour of submission (0..23). Each hour that has jobs
   starts as a group with the percentages of the four classes among its jobs.
4. Two consecutive groups (the second starts the hour after the first ends) whose four percentages differ
   by at most ``threshold`` percentage points are merged: the group spans both intervals and its
   percentages are the plain averages of the two groups' percentages, as in the paper. Merging proceeds
   left to right (a merged group is compared with the next) and is repeated until nothing merges. Hours
   without jobs form no group and so separate their neighbours.

SWF submit times are seconds since the start of the log. The calendar position of a job is taken from
the header's ``UnixStartTime`` (with ``TimeZoneString``, or else ``TimeZone`` seconds added, else UTC);
without ``UnixStartTime`` the log is taken to start on a Sunday at 00:00 (documented default, override
with ``start=``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.swf import UNKNOWN, SwfJob, SwfLog, header_number

CLASSES = ("HH", "HL", "LL", "LH")
WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
DEFAULT_THRESHOLD = 10.0
DEFAULT_START_DESCRIPTION = "no UnixStartTime in the header: time 0 taken as Sunday 00:00"


@dataclass(frozen=True)
class Group:
    first_hour: int
    last_hour: int
    #: class -> percentage of the group's jobs (averaged pairwise when groups merge)
    percent: dict[str, float]
    jobs: int

    @property
    def interval(self) -> str:
        return str(self.first_hour) if self.first_hour == self.last_hour else f"[{self.first_hour}-{self.last_hour}]"


@dataclass(frozen=True)
class Characterization:
    jobs: int
    excluded: int
    median_size: float
    median_runtime: float
    counts: dict[str, int]
    threshold: float
    start: str
    #: weekday name -> its groups, in hour order
    weekdays: dict[str, tuple[Group, ...]]


def job_size(job: SwfJob) -> float:
    """Allocated processors, else requested ones (``-1`` when neither is known)."""
    return job.allocated_processors if job.allocated_processors != UNKNOWN else job.requested_processors


def classify(size: float, runtime: float, median_size: float, median_runtime: float) -> str:
    """The paper's rule: ``<=`` the median is low."""
    return ("L" if size <= median_size else "H") + ("L" if runtime <= median_runtime else "H")


def merge_groups(groups: Sequence[Group], threshold: float = DEFAULT_THRESHOLD) -> tuple[Group, ...]:
    """Merge consecutive groups whose percentages differ by at most ``threshold`` points, until stable."""
    current = list(groups)
    changed = True
    while changed:
        changed = False
        merged: list[Group] = []
        for group in current:
            if merged and _mergeable(merged[-1], group, threshold):
                prev = merged.pop()
                merged.append(
                    Group(
                        prev.first_hour,
                        group.last_hour,
                        {c: (prev.percent[c] + group.percent[c]) / 2 for c in CLASSES},
                        prev.jobs + group.jobs,
                    )
                )
                changed = True
            else:
                merged.append(group)
        current = merged
    return tuple(current)


def _mergeable(a: Group, b: Group, threshold: float) -> bool:
    return a.last_hour + 1 == b.first_hour and all(abs(a.percent[c] - b.percent[c]) <= threshold for c in CLASSES)


def log_start(log: SwfLog) -> tuple[datetime | None, str]:
    """The local date and time of submit time 0, from the header, and a description of where it came from."""
    unix_start = header_number(log, "UnixStartTime")
    if unix_start is None:
        return None, DEFAULT_START_DESCRIPTION
    zone: tzinfo = UTC
    name = log.header.get("TimeZoneString", "").strip()
    offset = header_number(log, "TimeZone")
    if name:
        try:
            zone = ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise WorkloadError(f"unknown TimeZoneString {name!r}", log.source) from None
        how = f"UnixStartTime {unix_start:g} in {name}"
    elif offset is not None:
        zone = _FixedOffset(offset)
        how = f"UnixStartTime {unix_start:g} + TimeZone {offset:g} s"
    else:
        how = f"UnixStartTime {unix_start:g} (UTC, no time zone in the header)"
    return datetime.fromtimestamp(unix_start, zone), how


class _FixedOffset(tzinfo):
    def __init__(self, seconds: float):
        self._offset = timedelta(seconds=seconds)

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return self._offset

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return f"UTC{self._offset.total_seconds() / 3600:+g}"


def weekday_hour(submit: float, start: datetime | None) -> tuple[int, int]:
    """Weekday (0 = Sunday) and hour of a submit time (seconds since the log start)."""
    if start is None:
        seconds = int(submit // 1)
        return (seconds // 86400) % 7, (seconds // 3600) % 24
    if start.tzinfo is None:  # a wall-clock start without a zone: plain arithmetic, no DST
        when = start + timedelta(seconds=submit)
    else:
        when = (start.astimezone(UTC) + timedelta(seconds=submit)).astimezone(start.tzinfo)
    return (when.weekday() + 1) % 7, when.hour


def characterize(log: SwfLog, threshold: float = DEFAULT_THRESHOLD, start: datetime | None = None) -> Characterization:
    """Classify the jobs of a log by median size and run time and group the hours of each weekday."""
    if threshold < 0:
        raise WorkloadError(f"threshold must be >= 0, got {threshold}")
    if start is not None:
        how = f"given start {start.isoformat()}"
    else:
        start, how = log_start(log)
    selected = [j for j in log.jobs if j.run_time >= 1 and job_size(j) >= 1 and j.submit_time != UNKNOWN]
    if not selected:
        raise WorkloadError("no job with run time >= 1 s and at least 1 processor", log.source)
    sizes = np.array([job_size(j) for j in selected], dtype=float)
    runtimes = np.array([j.run_time for j in selected], dtype=float)
    median_size = float(np.median(sizes))
    median_runtime = float(np.median(runtimes))
    counts = dict.fromkeys(CLASSES, 0)
    buckets: dict[tuple[int, int], dict[str, int]] = {}
    for job, size, runtime in zip(selected, sizes, runtimes, strict=True):
        cls = classify(size, runtime, median_size, median_runtime)
        counts[cls] += 1
        bucket = buckets.setdefault(weekday_hour(job.submit_time, start), dict.fromkeys(CLASSES, 0))
        bucket[cls] += 1
    weekdays: dict[str, tuple[Group, ...]] = {}
    for day, name in enumerate(WEEKDAYS):
        hourly = []
        for hour in range(24):
            bucket = buckets.get((day, hour))
            if bucket:
                total = sum(bucket.values())
                hourly.append(Group(hour, hour, {c: 100.0 * bucket[c] / total for c in CLASSES}, total))
        weekdays[name] = merge_groups(hourly, threshold)
    return Characterization(
        jobs=len(selected),
        excluded=len(log.jobs) - len(selected),
        median_size=median_size,
        median_runtime=median_runtime,
        counts=counts,
        threshold=threshold,
        start=how,
        weekdays=weekdays,
    )
