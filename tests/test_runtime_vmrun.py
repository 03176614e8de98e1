"""vmrun: admission, environment, exit status, release, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmsched.vmruntime.testing import Manager, read_stats, vmrun_cmd
from vmsched.vmruntime.vmrun import EXIT_VMRUN, main, parse_args


@pytest.fixture(scope="module")
def manager() -> Iterator[Manager]:
    with Manager(cpus="0-1") as m:
        yield m


def run(cmd: list[str], m: Manager, **env: str) -> subprocess.CompletedProcess[str]:
    e = m.env()
    e.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=e)


def test_exit_status_propagates_and_job_is_released(manager: Manager) -> None:
    res = run(vmrun_cmd(manager.state_dir, 1, 1, [sys.executable, "-c", "import sys; sys.exit(3)"]), manager)
    assert res.returncode == 3, res.stderr
    assert manager.status()["jobs"] == []


def test_ranks_get_the_job_environment_and_register(manager: Manager, tmp_path: Path) -> None:
    prog = ("from mpi4py import MPI; import os, sys; c = MPI.COMM_WORLD; "
            f"open('{tmp_path}/rank%d' % c.rank, 'w').write("
            "'%s %s' % (os.environ['VMSCHED_JOB'], 'libvmrt' in os.environ.get('LD_PRELOAD', '')))")  # fmt: skip
    stats = tmp_path / "stats.jsonl"
    res = run(vmrun_cmd(manager.state_dir, 2, 1, [sys.executable, "-c", prog], job_id=4242), manager,
              VMRT_STATS=str(stats))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == ["4242 True", "4242 True"]
    ranks = read_stats(stats)
    assert {r["job"] for r in ranks} == {4242} and {r["mode"] for r in ranks} == {"fast"}
    assert "action=admit job=4242 ranks=2 " in manager.log_path.read_text()
    assert manager.status()["jobs"] == []


def test_mpiexec_itself_is_not_preloaded(manager: Manager) -> None:
    """Only the ranks load the library (-genv), not mpiexec or the hydra proxy."""
    prog = "import os; print(open('/proc/%d/environ' % os.getppid(), 'rb').read().count(b'LD_PRELOAD=') )"
    res = run(vmrun_cmd(manager.state_dir, 1, 1, [sys.executable, "-c", prog]), manager)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "0"


def test_admission_refused_is_a_clear_error(manager: Manager) -> None:
    res = run(vmrun_cmd(manager.state_dir, 8, 1, [sys.executable, "-c", "pass"]), manager)
    assert res.returncode == EXIT_VMRUN
    assert "admission refused" in res.stderr and "needs 8 CPUs" in res.stderr


def test_no_cpu_manager_is_a_clear_error(tmp_path: Path) -> None:
    res = subprocess.run(vmrun_cmd(tmp_path, 2, 1, [sys.executable, "-c", "pass"]), capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert res.returncode == EXIT_VMRUN
    assert "vm-cpumanager" in res.stderr


def test_usage_errors() -> None:
    with pytest.raises(SystemExit) as e:
        parse_args(["-n", "2"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        parse_args(["-n", "0", "--", "x"])
    assert parse_args(["-n", "2", "--max-mpl", "2", "--", "prog", "-x"]).command == ["prog", "-x"]


def test_main_runs_in_process(manager: Manager, capfd: pytest.CaptureFixture[str]) -> None:
    rc = main(["--state-dir", str(manager.state_dir), "-n", "1", "--queue", "global", "--",
               sys.executable, "-c", "print('hi')"])  # fmt: skip
    assert rc == 0
    assert "hi" in capfd.readouterr().out
    assert json.dumps(manager.status()["jobs"]) == "[]"
