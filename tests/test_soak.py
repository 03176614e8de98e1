"""A small soak (bench/soak.py): 12 real jobs with random cancels and one SIGKILL and restart of each daemon;
every job ends exactly once in a stated state, nothing leaks (processes, /dev/shm, temporary files)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def test_small_soak_with_a_kill_of_each_daemon():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "soak.py"), "--jobs", "12", "--kills", "1", "--seed", "3"],
                       capture_output=True, text=True, timeout=300, cwd=REPO)  # fmt: skip
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr[-3000:]
    assert result["jobs"] == result["submitted"] == result["ended_once"] == 12
    assert result["kills"] == {"launcher": 1, "cpumanager": 1}
    assert result["unverified_completed"] == 0 and result["states"].get("completed", 0) > 0
    for k in ("leaked_processes", "stopped_processes", "leaked_shm", "leaked_tmp"):
        assert result[k] == 0, (k, r.stderr[-3000:])
