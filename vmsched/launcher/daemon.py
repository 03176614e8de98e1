"""`vm-launcher`: the queue daemon. A small loop: serve requests, run what is due, repeat."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from vmsched.config import ConfigError, load_config
from vmsched.cpumanager.client import CpuManagerClient
from vmsched.daemon import request_socket, serve_forever
from vmsched.exporter import open_endpoint
from vmsched.faults import parse_faults
from vmsched.launcher.exporter import LauncherCollector
from vmsched.launcher.lifecycle import START_STEPS
from vmsched.launcher.service import Launcher, load_policy
from vmsched.launcher.store import Store
from vmsched.logs import LEVELS, event, setup_logging
from vmsched.notify import Notifier
from vmsched.proctrack import pid_alive_cmd
from vmsched.protocol import DaemonUnavailable

FAULTS_ENV = "VMSCHED_LAUNCHER_FAULTS"  # test-only fault injection (vmsched/faults.py)
log = logging.getLogger("vm-launcher")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vm-launcher", description="vmsched queue daemon")
    p.add_argument("--config", help="TOML config file (default: $VMSCHED_CONFIG or <state-dir>/vmsched.toml)")
    p.add_argument("--state-dir", help="directory for sockets, database and logs (default: $VMSCHED_STATE_DIR)")
    p.add_argument("--policy", help="POLICY[+BACKFILL[:EXPIRY]][/ORDER], e.g. fjt+easy:malleable/fifo")
    p.add_argument("--queue-type", choices=("lbd", "local", "global"), help="queue type asked for every job")
    p.add_argument("--overrun", choices=("kill", "keep"), help="what happens to a job past its time")
    p.add_argument("--wait-cpumanager", type=float, default=30.0, help="seconds to wait for the CPU manager")
    p.add_argument("--log-level", type=str.upper, choices=LEVELS, help="default: [log] level, else INFO")
    return p.parse_args(argv)


def status_line(svc: Launcher) -> str:
    """systemctl status's one line: what the daemon is doing now."""
    i = svc.info({})
    return f"{i['queued']} queued, {i['running']} running on {i['ncpus']} CPUs, policy {i['policy']}" + (
        ", queue paused" if i["paused"] else "")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    notifier = Notifier()
    try:
        overrides = {"launcher": {"policy": args.policy, "queue_type": args.queue_type, "overrun": args.overrun}}
        cfg = load_config(args.config, args.state_dir, overrides)
        policy = load_policy(cfg)
        faults = parse_faults(os.environ.get(FAULTS_ENV), FAULTS_ENV, "pass", START_STEPS)
    except (ConfigError, ValueError) as e:
        print(f"vm-launcher: {e}", file=sys.stderr)
        return 2
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    cfg.jobs_dir.mkdir(exist_ok=True)
    setup_logging(args.log_level or cfg.log.level.upper(), cfg.launcher_log)
    pidfile = cfg.state_dir / "launcher.pid"
    try:
        other = int(pidfile.read_text())
    except (OSError, ValueError):
        other = 0
    if other and other != os.getpid() and pid_alive_cmd(other, "launcher"):
        log.error("a launcher (pid %d) already runs on %s", other, cfg.state_dir)
        return 1
    try:
        metrics = open_endpoint(cfg.metrics.launcher_listen, "[metrics] launcher_listen")
    except ConfigError as e:  # e.g. the port is in use: no daemon without the endpoint the operator asked for
        log.error("%s", e)
        return 1
    pidfile.write_text(str(os.getpid()))
    notifier.status(f"waiting for the CPU manager on {cfg.cpumanager_socket}")
    cpu = CpuManagerClient(cfg, timeout_s=5.0)
    deadline = time.monotonic() + args.wait_cpumanager
    while True:
        try:
            cpu.call("ping")
            break
        except DaemonUnavailable as e:
            if time.monotonic() > deadline:
                log.error("%s", e)
                return 1
            notifier.watchdog()
            time.sleep(0.1)
    store = Store(cfg.db_path)
    cfg.db_path.chmod(0o600)  # it holds every job's environment
    cfg.jobs_dir.chmod(0o711)
    try:
        svc = Launcher(cfg, store, cpu, policy, faults)
    except ValueError as e:  # e.g. energy_source = "rapl" on a node without readable RAPL counters
        log.error("%s", e)
        print(f"vm-launcher: {e}", file=sys.stderr)
        pidfile.unlink(missing_ok=True)
        store.close()
        cpu.close()
        if metrics is not None:
            metrics.close()
        return 2
    notifier.status("recovering running jobs")
    svc.recover()
    if metrics is not None:
        metrics.register(LauncherCollector(cfg.db_path, lambda: svc.policy.spec(), lambda: svc.paused))
    try:
        with request_socket(cfg.launcher_socket) as sock:
            # Every local user may submit; who they are comes from the kernel (SO_PEERCRED), not the request.
            os.chmod(cfg.launcher_socket, 0o666)
            cfg.state_dir.chmod(cfg.state_dir.stat().st_mode | 0o011)  # reach the socket, list nothing
            event(log, "ready", policy=policy.spec(), cpus=svc.ncpus, database=cfg.db_path,
                  socket=cfg.launcher_socket, metrics=metrics and metrics.address)  # fmt: skip
            # The CPU manager answered, running jobs are recovered and our socket is bound.
            notifier.ready(status_line(svc))
            serve_forever(sock, svc.handlers(), lambda: svc.tick(time.time()), log, notifier,
                          lambda: status_line(svc))  # fmt: skip
    finally:
        # Running jobs go on without us: their shims are in their own sessions, and the next launcher
        # finds them again (KillMode=process in the unit keeps systemd from killing them too).
        event(log, "stop", running=store.count(("running",)), reason="running jobs keep running")
        if metrics is not None:
            metrics.close()
        notifier.close()
        pidfile.unlink(missing_ok=True)
        svc.close()
        store.close()
        cpu.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
