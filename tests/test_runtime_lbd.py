"""LBD end to end: the runtime's context-switch counts and the ranks' CPU times lead the CPU manager
to keep send.50x6 (imbalanced) on the global queue and to move a balanced app to local queues, and
the decision with its figures shows in the status view and the manager's log."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from vmsched.vmruntime.testing import Manager, vmrun_cmd


def send_cmd(variant: str, iters: int) -> list[str]:
    return [sys.executable, "-m", "vmsched.apps.send", "-c", "S", "--variant", variant, "--iters", str(iters)]


@pytest.fixture(scope="module")
def manager() -> Iterator[Manager]:
    with Manager(cpus="0-1") as m:
        yield m


@pytest.mark.parametrize(("variant", "iters", "expected"), [("50x6", 40, "global"), ("0x1", 150, "local")],
                         ids=["send.50x6", "balanced"])  # fmt: skip
def test_lbd_decision(manager: Manager, variant: str, iters: int, expected: str) -> None:
    job_id = 500 + iters
    cmd = vmrun_cmd(manager.state_dir, 4, 2, send_cmd(variant, iters), queue="lbd", job_id=job_id)
    proc = subprocess.Popen(cmd, env=manager.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[dict] = []
    while proc.poll() is None:
        jobs = [j for j in manager.status()["jobs"] if j["job"] == job_id]
        if jobs:
            seen.append(jobs[0])
        time.sleep(0.02)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert seen and seen[0]["queue"] == "global"  # every LBD job starts on the global queue
    decided = [j for j in seen if j["lbd"] == "decided"]
    assert decided, f"no decision while the job ran (last: {seen[-1]})"
    final = decided[-1]
    assert final["queue"] == expected, final
    assert (final["ip"] < 0.10) == (expected == "local")
    log = manager.log_path.read_text()
    m = re.search(rf"action=lbd_decision job={job_id} cvcs=([0-9.]+) ip=([0-9.e-]+) queue=(\w+)", log)
    assert m and m.group(3) == expected, log[-2000:]
