"""experiments/thesis_study.py on a small log: the table it writes, scaling from the logged machine, and
bad input (exit 2, nothing written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, load_script
from vmsched.sim.workload import from_swf
from vmsched.workloads.swf import machine_size, read_swf

STUDY = REPO / "experiments" / "thesis_study.py"


def _log(path: Path, maxprocs: int, sizes: list[int]) -> Path:
    lines = ["; Version: 2.2", f"; MaxProcs: {maxprocs}"]
    for i, p in enumerate(sizes, start=1):
        run = 600 + 400 * (i % 7)
        lines.append(f"{i} {60 * i} -1 {run} {p} -1 -1 {p} -1 -1 1 1 1 -1 1 -1 -1 -1")
    path.write_text("\n".join(lines) + "\n")
    return path


def _study(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, STUDY, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_the_study_writes_every_cell_relative_to_fcfs_easy_abort(tmp_path):
    log = _log(tmp_path / "small.swf", 32, [32, 8, 16, 1, 4, 32, 2, 8] * 5)
    out = tmp_path / "table.md"
    done = _study("--log", log, "--jobs", "40", "--cpus", "16", "--loads", "0.7", "1.0", "--estimate-factor", "0.5",
                  "--policy", "conservative", "--policy", "FCFS+EASY malleable", "--out", out)  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if line.startswith("| 16 ")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [
        (load, policy)
        for load in ("0.7", "1.0")
        for policy in ("FCFS+EASY abort", "FCFS+EASY malleable", "conservative")
    ]
    for r in rows:
        assert float(r[3].replace(",", "")) > 0
        if r[2].strip() == "FCFS+EASY abort":
            assert r[-1].strip() == "1.00"
    assert out.read_text().startswith("Regenerate: `python experiments/thesis_study.py --log ")


def test_sizes_are_scaled_from_the_logged_machine(tmp_path):
    """A log of a 32-CPU machine on 16 CPUs: its 32-CPU jobs get 16 (the Lublin log's 256 is not
    assumed), and the arrivals are spaced to offer the load asked for."""
    study = load_script(STUDY)
    log = read_swf(_log(tmp_path / "small.swf", 32, [32, 8, 16, 1]))
    jobs = study.scaled(from_swf(log, estimates="0.5", ncpus=machine_size(log)).jobs, 16, 0.5, machine_size(log))
    assert [s.job.procs[0] for s in jobs] == [16, 4, 8, 1]
    span = jobs[-1].job.submit_time - jobs[0].job.submit_time
    work = sum(s.job.procs[0] * s.runtime for s in jobs)
    assert abs(work / (16 * span) - 0.5) < 1e-9


def test_a_bad_log_is_refused_with_its_line_and_nothing_is_written(tmp_path):
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxProcs: 4\n1 0 -1 x\n")
    out = tmp_path / "table.md"
    done = _study("--log", bad, "--jobs", "10", "--out", out)
    assert done.returncode == 2
    assert f"{bad}:2" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
    nosize = _log(tmp_path / "nosize.swf", 8, [1, 2])
    nosize.write_text("\n".join(line for line in nosize.read_text().splitlines() if "MaxProcs" not in line) + "\n")
    done = _study("--log", nosize, "--jobs", "2", "--out", out)
    assert done.returncode == 2 and "MaxProcs" in done.stderr and not out.exists()
