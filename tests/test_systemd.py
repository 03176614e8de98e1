"""The systemd units: they verify, and their commands start, stop and restart cleanly the way systemd
runs them (ExecStart argv, KillSignal to the main process only with KillMode=process)."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import BIN, REPO, STARTED_INSTANCES, vmsched_shm_entries, wait_for
from tests.launcher_harness import send_for, vmapp_result
from vmsched.config import load_config

UNITS = ("vm-cpumanager.service", "vm-launcher.service")


def unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # systemd keys are case-sensitive
    cp.read(REPO / "systemd" / name)
    return cp


def exec_start(name: str, config: Path) -> list[str]:
    argv = shlex.split(unit(name)["Service"]["ExecStart"])
    argv[0] = str(BIN / Path(argv[0]).name)  # /opt/vmsched/.venv/bin/X -> this checkout's venv
    return [str(config) if a == "/etc/vmsched/vmsched.toml" else a for a in argv]


def unit_config(tmp_path: Path, extra: str = "") -> Path:
    """The documented config file, on a state directory under `tmp_path` and CPUs 0-1."""
    config = tmp_path / "vmsched.toml"
    documented = (REPO / "systemd" / "vmsched.toml").read_text()
    config.write_text(documented.replace('state_dir = "/var/lib/vmsched"', f'state_dir = "{tmp_path / "state"}"')
                      .replace('cpus = "all"', 'cpus = "0-1"') + extra)  # fmt: skip
    return config


def run_cli(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], env=env, capture_output=True, text=True, timeout=60,
                          cwd=cwd)  # fmt: skip


def test_units_verify(tmp_path):
    for name in UNITS:
        text = (REPO / "systemd" / name).read_text().replace("/opt/vmsched/.venv/bin", str(BIN))
        (tmp_path / name).write_text(text)
    r = subprocess.run(["systemd-analyze", "verify", *(str(tmp_path / n) for n in UNITS)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    svc = unit("vm-launcher.service")["Service"]
    assert svc["KillMode"] == "process", "stopping the launcher must not kill the running jobs"
    assert unit("vm-launcher.service")["Unit"]["Requires"] == "vm-cpumanager.service"


def test_units_start_stop_restart(tmp_path, spawn):
    config = unit_config(tmp_path)
    cfg = load_config(config)
    STARTED_INSTANCES.add(cfg.instance)
    stop_timeout = {n: float(unit(n)["Service"]["TimeoutStopSec"]) for n in UNITS}
    kill_signal = {n: getattr(signal, unit(n)["Service"]["KillSignal"]) for n in UNITS}
    env = {**os.environ, "VMSCHED_CONFIG": str(config)}

    def start(name: str) -> subprocess.Popen:  # by `spawn`: a failed check leaves no daemon running
        return spawn(*exec_start(name, config), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(name: str, p: subprocess.Popen) -> None:
        p.send_signal(kill_signal[name])
        assert p.wait(timeout=stop_timeout[name]) == 0, f"{name} did not stop cleanly"

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return run_cli(env, tmp_path, *argv)

    cm = start("vm-cpumanager.service")
    wait_for(lambda: cli("vmcpu", "--json").returncode == 0, what="the CPU manager unit to come up")
    launcher = start("vm-launcher.service")
    wait_for(lambda: cli("vmq", "--json").returncode == 0, what="the launcher unit to come up")
    # A job of a fixed time, not of iterations: 60 of them ran 0.7 s and had ended by the time the
    # launcher had stopped (a CI run, 2026-12-02).
    job = json.loads(cli("vmsubmit", "--json", "-n", "2", "--time", "60s", "--", *send_for(5)).stdout)["job"]
    wait_for(lambda: any(j["state"] == "running" for j in json.loads(cli("vmq", "--json").stdout)["jobs"]),
             what="the job to run")  # fmt: skip
    # systemctl restart vm-launcher: the job keeps running and is accounted by the new launcher.
    stop("vm-launcher.service", launcher)
    assert json.loads(cli("vmcpu", "--json").stdout)["jobs"], "stopping the launcher killed the job"
    launcher = start("vm-launcher.service")
    wait_for(lambda: cli("vmq", "--json").returncode == 0, what="the launcher to come back")
    wait_for(lambda: not json.loads(cli("vmq", "--json").stdout)["jobs"], timeout=120, what="the job to end")
    acct = {r["id"]: r for r in json.loads(cli("vmacct", "--json").stdout)}
    assert acct[job]["state"] == "completed"
    assert vmapp_result((tmp_path / f"vmsched-{job}.out").read_text())["verified"]
    # systemctl restart vm-cpumanager, then stop both.
    stop("vm-cpumanager.service", cm)
    cm = start("vm-cpumanager.service")
    wait_for(lambda: cli("vmcpu", "--json").returncode == 0, what="the CPU manager to come back")
    stop("vm-launcher.service", launcher)
    stop("vm-cpumanager.service", cm)
    time.sleep(0.1)
    assert not any(cfg.instance in n for n in vmsched_shm_entries())
