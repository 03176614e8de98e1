"""The default global-queue heuristic hands the token to a rank that can make progress: in a ring (both
directions) each rank gives its CPU away about once per lap, where the plain `sender` rule walks the
token backwards through ranks that still wait for their own sender. Counted, not timed: the runtime's
per-rank context-switch counters (VMRT_STATS)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from vmsched.cpumanager.shm_layout import DEFAULT_HEURISTIC
from vmsched.vmruntime.testing import Manager, compile_c_program, read_stats, vmrun_cmd

LAPS, RANKS = 2000, 4


@pytest.fixture(scope="module")
def patterns(tmp_path_factory) -> Path:
    return compile_c_program(REPO / "bench" / "patterns" / "patterns.c", tmp_path_factory.mktemp("patterns"))


def switches_per_rank_lap(patterns: Path, tmp_path: Path, pattern: str, heuristic: str | None) -> float:
    stats = tmp_path / f"{pattern}-{heuristic}.stats"
    with Manager(cpus="0") as m:
        opts = {"queue": "global", "heuristic": heuristic} if heuristic else {"queue": "global"}
        cmd = vmrun_cmd(m.state_dir, RANKS, RANKS, [str(patterns), pattern, str(LAPS), "0"], **opts)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**m.env(), "VMRT_STATS": str(stats)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert '"ok": true' in r.stdout
    ranks = read_stats(stats)
    assert len(ranks) == RANKS and all(s["mode"] == "ctl" for s in ranks), ranks
    return sum(s["ctx_switches"] for s in ranks) / (RANKS * LAPS)


def test_the_default_heuristic_is_progress():
    assert DEFAULT_HEURISTIC == "progress"


@pytest.mark.parametrize("pattern", ["ring", "ring-rev"])
def test_progress_hands_the_token_forward_in_a_ring(patterns, tmp_path, pattern):
    assert switches_per_rank_lap(patterns, tmp_path, pattern, None) <= 1.5  # the default: progress


def test_sender_walks_a_ring_backwards(patterns, tmp_path):
    # The measurement tells the two apart: the sender we wait for is itself still waiting.
    assert switches_per_rank_lap(patterns, tmp_path, "ring", "sender") > 2.0
