"""Metrics on hand-computed examples."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.metrics import (
    JobRecord,
    Segment,
    bounded_slowdown,
    busy_cpus,
    geometric_mean,
    job_metrics,
    per_processor_bounded_slowdown,
    records_from_swf,
    relative_performance,
    response_ratio,
    result_log,
    segments_from_records,
    slowdown,
    std,
    summarize,
    turnaround_steps,
    verdict,
)
from vmsched.workloads.swf import format_swf, parse_swf, read_swf

# j1 long: waits 0, runs 100 on 2 CPUs            -> response 100
# j2 short: waits 40, runs 5 on 1 CPU              -> response 45
# j3 long: waits 80, runs 200 on 2, deadline 250   -> response 280, 50 s late
# j4 short: runs 0 s, never waits                  -> response 0
J1 = JobRecord(1, submit=0, start=0, end=100, procs_requested=2, procs_used=2, requested_time=150, job_class="long")
J2 = JobRecord(2, submit=10, start=50, end=55, procs_requested=1, procs_used=1, requested_time=10, job_class="short")
J3 = JobRecord(
    3, submit=20, start=100, end=300, procs_requested=2, procs_used=2, job_class="long", deadline=250, cpu_seconds=300
)
J4 = JobRecord(4, submit=30, start=30, end=30, procs_requested=1, procs_used=1, job_class="short", deadline=40)
RUN = [J1, J2, J3, J4]


def test_slowdowns_with_and_without_the_floor() -> None:
    assert slowdown(40, 5) == 9
    assert slowdown(3, 0) is None
    assert bounded_slowdown(40, 5, 10) == 4.5
    assert bounded_slowdown(40, 5, 100) == 1.0  # 45 / 100 floored at 1
    assert bounded_slowdown(40, 5, 100, floor=False) == pytest.approx(0.45)
    assert bounded_slowdown(80, 200, 10) == pytest.approx(1.4)
    assert per_processor_bounded_slowdown(80, 200, 2, 10) == 1.0  # 280 / 400 floored
    assert per_processor_bounded_slowdown(80, 200, 2, 10, floor=False) == pytest.approx(0.7)
    assert per_processor_bounded_slowdown(40, 5, 1, 10) == 4.5
    with pytest.raises(ValueError):
        bounded_slowdown(1, 1, 0)


def test_per_job_metrics() -> None:
    m2 = job_metrics(J2, taus=(10, 100))
    assert (m2.wait, m2.execution, m2.response, m2.slowdown) == (40, 5, 45, 9)
    assert m2.bounded_slowdown == {10: 4.5, 100: 1.0}
    assert m2.bounded_slowdown_nofloor == pytest.approx({10: 4.5, 100: 0.45})
    assert m2.late is None and m2.tardiness is None and m2.cpu_seconds == 5
    m3 = job_metrics(J3)
    assert m3.late is True and m3.tardiness == 50 and m3.cpu_seconds == 300  # the record's own CPU-seconds
    m4 = job_metrics(J4)
    assert m4.slowdown is None and m4.bounded_slowdown[10.0] == 1.0 and m4.bounded_slowdown_nofloor[10.0] == 0
    assert m4.late is False and m4.tardiness == 0


def test_summary_means_geometric_mean_std_and_classes() -> None:
    s = summarize(RUN, cpus=4, taus=(10, 100), step=2)
    a = s.classes["all"]
    responses = [100, 45, 280, 0]
    assert a.jobs == 4
    assert a.mean_response == pytest.approx(106.25)
    assert a.geomean_response == pytest.approx((100 * 45 * 280) ** (1 / 3))  # zero response left out
    mean = 106.25
    assert a.std_response == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in responses) / 4))
    assert a.mean_wait == pytest.approx(30) and a.mean_execution == pytest.approx(76.25)
    assert a.mean_slowdown == pytest.approx((1 + 9 + 1.4) / 3)  # the 0-second job has no slowdown
    assert a.mean_bounded_slowdown[10] == pytest.approx((1 + 4.5 + 1.4 + 1) / 4)
    assert a.mean_bounded_slowdown_nofloor[100] == pytest.approx((1 + 0.45 + 280 / 200 + 0) / 4)
    assert a.mean_pp_bounded_slowdown[10] == pytest.approx((1 + 4.5 + 1 + 1) / 4)
    assert (a.jobs_with_deadline, a.late_jobs, a.total_tardiness) == (2, 1, 50)
    assert a.cpu_seconds == 200 + 5 + 300 + 0
    assert list(s.classes) == ["all", "long", "short"]
    assert s.classes["long"].mean_response == pytest.approx(190)
    assert s.classes["short"].mean_response == pytest.approx(22.5)
    assert s.classes["short"].geomean_response == pytest.approx(45)
    assert s.makespan == 300 and s.first_submit == 0 and s.last_end == 300
    assert s.utilization == pytest.approx(505 / (4 * 300))
    assert s.throughput == pytest.approx(4 / 300)


def test_turnaround_every_k_jobs_in_submission_order() -> None:
    first, second = turnaround_steps([J4, J3, J2, J1], step=2)
    assert (first.first, first.last, first.mean_response, first.completed_after) == (1, 2, 72.5, 100)
    assert first.cumulative_mean_response == 72.5
    assert (second.first, second.last, second.mean_response) == (3, 4, 140)
    assert second.cumulative_mean_response == pytest.approx(106.25)
    assert second.completed_after == 300
    assert len(turnaround_steps(RUN * 1, step=3)) == 2  # 3 + a short last block of 1


def test_unclassified_jobs_get_their_own_row() -> None:
    plain = JobRecord(9, 0, 1, 2, 1, 1)
    s = summarize([J1, plain])
    assert list(s.classes) == ["all", "long", "unclassified"]
    assert s.utilization is None  # no machine size given
    assert list(summarize([plain]).classes) == ["all"]


def test_small_helpers() -> None:
    assert geometric_mean([1, 4, 16]) == pytest.approx(4)
    assert geometric_mean([0, 0]) is None
    assert std([2, 4, 4, 4, 5, 5, 7, 9]) == 2
    assert response_ratio(10, 5) == 0.5 and response_ratio(0, 0) == 1 and response_ratio(0, 1) == math.inf
    assert [verdict(r, 0.05) for r in (0.94, 0.95, 1.05, 1.06)] == ["better", "equal", "equal", "worse"]


def test_bad_records_are_rejected() -> None:
    with pytest.raises(WorkloadError, match="job 5: starts"):
        JobRecord(5, submit=10, start=5, end=20, procs_requested=1, procs_used=1)
    with pytest.raises(WorkloadError, match="job 5: ends"):
        JobRecord(5, submit=0, start=5, end=4, procs_requested=1, procs_used=1)
    with pytest.raises(WorkloadError, match="processor counts"):
        JobRecord(5, 0, 0, 1, 0, 1)


def test_occupancy_step_function() -> None:
    times, busy = busy_cpus([Segment(1, 0, 10, 2), Segment(2, 5, 15, 1), Segment(3, 15, 20, 2)])
    assert times == [0, 5, 10, 15, 20]
    assert busy == [2, 3, 1, 2, 0]
    segs = segments_from_records([J1, J3, J4])
    assert [(s.job_id, s.cpus) for s in segs] == [(1, 2.0), (3, 1.5)]  # J3 held 300 CPU-s over 200 s


def _run(responses: list[float], sizes: list[int], runs: list[float], requested: list[float | None]) -> list[JobRecord]:
    out = []
    for i, (resp, size, run, req) in enumerate(zip(responses, sizes, runs, requested, strict=True), start=1):
        out.append(JobRecord(i, 0, resp - run, resp, size, size, req, "long" if i % 2 else "short"))
    return out


def test_relative_performance_and_its_split_by_thirds() -> None:
    sizes = [1, 1, 2, 2, 4, 4]
    runs_a = [10, 20, 30, 40, 50, 60]
    a = _run([10, 20, 30, 40, 50, 60], sizes, runs_a, [60, 50, 40, 30, 20, None])
    b = _run([5, 20.5, 45, 40, 25, 90], sizes, [5, 20, 30, 40, 25, 60], [60, 50, 40, 30, 20, None])
    rel = relative_performance(a, b, tolerance=0.05, label_a="fcfs", label_b="fjt")
    assert rel.ratios == pytest.approx({1: 0.5, 2: 1.025, 3: 1.5, 4: 1.0, 5: 0.5, 6: 1.5})
    assert (rel.overall.better, rel.overall.equal, rel.overall.worse) == pytest.approx((2 / 6, 2 / 6, 2 / 6))
    assert rel.overall.geomean_ratio == pytest.approx((0.5 * 1.025 * 1.5 * 1.0 * 0.5 * 1.5) ** (1 / 6))
    lower, middle, upper = rel.thirds["size"]
    assert (lower.low, lower.high, lower.share.better, lower.share.equal, lower.share.worse) == (1, 1, 0.5, 0.5, 0)
    assert (middle.share.better, middle.share.equal, middle.share.worse) == (0, 0.5, 0.5)
    assert (upper.low, upper.share.better, upper.share.worse) == (4, 0.5, 0.5)
    # run time comes from run a (the reference): jobs 1-2, 3-4, 5-6
    assert [t.share.jobs for t in rel.thirds["run_time"]] == [2, 2, 2]
    assert rel.thirds["run_area"][0].high == 20
    # job 6 has no requested time: left out of that split (5 jobs -> 2, 2, 1)
    req = rel.thirds["requested_time"]
    assert [t.share.jobs for t in req] == [2, 2, 1]
    assert (req[0].low, req[0].high, req[0].share.better) == (20, 30, 0.5)  # jobs 5 and 4
    assert [t.share.jobs for t in rel.thirds["requested_area"]] == [2, 2, 1]
    assert rel.by_class["long"].jobs == 3 and rel.by_class["long"].worse == pytest.approx(1 / 3)
    values, fractions = rel.cdf()
    assert values == sorted(rel.ratios.values()) and fractions[-1] == 1 and fractions[0] == pytest.approx(1 / 6)


def test_relative_performance_needs_the_same_jobs() -> None:
    a = _run([10, 20, 30], [1, 1, 1], [1, 1, 1], [None] * 3)
    with pytest.raises(WorkloadError, match=r"b lacks job\(s\) 3"):
        relative_performance(a, a[:2])
    with pytest.raises(WorkloadError, match="job 1 appears twice"):
        relative_performance(a + a[:1], a)


RESULT = """; MaxProcs: 2
1 0 0 100 2 50 -1 2 150 -1 1 -1 -1 0 1 -1 -1 -1
2 10 40 5 1 -1 -1 1 10 -1 1 -1 -1 2 2 -1 -1 -1
"""


def test_records_from_an_swf_result(tmp_path: Path) -> None:
    path = tmp_path / "r.swf"
    path.write_text(RESULT)
    r1, r2 = records_from_swf(read_swf(path))
    assert (r1.id, r1.submit, r1.start, r1.end, r1.job_class, r1.cpu_time) == (1, 0, 0, 100, "long", 100)
    assert (r2.wait, r2.execution, r2.job_class, r2.cpu_time, r2.requested_time) == (40, 5, "short", 5, 10)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("3 20 -1 10 1 -1 -1 1 -1 -1 1 -1 -1 0 1 -1 -1 -1", "job 3: wait time unknown"),
        ("3 20 0 -1 1 -1 -1 1 -1 -1 1 -1 -1 0 1 -1 -1 -1", "job 3: run time unknown"),
        ("3 20 0 10 -1 -1 -1 -1 -1 -1 1 -1 -1 0 1 -1 -1 -1", "job 3: number of processors unknown"),
        ("1 20 0 10 1 -1 -1 1 -1 -1 1 -1 -1 0 1 -1 -1 -1", "job 1 appears twice"),
    ],
)
def test_result_lines_without_what_metrics_need_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "r.swf"
    path.write_text(RESULT + line + "\n")
    with pytest.raises(WorkloadError) as info:
        records_from_swf(read_swf(path))
    assert str(info.value).startswith(f"{path}:4: ") and message in str(info.value)


def test_result_log_reads_back_to_the_same_records() -> None:
    log = parse_swf(format_swf(result_log([J3, J1, J2, J4], cpus=4, notes=["policy fcfs"])))
    assert log.header == {"Version": "2.2", "MaxProcs": "4", "Note": "policy fcfs"}
    back = records_from_swf(log)
    assert [r.id for r in back] == [1, 2, 3, 4]
    # deadlines are not part of SWF; everything else survives
    assert back == [dataclasses.replace(r, deadline=None) for r in RUN]
    assert summarize(back, 4).utilization == summarize(RUN, 4).utilization
