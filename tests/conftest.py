"""Shared fixtures: real daemons in temporary state directories, and leak checks after each test."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from vmsched.cpumanager.shm_layout import JOB_SHM_PREFIXES
from vmsched.vmruntime.shmclean import unmapped
from vmsched.vmruntime.testing import DaemonLeak, Manager, compile_c_program

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


def load_script(path: Path) -> ModuleType:
    """A script of bench/ or experiments/ (not a package) as a module, to test its pure functions. It is
    registered in sys.modules under its file's stem, where its dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _shared_data() -> Path:
    """The project's trace data, read in place and never copied into the repo: ../shared/data beside the
    checkout, or, in a clone made elsewhere (`git clone . /tmp/x`, as CI does), beside the checkout it
    was cloned from. VMSCHED_SHARED_DATA overrides both. When none exists, the tests that read it fail,
    naming the first path."""
    if os.environ.get("VMSCHED_SHARED_DATA"):
        return Path(os.environ["VMSCHED_SHARED_DATA"])
    beside = REPO.parent / "shared" / "data"
    origin = subprocess.run(["git", "-C", str(REPO), "remote", "get-url", "origin"], capture_output=True, text=True)
    source = Path(origin.stdout.strip()) if origin.returncode == 0 and origin.stdout.strip() else None
    if not beside.is_dir() and source is not None and source.is_dir():  # a clone of a local checkout
        cloned_from = source.resolve().parent / "shared" / "data"
        if cloned_from.is_dir():
            return cloned_from
    return beside


SHARED_DATA = _shared_data()


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.005, what: str = "condition",
             report: Callable[[], str] | None = None):  # fmt: skip
    """Poll `predicate` until it returns a truthy value; fail the test with `what` on timeout, and with what
    `report` says then (where the state it waited on stood)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}" + (f"\n{report()}" if report else ""))
        time.sleep(interval)


class CpuManagerProcess(Manager):
    """The one daemon harness (vmsched.vmruntime.testing.Manager) with the suite's bookkeeping: its instance
    is checked for leaked shared memory at the end of the session, and its failures fail the test."""

    def __init__(self, state_dir: Path, cpus: str = "0-1", quantum_ms: float = 10.0, *extra: str,
                 bin_dir: Path = BIN, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:  # fmt: skip
        super().__init__(state_dir, cpus, quantum_ms, extra, bin_dir=bin_dir, env=env, cwd=cwd)

    def start(self, timeout: float = 15.0) -> CpuManagerProcess:
        STARTED_INSTANCES.add(self.cfg.instance)
        try:
            super().start(timeout)
        except DaemonLeak as e:
            pytest.fail(str(e))
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
        try:
            return super().stop(sig, timeout) or 0
        except DaemonLeak as e:
            pytest.fail(str(e))


@pytest.fixture(scope="session")
def patterns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench/patterns/patterns.c, compiled once: plain MPI programs written without vmsched in mind."""
    return compile_c_program(REPO / "bench" / "patterns" / "patterns.c", tmp_path_factory.mktemp("patterns"))


@pytest.fixture
def cpumanager(tmp_path: Path) -> Iterator[CpuManagerProcess]:
    cm = CpuManagerProcess(tmp_path / "state").start()
    yield cm
    cm.stop()


