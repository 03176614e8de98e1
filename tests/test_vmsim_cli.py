"""The `vmsim` command as a user runs it: outputs like vmreplay's, and bad input refused with a message
naming the file and line or the option, exit 2, and no output directory that looks complete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vmsched.workloads.metrics import records_from_swf
from vmsched.workloads.swf import read_swf

BIN = Path(sys.executable).parent
HEADER = "; Version: 2.2\n; MaxProcs: 8\n"
FIELDS = "-1 -1 -1 {req} -1 1 -1 -1 -1 {queue} -1 -1 -1"


def job(n: int, submit: int, run: int, procs: int, req: int = -1, queue: int = -1) -> str:
    return f"{n} {submit} -1 {run} {procs} " + FIELDS.format(req=req, queue=queue)


def write_log(path: Path, lines: list[str], header: str = HEADER) -> Path:
    path.write_text(header + "\n".join(lines) + "\n")
    return path


def vmsim(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "vmsim"), *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=300)  # fmt: skip


GOOD = [job(1, 0, 100, 4, 150), job(2, 10, 50, 8, 60), job(3, 20, 30, 2, 100), job(4, 25, 300, 4, 400),
        job(5, 30, 10, 1, 20), job(6, 31, 500, 8, 2000)]  # fmt: skip


def test_two_policies_give_vmreplays_outputs_and_a_comparison(tmp_path: Path) -> None:
    log = write_log(tmp_path / "w.swf", GOOD)
    r = vmsim(log, "--policy", "fcfs+easy:abort", "--policy", "fcfs", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    for policy in ("fcfs_easy_abort_fifo", "fcfs_fifo"):
        for name in ("result.swf", "report.md", "utilization.png"):
            assert (out / policy / name).stat().st_size > 0, (policy, name)
    for name in ("comparison.md", "response_by_class.png", "relative_cdf.png", "vmsim.json"):
        assert (out / name).stat().st_size > 0, name
    easy = {r.id: r for r in records_from_swf(read_swf(out / "fcfs_easy_abort_fifo" / "result.swf"))}
    plain = {r.id: r for r in records_from_swf(read_swf(out / "fcfs_fifo" / "result.swf"))}
    assert sorted(easy) == [1, 2, 3, 4, 5, 6]
    # FCFS: job 2 (8 CPUs) waits for job 1 (ends at 100); jobs 3-5 wait behind it. EASY backfills jobs 3
    # and 5 on their arrival: their requested times end before job 1's (t=150), job 2's reservation.
    assert plain[2].start == 100 and plain[3].start == 150 and plain[5].start == 150
    assert easy[2].start == 100 and easy[3].start == 20 and easy[5].start == 30
    for rec in easy.values():
        assert rec.wait == rec.start - rec.submit >= 0
    assert easy[5].end - easy[5].start == 10  # its log run time
    meta = json.loads((out / "vmsim.json").read_text())
    assert meta["cpus"] == 8 and meta["jobs"] == 6
    assert "fcfs+easy:abort/fifo" in (out / "comparison.md").read_text()


def test_launcher_latency_delays_the_starts_it_should_and_is_recorded(tmp_path: Path) -> None:
    log = write_log(tmp_path / "w.swf", GOOD)
    r = vmsim(log, "--policy", "fcfs", "--finish-latency", "0.5", "--arrival-latency", "0.25", "--out", "out",
              cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    got = {r.id: r for r in records_from_swf(read_swf(tmp_path / "out" / "fcfs_fifo" / "result.swf"))}
    # Job 1 arrives at an idle node (+0.25); job 2 waits for job 1's end (100.25, +0.5) and job 3 for job
    # 2's (150.75, +0.5). Run times are the log's.
    assert (got[1].start, got[2].start, got[3].start) == (0.25, 100.75, 151.25)
    assert [got[i].end - got[i].start for i in (1, 2, 3)] == [100, 50, 30]
    meta = json.loads((tmp_path / "out" / "vmsim.json").read_text())
    assert meta["latency"] == {"finish_s": 0.5, "arrival_s": 0.25}
    assert "launcher latency: 0.5 s after a finish" in (tmp_path / "out" / "fcfs_fifo" / "report.md").read_text()


def test_cpus_jobs_and_window_options_select_what_is_simulated(tmp_path: Path) -> None:
    log = write_log(tmp_path / "w.swf", GOOD)
    r = vmsim(log, "--policy", "fcfs", "--cpus", "16", "--start", "10", "--end", "31", "--jobs", "3", "--out", "o",
              cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    recs = records_from_swf(read_swf(tmp_path / "o" / "fcfs_fifo" / "result.swf"))
    assert [x.id for x in recs] == [2, 3, 4]
    assert all(x.wait == 0 for x in recs)  # 16 CPUs: room for all of them


def _refused(r: subprocess.CompletedProcess[str], tmp_path: Path, *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("vmsim: ") or "usage: vmsim" in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.partial-*")), "a partial output directory was left behind"


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ([job(1, 0, 10, 2), "2 5 -1 10 2 -1 -1"], ["w.swf:4:", "expected 18 fields, found 7"]),  # truncated
        ([job(1, 0, 10, 2), job(2, 5, 10, 2).replace(" 10 ", " ten ", 1)], ["w.swf:4:", "not a number"]),
        ([job(1, 0, 10, 2), job(2, 5, 0, 2)], ["w.swf:4:", "job 2", "run time is 0", "--skip-invalid"]),
        ([job(1, 0, 10, 2), job(2, 5, 10, 2).replace(" 10 ", " -7 ", 1)], ["w.swf:4:", "negative"]),
        ([job(1, 0, 10, 2), job(2, 5, 10, 9)], ["w.swf:4:", "job 2 needs 9 processors", "8"]),
        ([job(1, 0, 10, 0)], ["w.swf:3:", "processor count"]),
    ],
)
def test_bad_logs_are_refused_naming_file_and_line(tmp_path: Path, lines: list[str], words: list[str]) -> None:
    log = write_log(tmp_path / "w.swf", lines)
    _refused(vmsim(log, "--policy", "fcfs+easy:abort", "--out", "out", cwd=tmp_path), tmp_path, *words)


def test_skip_invalid_drops_jobs_without_a_run_time_and_says_so(tmp_path: Path) -> None:
    log = write_log(tmp_path / "w.swf", [job(1, 0, 10, 2), job(2, 5, 0, 2), job(3, 6, -1, 2)])
    r = vmsim(log, "--policy", "fcfs", "--skip-invalid", "--out", "out", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [x.id for x in records_from_swf(read_swf(tmp_path / "out" / "fcfs_fifo" / "result.swf"))] == [1]
    report = (tmp_path / "out" / "fcfs_fifo" / "report.md").read_text()
    assert "2 job(s) with unknown or zero run time or size dropped" in report


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--policy", "fcfs+easyy"], ["--policy fcfs+easyy", "unknown backfill"]),
        (["--policy", "nosuch"], ["--policy nosuch", "unknown policy"]),
        (["--policy", "fcfs", "--cpus", "0"], ["--cpus", "positive"]),
        (["--policy", "fcfs", "--estimates", "sometimes"], ["--estimates", "perfect, requested or a factor"]),
        (["--policy", "fcfs", "--start", "50", "--end", "10"], ["--end must be after --start"]),
        (["--policy", "fcfs", "--jobs", "-3"], ["--jobs"]),
        (["--policy", "fcfs", "--moldability", "some"], ["--moldability", "invalid choice"]),
        (["--policy", "fcfs", "--finish-latency", "-0.1"], ["--finish-latency", "seconds >= 0"]),
        (["--policy", "fcfs", "--arrival-latency", "soon"], ["--arrival-latency", "seconds >= 0"]),
    ],
)
def test_bad_options_are_refused_naming_the_option(tmp_path: Path, args: list[str], words: list[str]) -> None:
    log = write_log(tmp_path / "w.swf", GOOD)
    _refused(vmsim(log, *args, "--out", "out", cwd=tmp_path), tmp_path, *words)


def test_a_log_without_machine_size_needs_cpus_and_a_missing_file_is_named(tmp_path: Path) -> None:
    log = write_log(tmp_path / "w.swf", GOOD, header="; Version: 2.2\n")
    _refused(vmsim(log, "--policy", "fcfs", "--out", "out", cwd=tmp_path), tmp_path, "w.swf", "--cpus")
    _refused(vmsim(tmp_path / "nope.swf", "--policy", "fcfs", "--out", "out", cwd=tmp_path), tmp_path, "nope.swf")


def test_an_existing_directory_that_is_not_a_vmsim_output_is_left_alone(tmp_path: Path) -> None:
    log = write_log(tmp_path / "w.swf", GOOD)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "precious.txt").write_text("keep me")
    r = vmsim(log, "--policy", "fcfs", "--out", "out", cwd=tmp_path)
    assert r.returncode == 2 and "not a vmsim output directory" in r.stderr
    assert (tmp_path / "out" / "precious.txt").read_text() == "keep me"
    # A previous vmsim output is replaced whole.
    r = vmsim(log, "--policy", "fcfs", "--out", "again", cwd=tmp_path)
    r = vmsim(log, "--policy", "fcfs+easy:abort", "--out", "again", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "again").iterdir() if p.is_dir()) == ["fcfs_easy_abort_fifo"]


def test_a_parameter_directory_takes_t1_and_measured_per_size_run_times() -> None:
    from vmsched.sim.workload import from_params

    hc = Path(__file__).resolve().parents[1] / "vmsched" / "workloads" / "examples" / "hc"
    w = from_params(hc, "ch6-hc-40.swf", estimates="requested", time_scale=2.0,
                    t1={"cg.A": 100.0, "cg.A@2": 70.0})  # fmt: skip
    # cg.A (high communication, 4 2 1 ranks): T1 100 s is 25 s at 4 ranks, 70 s measured at 2.
    first = next(s for s in w.jobs if s.comm == "high" and s.job.procs == (4, 2, 1) and s.runtime == 25.0)
    assert first.runtime_at(2) == 70.0  # measured
    assert first.runtime_at(1) == 100.0  # perfect speedup from the request's time
    subs = [s.job.submit_time for s in w.jobs]
    assert subs == sorted(subs) and subs[-1] - subs[0] > 0
