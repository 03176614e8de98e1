"""Shared fixtures: real daemons in temporary state directories, and leak checks after each test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vmsched.config import Config, load_config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.cpumanager.table import remove_table
from vmsched.protocol import DaemonUnavailable

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.005, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value; fail the test with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class CpuManagerProcess:
    """A real `vm-cpumanager` started as a subprocess on its own state directory."""

    def __init__(self, state_dir: Path, cpus: str = "0-1", quantum_ms: float = 10.0, *extra: str,
                 bin_dir: Path = BIN, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:  # fmt: skip
        self.state_dir = state_dir
        self.cfg: Config = load_config(state_dir=state_dir)
        self.args = [str(bin_dir / "vm-cpumanager"), "--state-dir", str(state_dir), "--cpus", cpus,
                     "--quantum-ms", str(quantum_ms), *extra]  # fmt: skip
        self.env, self.cwd = env, cwd
        self.proc: subprocess.Popen | None = None

    def start(self) -> CpuManagerProcess:
        STARTED_INSTANCES.add(self.cfg.instance)
        # stderr to a file, not a pipe: nobody reads a pipe while the daemon runs, and a daemon that logs
        # enough (a rejected request is a warning line) would block on a full pipe and hang.
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = self.state_dir / "cpumanager.stderr"
        self.stderr = open(self.stderr_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=self.stderr, text=True,
                                     env=self.env, cwd=self.cwd)  # fmt: skip
        client = CpuManagerClient(self.cfg, timeout_s=1.0)

        def up() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"vm-cpumanager exited with {self.proc.returncode}: {self.stderr_path.read_text()}")
            try:
                return client.call("ping")["pid"] == self.proc.pid
            except DaemonUnavailable:
                return False

        wait_for(up, what="the CPU manager to answer")
        client.close()
        return self

    def client(self) -> CpuManagerClient:
        return CpuManagerClient(self.cfg, timeout_s=5.0)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            # Do not leak a hung daemon or its segment into the rest of the suite; fail loudly.
            self.proc.kill()
            self.proc.wait()
            remove_table(self.cfg.shm_name, self.cfg.lock_name)
            pytest.fail("vm-cpumanager did not stop on SIGTERM within 10 s")
        finally:
            self.stderr.close()


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


# Generated cases per fuzzed input kind (tests/test_fuzz.py), printed at the end of the run.
FUZZ_CASES: dict[str, int] = {}
FUZZ_FLOOR = 10_000  # the acceptance's floor, checked when every kind ran


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if FUZZ_CASES:
        total = sum(FUZZ_CASES.values())
        parts = ", ".join(f"{n} {k}" for k, n in FUZZ_CASES.items())
        terminalreporter.write_line(f"fuzz: {total} generated cases ({parts}); no crash, every rejection explained")


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ANN001
    if len(FUZZ_CASES) == 6 and sum(FUZZ_CASES.values()) < FUZZ_FLOOR and exitstatus == 0:
        session.exitstatus = 1  # fewer cases than the floor: the fuzzing proved less than it claims
        print(f"\nfuzz: only {sum(FUZZ_CASES.values())} cases, fewer than {FUZZ_FLOOR}")


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
