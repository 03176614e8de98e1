"""One real calibration of the runtime model (private CPU manager, vmrun, mpiexec, real ranks of the ep
app); the model's pure functions are tested in tests/test_sim_runtime_model.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN
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
