"""vmruntime correctness: every program gives the same verified result with and without the runtime,
at MPL 1, 2 and 4, on local and global queues, while the job's partition keeps changing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.plain_runs import run_app
from vmsched.apps import registry
from vmsched.apps.result import parse_result
from vmsched.vmruntime.testing import (
    Manager,
    SiblingFlipper,
    compile_c_program,
    mpiexec,
    read_stats,
    selftest_cmd,
    vmrun_cmd,
)

C_RING = Path(__file__).parent / "c" / "ring.c"
PROGRAMS = {
    "ring": selftest_cmd("ring", "--laps", "1000"),
    "send": selftest_cmd("send", "--variant", "50x2", "--iters", "40", "--work", "4"),  # ~0.5 s or more
    "coll": selftest_cmd("coll", "--iters", "40"),
}
# Under a flipping sibling (the partition changes every 50 ms) a program must communicate for a few
# hundred ms, or on a fast, quiet machine it may finish between two changes and never be folded. coll
# folded takes some 2.5 ms an iteration here; its plain reference run, 4 ranks busy-polling on 2 CPUs,
# took 5.7-26 s for 2,000 (the suite's slowest runtime test), hence 600.
FLIP_PROGRAMS = {
    "ring": selftest_cmd("ring", "--laps", "20000"),
    "send": PROGRAMS["send"],
    "coll": selftest_cmd("coll", "--iters", "600"),
}
# (name, ranks, max MPL, sibling): "flip" = a sibling job comes and goes all the time,
# "hold" = a sibling holds the other CPU for the whole run.
CONFIGS = [
    ("mpl1", 2, 1, None),  # MPL 1 throughout: the fast path
    ("mpl1-2", 2, 2, "flip"),  # MPL 1 <-> 2
    ("mpl2-4", 4, 4, "flip"),  # MPL 2 <-> 4
    ("mpl4", 4, 4, "hold"),  # MPL 4 throughout: 4 ranks on one CPU
]


@pytest.fixture(scope="module")
def manager() -> Iterator[Manager]:
    with Manager(cpus="0-1") as m:
        yield m


@pytest.fixture(scope="module")
def c_ring(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_c_program(C_RING, tmp_path_factory.mktemp("c"))


def result_of(stdout: str) -> object:
    """What must not depend on scheduling: the verdict and checksum (JSON line) or the C program's line."""
    last = stdout.strip().splitlines()[-1]
    if last.startswith("{"):
        d = json.loads(last)
        assert d["ok"], d
        return d["checksum"]
    assert last.startswith("ring ok"), last
    return last


_reference: dict[tuple[str, int], object] = {}


