"""vmsim against textbook backfilling: rigid jobs, perfect estimates, start times identical job by job
(tests/textbook.py is written for these tests and shares no code with vmsched)."""

from __future__ import annotations

import random

import pytest

from tests.conftest import SHARED_DATA
from tests.textbook import conservative, easy
from vmsched.launcher.policy import parse_policy_spec
from vmsched.launcher.policy.snapshot import QueuedJob
from vmsched.sim.engine import simulate
from vmsched.sim.workload import from_swf
from vmsched.workloads.swf import read_swf

LUBLIN = SHARED_DATA / "lublin_256.swf"


def _vmsim_starts(jobs: list[tuple[int, float, float, int]], ncpus: int, spec: str) -> dict[int, float]:
    runs = {j[0]: j[2] for j in jobs}
    queued = [QueuedJob(jid, submit, "u", (procs,), 1, "short", run) for jid, submit, run, procs in jobs]
    records = simulate(queued, ncpus, parse_policy_spec(spec), lambda job, n, c: runs[job.job_id])
    return {r.job_id: r.start for r in records}


def _lublin() -> list[tuple[int, float, float, int]]:
    """The log as vmsim reads it (rigid, perfect estimates), as (id, submit, run time, processors)."""
    workload = from_swf(read_swf(LUBLIN), estimates="perfect", moldability="none")
    return [(s.job.job_id, s.job.submit_time, s.runtime, s.job.procs[0]) for s in workload.jobs]


def _mismatches(a: dict[int, float], b: dict[int, float]) -> list[tuple[int, float, float]]:
    assert a.keys() == b.keys()
    return [(j, a[j], b[j]) for j in sorted(a) if a[j] != b[j]][:5]


def test_easy_on_the_10000_job_lublin_log_starts_every_job_when_textbook_easy_does() -> None:
    jobs = _lublin()
    assert len(jobs) == 10_000
    ref = easy(jobs, 256)
    assert _mismatches(_vmsim_starts(jobs, 256, "fcfs+easy:abort"), ref) == []
    # Not a trivial agreement: jobs do wait, and some start ahead of their turn.
    assert sum(ref[j] - s for j, s, _, _ in jobs) > 0
    order = sorted(jobs, key=lambda j: (j[1], j[0]))
    assert any(ref[a[0]] > ref[b[0]] for a, b in zip(order, order[1:], strict=False))


def test_conservative_on_the_lublin_log_starts_every_job_when_textbook_conservative_does() -> None:
    jobs = _lublin()
    jobs = jobs[:3000]  # the whole log takes longer than a test should (bench/vmsim_speed.py runs it)
    assert _mismatches(_vmsim_starts(jobs, 256, "fcfs+conservative:abort"), conservative(jobs, 256)) == []


def _generated(seed: int, n: int, ncpus: int) -> list[tuple[int, float, float, int]]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for jid in range(1, n + 1):
        t += round(rng.expovariate(1 / 40.0))  # whole seconds: many arrivals and ends at the same instant
        procs = rng.choice([1, 1, 2, 3, 4, ncpus // 2, ncpus])
        jobs.append((jid, t, float(rng.randint(1, 400)), procs))
    return jobs


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ncpus", [8, 32])
def test_generated_logs_give_textbook_start_times(seed: int, ncpus: int) -> None:
    jobs = _generated(seed, 400, ncpus)
    assert _mismatches(_vmsim_starts(jobs, ncpus, "fcfs+easy:none"), easy(jobs, ncpus)) == []
    assert _mismatches(_vmsim_starts(jobs, ncpus, "fcfs+conservative:none"), conservative(jobs, ncpus)) == []


def test_the_textbook_schedulers_differ_from_each_other_and_from_fcfs() -> None:
    """The yardsticks themselves must tell policies apart, or agreeing with them proves nothing."""
    jobs = _generated(1, 400, 8)
    plain = _vmsim_starts(jobs, 8, "fcfs")
    assert easy(jobs, 8) != plain
    assert conservative(jobs, 8) != easy(jobs, 8)
