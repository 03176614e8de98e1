"""The default global-queue heuristic hands the token to a rank that can make progress: in a ring (both
directions) each rank gives its CPU away about once per lap, where the plain `sender` rule walks the
token backwards through ranks that still wait for their own sender. Counted, not timed: the runtime's
per-rank context-switch counters (VMRT_STATS)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vmsched.cpumanager.shm_layout import DEFAULT_HEURISTIC
from vmsched.vmruntime import build
from vmsched.vmruntime.testing import Manager, mpiexec, read_stats, vmrun_cmd

LAPS, RANKS = 2000, 4


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


def test_message_counts_do_not_drift_when_ranks_run_side_by_side(patterns, tmp_path):
    """4 ranks on 2 CPUs, global queue: a receiver on the other CPU may take a message in before its
    sender has returned from the send. Counted only afterwards, its count stayed one too high for good:
    such a rank looked ready while it waited and repolled in vain (two of the four ended at 1, and made
    25 repolls per lap between them). Every message is received, so every rank must end at 0."""
    stats = tmp_path / "ring.stats"
    with Manager(cpus="0-1") as m:
        cmd = vmrun_cmd(m.state_dir, RANKS, 2, [str(patterns), "ring", "20000", "0"], queue="global")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**m.env(), "VMRT_STATS": str(stats)})
    assert r.returncode == 0 and '"ok": true' in r.stdout, r.stderr[-2000:]
    ranks = read_stats(stats)
    assert len(ranks) == RANKS and all(s["mode"] == "ctl" for s in ranks), ranks
    assert [s["unconsumed"] for s in ranks] == [0] * RANKS


def test_the_global_queue_frees_a_token_only_starved_ranks_could_take(patterns, tmp_path):
    """A ring of 4 on 2 CPUs has one message in flight: one rank can run. The second token went to a
    rank waiting for a message nobody had sent (the one it waits for, or round robin), which woke, tested
    in vain and handed it on: 1.4 hand-offs to a starved rank per rank and lap, 1.9 sleeps, the ring 3-7x
    slower than on local queues. Now that token is freed, and the next send grants it to its receiver:
    what is left are the every-8th round-robin hand-offs (0.13), and about one sleep per hop."""
    laps, stats = 10000, tmp_path / "ring.stats"
    with Manager(cpus="0-1") as m:
        cmd = vmrun_cmd(m.state_dir, RANKS, 2, [str(patterns), "ring", str(laps), "0"], queue="global")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**m.env(), "VMRT_STATS": str(stats)})
    assert r.returncode == 0 and '"ok": true' in r.stdout, r.stderr[-2000:]
    ranks = read_stats(stats)
    assert len(ranks) == RANKS and all(s["mode"] == "ctl" for s in ranks), ranks
    hops = RANKS * laps
    assert sum(s["starved_handoffs"] for s in ranks) / hops < 0.4, ranks
    assert sum(s["fed_grants"] for s in ranks) / hops > 0.5, ranks  # sends gave the freed token on
    assert sum(s["sleeps"] for s in ranks) / hops < 1.4, ranks


def test_sender_walks_a_ring_backwards(patterns, tmp_path):
    # The measurement tells the two apart: the sender we wait for is itself still waiting.
    assert switches_per_rank_lap(patterns, tmp_path, "ring", "sender") > 2.0


# MPI functions that never wait for another rank (local queries), and communicator management, whose
# waits happen inside MPICH where the runtime's sched_yield hook catches them (libvmrt.c).
LOCAL = {"MPI_Comm_rank", "MPI_Comm_size", "MPI_Wtime", "MPI_Dims_create", "MPI_Cart_coords", "MPI_Cart_shift"}
WAITS_VIA_YIELD = {"MPI_Cart_create", "MPI_Comm_split", "MPI_Comm_free"}
PATTERNS = ("ring", "ring-rev", "pipeline", "master-worker", "halo2d", "alltoall", "random-pairs", "tree", "halo-rma",
            "halo-persist", "groups", "overlap", "drift")  # fmt: skip


def symbols(path: Path, *flags: str) -> set[str]:
    out = subprocess.run(["nm", *flags, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("MPI_")}


def test_every_mpi_function_the_patterns_call_is_wrapped(patterns):
    """Statically: every MPI function the pattern programs import is one the runtime wraps (or one
    that cannot wait); a new pattern calling an unwrapped function fails here."""
    wrapped = symbols(build.library_path(), "-D", "--defined-only")
    imported = symbols(patterns, "-u")
    assert imported, "nm found no MPI imports: the check would prove nothing"
    assert imported - wrapped - LOCAL - WAITS_VIA_YIELD == set()


def test_every_pattern_call_is_counted_under_the_runtime(patterns, tmp_path):
    """Dynamically: run every pattern with the runtime preloaded; each wrapped function the programs
    import is seen by the wrappers, and every result is the plain run's."""
    seen: set[str] = set()
    for pattern in PATTERNS:
        stats = tmp_path / f"{pattern}.jsonl"
        argv = [str(patterns), pattern, "50", "0"]
        plain = subprocess.run([mpiexec(), "-n", "4", *argv], capture_output=True, text=True, timeout=120)
        preload = ["-genv", "VMRT_STATS", str(stats), "-genv", "LD_PRELOAD", str(build.library_path())]
        res = subprocess.run([mpiexec(), "-n", "4", *preload, *argv], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0 and plain.returncode == 0, res.stderr + plain.stderr
        assert json.loads(res.stdout)["checksum"] == json.loads(plain.stdout)["checksum"], pattern
        seen |= set().union(*(r["calls"] for r in read_stats(stats)))
    wrapped = {s.removeprefix("MPI_") for s in symbols(build.library_path(), "-D", "--defined-only")}
    used = {s.removeprefix("MPI_") for s in symbols(patterns, "-u")} & wrapped
    assert used - seen == set(), "calls that bypassed the wrappers"
