"""The CPU manager's Prometheus metrics: CPUs, every job's partition, MPL, queue type and LBD state,
quantum cost, repartitions and token hand-offs.

`families()` is a pure function of the same status that `vmcpu --json` shows, so the two cannot
disagree; the collector only reads it at scrape time (in prometheus_client's thread: the status is a
read of the shared table, which the ranks write concurrently anyway, and of a few ints).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from vmsched.cpumanager import shm_layout as L

# A quantum is ~10 ms of which reconciling takes well under a millisecond; the upper buckets show a loop
# that falls behind.
QUANTUM_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


def quantum_histogram() -> Histogram:
    """Observed by the daemon around each reconcile; not in any registry, the collector yields it."""
    return Histogram("vmsched_quantum_duration_seconds", "Time one quantum's reconcile took",
                     buckets=QUANTUM_BUCKETS, registry=None)  # fmt: skip


def _enum(name: str, doc: str, label: str, states: list[str], per_job: list[tuple[str, str]]) -> GaugeMetricFamily:
    """The Prometheus way to show a state: one series per possible value, 1 for the current one."""
    g = GaugeMetricFamily(name, doc, labels=["job", label])
    for job, current in per_job:
        for s in states:
            g.add_metric([job, s], float(s == current))
    return g


def families(st: dict[str, Any], repartitions: int, handoffs: int) -> list[Metric]:
    """Metric families from a `status` reply (the `vmcpu --json` document) and the manager's counters."""
    jobs = st["jobs"]
    used = sum(len(j["cpus"]) for j in jobs)
    out: list[Metric] = [
        GaugeMetricFamily("vmsched_cpus_managed", "CPUs the CPU manager manages", value=len(st["cpus"])),
        GaugeMetricFamily("vmsched_cpus_idle", "Managed CPUs in no job's partition", value=len(st["cpus"]) - used),
        GaugeMetricFamily(
            "vmsched_wait_queue_nonempty",
            "1 while the launcher has jobs waiting (no equipartition)",
            value=float(st["queue_waiting"]),
        ),
        CounterMetricFamily("vmsched_quanta", "Quanta run since the shared table was created", value=st["quanta"]),
        CounterMetricFamily(
            "vmsched_repartitions", "Changes of a job's partition (one per job per change)", value=repartitions
        ),
        CounterMetricFamily(
            "vmsched_token_handoffs", "Times a rank gave its CPU (token) to a sibling at an MPI wait", value=handoffs
        ),
    ]
    per_job = {
        "vmsched_job_partition_cpus": ("CPUs in the job's partition (P)", "cpus"),
        "vmsched_job_mpl": ("Multiprogramming level: ranks per CPU, ceil(N / P)", "mpl"),
        "vmsched_job_max_mpl": ("Most the job may be folded", "max_mpl"),
        "vmsched_job_ranks": ("MPI ranks of the job (N)", "nranks"),
        "vmsched_job_ranks_registered": ("Ranks registered in the shared table", "registered"),
        "vmsched_job_suspended": ("1 while the job is suspended", "suspended"),
        "vmsched_job_lbd_cvcs": ("LBD: coefficient of variation of the ranks' context switches", "cvcs"),
        "vmsched_job_lbd_idleness_ratio": ("LBD: idleness percentage IP as a ratio (below the threshold: local)", "ip"),
    }
    for name, (doc, key) in per_job.items():
        g = GaugeMetricFamily(name, doc, labels=["job"])
        for j in jobs:
            value = j[key]
            g.add_metric([str(j["job"])], float(len(value) if isinstance(value, list) else value))
        out.append(g)
    out.append(_enum("vmsched_job_queue", "The job's queue type (1 = current)", "queue",
                     list(L.QUEUE_NAMES.values()), [(str(j["job"]), j["queue"]) for j in jobs]))  # fmt: skip
    out.append(_enum("vmsched_job_lbd_phase", "The Load Balancing Detector's phase for the job (1 = current)",
                     "phase", list(L.LBD_NAMES.values()), [(str(j["job"]), j["lbd"]) for j in jobs]))  # fmt: skip
    return out


class Source(Protocol):
    """What the collector reads: the CPU manager (`manager.CpuManager`)."""

    repartitions: int

    def status(self, msg: dict[str, Any]) -> dict[str, Any]: ...

    def token_handoffs(self) -> int: ...


class CpuManagerCollector:
    def __init__(self, mgr: Source, quantum: Histogram) -> None:
        self.mgr = mgr
        self.quantum = quantum
        self._lock = threading.Lock()
        self._handoffs = 0

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            # Never backwards: a rank freed while we read may be counted in neither or both of its halves
            # (live slots, retired sum); a counter that went down would read as a reset.
            self._handoffs = max(self._handoffs, self.mgr.token_handoffs())
            handoffs = self._handoffs
        yield from families(self.mgr.status({}), self.mgr.repartitions, handoffs)
        yield from self.quantum.collect()