@pytest.fixture
def spawn() -> Iterator:
    """Start plain processes for a test; every one is killed and reaped afterwards (by pid)."""
    procs: list[subprocess.Popen] = []

    def _spawn(*argv: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen(list(argv), **kw)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(timeout=10)


# Test files that can run beside another test: they read no pace, CPU time, idle time or placement, and
# no deadline of theirs is near what a shared CPU costs. The rules, the simulator, the workload tools, the
# fuzzing (its daemons run no job); and three files whose jobs are checked for results and for what is
# left behind, never for speed, and that mostly wait (pip building the wheel, a grace period, a manager's
# death): the installed wheel, start failures, the runtime's robustness. They are marked `parallel`, and
# the README's test command runs them first on both CPUs (`-m parallel -n 2 --dist load`, pytest-xdist;
# each worker that runs one of test_install.py's tests builds the wheel: `--dist loadgroup` would keep them
# on one worker, but with pytest 9.2 its xdist_group mark has no effect, pytest-xdist issue #1386):
# 172 s against 142 s for the first 27 files alone, with 105 s of the rest moved in (2026-12-06, slow
# spells; `--dist loadfile` 188 s, the fuzzing's 97 s on one worker). The rest then run alone
# (`-m "not parallel"`): what they read (a job's pace, its ranks' CPU seconds, an idle CPU, a start within
# half a second, a watchdog ping within 0.1 s) would be the other test's doing. The supervisor's and the
# security tests leave MPICH-named segments unmapped on purpose, which the other worker's
# `no_leaked_mpi_segment` would count as its own leak; the correctness tests gained 26 s of 169 here (their
# ranks already keep both CPUs busy: 334 s against 188 s), not worth a deadline missed.
PARALLEL_FILES = frozenset({
    "test_config.py", "test_daemon_loop.py", "test_fuzz.py", "test_hardware_vs_sim.py", "test_launcher_batch_units.py",
    "test_lbd.py", "test_lint.py", "test_metrics.py", "test_partition.py", "test_policies.py",
    "test_policies_backfill.py", "test_policies_config.py", "test_policies_reasons.py", "test_policies_sa.py",
    "test_policies_shortcuts.py", "test_policies_simulate.py", "test_sim_runtime_model.py", "test_thesis_study.py",
    "test_vmsim_cli.py", "test_vmsim_parity.py", "test_vmsim_textbook.py", "test_workloads_characterize.py",
    "test_workloads_cli.py", "test_workloads_generate.py", "test_workloads_params.py", "test_workloads_plots.py",
    "test_workloads_swf.py",
    "test_install.py", "test_launcher_start.py", "test_runtime_robust.py",
})  # fmt: skip
_renamed = PARALLEL_FILES - {f.name for f in Path(__file__).parent.glob("test_*.py")}
assert not _renamed, f"PARALLEL_FILES names files that are not here: {sorted(_renamed)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in PARALLEL_FILES:
            item.add_marker(pytest.mark.parallel)


# Generated cases per fuzzed input kind (tests/test_fuzz.py), printed at the end of the run. Under pytest-xdist
# each worker counts its own and hands them to the controller, which prints and checks the sum.
FUZZ_CASES: dict[str, int] = {}
FUZZ_FLOOR = 10_000  # the acceptance's floor, checked when every kind ran


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # noqa: ANN001 - an xdist worker is done: add its counts
    for kind, n in getattr(node, "workeroutput", {}).get("fuzz_cases", {}).items():
        FUZZ_CASES[kind] = FUZZ_CASES.get(kind, 0) + n


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if FUZZ_CASES:
        total = sum(FUZZ_CASES.values())
        parts = ", ".join(f"{n} {k}" for k, n in FUZZ_CASES.items())
        terminalreporter.write_line(f"fuzz: {total} generated cases ({parts}); no crash, every rejection explained")


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001
    if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller checks the sum
        session.config.workeroutput["fuzz_cases"] = dict(FUZZ_CASES)
        return
    if len(FUZZ_CASES) == 6 and sum(FUZZ_CASES.values()) < FUZZ_FLOOR and exitstatus == 0:
        session.exitstatus = 1  # fewer cases than the floor: the fuzzing proved less than it claims
        print(f"\nfuzz: only {sum(FUZZ_CASES.values())} cases, fewer than {FUZZ_FLOOR}")


def pytest_unconfigure(config: pytest.Config) -> None:
    # tmp_path_retention_policy "failed" has pytest remove a green run's directory (its sessionfinish, which
    # runs before this) but not the per-user one that holds it, /tmp/pytest-of-USER: take that too when it
    # is left empty (rmdir refuses one that still holds this run's, another run's or a failed test's).
    base = getattr(getattr(config, "_tmp_path_factory", None), "_basetemp", None)
    if base is not None:
        with contextlib.suppress(OSError):
            base.parent.rmdir()


def vmsched_shm_entries() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("vmsched.") or n.startswith("sem.vmsched.")}


# Instances (shm names) of every daemon this test session started; checked at the end. Only ours:
# another test run on the same machine may have its own segments alive meanwhile.
STARTED_INSTANCES: set[str] = set()


@pytest.fixture(autouse=True, scope="session")
def no_leftover_shm() -> Iterator[None]:
    """After the whole suite no shared-memory segment or semaphore of ours may remain."""
    yield
    leaked = {n for n in vmsched_shm_entries() if any(i in n for i in STARTED_INSTANCES)}
    assert not leaked, f"tests left shared memory behind: {sorted(leaked)}"


def mpi_segments() -> dict[str, int]:
    """MPICH's and UCX's segments in /dev/shm: path -> inode (a name may be made again)."""
    out = {}
    with os.scandir("/dev/shm") as entries:
        for e in entries:
            if e.path.startswith(JOB_SHM_PREFIXES):
                try:
                    out[e.path] = e.inode()
                except OSError:
                    continue
    return out


# How long a test's killed job may take to have its segments removed by whoever started it (the CPU
# manager removes them at the job's release, a supervisor once the job's processes are gone).
SEGMENT_CLEANUP_S = 5.0


@pytest.fixture(autouse=True)
def no_leaked_mpi_segment() -> Iterator[None]:
    """No MPICH or UCX segment that appeared during a test may be left unmapped after it: a job's killed ranks
    leave theirs, and whatever started the job must remove them. (A segment some other work on the
    node makes and still maps is not counted; one it abandons would be: run the suite alone.)"""
    before = mpi_segments()
    yield

    def left() -> set[str]:
        return unmapped({p for p, ino in mpi_segments().items() if before.get(p) != ino})

    deadline = time.monotonic() + SEGMENT_CLEANUP_S
    while (leaked := left()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for path in leaked:  # the next tests should not trip over them
        Path(path).unlink(missing_ok=True)
    assert not leaked, f"the test left MPI segments behind: {sorted(leaked)}"


@pytest.fixture
def node_factory():
    """Start real nodes (CPU manager + launcher, `tests.launcher_harness.Node`); all stopped afterwards."""
    from tests.launcher_harness import Node

    nodes: list[Node] = []

    def make(policy: str, extra: str = "") -> Node:
        n = Node(policy, extra).start()
        nodes.append(n)
        return n

    yield make
    for n in nodes:
        n.stop()
