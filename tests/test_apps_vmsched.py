"""Every app under vmsched (the runtime preloaded, `vmrun`, a real CPU manager) at MPL 1 and MPL 4 gives
a verified result with the same checksum as a plain run."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import BIN
from tests.plain_runs import run_app
from vmsched.apps import registry
from vmsched.apps.result import parse_result

# (app, options, ranks at MPL 1 on 2 CPUs, ranks at MPL 4 on 1 CPU)
CASES = [
    ("ep", {}, 2, 4),
    ("cg", {}, 2, 4),
    ("mg", {}, 2, 4),
    ("ft", {}, 2, 4),
    ("sweep", {}, 2, 4),
    ("btmz", {}, 1, 4),
    ("send", {"variant": "50x2", "iters": 20}, 2, 4),
    ("ring", {"iters": 2000}, 2, 4),
]


def run(argv: list[str]) -> dict:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{' '.join(argv)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    res = parse_result(r.stdout)
    assert res["verified"] is True
    return res


@pytest.mark.parametrize("app, opts, n1, n4", CASES, ids=[c[0] for c in CASES])
def test_app_under_vmsched_mpl1_and_mpl4(cpumanager, spawn, app, opts, n1, n4):
    command = registry.command(app, "S", **opts)
    plain = run_app(app, 1, "S", **opts)  # the session's reference run (tests/plain_runs.py)
    vmrun = [str(BIN / "vmrun"), "--state-dir", str(cpumanager.state_dir)]
    mpl1 = run([*vmrun, "-n", str(n1), "--max-mpl", "1", "--", *command])
    # A one-rank job holds one CPU, so the job gets the other alone: 4 ranks on one CPU, MPL 4.
    c = cpumanager.client()
    c.admit(900, nranks=1, max_mpl=1, queue="local")
    c.register(900, 0, spawn("sleep", "300").pid)
    mpl4 = run([*vmrun, "-n", str(n4), "--max-mpl", "4", "--", *command])
    assert list(c.partitions()) == [900] and len(c.partitions()[900]) == 1
    assert mpl1["ranks"] == n1 and mpl4["ranks"] == n4
    log = cpumanager.cfg.cpumanager_log.read_text()
    assert f" mpl={n4}\n" in log, "the job did not run folded on one CPU"
    assert plain["checksum"] == mpl1["checksum"] == mpl4["checksum"]
