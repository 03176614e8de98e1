"""Readiness, status, watchdog and stopping as systemd sees them: the units' ExecStart run under a real
notify socket (tests/notify_harness.py), real daemons, real shared memory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import STARTED_INSTANCES, vmsched_shm_entries, wait_for
from tests.notify_harness import NotifySocket
from tests.test_systemd import UNITS, exec_start, run_cli, unit, unit_config
from vmsched.config import load_config
from vmsched.daemon import TEST_HANG_ENV
from vmsched.notify import socket_address, watchdog_period

WATCHDOG_S = 1.0  # WatchdogSec= for the test: a ping is due within every second


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Daemons a test starts; any still running afterwards are killed (by pid) and the test fails."""
    procs: list[subprocess.Popen] = []
    yield procs
    left = [p for p in procs if p.poll() is None]
    for p in left:
        os.kill(p.pid, signal.SIGCONT)
        p.terminate()
        p.wait(timeout=20)
    assert not left, "a daemon was left running"


def systemd_env(config: Path, ns: NotifySocket, **extra: str) -> dict[str, str]:
    """The environment systemd gives a Type=notify service with WatchdogSec= (no journal: logs to a file)."""
    env = {k: v for k, v in os.environ.items() if k not in ("INVOCATION_ID", "JOURNAL_STREAM", TEST_HANG_ENV)}
    return {**env, "VMSCHED_CONFIG": str(config), **ns.env(WATCHDOG_S), **extra}


