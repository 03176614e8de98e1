"""SWF reader/writer: exact round trip, edge cases, malformed input named by file and line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import SHARED_DATA
from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.swf import (
    FIELD_NAMES,
    Blank,
    Comment,
    JobLine,
    SwfJob,
    SwfLog,
    format_swf,
    header_number,
    machine_size,
    make_log,
    parse_swf,
    read_swf,
    write_swf,
)

DATA = SHARED_DATA
LUBLIN = DATA / "lublin_256.swf"


def test_lublin_round_trip_is_exact_and_field_by_field(tmp_path: Path) -> None:
    original = LUBLIN.read_text()
    log = read_swf(LUBLIN)
    assert len(log.jobs) == 10000
    assert log.header["MaxNodes"] == "256" and machine_size(log) == 256
    assert header_number(log, "MaxRuntime") == 162754
    assert format_swf(log) == original
    out = tmp_path / "copy.swf"
    write_swf(log, out)
    assert out.read_text() == original
    again = read_swf(out)
    assert again.jobs == log.jobs
    # spot check against the raw text, independently of the parser
    first = next(line for line in original.splitlines() if not line.startswith(";"))
    assert log.jobs[0].fields() == tuple(int(t) for t in first.split())


def test_canonical_rewrite_of_lublin_keeps_every_field(tmp_path: Path) -> None:
    log = read_swf(LUBLIN)
    rebuilt = log.with_jobs(log.jobs)  # no original text: the writer formats every job itself
    out = tmp_path / "canonical.swf"
    write_swf(rebuilt, out)
    text = out.read_text()
    assert text != LUBLIN.read_text()  # different spacing...
    again = read_swf(out)
    assert again.jobs == log.jobs  # ...same records, field by field
    assert again.header == log.header


EDGE = (
    "; Version: 2.2\n"
    "; Note: first note\n"
    ";Note:second note\n"
    "; MaxProcs: 2\n"
    "\n"
    "1 0 5 100 2 12.5 -1 2 120 -1 1 3 -1 0 1 -1 -1 -1\n"
    "   \n"
    "; a comment between jobs: MaxProcs: 99\n"
    "2\t10\t-1\t-1\t-1\t1e-05\t-1\t4\t-1\t-1\t-1\t-1\t-1\t1\t2\t-1\t-1\t-1\n"
    "3 11.25 0 0.5 1 -1 -1 1 -1 -1 5 -1 -1 2 2 -1 1 30\n"
    "\n"
)


def test_edge_cases_comments_blank_lines_unknown_fields_and_floats(tmp_path: Path) -> None:
    path = tmp_path / "edge.swf"
    path.write_text(EDGE)
    log = read_swf(path)
    assert [type(e) for e in log.entries] == [
        Comment,
        Comment,
        Comment,
        Comment,
        Blank,
        JobLine,
        Blank,
        Comment,
        JobLine,
        JobLine,
        Blank,
    ]
    assert log.header == {"Version": "2.2", "Note": "first note\nsecond note", "MaxProcs": "2"}
    j1, j2, j3 = log.jobs
    assert j1.average_cpu_time_used == 12.5 and j1.used_memory == -1 and j1.requested_time == 120
    assert isinstance(j1.run_time, int)
    assert j2.average_cpu_time_used == 1e-05 and j2.wait_time == -1 and j2.executable_number == 1
    assert j3.submit_time == 11.25 and j3.run_time == 0.5 and j3.status == 5
    assert j3.think_time_from_preceding_job == 30 and j3.preceding_job_number == 1
    assert [e.line for e in log.job_lines] == [6, 9, 10]
    assert format_swf(log) == EDGE
    out = tmp_path / "out.swf"
    write_swf(log, out)
    assert out.read_bytes() == path.read_bytes()


def test_no_trailing_newline_and_empty_file_round_trip() -> None:
    text = "; only\n1 0 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1"
    assert format_swf(parse_swf(text)) == text
    assert format_swf(parse_swf("")) == ""
    assert parse_swf("").jobs == ()


def test_changed_job_is_written_from_its_fields_not_its_old_text() -> None:
    log = parse_swf(EDGE)
    entries = list(log.entries)
    old = entries[5]
    assert isinstance(old, JobLine)
    entries[5] = dataclasses.replace(old, job=dataclasses.replace(old.job, run_time=777))
    text = format_swf(SwfLog(tuple(entries)))
    assert parse_swf(text).jobs[0].run_time == 777
    assert "1 0 5 777 2 12.5 -1 2 120 -1 1 3 -1 0 1 -1 -1 -1" in text


def test_make_log_writes_header_then_jobs() -> None:
    log = make_log([SwfJob(1, 0), SwfJob(2, 3.5, run_time=10)], {"MaxProcs": 2, "Note": "a\nb"})
    text = format_swf(log)
    assert text.splitlines()[:3] == ["; MaxProcs: 2", "; Note: a", "; Note: b"]
    assert parse_swf(text).jobs == log.jobs
    assert machine_size(parse_swf(text)) == 2


def _fields(**changes: str) -> str:
    values = ["-1"] * 18
    values[0], values[1] = "7", "100"
    for name, value in changes.items():
        values[FIELD_NAMES.index(name)] = value
    return " ".join(values)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1 2 3", "expected 18 fields, found 3"),
        (_fields() + " 5", "expected 18 fields, found 19"),
        (_fields(run_time="abc"), "field 4 (run_time) is not a number: 'abc'"),
        (_fields(run_time="1_000"), "field 4 (run_time) is not a number"),
        (_fields(average_cpu_time_used="nan"), "field 6 (average_cpu_time_used) is not a number"),
        (_fields(requested_time="inf"), "field 9 (requested_time) is not a number"),
        (_fields(run_time="-5"), "field 4 (run_time) is negative (-5)"),
        (_fields(submit_time="-2"), "field 2 (submit_time) is negative"),
        (_fields(wait_time="-0.5"), "field 3 (wait_time) is negative"),
        (_fields(think_time_from_preceding_job="-3"), "field 18 (think_time_from_preceding_job) is negative"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "bad.swf"
    path.write_text("; MaxProcs: 2\n\n" + _fields() + "\n" + line + "\n" + _fields() + "\n")
    with pytest.raises(WorkloadError) as info:
        read_swf(path)
    assert str(info.value).startswith(f"{path}:4: ")
    assert expected in str(info.value)
    assert info.value.line == 4 and info.value.path == str(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="nope.swf: no such file"):
        read_swf(tmp_path / "nope.swf")


def test_non_numeric_header_field_is_an_error() -> None:
    log = parse_swf("; MaxProcs: many\n", "h.swf")
    with pytest.raises(WorkloadError, match="h.swf: header field MaxProcs is not a number"):
        machine_size(log)


# ---------------------------------------------------------------- properties

_value = st.one_of(
    st.just(-1),
    st.integers(min_value=0, max_value=10**12),
    st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False),
)
_job = st.builds(lambda values: SwfJob(*values), st.lists(_value, min_size=18, max_size=18))
_other = st.one_of(
    st.builds(
        Comment, st.text(alphabet=st.characters(blacklist_characters="\n\r"), max_size=30).map(lambda s: ";" + s)
    ),
    st.builds(Blank, st.sampled_from(["", " ", "\t", "   "])),
)
_entry = st.one_of(_job.map(JobLine), _other)


@settings(max_examples=150, deadline=None)
@given(st.lists(_entry, max_size=25))
def test_write_then_read_gives_the_same_jobs_and_lines(entries: list) -> None:
    log = SwfLog(tuple(entries))
    text = format_swf(log)
    again = parse_swf(text)
    assert again.jobs == log.jobs
    assert [type(e) for e in again.entries] == [type(e) for e in entries]
    assert format_swf(again) == text


@settings(max_examples=100, deadline=None)
@given(
    st.lists(_job, min_size=1, max_size=5),
    st.lists(st.sampled_from([" ", "  ", "\t", " \t "]), min_size=19, max_size=19),
)
def test_any_spacing_reads_back_byte_for_byte(jobs: list[SwfJob], gaps: list[str]) -> None:
    lines = []
    for job in jobs:
        tokens = job.format().split(" ")
        lines.append(gaps[0] + "".join(t + g for t, g in zip(tokens, gaps[1:], strict=True)))
    text = "\n".join(lines) + "\n"
    log = parse_swf(text)
    assert log.jobs == tuple(jobs)
    assert format_swf(log) == text
