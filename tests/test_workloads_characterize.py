"""Characterization by median size / run time and weekday-hour groups (workload-characterization.txt)."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import SHARED_DATA
from vmsched.workloads.characterize import (
    CLASSES,
    DEFAULT_START_DESCRIPTION,
    Group,
    characterize,
    classify,
    merge_groups,
    weekday_hour,
)
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.swf import parse_swf, read_swf

LUBLIN = SHARED_DATA / "lublin_256.swf"


def _raw_jobs(path: Path) -> list[list[float]]:
    """The log's job lines read with nothing but str.split, to check the module independently."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(";"):
            rows.append([float(t) for t in line.split()])
    return rows


def test_lublin_runs_in_seconds_and_its_split_matches_its_medians() -> None:
    t0 = time.perf_counter()
    ch = characterize(read_swf(LUBLIN))
    elapsed = time.perf_counter() - t0
    assert elapsed < 5, elapsed
    rows = [r for r in _raw_jobs(LUBLIN) if r[3] >= 1 and r[4] >= 1]
    assert ch.jobs == len(rows) and ch.excluded == 10000 - len(rows)
    assert ch.median_size == statistics.median(r[4] for r in rows)
    assert ch.median_runtime == statistics.median(r[3] for r in rows)
    expected = dict.fromkeys(CLASSES, 0)
    for r in rows:
        size = "L" if r[4] <= ch.median_size else "H"
        run = "L" if r[3] <= ch.median_runtime else "H"
        expected[size + run] += 1
    assert ch.counts == expected
    assert ch.start == DEFAULT_START_DESCRIPTION
    assert sum(g.jobs for groups in ch.weekdays.values() for g in groups) == ch.jobs
    for groups in ch.weekdays.values():
        for g in groups:
            assert sum(g.percent.values()) == pytest.approx(100)
        for a, b in zip(groups, groups[1:], strict=False):
            assert a.last_hour < b.first_hour
            # the grouping is a fixed point: adjacent groups left apart differ by more than the threshold
            if a.last_hour + 1 == b.first_hour:
                assert max(abs(a.percent[c] - b.percent[c]) for c in CLASSES) > ch.threshold


def test_classification_rule_uses_less_or_equal_for_low() -> None:
    assert classify(32, 320, 32, 320) == "LL"
    assert classify(32, 321, 32, 320) == "LH"
    assert classify(33, 320, 32, 320) == "HL"
    assert classify(64, 1000, 32, 320) == "HH"


def _g(hour: int, hh: float, hl: float, ll: float, lh: float, jobs: int = 1, last: int | None = None) -> Group:
    return Group(hour, hour if last is None else last, {"HH": hh, "HL": hl, "LL": ll, "LH": lh}, jobs)


def test_merge_averages_pairwise_like_the_paper() -> None:
    groups = [
        _g(0, 40, 20, 20, 20, jobs=10),
        _g(1, 46, 14, 20, 20, jobs=30),  # within 10 of hour 0
        _g(2, 10, 10, 60, 20, jobs=5),  # far from both
        _g(3, 12, 10, 58, 20, jobs=5),
        _g(5, 12, 10, 58, 20, jobs=5),  # hour 4 is empty: not consecutive with 3
    ]
    merged = merge_groups(groups, threshold=10)
    assert [(g.first_hour, g.last_hour, g.jobs) for g in merged] == [(0, 1, 40), (2, 3, 10), (5, 5, 5)]
    assert merged[0].percent == {"HH": 43, "HL": 17, "LL": 20, "LH": 20}  # plain average, not job-weighted
    assert merged[0].interval == "[0-1]" and merged[2].interval == "5"


def test_merge_repeats_until_nothing_merges() -> None:
    # hours 0 and 1 differ by 12 points, hours 1 and 2 by 8
    groups = [_g(0, 20, 0, 0, 80), _g(1, 32, 0, 0, 68), _g(2, 24, 0, 0, 76)]
    merged = merge_groups(groups, threshold=10)
    # pass 1: 0|1 apart (12), 1+2 -> 28/72; pass 2: 0 and 28 differ by 8 -> merge to 24/76
    assert [(g.first_hour, g.last_hour) for g in merged] == [(0, 2)]
    assert merged[0].percent["HH"] == pytest.approx(24)
    assert merge_groups(groups, threshold=5) == tuple(groups)


def test_calendar_default_and_from_the_header() -> None:
    assert weekday_hour(0, None) == (0, 0)  # Sunday 00:00 by default
    assert weekday_hour(86400 + 5 * 3600 + 59, None) == (1, 5)
    assert weekday_hour(6 * 86400 + 23 * 3600, None) == (6, 23)
    assert weekday_hour(7 * 86400, None) == (0, 0)
    start = datetime(2024, 1, 3, 12, 0, tzinfo=UTC)  # a Wednesday
    assert weekday_hour(13 * 3600, start) == (4, 1)  # Thursday 01:00
    assert weekday_hour(13 * 3600, start.replace(tzinfo=None)) == (4, 1)  # naive: wall clock as given


def _log_with_start(header: str) -> str:
    # one job at t = 0 and one a day and two hours later
    return (
        header
        + "1 0 0 10 1 -1 -1 1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n2 93600 0 10 2 -1 -1 2 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n"
    )


def test_header_start_time_and_time_zone_are_used() -> None:
    # 1704067200 = Monday 2024-01-01 00:00 UTC
    utc = characterize(parse_swf(_log_with_start("; UnixStartTime: 1704067200\n")))
    assert [(g.first_hour, g.jobs) for g in utc.weekdays["Monday"]] == [(0, 1)]
    assert [(g.first_hour, g.jobs) for g in utc.weekdays["Tuesday"]] == [(2, 1)]
    ny = characterize(parse_swf(_log_with_start("; UnixStartTime: 1704067200\n; TimeZoneString: America/New_York\n")))
    assert [(g.first_hour, g.jobs) for g in ny.weekdays["Sunday"]] == [(19, 1)]  # UTC-5
    assert [(g.first_hour, g.jobs) for g in ny.weekdays["Monday"]] == [(21, 1)]
    offset = characterize(parse_swf(_log_with_start("; UnixStartTime: 1704067200\n; TimeZone: 3600\n")))
    assert [(g.first_hour, g.jobs) for g in offset.weekdays["Monday"]] == [(1, 1)]
    assert "TimeZone 3600" in offset.start


def test_errors() -> None:
    with pytest.raises(WorkloadError, match="unknown TimeZoneString"):
        characterize(parse_swf(_log_with_start("; UnixStartTime: 0\n; TimeZoneString: Nowhere/Atlantis\n"), "x.swf"))
    with pytest.raises(WorkloadError, match="x.swf: no job with run time >= 1 s"):
        characterize(parse_swf("1 0 0 0 1 -1 -1 1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n", "x.swf"))
