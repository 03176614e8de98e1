"""`vm-cpumanager`: the CPU-manager daemon. A small loop: serve requests, run a quantum, repeat."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from vmsched.config import Config, ConfigError, format_cpu_list, load_config, parse_cpu_list
from vmsched.cpumanager.exporter import CpuManagerCollector, quantum_histogram
from vmsched.cpumanager.manager import FAULTS_ENV, CpuManager, open_table, parse_faults
from vmsched.cpumanager.table import TableError
from vmsched.daemon import request_socket, serve_forever
from vmsched.exporter import open_endpoint
from vmsched.logs import LEVELS, event, setup_logging
from vmsched.notify import Notifier

log = logging.getLogger("vm-cpumanager")


def choose_cpus(cfg: Config) -> tuple[tuple[int, ...], int | None]:
    """Managed CPUs and the CPU kept for the daemons (if any)."""
    mine = tuple(sorted(os.sched_getaffinity(0)))
    cpus = cfg.cpumanager.cpus or mine
    outside = sorted(set(cpus) - set(mine))
    if outside:
        raise ConfigError(f"CPUs {format_cpu_list(outside)} are not available to this process "
                          f"(allowed: {format_cpu_list(mine)})")  # fmt: skip
    if cfg.cpumanager.reserve_cpu:
        if len(cpus) < 2:
            raise ConfigError("reserve_cpu needs at least two CPUs")
        return cpus[1:], cpus[0]
    return cpus, None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vm-cpumanager", description="vmsched CPU manager daemon")
    p.add_argument("--config", help="TOML config file (default: $VMSCHED_CONFIG or <state-dir>/vmsched.toml)")
    p.add_argument("--state-dir", help="directory for sockets and logs (default: $VMSCHED_STATE_DIR)")
    p.add_argument("--cpus", help="CPUs to manage, e.g. 0-15 (default: this process's affinity mask)")
    p.add_argument("--reserve-cpu", action="store_true", default=None, help="keep one CPU for the daemons")
    p.add_argument("--quantum-ms", type=float, help="quantum in milliseconds (default 10)")
    p.add_argument("--default-queue", choices=("lbd", "local", "global"), help="queue type of new jobs")
    p.add_argument("--log-level", type=str.upper, choices=LEVELS, help="default: [log] level, else INFO")
    return p.parse_args(argv)


def status_line(mgr: CpuManager) -> str:
    """systemctl status's one line: what the daemon is doing now."""
    jobs = mgr.table.jobs()
    used = sum(len(j.cpus) for j in jobs)
    return f"{len(jobs)} jobs on {used}/{len(mgr.cpus)} CPUs, {mgr.quanta} quanta"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    notifier = Notifier()
    try:
        overrides = {"cpumanager": {
            "cpus": format_cpu_list(parse_cpu_list(args.cpus)) if args.cpus else None,
            "reserve_cpu": args.reserve_cpu, "quantum_ms": args.quantum_ms, "default_queue": args.default_queue,
        }}  # fmt: skip
        cfg = load_config(args.config, args.state_dir, overrides)
        cpus, reserved = choose_cpus(cfg)
        faults = parse_faults(os.environ.get(FAULTS_ENV))
    except (ConfigError, ValueError) as e:
        print(f"vm-cpumanager: {e}", file=sys.stderr)
        return 2
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(args.log_level or cfg.log.level.upper(), cfg.cpumanager_log)
    try:
        metrics = open_endpoint(cfg.metrics.listen, "[metrics] listen")
    except ConfigError as e:  # e.g. the port is in use: no daemon without the endpoint the operator asked for
        log.error("%s", e)
        return 1
    if reserved is not None:
        os.sched_setaffinity(0, {reserved})
    notifier.status("opening the partition table")
    try:
        table, recovered = open_table(cfg, cpus)
    except TableError as e:
        log.error("%s", e)
        return 1
    mgr = CpuManager(cfg, table, recovered, faults)
    quantum = cfg.cpumanager.quantum_ms / 1000
    quantum_cost = quantum_histogram()
    if metrics is not None:
        metrics.register(CpuManagerCollector(mgr, quantum_cost))
    next_q = time.monotonic()

    def tick() -> float:
        nonlocal next_q
        now = time.monotonic()
        if now >= next_q:
            t0 = time.perf_counter()
            try:
                mgr.reconcile()
            except Exception:  # a failing quantum is logged; the next one runs
                log.exception("quantum %d failed", mgr.quanta)
            quantum_cost.observe(time.perf_counter() - t0)
            next_q += quantum
            if next_q < now:  # fell behind (e.g. the daemon was stopped): do not burst
                next_q = now + quantum
        return max(0.0, next_q - time.monotonic())

    try:
        with request_socket(cfg.cpumanager_socket) as sock:
            # Root's launcher and administrators only (the handlers check SO_PEERCRED as well).
            os.chmod(cfg.cpumanager_socket, 0o600)
            event(log, "ready", cpus=format_cpu_list(cpus), reserved=reserved, quantum_ms=cfg.cpumanager.quantum_ms,
                  shm=cfg.shm_name, socket=cfg.cpumanager_socket, recovered=recovered,
                  metrics=metrics and metrics.address, cpu_groups=mgr.groups.describe())  # fmt: skip
            # The socket is bound (requests queue until the loop serves them) and the table is there.
            notifier.ready(("recovered the table; " if recovered else "") + status_line(mgr))
            serve_forever(sock, mgr.handlers(), tick, log, notifier, lambda: status_line(mgr))
    except BaseException:
        # Not an orderly stop: keep the table and the job segments, so that a restarted manager
        # recovers every job's partition instead of the node dropping to plain MPI.
        log.exception("CPU manager failed; leaving %s for a restarted manager to recover", cfg.shm_name)
        if metrics is not None:
            metrics.close()
        notifier.close()
        table.close()
        raise
    event(log, "stop", reason="continuing stopped ranks, waking blocked ones, removing the table", shm=cfg.shm_name)
    if metrics is not None:
        metrics.close()
    mgr.shutdown()
    table.unlink()
    table.close()
    notifier.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
