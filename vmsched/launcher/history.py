"""Turn the launcher's accounting rows (`vmacct --json`) into the plain records of `vmsched.workloads.metrics`:
per-job records for the metrics, and partition segments for the plots. Used by the demo and by
`vmreplay`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from vmsched.workloads.metrics import JobRecord, Segment


def job_records(rows: Iterable[dict[str, Any]]) -> list[JobRecord]:
    """Finished jobs that ran, as metric records (procs used = ranks; CPU-seconds from the history)."""
    out = []
    for r in rows:
        if r["start_time"] is None or r["end_time"] is None:
            continue
        out.append(JobRecord(
            id=r["id"], submit=r["submit_time"], start=r["start_time"], end=r["end_time"],
            procs_requested=r["nranks"], procs_used=r["nranks"],
            requested_time=r.get("time_limit") or r.get("estimate"), job_class=r["job_class"],
            deadline=r.get("deadline"), cpu_seconds=r["cpu_seconds"],
        ))  # fmt: skip
    return out


def partition_segments(rows: Sequence[dict[str, Any]], cpu_index: dict[int, int] | None = None) -> list[Segment]:
    """One segment per stretch of time a job held the same CPUs. `cpu_index` maps OS CPU numbers to
    rows of the plot (default: the CPUs seen, in order)."""
    if cpu_index is None:
        seen = sorted({c for r in rows for p in r["partitions"] for c in p["cpus"]})
        cpu_index = {c: i for i, c in enumerate(seen)}
    out = []
    for r in rows:
        parts = [p for p in r["partitions"] if p["cpus"]]
        end = r["end_time"]
        if not parts or end is None:
            continue
        for p, nxt in zip(parts, [*parts[1:], None], strict=True):
            stop = min(nxt["time"], end) if nxt else end
            start = max(p["time"], r["start_time"] or p["time"])
            if stop > start:
                ids = tuple(cpu_index[c] for c in p["cpus"] if c in cpu_index)
                out.append(Segment(r["id"], start, stop, len(p["cpus"]), ids))
    return out
