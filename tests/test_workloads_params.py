"""The thesis's parameter files (§3.2.1, figs 3.2-3.5): reading, errors with file and line, job requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from vmsched.workloads.errors import WorkloadError
from vmsched.workloads.params import (
    AllowedCounts,
    Application,
    Arrival,
    application_name,
    arrival_log,
    job_requests,
    parse_allowed_line,
    read_params,
    read_params_dir,
    strip_launcher,
    substitute_procs,
    write_params,
)

# thesis figs 3.2, 3.3, 3.4 and 3.5, as printed
TEMPLATE = (
    "mpirun -np N $HOME/aplicaciones/bin/cg.B.N\n"
    "mpirun -np N $HOME/aplicaciones/bin/bt.A.N\n"
    "mpirun -np N $HOME/aplicaciones/bin/send.50x2\n"
)
ALLOWED = "32 16 8 4 2 1 1\n60 -1 -1 -1 -1 -1 -1\n49 36 25 16 4 4 4\n"
TYPES = "1\n2\n1\n"
TRACE = (
    "0 2 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 2 -1 -1 -1 -1\n"
    "1 34 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 2 -1 -1 -1 -1\n"
    "2 36 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1\n"
    "3 67 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 0 -1 -1 -1 -1\n"
)


def _write(directory: Path, template=TEMPLATE, allowed=ALLOWED, types=TYPES, trace=TRACE) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (
        ("template.txt", template),
        ("allowed_procs.txt", allowed),
        ("job_types.txt", types),
        ("trace.swf", trace),
    ):
        if text is not None:
            (directory / name).write_text(text)
    return directory


def test_thesis_figures_read_into_plain_data(tmp_path: Path) -> None:
    params = read_params_dir(_write(tmp_path / "p"))
    cg, bt, send = params.applications
    assert cg.allowed == AllowedCounts(32, (32, 16, 8, 4, 2, 1), False)
    assert bt.allowed.any_up_to_max and bt.allowed.maximum == 60
    assert bt.allowed.allows(37) and not bt.allowed.allows(61) and not bt.allowed.allows(0)
    assert send.allowed.choices() == (49, 36, 25, 16, 4)
    assert [a.job_class for a in params.applications] == ["long", "short", "long"]
    assert [(a.job_number, a.submit_time, a.app_number) for a in params.arrivals] == [
        (0, 2, 2),
        (1, 34, 2),
        (2, 36, 1),
        (3, 67, 0),
    ]
    assert [a.line for a in params.arrivals] == [1, 2, 3, 4]
    assert [a.name for a in params.applications] == ["cg.B.N", "bt.A.N", "send.50x2"]


def test_job_requests_substitute_the_process_count(tmp_path: Path) -> None:
    params = read_params_dir(_write(tmp_path / "p"))
    requests = job_requests(params, default_estimates={"long": 3600.0})
    assert [r.job_number for r in requests] == [0, 1, 2, 3]
    first, _, third, last = requests
    assert first.requested_procs == 49 and first.job_class == "long" and first.estimate == 3600.0
    assert first.command() == "mpirun -np 49 $HOME/aplicaciones/bin/send.50x2"
    assert third.requested_procs == 60 and third.job_class == "short" and third.estimate is None
    assert last.command(16) == "mpirun -np 16 $HOME/aplicaciones/bin/cg.B.16"
    assert last.program_argv(8) == ["$HOME/aplicaciones/bin/cg.B.8"]
    assert last.allowed_counts.allows(16) and not last.allowed_counts.allows(3)
    assert last.name == "cg.B.N-3" and last.app_number == 0


def test_requests_follow_arrival_time_and_use_trace_fields_8_and_9(tmp_path: Path) -> None:
    trace = (
        "5 90 -1 -1 -1 -1 -1 16 600 -1 -1 -1 -1 0 -1 -1 -1 -1\n6 10 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1\n"
    )
    requests = job_requests(read_params_dir(_write(tmp_path / "p", trace=trace)))
    assert [(r.job_number, r.submit_time) for r in requests] == [(6, 10), (5, 90)]
    assert requests[1].requested_procs == 16 and requests[1].estimate == 600


def test_placeholder_substitution_only_touches_the_letter_n() -> None:
    template = "mpiexec -n N python -m vmsched.apps.cg --class A --name NAS N.out cg.B.N"
    assert substitute_procs(template, 4) == "mpiexec -n 4 python -m vmsched.apps.cg --class A --name NAS 4.out cg.B.4"
    assert strip_launcher(["mpiexec", "-n", "4", "python", "x.py"]) == ["python", "x.py"]
    assert strip_launcher(["mpirun", "-np=4", "a.out"]) == ["a.out"]
    assert strip_launcher(["python", "x.py"]) == ["python", "x.py"]
    assert application_name("mpiexec -n N python -m vmsched.apps.send --class W --variant 50x6") == "send.W.50x6"
    assert application_name("mpiexec -n N python -m vmsched.apps.cg --class W") == "cg.W"


def test_allowed_counts_format_pads_to_seven_columns() -> None:
    assert AllowedCounts.of([4, 2, 1]).format() == "4 2 1 1 1 1 1"
    assert AllowedCounts.any_up_to(4).format() == "4 -1 -1 -1 -1 -1 -1"
    assert parse_allowed_line("8") == AllowedCounts(8, (8,), False)
    assert parse_allowed_line("60 -1") == AllowedCounts.any_up_to(60)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("4 -1 2", "-1 means 'any count up to the first'"),
        ("4 x", "process counts must be integers"),
        ("0 -1", "the first count must be >= 1"),
        ("4 8", "counts must be between 1 and the first count 4"),
    ],
)
def test_bad_allowed_counts_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    d = _write(tmp_path / "p", allowed="32 16 8 4 2 1 1\n" + line + "\n49 36 25 16 4 4 4\n")
    with pytest.raises(WorkloadError) as info:
        read_params_dir(d)
    assert str(info.value).startswith(f"{d / 'allowed_procs.txt'}:2: ")
    assert message in str(info.value)


def test_unknown_application_number_names_trace_and_line(tmp_path: Path) -> None:
    trace = TRACE + "4 80 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 3 -1 -1 -1 -1\n"
    d = _write(tmp_path / "p", trace=trace)
    with pytest.raises(WorkloadError) as info:
        read_params_dir(d)
    assert str(info.value).startswith(f"{d / 'trace.swf'}:5: unknown application number 3")
    assert "numbered 0 to 2" in str(info.value)


def test_missing_application_number_is_an_error(tmp_path: Path) -> None:
    d = _write(tmp_path / "p", trace="0 2 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1 -1\n")
    with pytest.raises(WorkloadError, match=r"trace.swf:1: no application number \(field 14 is -1\)"):
        read_params_dir(d)


def test_malformed_trace_line_is_reported(tmp_path: Path) -> None:
    d = _write(tmp_path / "p", trace=TRACE + "4 80 -1 -1\n")
    with pytest.raises(WorkloadError, match=r"trace.swf:5: expected 18 fields, found 4"):
        read_params_dir(d)


def test_missing_template_is_an_error(tmp_path: Path) -> None:
    d = _write(tmp_path / "p", template=None)
    with pytest.raises(WorkloadError, match=r"template.txt: template file is missing"):
        read_params_dir(d)


def test_template_line_without_placeholder_names_line(tmp_path: Path) -> None:
    d = _write(
        tmp_path / "p",
        template=TEMPLATE.replace("bt.A.N", "bt.A.16").replace(
            "-np N $HOME/aplicaciones/bin/bt", "-np 16 $HOME/aplicaciones/bin/bt"
        ),
    )
    with pytest.raises(WorkloadError, match=r"template.txt:2: no N placeholder"):
        read_params_dir(d)


def test_blank_template_line_is_an_error(tmp_path: Path) -> None:
    d = _write(tmp_path / "p", template="mpirun -np N a.N\n\nmpirun -np N b.N\n")
    with pytest.raises(WorkloadError, match=r"template.txt:2: blank line"):
        read_params_dir(d)


def test_bad_job_type_names_line(tmp_path: Path) -> None:
    d = _write(tmp_path / "p", types="1\n3\n1\n")
    with pytest.raises(WorkloadError, match=r"job_types.txt:2: job type must be 1 \(long\) or 2 \(short\), got '3'"):
        read_params_dir(d)


def test_files_must_agree_line_by_line(tmp_path: Path) -> None:
    d = _write(tmp_path / "p", types="1\n2\n")
    with pytest.raises(WorkloadError, match=r"job_types.txt: job types file has 2 line\(s\) but the template"):
        read_params_dir(d)


def test_requested_count_must_be_allowed(tmp_path: Path) -> None:
    trace = "0 2 -1 -1 -1 -1 -1 5 -1 -1 -1 -1 -1 0 -1 -1 -1 -1\n"
    d = _write(tmp_path / "p", trace=trace)
    with pytest.raises(WorkloadError, match=r"trace.swf:1: requested processors 5 \(field 8\) not allowed"):
        read_params_dir(d)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="not a directory"):
        read_params_dir(tmp_path / "absent")


def test_write_then_read_parameter_files(tmp_path: Path) -> None:
    apps = [
        Application(0, "mpiexec -n N python -m vmsched.apps.ep --class A", AllowedCounts.any_up_to(4), "long"),
        Application(1, "mpiexec -n N python -m vmsched.apps.cg --class W", AllowedCounts.of([4, 2, 1]), "short"),
    ]
    arrivals = [Arrival(1, 0, 1), Arrival(2, 7.5, 0, requested_processors=3, requested_time=90)]
    write_params(tmp_path / "w", apps, arrival_log(arrivals, {"MaxProcs": 2}))
    params = read_params(
        tmp_path / "w" / "template.txt",
        tmp_path / "w" / "allowed_procs.txt",
        tmp_path / "w" / "job_types.txt",
        tmp_path / "w" / "trace.swf",
    )
    assert params.applications == tuple(apps)
    assert [
        (a.job_number, a.submit_time, a.app_number, a.requested_processors, a.requested_time) for a in params.arrivals
    ] == [
        (1, 0, 1, None, None),
        (2, 7.5, 0, 3, 90),
    ]