def reference(name: str, cmd: list[str], nranks: int) -> object:
    """The program's result under plain mpiexec (no runtime, no manager)."""
    key = (name, tuple(cmd), nranks)
    if key not in _reference:
        res = subprocess.run([mpiexec(), "-n", str(nranks), *cmd], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        _reference[key] = result_of(res.stdout)
    return _reference[key]


def run_managed(m: Manager, cmd: list[str], nranks: int, max_mpl: int, queue: str, sibling: str | None,
                tmp_path: Path) -> tuple[object, list[dict], int]:  # fmt: skip
    stats = tmp_path / f"stats-{queue}.jsonl"
    env = m.env()
    env["VMRT_STATS"] = str(stats)
    with ExitStack() as stack:
        flipper = None
        if sibling == "hold":
            with m.client() as c:
                c.admit(78, 1, 1, queue="local")
            stack.callback(lambda: m.client().release(78))
        elif sibling == "flip":
            flipper = stack.enter_context(SiblingFlipper(m))
        res = subprocess.run(vmrun_cmd(m.state_dir, nranks, max_mpl, cmd, queue=queue), capture_output=True,
                             text=True, timeout=180, env=env)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    return result_of(res.stdout), read_stats(stats), flipper.flips if flipper else 0


CASES = [(prog, config, queue) for prog in [*sorted(PROGRAMS), "c-ring"] for config in CONFIGS
         for queue in ("local", "global")
         if prog != "c-ring" or config[0] in ("mpl1", "mpl2-4")]  # fmt: skip


@pytest.mark.parametrize(("program", "config", "queue"), CASES, ids=[f"{p}-{c[0]}-{q}" for p, c, q in CASES])
def test_same_result_with_and_without_runtime(manager: Manager, c_ring: Path, tmp_path: Path, program: str,
                                              config: tuple, queue: str) -> None:  # fmt: skip
    name, nranks, max_mpl, sibling = config
    programs = FLIP_PROGRAMS if sibling == "flip" else PROGRAMS
    cmd = [str(c_ring), "20000" if sibling == "flip" else "1000"] if program == "c-ring" else programs[program]
    got, stats, flips = run_managed(manager, cmd, nranks, max_mpl, queue, sibling, tmp_path)
    assert got == reference(program, cmd, nranks)
    assert sorted(s["rank"] for s in stats) == list(range(nranks))
    assert all(s["mpi_calls"] > 0 for s in stats)
    modes = {s["mode"] for s in stats}
    if name == "mpl1":
        assert modes == {"fast"}  # never folded: no token protocol, no blocking by the runtime
        assert all(s["ctx_switches"] == 0 for s in stats)
    elif name == "mpl1-2":
        # The mode is reported at finalize: a rank that finishes while the partition is back at two CPUs
        # (MPL 1) is on the fast path then. Folded at some point is what matters.
        assert modes <= {"ctl", "fast"}
        assert sum(s["ctx_switches"] for s in stats) > 0  # ranks really gave up their CPU
    else:
        assert modes == {"ctl"}
        assert sum(s["ctx_switches"] for s in stats) > 0  # ranks really gave up their CPU
    if sibling == "flip" and program == "send":  # the others may be over too soon to see several changes
        # The partition changed several times while the ranks were running MPI.
        assert flips >= 2 and max(s["generations"] for s in stats) >= 3, (flips, stats)


@pytest.mark.parametrize("heuristic", ["sender", "unconsumed", "affinity", "rr"])
def test_global_queue_heuristics(manager: Manager, tmp_path: Path, heuristic: str) -> None:
    """Every next-rank heuristic of the global queue gives the right result while the partition changes."""
    cmd = PROGRAMS["coll"]
    stats = tmp_path / "stats.jsonl"
    env = manager.env()
    env["VMRT_STATS"] = str(stats)
    with SiblingFlipper(manager):
        res = subprocess.run(vmrun_cmd(manager.state_dir, 4, 4, cmd, queue="global", heuristic=heuristic),
                             capture_output=True, text=True, timeout=180, env=env)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert result_of(res.stdout) == reference("coll", cmd, 4)
    assert sum(s["ctx_switches"] for s in read_stats(stats)) > 0


APP_CASES = [("cg", "local"), ("ft", "global"), ("sweep", "global"), ("btmz", "local")]


@pytest.mark.parametrize(("app", "queue"), APP_CASES, ids=[f"{a}-{q}" for a, q in APP_CASES])
def test_apps_while_the_partition_changes(manager: Manager, tmp_path: Path, app: str, queue: str) -> None:
    """The suite's apps (point-to-point, all-to-all, wavefront, imbalanced zones) keep their verified
    checksum while their partition flips between MPL 2 and MPL 4."""
    cmd = registry.command(app, "S")
    plain = run_app(app, 1)  # the session's reference run (tests/plain_runs.py)
    stats = tmp_path / "stats.jsonl"
    env = manager.env()
    env["VMRT_STATS"] = str(stats)
    with SiblingFlipper(manager, period_s=0.1) as flipper:
        res = subprocess.run(vmrun_cmd(manager.state_dir, 4, 4, cmd, queue=queue), capture_output=True, text=True,
                             timeout=300, env=env)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    got = parse_result(res.stdout)
    assert got["verified"] and got["checksum"] == plain["checksum"]
    assert flipper.flips >= 2 and max(s["generations"] for s in read_stats(stats)) >= 3