def start(name: str, config: Path, env: dict[str, str], started: list[subprocess.Popen]) -> subprocess.Popen:
    p = subprocess.Popen(exec_start(name, config), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(p)
    return p


def max_gap(times: list[float]) -> float:
    return max(b - a for a, b in zip(times, times[1:], strict=False))


def test_units_are_notify_with_watchdog():
    for name in UNITS:
        svc = unit(name)["Service"]
        assert svc["Type"] == "notify" and svc["NotifyAccess"] == "main", name
        assert float(svc["WatchdogSec"].rstrip("s")) > 0, name


def test_ready_order_watchdog_hang_and_stopping(tmp_path, started):
    config = unit_config(tmp_path)
    cfg = load_config(config)
    STARTED_INSTANCES.add(cfg.instance)
    ns = NotifySocket(tmp_path / "notify")
    hang = tmp_path / "hang-the-loop"
    env = systemd_env(config, ns)
    try:
        # The launcher first: with no CPU manager it says so, and is not ready.
        launcher = start("vm-launcher.service", config, env, started)
        status = ns.wait(launcher.pid, "STATUS", timeout=30).fields["STATUS"]
        assert "waiting for the CPU manager" in status
        time.sleep(1.0)
        assert not ns.messages(launcher.pid, "READY"), "the launcher was ready without a CPU manager"

        cm = start("vm-cpumanager.service", config, {**env, TEST_HANG_ENV: str(hang)}, started)
        cm_ready = ns.wait(cm.pid, "READY", "1")
        # Ready means answering, at once: the table exists and the socket serves.
        assert run_cli(env, tmp_path, "vmcpu", "--json").returncode == 0
        assert cfg.instance in " ".join(vmsched_shm_entries())
        assert "jobs on 0/2 CPUs" in cm_ready.fields["STATUS"]
        launcher_ready = ns.wait(launcher.pid, "READY", "1")
        assert launcher_ready.at > cm_ready.at
        assert run_cli(env, tmp_path, "vmq", "--json").returncode == 0
        assert "0 queued, 0 running on 2 CPUs" in launcher_ready.fields["STATUS"]

        # Watchdog pings from both loops, one within every period.
        time.sleep(3 * WATCHDOG_S)
        now = time.monotonic()
        for pid, ready in ((cm.pid, cm_ready), (launcher.pid, launcher_ready)):
            pings = [ready.at, *ns.pings(pid, ready.at, now), now]
            assert len(pings) >= 6 and max_gap(pings) < WATCHDOG_S, f"pid {pid}: pings at {pings}"

        # A hung quantum loop sends no more pings (systemd would kill and restart it) ...
        hang.touch()
        hung_at = time.monotonic()
        time.sleep(3 * WATCHDOG_S)
        assert not ns.pings(cm.pid, hung_at + 0.1, time.monotonic()), "pings from a hung loop"
        assert cm.poll() is None
        # ... and pings again once it runs again.
        hang.unlink()
        resumed_at = time.monotonic()
        wait_for(lambda: ns.pings(cm.pid, resumed_at, float("inf")), timeout=WATCHDOG_S, what="a ping after the hang")

        # An orderly stop: STOPPING=1, then exit 0 (as in test_systemd, KillSignal to the main process).
        for name, p in (("vm-launcher.service", launcher), ("vm-cpumanager.service", cm)):
            p.send_signal(getattr(signal, unit(name)["Service"]["KillSignal"]))
            ns.wait(p.pid, "STOPPING", "1", timeout=15)
            assert p.wait(timeout=15) == 0
        assert not any(cfg.instance in n for n in vmsched_shm_entries())
    finally:
        ns.close()


def test_test_hook_is_ignored_under_systemd(tmp_path, started):
    """$INVOCATION_ID is set for every systemd unit: there the hang hook cannot be switched on."""
    config = unit_config(tmp_path)
    STARTED_INSTANCES.add(load_config(config).instance)
    ns = NotifySocket(tmp_path / "notify")
    hang = tmp_path / "hang-the-loop"
    hang.touch()
    try:
        env = systemd_env(config, ns, INVOCATION_ID="0123456789abcdef0123456789abcdef", **{TEST_HANG_ENV: str(hang)})
        cm = start("vm-cpumanager.service", config, env, started)
        ready = ns.wait(cm.pid, "READY", "1")
        time.sleep(2 * WATCHDOG_S)
        assert len(ns.pings(cm.pid, ready.at, time.monotonic())) >= 3
        assert "is a test hook and is ignored under systemd" in (tmp_path / "state" / "cpumanager.log").read_text()
        cm.terminate()
        assert cm.wait(timeout=15) == 0
    finally:
        ns.close()


def test_watchdog_period_and_address():
    assert watchdog_period({"WATCHDOG_USEC": "2000000"}, 42) == 2.0
    assert watchdog_period({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "41"}, 42) is None  # meant for another
    assert watchdog_period({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "42"}, 42) == 2.0
    assert watchdog_period({}, 42) is None and watchdog_period({"WATCHDOG_USEC": "0"}, 42) is None
    assert socket_address("@vmsched/notify") == "\0vmsched/notify"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


def test_ready_after_recovering_the_table(tmp_path, started):
    """A CPU manager restarted after a crash (Restart=on-failure) is ready once it took the table over."""
    config = unit_config(tmp_path)
    cfg = load_config(config)
    STARTED_INSTANCES.add(cfg.instance)
    ns = NotifySocket(tmp_path / "notify")
    env = systemd_env(config, ns)
    try:
        first = start("vm-cpumanager.service", config, env, started)
        ns.wait(first.pid, "READY", "1")
        first.kill()  # a crash: the table stays in shared memory
        first.wait(timeout=10)
        assert cfg.instance in " ".join(vmsched_shm_entries())
        second = start("vm-cpumanager.service", config, env, started)
        ready = ns.wait(second.pid, "READY", "1")
        assert ready.fields["STATUS"].startswith("recovered the table; 0 jobs on 0/2 CPUs")
        st = json.loads(run_cli(env, tmp_path, "vmcpu", "--json").stdout)
        assert st["pid"] == second.pid
        second.terminate()
        ns.wait(second.pid, "STOPPING", "1", timeout=15)
        assert second.wait(timeout=15) == 0
        assert not any(cfg.instance in n for n in vmsched_shm_entries())
    finally:
        ns.close()
