"""The launcher's Prometheus metrics: jobs queued/running/suspended, submissions, starts, ends by cause
and the wait-time histogram, all from the job store (so they agree with `vmq`/`vmacct` and survive a
launcher restart: after one, the first scrape counts the whole history again).

Scrapes run in prometheus_client's threads, so they read SQLite through their own read-only connection,
and only the events added since the previous scrape.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from vmsched.launcher.lifecycle import FINISHED, HOLDING, JobState
from vmsched.launcher.store import events_after, open_reader, state_counts

# Waits run from seconds (an idle node) to hours (a full queue).
WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)


def job_gauges(counts: dict[tuple[str, bool], int]) -> GaugeMetricFamily:
    g = GaugeMetricFamily("vmsched_jobs", "Jobs by state: queued, running, suspended", labels=["state"])
    g.add_metric(["queued"], sum(n for (s, _), n in counts.items() if s == JobState.QUEUED))
    g.add_metric(["running"], sum(n for (s, susp), n in counts.items() if s in HOLDING and not susp))
    g.add_metric(["suspended"], sum(n for (s, susp), n in counts.items() if s in HOLDING and susp))
    return g


def end_counters(counts: dict[tuple[str, bool], int], requeues: int) -> CounterMetricFamily:
    """Ends by cause: the final states, and 'requeued' (a run that ended and went back to the queue)."""
    c = CounterMetricFamily("vmsched_job_ends", "Job runs that ended, by cause", labels=["cause"])
    for state in FINISHED:
        c.add_metric([state.value], sum(n for (s, _), n in counts.items() if s == state))
    c.add_metric(["requeued"], requeues)
    return c


class LauncherCollector:
    def __init__(self, db_path: Path, policy: Callable[[], str], paused: Callable[[], bool]) -> None:
        self.db_path = db_path
        self.policy = policy
        self.paused = paused
        self._lock = threading.Lock()  # scrapes may come in parallel; the event cursor is shared
        self._last_event = 0
        self._starts = 0
        self._requeues = 0
        self._wait = Histogram("vmsched_job_wait_seconds", "Time from submission to start, per start",
                               buckets=WAIT_BUCKETS, registry=None)  # fmt: skip

    def collect(self) -> Iterator[Metric]:
        with self._lock, closing(open_reader(self.db_path)) as db:
            for rowid, kind, since_submit in events_after(db, self._last_event, ("start", "requeue")):
                self._last_event = rowid
                if kind == "start":
                    self._starts += 1
                    self._wait.observe(max(0.0, since_submit))
                else:
                    self._requeues += 1
            counts = state_counts(db)
            starts, requeues = self._starts, self._requeues
        info = GaugeMetricFamily("vmsched_launcher_info", "The launcher's active policy", labels=["policy"])
        info.add_metric([self.policy()], 1)
        yield info
        yield GaugeMetricFamily("vmsched_queue_paused", "1 while the queue is held (no job is started)",
                                value=float(self.paused()))  # fmt: skip
        yield job_gauges(counts)
        yield CounterMetricFamily("vmsched_job_submissions", "Jobs submitted", value=sum(counts.values()))
        yield CounterMetricFamily("vmsched_job_starts", "Job starts (a requeued job starts again)", value=starts)
        yield end_counters(counts, requeues)
        yield from self._wait.collect()
