"""One real calibration of the runtime model (private CPU manager, vmrun, mpiexec, real ranks of the ep
app); the model's pure functions are tested in tests/test_sim_runtime_model.py."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.conftest import BIN, wait_for
from vmsched.sim.runtime_model import MPL_POINTS, QUEUES, load_model


@pytest.mark.timeout(180)
def test_a_quick_real_calibration_writes_a_model_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "model.json"
    r = subprocess.run([str(BIN / "vmsim-calibrate"), "--quick", "--apps", "ep", "--out", str(out)],
                       capture_output=True, text=True, timeout=150, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    model = load_model(out)
    assert model.command == f"vmsim-calibrate --quick --apps ep --out {out}"
    assert set(model.curves) == {"low"}
    assert len(model.measurements) == len(QUEUES) * len(MPL_POINTS)
    assert {(m.queue, m.nranks, m.cpus) for m in model.measurements} == {
        (q, 2 * mpl, 2) for q in QUEUES for mpl in MPL_POINTS
    }
    assert all(m.app == "ep" and m.comm_class == "low" and m.seconds > 0.05 for m in model.measurements)
    for queue in QUEUES:
        curve = model.curves["low"][queue]
        assert curve[0] == 1.0 and all(0.3 < s < 5 for s in curve[1:]), curve  # measured, not made up
    doc = json.loads(out.read_text())
    assert len({r["checksum"] for r in doc["runs"]}) == 1  # same answer at every folding
    assert "folding slowdown" in r.stderr and not list(tmp_path.glob(".model.json.*"))
    assert out.stat().st_mode & 0o777 == 0o644  # readable by every user of the node


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""


@pytest.mark.timeout(120)
def test_sigterm_stops_the_calibration_and_takes_its_manager_and_jobs_with_it(tmp_path: Path) -> None:
    # By default a SIGTERM ends a Python process without unwinding: the private CPU manager it had
    # started ran on alone, with its shared memory and state directory (2026-11-28).
    out = tmp_path / "model.json"
    proc = subprocess.Popen([str(BIN / "vmsim-calibrate"), "--quick", "--apps", "ep", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # fmt: skip

    def started() -> dict[psutil.Process, str] | None:
        kids = {k: _cmdline(k) for k in psutil.Process(proc.pid).children(recursive=True)}
        words = {w for c in kids.values() for w in c.split()}
        return kids if {"vmsched.cpumanager.daemon", "vmsched.apps.ep"} <= words else None

    kids: dict[psutil.Process, str] = {}
    state_dir = None
    try:
        kids = wait_for(started, timeout=60, interval=0.05, what="a manager and a rank of ep")
        daemon = next(c.split() for c in kids.values() if "vmsched.cpumanager.daemon" in c)
        state_dir = Path(daemon[daemon.index("--state-dir") + 1])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert "stopped, nothing written" in err and not out.exists()
        # With each one's command line and state: a failure then says which part of the tree stayed.
        left = {k.pid: (cmd, k.status()) for k, cmd in kids.items()
                if k.is_running() and k.status() != psutil.STATUS_ZOMBIE}  # fmt: skip
        assert not left, f"still running after the calibration stopped: {left}"
        assert not state_dir.exists()
    finally:  # what a failure leaves: the processes this test started, and the manager's directory
        for k in [proc, *kids]:
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                k.terminate()
        proc.communicate()
        psutil.wait_procs(list(kids), timeout=10)
        if state_dir is not None:
            shutil.rmtree(state_dir, ignore_errors=True)
